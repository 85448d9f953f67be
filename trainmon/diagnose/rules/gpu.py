"""The GPU side: memory pressure, throttled clocks, and the compute-bound all-clear."""

from __future__ import annotations

import math

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import AdviceItem, Finding, code_advice
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.input_workers import workers_ahead
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.diagnose.thresholds import Thresholds
from trainmon.metrics import limiting_reasons
from trainmon.numbers import is_nan, rounded


@rule(Stage.PER_RUN, "memory.gpu_pressure")
def gpu_memory(ctx: RuleContext) -> Finding | None:
    w, ev, th = ctx.w, ctx.ev, ctx.th
    if is_nan(ev.gpu_mem_pct) or ev.gpu_mem_pct < th.gpu_mem_pct:
        return None
    return Finding(
        "memory.gpu_pressure",
        "warning",
        f"GPU memory {ev.gpu_mem_pct:.0f}% used: the next larger batch or a fragmentation spike will OOM",
        [],
        {"run": w.run.label, "gpu_mem_pct": rounded(ev.gpu_mem_pct, 1), "gpus": ev.gpus},
        [
            AdviceItem("use activation checkpointing or AMP (bf16) to cut activation memory"),
            AdviceItem(
                "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
                {"env:PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                "fragmentation",
            ),
        ],
    )


@rule(Stage.PER_RUN, "gpu.throttled")
def gpu_throttled(ctx: RuleContext) -> Finding | None:
    w, ev, th = ctx.w, ctx.ev, ctx.th
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
        [],
        {
            "run": w.run.label,
            "throttle_share": rounded(ev.gpu_throttle_share, 3),
            "reasons": reasons,
            "gpus": ev.gpus,
            "sm_clock_mhz": rounded(ev.gpu_sm_clock_mhz, 0),
            "sm_clock_max_mhz": rounded(ev.gpu_sm_clock_max_mhz, 0),
            "temp_c": rounded(ev.gpu_temp_c, 0),
        },
        advice_items=code_advice(
            "check cooling and airflow (thermal) or the power limit (nvidia-smi -q -d PERFORMANCE,POWER)",
            "a power-capped GPU runs slower at the same utilisation: compare sm_clock with its maximum",
        ),
    )


def gpu_is_the_limit(ev: Evidence, th: Thresholds) -> bool:
    """With GPU figures: the run's GPUs are busy, and (where GPM tells) their SMs really have work."""
    if is_nan(ev.gpu_util):
        return True  # no GPU figures: the compute is the limit as far as anyone can tell
    if ev.gpu_util < th.gpu_busy_pct:
        return False
    return is_nan(ev.gpu_sm_active) or ev.gpu_sm_active >= th.sm_active_low_pct


def _wait_text(w: RunWindow, f: float, lead: str = "data wait is") -> str:
    """The data wait as a summary tells it; a loop nothing measured it of (no loader, its model not timed) has none."""
    return f"{lead} {f:.1%} of the step" if w.run.wait_measured else "no loader measured the data wait"


@rule(Stage.PER_RUN, "ok.compute_bound")
def compute_bound(ctx: RuleContext) -> Finding | None:
    w, ev, th = ctx.w, ctx.ev, ctx.th
    f = w.starving_fraction
    # A loader whose workers are ahead (waiting on their index queues) is healthy up to a critical wait: what the loop
    # waits beside them is taking the batches in (rules/input.py leaves such windows here).
    ahead = workers_ahead(ev, th) if not is_nan(f) and f > th.wait_warning else math.nan
    if is_nan(f) or f > (th.wait_warning if is_nan(ahead) else th.wait_critical) or not gpu_is_the_limit(ev, th):
        return None
    sps = w.samples_per_s
    rate = f", {sps:.0f} samples/s" if not is_nan(sps) else ""
    gpu = f", GPU {ev.gpu_util:.0f}% busy" if not is_nan(ev.gpu_util) else ""
    workers = "" if is_nan(ahead) else f", its worker(s) ahead (waiting on their index queue {ahead:.0%} of the time)"
    evidence = base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1)}
    if not is_nan(ahead):
        evidence["workers_ahead"] = rounded(ahead, 3)
    return Finding(
        "ok.compute_bound",
        "ok",
        f"{_wait_text(w, f)}{workers}; compute is the limit (step p50 {w.step_p50_s * 1e3:.0f} ms{rate}{gpu})",
        [],
        evidence,
        advice_items=code_advice(
            "nothing starves the accelerator: to go faster, speed up the model (AMP, torch.compile, a larger batch)"
        ),
    )


@rule(Stage.PER_RUN, "host.sync")
def host_sync(ctx: RuleContext) -> Finding | None:
    """The GPU is mostly idle, the loop does not wait on data, and the GPU drains to zero within every tick:
    the host waits on the device each step (.item(), .cpu(), printing tensors, synchronize)."""
    w, ev, th = ctx.w, ctx.ev, ctx.th
    f = w.starving_fraction
    if is_nan(f) or f > th.wait_warning or is_nan(ev.gpu_util) or is_nan(ev.gpu_util_min):
        return None
    if ev.gpu_util >= th.gpu_busy_pct or ev.gpu_util_min > th.gpu_drained_pct:
        return None
    return Finding(
        "host.sync",
        "critical" if ev.gpu_util < th.gpu_busy_pct / 2 else "warning",
        f"the GPU is only {ev.gpu_util:.0f}% busy and drains to {ev.gpu_util_min:.0f}% within each second while "
        f"{_wait_text(w, f, 'the loop waits on data')}: the host waits on the GPU every step",
        [],
        base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1), "gpu_util_min_pct": rounded(ev.gpu_util_min, 1)},
        advice_items=code_advice(
            "take .item(), .cpu(), .tolist() and print(tensor) out of the step: log every N steps",
            "keep running metrics on the device (sum into a GPU tensor, read it once per log interval)",
            "copy to the host with non_blocking=True into pinned memory; drop explicit torch.cuda.synchronize()",
        ),
    )


@rule(Stage.PER_RUN, "gpu.small_work")
def small_work(ctx: RuleContext) -> Finding | None:
    """NVML counts a GPU busy while any kernel runs; GPM's SM activity says how much of the GPU the kernels use."""
    w, ev, th = ctx.w, ctx.ev, ctx.th
    if is_nan(ev.gpu_util) or is_nan(ev.gpu_sm_active):
        return None
    if ev.gpu_util < th.gpu_busy_pct or ev.gpu_sm_active >= th.sm_active_low_pct:
        return None
    return Finding(
        "gpu.small_work",
        "warning",
        f"the GPU reports {ev.gpu_util:.0f}% busy but its SMs have work only {ev.gpu_sm_active:.0f}% of the time: "
        "the kernels are too small to fill it",
        [],
        base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1), "sm_active_pct": rounded(ev.gpu_sm_active, 1)},
        advice_items=code_advice(
            "raise the batch size (scale the learning rate with it)",
            "cut launch overhead: torch.compile, CUDA Graphs (torch.cuda.graphs / mode='reduce-overhead')",
            "fuse small ops; avoid per-sample Python loops over tensors",
        ),
    )


@rule(Stage.PER_RUN, "gpu.no_tensor_cores")
def no_tensor_cores(ctx: RuleContext) -> Finding | None:
    """GPM exists on Hopper and newer, which all have tensor cores: SMs busy with the tensor pipes idle is fp32."""
    w, ev, th = ctx.w, ctx.ev, ctx.th
    if is_nan(ev.gpu_sm_active) or is_nan(ev.gpu_tensor_active):
        return None
    if ev.gpu_sm_active < th.sm_active_low_pct or ev.gpu_tensor_active >= th.tensor_idle_pct:
        return None
    return Finding(
        "gpu.no_tensor_cores",
        "warning",
        f"SMs active {ev.gpu_sm_active:.0f}% of the time, tensor pipes {ev.gpu_tensor_active:.1f}%: the math runs "
        "without tensor cores",
        [],
        base_evidence(w)
        | {"sm_active_pct": rounded(ev.gpu_sm_active, 1), "tensor_active_pct": rounded(ev.gpu_tensor_active, 1)},
        advice_items=code_advice(
            "train in bf16 with torch.autocast(device_type='cuda', dtype=torch.bfloat16)",
            "or allow TF32: torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True",
        ),
    )
