"""The host and the GPU under strain, and pauses that recur: memory pressure, memory that creeps, clocks held
down, a periodic stall.

In the order of their priority (``VERDICTS`` in ``trainmon.diagnose.verdicts``)."""

from trainmon.diagnose.verdicts.declaration import Verdict

RESOURCES: tuple[Verdict, ...] = (
    Verdict(
        "memory.host_pressure",
        "host memory nearly full or swapping",
        "#4e342e",
        thresholds=("host_mem_pct", "swap_growth_mb"),
        explains="host memory nearly full or swapping",
        evidence="memory used %, swap growth",
        advice="fewer workers / smaller prefetch, memory-mapped datasets",
        when="≥ {host_mem_pct} % used, or swap grew ≥ {swap_growth_mb} MB",
    ),
    Verdict(
        "memory.gpu_pressure",
        "accelerator memory nearly full",
        "#4e342e",
        thresholds=("gpu_mem_pct",),
        explains="accelerator memory nearly full",
        evidence="NVML memory used / total of the run's GPUs",
        advice="activation checkpointing, AMP, `expandable_segments`",
        when="≥ {gpu_mem_pct} %",
    ),
    Verdict(
        "memory.creep",
        "a run's per-step peak accelerator memory grows steadily",
        "#6d4c41",
        thresholds=("creep_min_mb", "creep_min_s", "creep_rising_share", "creep_critical_min"),
        explains=("the run's peak CUDA memory grows steadily (a leak: outputs kept across steps, a growing cache)"),
        evidence=(
            "the agent's reads of the caching allocator about ten times a second, from its sender thread "
            "(`max_memory_allocated` / `max_memory_reserved` and the current figures, no synchronisation, "
            "peaks never reset); the span cut into 8 segments, each one's highest peak: growth in MB/min and "
            "per 1000 steps, minutes until the device's total at that rate"
        ),
        advice=(
            "find what is kept across steps (`.detach()`/`.item()` before keeping a loss, caches, hooks); "
            "compare `torch.cuda.memory_snapshot()` far apart; fragmentation (reserved grows, allocated does "
            "not): `expandable_segments:True`"
        ),
        when=(
            "the peak rises in ≥ {creep_rising_share:%} of the segments, ≥ {creep_min_mb} MB over ≥ "
            "{creep_min_s} s (critical when full within {creep_critical_min} min); awaiting a real GPU "
            "(docs/gpu-validation.md)"
        ),
    ),
    Verdict(
        "gpu.throttled",
        "clocks held down by power or thermal limits",
        "#d84315",
        thresholds=("throttle_share", "throttle_power_cap_clock"),
        explains="clocks held down by power or thermal limits",
        evidence=(
            "NVML clock-event reasons of the run's own GPUs: HW slowdown, thermal and power brake always; "
            "the power cap only with the SM clock below 85 % of its maximum (an A100/H100 at full load sits "
            "at its power limit at full clock); idle and app clocks ignored; the evidence gives clock, "
            "maximum and temperature"
        ),
        advice="check cooling and power limits",
        when=(
            "limiting reasons in ≥ {throttle_share:%} of samples; a power cap only with the SM clock under "
            "{throttle_power_cap_clock:%} of its maximum"
        ),
    ),
    Verdict(
        "stall.periodic",
        "recurring long steps (eval, logging bursts, GC)",
        "#8e24aa",
        reads_states=True,
        thresholds=(
            "long_step_factor",
            "periodic_share",
            "periodic_irregularity",
            "gc_explains",
            "periodic_critical_share",
        ),
        explains="recurring long steps (eval, logging bursts, GC) not explained by checkpoints",
        evidence=(
            "step times vs. the median; eval-loader iterations and `phase()` spans inside the long steps; "
            "their period; the agent's gen-2 pauses inside them (\"gen-2 garbage collection, N ms each, "
            'explains K of M long steps"; `gc`: pauses by generation in the window)'
        ),
        advice=(
            "evaluate/log less often or asynchronously; no per-step `.item()`; for GC: `gc.freeze()` after "
            "start-up and the model build, fewer reference cycles per step, `gc.set_threshold` or "
            "`gc.disable()` with `gc.collect()` at epoch boundaries"
        ),
        when=(
            "≥ 2 steps longer than {long_step_factor}× the median, taking ≥ {periodic_share:%} of the time "
            "(critical ≥ {periodic_critical_share:%}); GC named when gen-2 pauses are ≥ {gc_explains:%} of "
            "the excess of ≥ 2 and half of the long steps"
        ),
    ),
)
