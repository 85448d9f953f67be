"""The rules' thresholds, one dataclass (a config file's [thresholds] table overrides any of them).

Defaults come from the established tools: the TensorBoard profiler plugin (DataLoader > 5 % of the step),
SageMaker Debugger (CPU > 90 %, iowait), nvidia-resiliency-ext (straggler score < 0.75), the PyTorch Profiler
plugin (communication > 10 % of the step); docs/verdicts.md lists them with the verdicts that read them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Thresholds:
    window_s: float = 20.0
    window_steps: int = 20
    min_steps: int = 10  # fewer steady-state steps than this → insufficient_data
    wait_warning: float = 0.05  # DataLoader share of the step (TB plugin: > 5 %)
    wait_critical: float = 0.20
    exposed_min_share: float = 0.5  # on CUDA: the wait counts only if ≥ half of it left the GPU idle
    cpu_saturated_pct: float = 90.0  # SageMaker cpu_threshold
    worker_busy_pct: float = 70.0  # a worker using this much of a core is CPU-bound
    workers_ahead_share: float = 0.5  # workers seen waiting on their index queue this share of looks are ahead
    latency_workers_per_core: float = 4.0  # advised workers that mostly wait: at most this many per usable core
    advice_min_compute_share: float = 0.05  # advised workers: N / (1 − wait), with 1 − wait taken as at least this
    runq_starved_ms_s: float = 150.0  # runnable but waiting for a core this many ms per s: CPU-starved
    io_d_state: float = 0.25  # workers blocked on disk (D) this share of the time
    disk_busy_pct: float = 80.0
    disk_read_mb_s: float = 2.0  # workers' block-layer reads that, with idle CPU, mean disk-bound
    io_block_read_share: float = 0.5  # ... when they are at least this share of what the workers read()
    io_disk_read_mb_s: float = 0.5  # a busy disk counts against the workers once they read more than this
    io_remote_read_share: float = 0.25  # read() from a remote mount: block reads under this share of it
    iowait_pct: float = 30.0  # host iowait, as CPUs, of at least this % of one CPU per worker (D-state unknown)
    net_wait_share: float = 0.25  # workers seen waiting on the network (sockets, network filesystems) this share
    remote_rchar_mb_s: float = 0.5  # workers read this much through read() with little block I/O
    epoch_restart_share: float = 0.05  # worker restarts at new iterators cost this share of wall time
    epoch_restart_critical_share: float = 0.20
    checkpoint_share: float = 0.10
    checkpoint_critical_share: float = 0.30
    long_step_factor: float = 2.5  # a step this many times the median is a long step
    periodic_share: float = 0.15  # long steps take at least this share of the window
    periodic_critical_share: float = 0.40  # ... critical from this share
    periodic_irregularity: float = 1.0  # (p90 − p10) / median of the gaps between unexplained long steps
    gc_explains: float = 0.5  # a long step is GC's when gen-2 pauses inside it are this share of its excess
    hang_min_s: float = 30.0  # no step for max(this, hang_step_factor × the p95 step) while alive: a hang
    hang_step_factor: float = 10.0
    freeze_headline_share: float = 0.05  # a freeze that resumed heads the report when its run's freezes took this
    host_overhead_gpu_util: float = 70.0
    h2d_pcie_rx_mb_s: float = 1000.0  # host→device traffic that matters when it is not overlapped
    host_overhead_main_cpu: float = 85.0
    loop_code_share: float = 0.15  # the loop's own code (outside the model and the data wait) this share of the step
    loop_code_critical_share: float = 0.30
    gpu_mem_pct: float = 95.0
    gpu_busy_pct: float = 50.0  # below this the GPU is not the limit (PyTorch Profiler plugin flags < 50 %)
    gpu_drained_pct: float = 5.0  # the lowest sub-second utilisation sample at or under this: the GPU drained
    sm_active_low_pct: float = 30.0  # GPM SM activity under this while NVML says busy: small work
    tensor_idle_pct: float = 1.0  # GPM tensor activity under this with the SMs active: no tensor cores used
    throttle_share: float = 0.5
    throttle_power_cap_clock: float = 0.85  # a power cap throttles only with the SM clock below this share of max
    host_mem_pct: float = 95.0
    swap_growth_mb: float = 64.0
    straggler_wait_gap: float = 0.10  # a rank waits this share of the step more than the others
    straggler_step_ratio: float = 1.25  # unsynchronised ranks: step time this much above the others
    straggler_score: float = 0.75  # others' median compute / this rank's compute under this (nvidia-resiliency-ext)
    comm_share: float = 0.10  # time blocked in collectives, share of the step (PyTorch Profiler plugin: > 10 %)
    comm_critical_share: float = 0.30
    compile_share: float = 0.10  # torch.compile recompilations take this share of the window's wall time
    compile_critical_share: float = 0.30
    creep_min_mb: float = 256.0  # a run's CUDA memory peak grows at least this much over the span judged ...
    creep_min_s: float = 120.0  # ... which lasts at least this long ...
    creep_rising_share: float = 0.75  # ... and the peak rises in at least this share of its CREEP_SEGMENTS segments
    creep_critical_min: float = 30.0  # memory.creep is critical when the device would be full within this (minutes)
    hold_s: float = 3.0  # a new verdict must hold this long before the banner changes
    change_hold_s: float = 1.0  # ... or this long after a change the live window was cut at
    change_min_steps: int = 10  # a live change needs this many steps on either side of it
    change_min_s: float = 1.0  # ... and this many seconds after it
    change_wait: float = 0.10  # a change in the data-wait share this large is material
    change_step_ratio: float = 1.5  # so is a step time this many times longer or shorter
    change_z: float = 4.5  # rank statistic of a change, in standard deviations (scanned over every split)
    phase_min_s: float = 5.0  # a report's phases last at least this long
    sampled_min_samples: int = 30  # a training sampled without an agent is judged on at least this many samples
    sampled_idle_cpu_pct: float = 10.0  # ... and not at all while its main process uses less CPU than this
    headline_share: float = 0.25  # a cause headlining this share of the steady state may head the report
