"""The host side of the loop: Python overhead outside the model, the loop's own code, synchronisations with the GPU."""

from trainmon.diagnose.verdicts.declaration import Verdict

HOST_OVERHEAD = Verdict(
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
)

HOST_LOOP_CODE = Verdict(
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
)

HOST_SYNC = Verdict(
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
)
