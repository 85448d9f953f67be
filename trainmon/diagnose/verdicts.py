"""The verdict registry: one declaration per code, read by everything that treats verdicts differently.

The engine (which codes end a run's judgement), the verdict tracker and the report's headline (``immediate``), the
monitor (``reads_states``: the thread-state sampler looks fast while such a finding stands), automatic stack dumps
(``dump_workers``), every report format (``colour``, ``meaning``), Prometheus (the code set) and the verdict
reference, docs/verdicts.md (written from it by scripts/reference.py; a test fails when the page is stale) all read
it. The order of ``VERDICTS`` is the priority among findings of
the same severity (the first wins). Codes are a public contract: add, never rename.

Adding a verdict: a declaration here, its rule in ``diagnose/rules/`` declared with ``@rule(stage, code)``, a scenario
(docs/architecture.md, "Where a change goes"); ``python scripts/reference.py`` writes its reference entry.
"""

from __future__ import annotations

from dataclasses import dataclass

INPUT_COLOUR = "#c62828"
GREY = "#616161"


@dataclass(frozen=True)
class Verdict:
    code: str
    meaning: str  # one line: what holds when this code is given
    colour: str = GREY  # in the HTML report's timeline and charts
    immediate: bool = False  # shown as soon as it holds, and heads a report that has it (a hang only gets worse)
    reads_states: bool = False  # its rule reads the thread states: they are sampled fast while it stands
    dump_workers: int = 1  # stack dumps when it turns critical: the main process and this many workers
    thresholds: tuple[str, ...] = ()  # the Thresholds fields its rule reads (the reference lists them, with defaults)
    # The verdict reference (docs/verdicts.md, written from these by scripts/reference.py): what holds when it is given,
    # the evidence its rule reads, the advice it gives, and when it is given, its figures as placeholders ({name} a
    # threshold's default, {name:%} a share's as a percentage), so the page follows Thresholds
    explains: str = ""
    evidence: str = ""
    advice: str = ""
    when: str = ""

    @property
    def family(self) -> str:
        """``input``, ``stall``, ``gpu``...: the part before the dot (the code itself when it has none)."""
        return self.code.split(".", 1)[0]


_INPUT = ("wait_warning", "wait_critical")

VERDICTS: tuple[Verdict, ...] = (
    Verdict(
        "stall.hang",
        "no step for far longer than usual while the process lives (stacks dumped automatically)",
        "#b71c1c",
        immediate=True,
        reads_states=True,
        dump_workers=8,
        thresholds=(
            "hang_min_s",
            "hang_step_factor",
            "freeze_headline_share",
        ),
        explains=(
            "the training stopped stepping long ago while its process lives: a deadlock, a collective a peer "
            "never joins, a worker stuck in a read, a SIGSTOP"
        ),
        evidence=(
            "time since the run's last step, batch, save or mark (`silent_s`) against its limit (`limit_s`) "
            "and p95 step; the main process's CPU % and running share over the silence; the stacks dumped "
            "for it (`stack_dumps`, `main_thread_in`: the main thread's innermost frame)"
        ),
        advice=(
            "read the stacks; a collective: give `init_process_group` a timeout "
            "(`TORCH_NCCL_ASYNC_ERROR_HANDLING=1`) so the job fails instead of hanging; the DataLoader with "
            "a stuck worker: `DataLoader(timeout=...)` and timeouts on its reads; a lock: take locks in one "
            "order"
        ),
        when=(
            "no activity for max({hang_min_s} s, {hang_step_factor} × p95 step), critical at once; a report "
            "keeps every freeze, one that resumed too, and heads with it unless it resumed having cost under "
            "{freeze_headline_share:%} of the run's wall time"
        ),
    ),
    Verdict(
        "stall.checkpoint",
        "checkpoint saves take a material share of wall time",
        "#6a1b9a",
        reads_states=True,
        thresholds=("checkpoint_share", "checkpoint_critical_share"),
        explains="`torch.save` takes a material share of wall time",
        evidence="checkpoint spans from the agent vs. the window",
        advice="save less often or asynchronously; write to fast local storage",
        when="> {checkpoint_share:%} of the window (critical ≥ {checkpoint_critical_share:%})",
    ),
    Verdict(
        "stall.recompile",
        "torch.compile recompilations (or an eager fallback at the recompile limit) take a material share of the time",
        "#d81b60",
        thresholds=("compile_share", "compile_critical_share"),
        explains=(
            "`torch.compile` recompiles a function again and again (each new sequence length, each changed "
            "Python value it guards on), or sent it back to eager at its recompile limit"
        ),
        evidence=(
            "the agent's compilation spans (torch.compile's compile start/end callbacks) and torch's own "
            "record of each compilation (`get_compilation_metrics()`: function, seconds, `recompile_reason`, "
            "graph breaks, a compilation refused at the limit); recompilations only (a function's first "
            "compilation is warm-up): `recompile_s`, `recompile_share` of the window, `function` (name, "
            "file:line), `failed_guard` (e.g. `tensor 'input_ids' size mismatch at index 1`), `last_reason`, "
            "`eager_fallback`, `limit`"
        ),
        advice=(
            "a size guard: `torch._dynamo.mark_dynamic(tensor, dim)` or `dynamic=True` (or the default "
            "`None`, not `False`); pad to a few length buckets; raise `torch._dynamo.config.recompile_limit` "
            "only for a known, small set of shapes"
        ),
        when=(
            "recompilations ≥ {compile_share:%} of the window (critical ≥ {compile_critical_share:%}), or a "
            "function fell back to eager at its recompile limit"
        ),
    ),
    Verdict(
        "dist.straggler",
        "one rank is slower than the rest",
        "#00838f",
        thresholds=("straggler_wait_gap", "straggler_step_ratio", "straggler_score"),
        explains="one rank of a job is slower than the others",
        evidence=(
            "ranks grouped by rendezvous or `trainmon run`; per rank: data wait, time in collectives, own "
            "work (median of step − data wait − communication) and its score (the others' median own work ÷ "
            "its own, as nvidia-resiliency-ext scores a section); the slow rank's own input sub-cause; "
            "`kind` is `data`, `compute` (synchronous ranks: equal steps, the others wait for it in "
            "collectives) or `step` (unsynchronised ranks)"
        ),
        advice=(
            "fix that rank first: its sub-cause's advice; for a compute straggler, its accelerator's clocks "
            "and throttling, uneven work per rank, or moving off slower hardware"
        ),
        when=(
            "its wait exceeds the others' by > {straggler_wait_gap:%} of the step; else its score < "
            "{straggler_score}; else (no communication seen) its step time > {straggler_step_ratio}× theirs"
        ),
    ),
    Verdict(
        "input.main_process",
        "data loads in the main process (num_workers=0) and the loop waits on it",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *_INPUT,
            "worker_busy_pct",
            "latency_workers_per_core",
            "advice_min_compute_share",
            "workers_ahead_share",
        ),
        explains="data loads in the main process and the loop waits on it",
        evidence=(
            "`f_wait`, `num_workers = 0`, main-process CPU (loading that keeps it busy is CPU work, one that "
            "leaves it idle waits); or workers seen blocked (ahead of the loop) while the training thread "
            "runs through its waits: the main process receiving each batch (`sub_cause` `receive`)"
        ),
        advice=(
            "set `num_workers` to `f_wait` / (1 − `f_wait`) (at least 2), at most the usable cores (CPU "
            "work) or 4× them (waiting; `num_workers_bound` in the evidence); `persistent_workers`, "
            "`pin_memory` (off a CPU run); receiving: keep N, fewer and larger tensors per batch"
        ),
        when="`f_wait` > {wait_warning:%} (critical ≥ {wait_critical:%})",
    ),
    Verdict(
        "input.io",
        "DataLoader workers mostly wait on reads rather than compute",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *_INPUT,
            "io_d_state",
            "disk_busy_pct",
            "disk_read_mb_s",
            "iowait_pct",
            "net_wait_share",
            "remote_rchar_mb_s",
            "io_block_read_share",
            "io_disk_read_mb_s",
            "io_remote_read_share",
            "worker_busy_pct",
        ),
        explains="workers wait on reads, not compute",
        evidence=(
            "remote: the share of looks at each worker that found it waiting on the network "
            '(`workers_net_wait`: a socket or network-filesystem wait, see "Network waits" below), or read '
            "chars without block I/O (`rchar`, network filesystems read with read()); disk: workers' "
            "main-thread D-state share, disk %util and r_await, host iowait as CPUs (`host_iowait_cores`)"
        ),
        advice=(
            "sharded sequential formats, local NVMe or RAM copy, cache, more reads in flight (a thread pool "
            "or asyncio in the worker)"
        ),
        when=(
            "remote: net wait ≥ {net_wait_share:%} (and ≥ the D share) with workers < {worker_busy_pct} % "
            "busy, or `rchar` ≥ {remote_rchar_mb_s} MB/s with block reads < {io_remote_read_share:%} of it; "
            "disk: D ≥ {io_d_state:%}, or disk ≥ {disk_busy_pct} % busy with worker reads, or — only where "
            "the workers' D-state is unknown — iowait CPUs, less the main process's own D time, ≥ "
            "{iowait_pct} % of a CPU per worker"
        ),
    ),
    Verdict(
        "input.workers_cpu",
        "workers are CPU-bound and the host CPU is saturated",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(*_INPUT, "worker_busy_pct", "cpu_saturated_pct", "runq_starved_ms_s"),
        explains="workers are CPU-bound and the host has no spare cores",
        evidence=(
            "the train loader's workers' CPU % of a core (each weighed by the time it ran in the window) and "
            "run-queue wait (`/proc/PID/schedstat`: a worker at 40 % can be starved), host CPU, usable cores"
        ),
        advice=("cheaper transforms, cached decoded data, GPU decode/augment; more workers will not help"),
        when=(
            "workers ≥ {worker_busy_pct} % of a core (or starved ≥ {runq_starved_ms_s} ms/s), and host ≥ "
            "{cpu_saturated_pct} % busy or already one worker per usable core"
        ),
    ),
    Verdict(
        "input.too_few_workers",
        "workers are busy all the time while the host has idle cores",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *_INPUT,
            "worker_busy_pct",
            "latency_workers_per_core",
            "runq_starved_ms_s",
            "workers_ahead_share",
            "advice_min_compute_share",
        ),
        explains="workers cannot keep up but the host has room: more of them would",
        evidence=(
            "the train loader's workers' CPU %, run-queue wait and thread states (each over the time it ran "
            "and the loop consumed that loader: evaluation, checkpoints, long steps that were not data wait "
            "and gaps between its steps left out, `idle_s_left_out` in the evidence; other loaders' workers "
            "left out), idle cores; or workers seen blocked (their main threads not running, "
            "`workers_blocked`: latency-bound), never a low CPU figure alone (`sub_cause` `unknown`: bounded "
            "by the usable cores)"
        ),
        advice=(
            "raise `num_workers` from N to N / (1 − `f_wait`), capped by the idle cores and the usable cores "
            "when CPU-bound, by 4× the usable cores when latency-bound (`num_workers_cap`, "
            "`num_workers_bound` in the evidence); latency-bound workers already at that bound: do not raise "
            "N, overlap the requests inside each worker (threads, asyncio, `__getitems__`)"
        ),
        when=("`f_wait` > {wait_warning:%} (critical ≥ {wait_critical:%}) and neither I/O nor saturation"),
    ),
    Verdict(
        "input.epoch_restart",
        "worker start-up and first batches at every epoch (no persistent_workers) cost wall time",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=("epoch_restart_share", "epoch_restart_critical_share"),
        explains=(
            "DataLoader workers restart at every new iterator (`persistent_workers=False`) and their "
            "start-up costs a material share of wall time"
        ),
        evidence=(
            "per restart (an iterator after a loader's first, with new workers): the old workers' shutdown "
            "in the last `__next__`, making the iterator, and each new worker's first batch beyond the "
            "loader's normal wait (`store/restarts.py`); restarts and their mean cost over the live window "
            "when it holds two or more, else over the run so far (a restart every 10 minutes is weighed "
            "against the whole run); `persistent_workers`, start method; reports give "
            "`runs[].epoch_restarts`, `epoch_restart_s`, `epoch_restart_fraction`"
        ),
        advice=(
            "`persistent_workers=True`; with the spawn/forkserver start method each new worker is a fresh "
            "interpreter that re-imports torch and the dataset's modules and unpickles the dataset; keep "
            "per-worker set-up small or do it once before the workers start"
        ),
        when=("≥ {epoch_restart_share:%} of wall time (critical ≥ {epoch_restart_critical_share:%})"),
    ),
    Verdict(
        "input.host_to_device",
        "host→device copies are exposed",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=("h2d_pcie_rx_mb_s", "host_overhead_gpu_util"),
        explains="host→device copies from pageable memory are not overlapped with compute",
        evidence="GPU utilisation, PCIe RX throughput (NVML), the loader's `pin_memory`",
        advice=("`pin_memory=True` with `.to(device, non_blocking=True)`; move less (uint8, normalise on the GPU)"),
        when=("GPU < {host_overhead_gpu_util} % busy with ≥ {h2d_pcie_rx_mb_s} MB/s PCIe RX and `pin_memory=False`"),
    ),
    Verdict(
        "dist.comm",
        "time in collectives is a material share of the step and no single rank explains it",
        "#0097a7",
        thresholds=("comm_share", "comm_critical_share"),
        explains=(
            "the ranks of a job spend a material share of each step blocked in collectives, and no slower "
            "rank explains it"
        ),
        evidence=(
            "`comm_share`: at each step the least share blocked in collectives among the ranks (steps "
            "matched by their ends; the last rank to arrive hardly waits, the others' extra is waiting for "
            "it), the median over the steps; per rank `comm_fraction`, `comm_share_p50`, ms per step and "
            "compute; the shares by operation over the run (`by_op`: `ddp_grad_sync`, `all_reduce`, `wait`, "
            "...), ranks seen and world size"
        ),
        advice=(
            "let DDP overlap the all-reduce with backward (`bucket_cap_mb`, `gradient_as_bucket_view`, "
            "`static_graph`); gradient accumulation under `no_sync()`; fewer syncs of the job's own "
            "(metrics, barriers); compression hooks; placement on fast links"
        ),
        when=(
            "`comm_share` > {comm_share:%} (the PyTorch Profiler plugin's communication threshold; critical "
            "≥ {comm_critical_share:%}), no `dist.straggler`"
        ),
    ),
    Verdict(
        "host.overhead",
        "the main thread is busy outside data waits while the accelerator idles",
        "#283593",
        thresholds=(
            "host_overhead_gpu_util",
            "host_overhead_main_cpu",
            "wait_warning",
        ),
        explains="the GPU idles while the main thread is busy outside data waits",
        evidence="GPU utilisation, main-process CPU, `f_wait`",
        advice=('CUDA Graphs / `torch.compile(mode="reduce-overhead")`, remove per-step syncs, larger batch'),
        when=(
            "GPU < {host_overhead_gpu_util} % busy, main ≥ {host_overhead_main_cpu} % of a core, `f_wait` ≤ "
            "{wait_warning:%}"
        ),
    ),
    Verdict(
        "host.loop_code",
        "the loop's own per-step code (metrics, logging, progress bars, .item()) takes a material share of the step",
        "#1a237e",
        thresholds=("loop_code_share", "loop_code_critical_share"),
        explains=(
            "the loop's own per-step code (metrics, logging, progress bars, `.item()`) takes a material "
            "share of the step, outside the model and the data wait"
        ),
        evidence=(
            "the own-code share (the step less its data wait and the model, timed in bursts), the functions "
            "holding it (from the monitor's py-spy samples of the training thread, weighted by time; the "
            "agent's in-process samples, biased by the GIL, never name one)"
        ),
        advice=(
            "compute metrics every N steps or on the device (`torchmetrics`), log every N steps off the "
            "training thread, `tqdm(mininterval=...)`, no per-step `.item()`/`print(tensor)`"
        ),
        when=(
            "own code ≥ {loop_code_share:%} of the typical step (critical ≥ {loop_code_critical_share:%}; "
            "long steps — an eval, a collection — are stalls, left out)"
        ),
    ),
    Verdict(
        "host.sync",
        "the GPU drains every step because the host waits on it (.item(), .cpu(), synchronize)",
        "#3949ab",
        thresholds=(
            "gpu_drained_pct",
            "gpu_busy_pct",
            "wait_warning",
        ),
        explains="the GPU drains every step because the host waits on it",
        evidence=("utilisation of the run's GPUs and NVML's lowest sub-second sample in each tick, `f_wait`"),
        advice=(
            "log every N steps instead of `.item()`/`.cpu()`/`print(tensor)`; keep metrics on the device; "
            "`non_blocking` copies; no explicit `synchronize()`"
        ),
        when=(
            "GPU < {gpu_busy_pct} % busy, its lowest sample ≤ {gpu_drained_pct} % (drained), `f_wait` ≤ "
            "{wait_warning:%} (critical under 25 % busy)"
        ),
    ),
    Verdict(
        "gpu.small_work",
        "the GPU reports busy but its SMs are mostly idle: small batches, tiny or launch-bound kernels",
        "#e65100",
        thresholds=("sm_active_low_pct", "gpu_busy_pct"),
        explains="the GPU reports busy but its SMs are mostly idle",
        evidence="NVML utilisation against GPM SM activity (Hopper and newer)",
        advice="larger batch; `torch.compile`, CUDA Graphs; fuse small ops",
        when="NVML ≥ {gpu_busy_pct} % busy with SM activity < {sm_active_low_pct} %",
    ),
    Verdict(
        "gpu.no_tensor_cores",
        "SMs active, tensor pipes idle on a GPU that has them: AMP / bf16 / TF32 unused",
        "#f57f17",
        thresholds=("tensor_idle_pct", "sm_active_low_pct"),
        explains="SMs busy, tensor pipes idle: fp32 math on tensor-core hardware",
        evidence="GPM SM activity and tensor activity",
        advice="bf16 autocast, or TF32 for matmuls and cuDNN",
        when="SM activity ≥ {sm_active_low_pct} % with tensor activity < {tensor_idle_pct} %",
    ),
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
    Verdict(
        "ok.compute_bound",
        "no starvation: the accelerator (or the compute) is the limit",
        "#2e7d32",
        thresholds=(
            "wait_warning",
            "gpu_busy_pct",
            "wait_critical",
            "workers_ahead_share",
            "sm_active_low_pct",
        ),
        explains="nothing starves the accelerator",
        evidence="`f_wait`; with a GPU, the run's GPUs' utilisation and (GPM) SM activity",
        advice="speed up the model itself (AMP, `torch.compile`, larger batch)",
        when=(
            "`f_wait` ≤ {wait_warning:%}, and with a GPU: ≥ {gpu_busy_pct} % busy and SM activity ≥ "
            "{sm_active_low_pct} % where GPM exists"
        ),
    ),
    Verdict(
        "insufficient_data",
        "too few steps after warm-up to judge",
        "#9e9e9e",
        thresholds=("min_steps", "sampled_min_samples", "sampled_idle_cpu_pct"),
        explains="too few steps after warm-up to judge",
        evidence="steady-state step count",
        advice="keep training",
        when=(
            "< {min_steps} steady-state steps (a training sampled without an agent: < {sampled_min_samples} "
            "samples, or its main process under {sampled_idle_cpu_pct} % CPU)"
        ),
    ),
)

BY_CODE: dict[str, Verdict] = {v.code: v for v in VERDICTS}


def verdict(code: str) -> Verdict:
    """The declaration of ``code``; a code this trainmon does not know gets a neutral one (from a newer
    recording, or a Prometheus label)."""
    return BY_CODE.get(code) or Verdict(code, "a code this trainmon does not know")
