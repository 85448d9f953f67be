"""The GPU's own work: kernels too small to fill it, matrix products off the tensor cores, clocks held down."""

from trainmon.diagnose.verdicts.declaration import Verdict

GPU_SMALL_WORK = Verdict(
    "gpu.small_work",
    "the GPU reports busy but its SMs are mostly idle: small batches, tiny or launch-bound kernels",
    "#e65100",
    thresholds=("sm_active_low_pct", "gpu_busy_pct"),
    explains="the GPU reports busy but its SMs are mostly idle",
    evidence="NVML utilisation against GPM SM activity (Hopper and newer)",
    advice="larger batch; `torch.compile`, CUDA Graphs; fuse small ops",
    when="NVML ≥ {gpu_busy_pct} % busy with SM activity < {sm_active_low_pct} %",
)

GPU_NO_TENSOR_CORES = Verdict(
    "gpu.no_tensor_cores",
    "SMs active, tensor pipes idle on a GPU that has them: AMP / bf16 / TF32 unused",
    "#f57f17",
    thresholds=("tensor_idle_pct", "sm_active_low_pct"),
    explains="SMs busy, tensor pipes idle: fp32 math on tensor-core hardware",
    evidence="GPM SM activity and tensor activity",
    advice="bf16 autocast, or TF32 for matmuls and cuDNN",
    when="SM activity ≥ {sm_active_low_pct} % with tensor activity < {tensor_idle_pct} %",
)

GPU_THROTTLED = Verdict(
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
)
