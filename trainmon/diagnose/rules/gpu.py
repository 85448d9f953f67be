"""The GPU side: memory pressure, throttled clocks, and the compute-bound all-clear."""

from __future__ import annotations

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.window import RunWindow
from trainmon.metrics import limiting_reasons
from trainmon.numbers import is_nan, rounded


def gpu_memory(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    if is_nan(ev.gpu_mem_pct) or ev.gpu_mem_pct < th.gpu_mem_pct:
        return None
    return Finding(
        "memory.gpu_pressure",
        "warning",
        f"GPU memory {ev.gpu_mem_pct:.0f}% used: the next larger batch or a fragmentation spike will OOM",
        [
            "use activation checkpointing or AMP (bf16) to cut activation memory",
            "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
        ],
        {"run": w.run.label, "gpu_mem_pct": rounded(ev.gpu_mem_pct, 1), "gpus": ev.gpus},
    )


def gpu_throttled(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    if is_nan(ev.gpu_throttle_share) or ev.gpu_throttle_share < th.throttle_share:
        return None
    reasons = [r.long for r in limiting_reasons(ev.gpu_throttle_bits)]
    state = []
    if not is_nan(ev.gpu_sm_clock_mhz) and not is_nan(ev.gpu_sm_clock_max_mhz):
        state.append(f"SM clock {ev.gpu_sm_clock_mhz:.0f} of {ev.gpu_sm_clock_max_mhz:.0f} MHz")
    if not is_nan(ev.gpu_temp_c):
        state.append(f"{ev.gpu_temp_c:.0f} °C")
    return Finding(
        "gpu.throttled",
        "warning",
        f"GPU clocks held down {ev.gpu_throttle_share:.0%} of the time ({', '.join(reasons)})"
        + (f": {', '.join(state)}" if state else ""),
        [
            "check cooling and airflow (thermal) or the power limit (nvidia-smi -q -d PERFORMANCE,POWER)",
            "a power-capped GPU runs slower at the same utilisation: compare sm_clock with its maximum",
        ],
        {
            "run": w.run.label,
            "throttle_share": rounded(ev.gpu_throttle_share, 3),
            "reasons": reasons,
            "gpus": ev.gpus,
            "sm_clock_mhz": rounded(ev.gpu_sm_clock_mhz, 0),
            "sm_clock_max_mhz": rounded(ev.gpu_sm_clock_max_mhz, 0),
            "temp_c": rounded(ev.gpu_temp_c, 0),
        },
    )


def compute_bound(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    f = w.starving_fraction
    if is_nan(f) or f > th.wait_warning:
        return None
    sps = w.samples_per_s
    rate = f", {sps:.0f} samples/s" if not is_nan(sps) else ""
    gpu = f", GPU {ev.gpu_util:.0f}% busy" if not is_nan(ev.gpu_util) else ""
    return Finding(
        "ok.compute_bound",
        "ok",
        f"data wait is {f:.1%} of the step; compute is the limit (step p50 {w.step_p50_s * 1e3:.0f} ms{rate}{gpu})",
        ["nothing starves the accelerator: to go faster, speed up the model (AMP, torch.compile, a larger batch)"],
        base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1)},
    )


# ---------------------------------------------------------------- distributed
