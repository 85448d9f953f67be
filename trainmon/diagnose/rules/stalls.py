"""Stalls: checkpoint saves and recurring long steps."""

from __future__ import annotations

import itertools
import math

from trainmon.diagnose.findings import Finding
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.window import RunWindow, quantile
from trainmon.numbers import is_nan, rounded


def checkpoint_stall(w: RunWindow, th: Thresholds) -> Finding | None:
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
        [
            "save less often, or asynchronously (torch.distributed.checkpoint.async_save, a background thread)",
            "write checkpoints to fast local storage and copy them off in the background",
        ],
        ev,
    )


def periodic_stall(w: RunWindow, th: Thresholds) -> Finding | None:
    if w.steps < th.min_steps or is_nan(w.step_p50_s):
        return None
    limit = w.step_p50_s * th.long_step_factor
    longest = w.long_durations(limit)  # exact and C-level: most windows have no candidate at all
    if len(longest) < 2 or math.fsum(longest) < th.periodic_share * w.step_time_s:
        return None
    # Long steps spent mostly waiting on data are an input problem; those overlapping a save are a
    # checkpoint problem: neither is a periodic stall.
    long_steps = [
        (s, e) for s, e, wait in w.long_steps(limit) if wait < 0.5 * (e - s) and not w.overlaps_checkpoint(s, e)
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
    if not names and not eval_ran and len(gaps) >= 2:
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
    return Finding(
        "stall.periodic",
        "critical" if share >= 0.4 else "warning",
        f"{len(long_steps)} long steps{what} every {period:.1f} s take {share:.0%} of the time "
        f"(+{extra:.1f} s over the {w.step_p50_s * 1e3:.0f} ms median)",
        [
            "run evaluation, logging and metric syncs less often, or asynchronously",
            "avoid per-step .item()/.cpu() syncs in logging; aggregate on device and log every N steps",
            "if it is Python GC: gc.freeze() after setup, or raise gc thresholds",
        ],
        ev,
    )


# ---------------------------------------------------------------- host / GPU
