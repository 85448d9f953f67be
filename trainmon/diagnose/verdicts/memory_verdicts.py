"""Memory: the host's and the GPU's under pressure, and memory that creeps up step after step."""

from trainmon.diagnose.verdicts.declaration import Verdict

MEMORY_HOST_PRESSURE = Verdict(
    "memory.host_pressure",
    "host memory nearly full or swapping",
    "#4e342e",
    thresholds=("host_mem_pct", "swap_growth_mb"),
    explains="host memory nearly full or swapping",
    evidence="memory used %, swap growth",
    advice="fewer workers / smaller prefetch, memory-mapped datasets",
    when="≥ {host_mem_pct} % used, or swap grew ≥ {swap_growth_mb} MB",
)

MEMORY_GPU_PRESSURE = Verdict(
    "memory.gpu_pressure",
    "accelerator memory nearly full",
    "#4e342e",
    thresholds=("gpu_mem_pct",),
    explains="accelerator memory nearly full",
    evidence="NVML memory used / total of the run's GPUs",
    advice="activation checkpointing, AMP, `expandable_segments`",
    when="≥ {gpu_mem_pct} %",
)

MEMORY_CREEP = Verdict(
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
)
