"""Distributed jobs: one rank slower than the rest."""

from __future__ import annotations

from trainmon.diagnose.findings import Finding
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.window import RunWindow, quantile


def straggler(windows: list[RunWindow], sub_causes: dict[int, Finding | None], th: Thresholds) -> Finding | None:
    """Ranks of one job: the rank whose data wait (or, unsynchronised, step time) is out of line."""
    ranked = [w for w in windows if w.steps >= th.min_steps]
    if len(ranked) < 2:
        return None
    waits = {id(w): (w.wait_s / w.steps) for w in ranked}
    steps = {id(w): w.step_p50_s for w in ranked}
    slow = max(ranked, key=lambda w: waits[id(w)])
    others = [w for w in ranked if w is not slow]
    other_wait = quantile([waits[id(w)] for w in others], 0.5)
    step = quantile(list(steps.values()), 0.5)
    gap = (waits[id(slow)] - other_wait) / step if step > 0 else 0.0
    kind = "data"
    if gap < th.straggler_wait_gap:
        slow = max(ranked, key=lambda w: steps[id(w)])
        others = [w for w in ranked if w is not slow]
        ratio = steps[id(slow)] / max(1e-9, quantile([steps[id(w)] for w in others], 0.5))
        if ratio < th.straggler_step_ratio:
            return None
        kind = "compute"
        gap = ratio - 1
    sub = sub_causes.get(id(slow))
    sub_code = sub.code if sub is not None and sub.code.startswith("input.") else None
    who = slow.run.label
    peers = ", ".join(w.run.label for w in others)
    if kind == "data":
        summary = (
            f"{who} is the straggler: it waits {slow.wait_fraction:.0%} of each step on data while "
            f"{peers} wait {quantile([w.wait_fraction for w in others], 0.5):.0%} and idle in collectives"
        )
        if sub_code:
            summary += f" ({sub_code})"
    else:
        summary = f"{who} is the straggler: its steps take {gap + 1:.2f}× those of {peers}"
    advice = [f"fix {who} first: every other rank waits for it at each synchronisation"]
    if sub is not None and sub.code.startswith("input."):
        advice += sub.advice
    else:
        advice.append(f"compare {who}'s host (CPU, disk, GPU clocks) with the others'; rebalance its data shard")
    return Finding(
        "dist.straggler",
        "critical" if gap >= 0.2 else "warning",
        summary,
        advice,
        {
            "rank": slow.run.rank,
            "run": who,
            "kind": kind,
            "gap": round(gap, 4),
            "sub_cause": sub_code,
            "ranks": {
                w.run.label: {
                    "data_wait_fraction": round(w.wait_fraction, 4),
                    "step_time_ms_p50": round(w.step_p50_s * 1e3, 2),
                }
                for w in ranked
            },
        },
    )
