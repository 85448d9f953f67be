"""Rules: pure functions from window figures to Findings."""

from __future__ import annotations

from dataclasses import dataclass

from trainmon.diagnose.findings import Finding
from trainmon.diagnose.window import HostWindow, RunWindow


@dataclass
class Thresholds:
    """Defaults from the anchors (TB plugin, SageMaker rules); see README "Verdicts"."""

    window_s: float = 20.0
    window_steps: int = 20
    min_steps: int = 10  # fewer steady-state steps than this → insufficient_data
    wait_warning: float = 0.05  # DataLoader share of the step (TB plugin: > 5 %)
    wait_critical: float = 0.20
    cpu_saturated_pct: float = 90.0  # SageMaker cpu_threshold
    checkpoint_share: float = 0.10
    checkpoint_critical_share: float = 0.30
    host_mem_pct: float = 95.0
    swap_growth_mb: float = 64.0
    hold_s: float = 3.0  # a new verdict must hold this long before the banner changes


def _label(w: RunWindow) -> str:
    rank = w.run.rank
    return f"rank {rank}" if rank is not None else f"pid {w.run.pid}"


def _base_evidence(w: RunWindow) -> dict:
    return {
        "run": _label(w),
        "steps": w.steps,
        "window_s": round(w.span_s, 2),
        "data_wait_fraction": round(w.wait_fraction, 4),
        "step_time_ms_p50": round(w.step_p50_s * 1e3, 2),
        "step_time_ms_p95": round(w.step_p95_s * 1e3, 2),
        "num_workers": w.loader.get("num_workers"),
        "batch_size": w.loader.get("batch_size"),
    }


def insufficient(w: RunWindow, th: Thresholds) -> Finding | None:
    if w.steps >= th.min_steps:
        return None
    return Finding(
        "insufficient_data", "ok",
        f"{w.steps} steady-state steps so far ({w.warm_steps} warm-up); need {th.min_steps} to judge",
        ["keep training; trainmon judges once warm-up is over"],
        {"run": _label(w), "steps": w.steps, "warmup_steps": w.warm_steps, "min_steps": th.min_steps},
    )


def input_bound(w: RunWindow, host: HostWindow, th: Thresholds) -> Finding | None:
    f = w.wait_fraction
    if f != f or f <= th.wait_warning:
        return None
    severity = "critical" if f >= th.wait_critical else "warning"
    ev = _base_evidence(w)
    ev["host_cpu_busy_pct"] = round(host.cpu_busy, 1)
    ev["cores"] = host.cores
    workers = w.loader.get("num_workers")
    pct = f"{f:.0%}"
    if workers == 0:
        suggested = max(2, min(8, host.cores - 1))
        return Finding(
            "input.main_process", severity,
            f"{pct} of each step waits on data loaded in the main process (num_workers=0); "
            f"step p50 {w.step_p50_s * 1e3:.0f} ms",
            [f"set DataLoader(num_workers={suggested}) so batches load in parallel with compute",
             "add pin_memory=True and persistent_workers=True when training on a GPU"],
            ev,
        )
    if host.cpu_busy == host.cpu_busy and host.cpu_busy >= th.cpu_saturated_pct:
        return Finding(
            "input.workers_cpu", severity,
            f"{pct} of each step waits on data while the host CPU is {host.cpu_busy:.0f}% busy "
            f"({workers} workers on {host.cores} cores)",
            ["make preprocessing cheaper: crop/resize before converting, batch transforms, cache decoded data",
             "move augmentation to the GPU (DALI, torchvision.transforms.v2 on tensors)"],
            ev,
        )
    idle_cores = host.cores * (1 - host.cpu_busy / 100) if host.cpu_busy == host.cpu_busy else None
    more = (workers or 0) + max(1, int(idle_cores or 1))
    return Finding(
        "input.too_few_workers", severity,
        f"{pct} of each step waits on data with {workers} workers while "
        f"{idle_cores:.1f} of {host.cores} cores are idle" if idle_cores is not None else
        f"{pct} of each step waits on data with {workers} workers",
        [f"raise num_workers from {workers} to {more}", "set persistent_workers=True and prefetch_factor≥2"],
        ev,
    )


def checkpoint_stall(w: RunWindow, th: Thresholds) -> Finding | None:
    if w.span_s <= 0 or not w.checkpoints:
        return None
    share = w.checkpoint_s / w.span_s
    if share < th.checkpoint_share:
        return None
    ev = _base_evidence(w)
    ev.update(checkpoint_s=round(w.checkpoint_s, 3), checkpoints=w.checkpoints, checkpoint_share=round(share, 4))
    return Finding(
        "stall.checkpoint", "critical" if share >= th.checkpoint_critical_share else "warning",
        f"checkpoint saves took {share:.0%} of the last {w.span_s:.0f} s ({w.checkpoints} saves, "
        f"{w.checkpoint_s:.1f} s)",
        ["save less often, or asynchronously (torch.distributed.checkpoint.async_save)",
         "write checkpoints to fast local storage and copy them off in the background"],
        ev,
    )


def host_memory(host: HostWindow, th: Thresholds) -> Finding | None:
    mem, swap = host.mem_used_pct_max, host.swap_growth_mb
    if (mem == mem and mem >= th.host_mem_pct) or (swap == swap and swap >= th.swap_growth_mb):
        return Finding(
            "memory.host_pressure", "critical" if swap == swap and swap >= th.swap_growth_mb else "warning",
            f"host memory {mem:.0f}% used, swap grew {0 if swap != swap else swap:.0f} MB in the window",
            ["reduce num_workers or prefetch_factor (each worker holds a copy of the dataset object)",
             "keep datasets as memory-mapped arrays instead of Python objects"],
            {"mem_used_pct_max": mem, "swap_growth_mb": swap},
        )
    return None


def compute_bound(w: RunWindow, th: Thresholds) -> Finding | None:
    f = w.wait_fraction
    if f != f or f > th.wait_warning:
        return None
    ev = _base_evidence(w)
    sps = w.samples_per_s
    rate = f", {sps:.0f} samples/s" if sps == sps else ""
    return Finding(
        "ok.compute_bound", "ok",
        f"data wait is {f:.1%} of the step; compute is the limit (step p50 {w.step_p50_s * 1e3:.0f} ms{rate})",
        ["nothing starves the accelerator: to go faster, speed up the model (AMP, torch.compile, larger batch)"],
        ev,
    )
