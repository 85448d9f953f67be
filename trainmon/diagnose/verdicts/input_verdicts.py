"""The loop waits for its batches: where they are made and what they wait on, or their copy to the GPU.

In the order of their priority (``VERDICTS`` in ``trainmon.diagnose.verdicts``)."""

from trainmon.diagnose.verdicts.declaration import INPUT_COLOUR, INPUT_THRESHOLDS, Verdict

INPUT: tuple[Verdict, ...] = (
    Verdict(
        "input.main_process",
        "data loads in the main process (num_workers=0) and the loop waits on it",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *INPUT_THRESHOLDS,
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
            *INPUT_THRESHOLDS,
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
        thresholds=(*INPUT_THRESHOLDS, "worker_busy_pct", "cpu_saturated_pct", "runq_starved_ms_s"),
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
            *INPUT_THRESHOLDS,
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
)
