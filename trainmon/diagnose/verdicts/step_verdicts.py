"""What a step spends beside the model's own work: collectives, the host's Python around the model and the
loop's own code, synchronisations, kernels too small for the GPU, matrix products off its tensor cores.

In the order of their priority (``VERDICTS`` in ``trainmon.diagnose.verdicts``)."""

from trainmon.diagnose.verdicts.declaration import Verdict

STEP: tuple[Verdict, ...] = (
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
)
