"""Stalls: checkpoint saves and recurring long steps."""

from __future__ import annotations

import itertools
import math

from trainmon.diagnose.findings import Finding, code_advice
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.diagnose.stats import quantile
from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan, rounded
from trainmon.store.gcspans import GENERATIONS


@rule(Stage.BEFORE_WARMUP, "stall.checkpoint")
def checkpoint_stall(ctx: RuleContext) -> Finding | None:
    if not ctx.stalls:
        return None  # a window cut at a recent change: too short to hold a recurring pattern
    w, th = ctx.w, ctx.th
    if w.span_s <= 0 or not w.checkpoints:
        return None
    share = w.checkpoint_s / w.span_s
    if share < th.checkpoint_share:
        return None
    ev = base_evidence(w) | {
        "checkpoint_s": round(w.checkpoint_s, 3),
        "checkpoints": w.checkpoints,
        "checkpoint_share": round(share, 4),
    }
    per = w.checkpoint_s / w.checkpoints
    return Finding(
        "stall.checkpoint",
        "critical" if share >= th.checkpoint_critical_share else "warning",
        f"checkpoint saves took {share:.0%} of the last {w.span_s:.0f} s ({w.checkpoints} saves, {per:.2f} s each)",
        [],
        ev,
        advice_items=code_advice(
            "save less often, or asynchronously (torch.distributed.checkpoint.async_save, a background thread)",
            "write checkpoints to fast local storage and copy them off in the background",
        ),
    )


@rule(Stage.PER_RUN, "stall.periodic")
def periodic_stall(ctx: RuleContext) -> Finding | None:
    if not ctx.stalls:
        return None  # a window cut at a recent change: too short to hold a recurring pattern
    w, th = ctx.w, ctx.th
    if w.steps < th.min_steps or is_nan(w.step_p50_s):
        return None
    limit = w.step_p50_s * th.long_step_factor
    longest = w.long_durations(limit)  # exact and C-level: most windows have no candidate at all
    if len(longest) < 2 or math.fsum(longest) < th.periodic_share * w.step_time_s:
        return None
    # Long steps spent mostly waiting on data are an input problem; those overlapping a save are a
    # checkpoint problem, and those holding a torch.compile compilation a recompilation problem (stall.recompile):
    # none is a periodic stall. A collection the DataLoader's own allocations set off pauses the loop inside
    # __next__: its time is not data.
    gc, compiles = w.run.gc, w.run.compiles
    long_steps = [
        (s, e)
        for s, e, wait in w.long_steps(limit)
        if wait - (gc.overlap_all(s, e) if gc.total else 0.0) < 0.5 * (e - s)
        and not w.overlaps_checkpoint(s, e)
        and not (compiles.total and compiles.between(s, e))
    ]
    if len(long_steps) < 2:
        return None
    long_time = sum(e - s for s, e in long_steps)
    share = long_time / w.step_time_s if w.step_time_s > 0 else 0.0
    if share < th.periodic_share:
        return None
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(long_steps)]
    period = quantile(gaps, 0.5) if gaps else math.nan
    extra = long_time - len(long_steps) * w.step_p50_s
    names = sorted({p for p in w.phase_names_in(long_steps)})
    eval_ran = w.eval_in(long_steps)
    gc_steps, gc_pause_ms = gc_explained(w, long_steps, th)
    gc_named = len(gc_steps) >= 2 and 2 * len(gc_steps) >= len(long_steps)
    if not names and not eval_ran and not gc_named and len(gaps) >= 2:
        spread = (quantile(gaps, 0.9) - quantile(gaps, 0.1)) / period if period > 0 else math.inf
        if spread > th.periodic_irregularity:
            return None  # irregular hiccups (contention, noise), not a recurring stall
    what = f" during {', '.join(names)}" if names else (" (an eval loader ran)" if eval_ran else "")
    ev = base_evidence(w) | {
        "long_steps": len(long_steps),
        "long_step_share": round(share, 4),
        "period_s": rounded(period, 2),
        "long_step_ms_p50": rounded(quantile([e - s for s, e in long_steps], 0.5) * 1e3, 1),
        "phases": names,
    }
    advice = [
        "run evaluation, logging and metric syncs less often, or asynchronously",
        "avoid per-step .item()/.cpu() syncs in logging; aggregate on device and log every N steps",
        "if it is Python GC: gc.freeze() after setup, or raise gc thresholds",
    ]
    summary = (
        f"{len(long_steps)} long steps{what} every {period:.1f} s take {share:.0%} of the time "
        f"(+{extra:.1f} s over the {w.step_p50_s * 1e3:.0f} ms median)"
    )
    if w.run.gc.total:  # the agent times the collector (older agents and recordings do not)
        ev["gc"] = gc_totals(w)
        ev["gc_explained_long_steps"] = len(gc_steps)
        ev["gc_gen2_pause_ms_p50"] = rounded(gc_pause_ms, 1)
    if gc_named:
        summary += (
            f": gen-2 garbage collection, {gc_pause_ms:.0f} ms each, explains {len(gc_steps)} of "
            f"{len(long_steps)} long steps"
        )
        advice = [
            "call gc.freeze() once start-up and the model build are done: what they allocated leaves the "
            "collector's generations and is never scanned again",
            "build fewer reference cycles per step (graphs, caches and closures that point back at their owner, "
            "exceptions kept with their tracebacks): break them, or use weakref",
            "raise the collector's thresholds (gc.set_threshold(50_000, 50, 100)), or gc.disable() and call "
            "gc.collect() yourself at epoch boundaries",
        ]
    severity = "critical" if share >= th.periodic_critical_share else "warning"
    return Finding("stall.periodic", severity, summary, [], ev, advice_items=code_advice(*advice))


def gc_explained(w: RunWindow, long_steps: list[tuple[float, float]], th: Thresholds) -> tuple[list[int], float]:
    """Which long steps gen-2 collections explain (their pauses inside the step are at least ``gc_explains`` of
    its excess over the median), and the median gen-2 pause inside those steps (ms; nan where none)."""
    spans = w.run.gc
    if not spans.total:
        return [], math.nan
    explained: list[int] = []
    pauses: list[float] = []
    for k, (s, e) in enumerate(long_steps):
        pause = spans.overlap(s, e, 2)
        if pause > 0 and pause >= th.gc_explains * (e - s - w.step_p50_s):
            explained.append(k)
            start, end, gen = spans.between(s, e)
            pauses.extend(b - a for a, b, g in zip(start, end, gen, strict=True) if g == 2)
    return explained, quantile(pauses, 0.5) * 1e3 if pauses else math.nan


def gc_totals(w: RunWindow) -> dict[str, dict[str, float]]:
    """Garbage-collection pauses in the window by generation: how many, how long in all, the longest."""
    start, end, gen = w.run.gc.between(w.t0, w.t1)
    out: dict[str, dict[str, float]] = {}
    for g in range(GENERATIONS):
        pauses = [b - a for a, b, k in zip(start, end, gen, strict=True) if k == g]
        out[f"gen{g}"] = {
            "count": len(pauses),
            "total_ms": round(math.fsum(pauses) * 1e3, 1),
            "max_ms": round(max(pauses, default=0.0) * 1e3, 1),
        }
    return out


# ---------------------------------------------------------------- host / GPU
