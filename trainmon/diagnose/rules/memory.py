"""Accelerator memory creeping up: the CUDA allocator's peak grows steadily over the run (a leak: tensors kept across
steps, a growing cache, a history of losses kept with their graphs).

Read from the agent's reads of the caching allocator (``Run.cuda_memory``, about ten a second): the span judged (the
run so far, or a report's phase) is cut into ``CREEP_SEGMENTS`` equal segments and each segment's highest peak taken.
A creep: the peak rises from segment to segment in at least ``creep_rising_share`` of them, by ``creep_min_mb`` or
more in all, over ``creep_min_s`` or longer. A peak that settles (the longest batch seen, the optimizer's state made
at its first step) rises early and then rarely, and is not one. The rate is the least-squares slope through the
segments' peaks; the device fills when the peak reaches its total memory at that rate. The warm-up steps are left out:
the memory the first steps make (activations, the optimizer's state) is no creep.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from trainmon.diagnose.findings import Finding, code_advice
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.store.cuda_memory import MB, CudaMemory

CREEP_SEGMENTS = 8
FIELD = "peak_allocated"


def segment_peaks(memory: CudaMemory, t0: float, t1: float, field: str = FIELD) -> list[tuple[float, float]]:
    """(segment middle, highest reading) of each of CREEP_SEGMENTS equal segments of ``[t0, t1]`` holding a read."""
    out = []
    width = (t1 - t0) / CREEP_SEGMENTS
    for k in range(CREEP_SEGMENTS):
        a = t0 + k * width
        _, values = memory.between(field, a, a + width)
        if values:
            out.append((a + width / 2, max(values)))
    return out


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y), per second."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / var if var > 0 else 0.0


@rule(Stage.PER_RUN, "memory.creep")
def memory_creep(ctx: RuleContext) -> Finding | None:
    run, th = ctx.r, ctx.th
    memory = run.cuda_memory
    if not memory:
        return None
    times = memory.t[FIELD]
    t0 = max(times[0], ctx.since if ctx.since is not None else times[0], _steady_from(run))
    t1 = min(ctx.t, times[-1])
    if t1 - t0 < th.creep_min_s:
        return None
    peaks = segment_peaks(memory, t0, t1)
    if len(peaks) < CREEP_SEGMENTS - 1:
        return None  # reads missing over part of the span: not judged
    rises = sum(1 for (_, a), (_, b) in itertools.pairwise(peaks) if b > a)
    growth = peaks[-1][1] - peaks[0][1]
    if rises < th.creep_rising_share * (len(peaks) - 1) or growth < th.creep_min_mb * MB:
        return None
    rate = slope(peaks)  # bytes per second
    if rate <= 0:
        return None
    i, j = run.steps.index_range(t0, t1)
    per_k_steps = rate * (t1 - t0) / (j - i) * 1000 if j > i else math.nan
    latest = peaks[-1][1]
    full_min = (memory.total - latest) / rate / 60 if memory.total > latest else math.nan
    severity = "critical" if full_min <= th.creep_critical_min else "warning"
    summary = (
        f"CUDA memory peak grew {growth / MB:,.0f} MB over {(t1 - t0) / 60:.1f} min, steadily "
        f"({rate * 60 / MB:,.0f} MB/min"
        + (f", {per_k_steps / MB:,.1f} MB per 1000 steps" if not math.isnan(per_k_steps) else "")
        + ")"
    )
    if not math.isnan(full_min):
        summary += f": the device's {memory.total / MB / 1024:.0f} GiB would be full in about {full_min:.0f} min"
    return Finding(
        "memory.creep",
        severity,
        summary,
        [],
        _evidence(run.label, memory, peaks, rate, per_k_steps, full_min),
        advice_items=code_advice(*_ADVICE),
    )


def _steady_from(run: Any) -> float:
    """When the run's first steady step began: the memory its first steps make (activations, the optimizer's state)
    is no creep. inf while it has none (nothing is judged yet)."""
    warm = run.steps.warm
    k = warm.tobytes().find(b"\x00")
    return run.steps.start[k] if k >= 0 else math.inf


_ADVICE = [
    "look for tensors kept across steps: losses or outputs appended to a list without .detach() / .item(), caches "
    "that grow with each batch, hooks that store activations",
    "compare torch.cuda.memory_snapshot() (or torch.cuda.memory._record_memory_history()) between two steps far "
    "apart to see what grows",
    "if the growth is the allocator's fragmentation rather than live tensors (reserved grows, allocated does not): "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
]


def _evidence(
    label: str, memory: CudaMemory, peaks: list[tuple[float, float]], rate: float, per_k: float, full_min: float
) -> dict[str, Any]:
    reserved = memory.latest("peak_reserved")
    return {
        "run": label,
        "device": memory.device,
        "device_total_mb": round(memory.total / MB) if memory.total else None,
        "peak_allocated_mb": [round(p / MB, 1) for _, p in peaks],
        "peak_reserved_mb": round(reserved / MB, 1) if reserved is not None else None,
        "growth_mb_per_min": round(rate * 60 / MB, 2),
        "growth_mb_per_1000_steps": None if math.isnan(per_k) else round(per_k / MB, 2),
        "minutes_to_full": None if math.isnan(full_min) else round(full_min, 1),
    }
