"""The agent's own cost inside a run (``cost`` records, one per part about every second): what its hooks added to the
training thread and the CPU time of its sender thread, each over the interval it covers, and per step."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trainmon.protocol import COST_PARTS

if TYPE_CHECKING:
    from trainmon.store.steps import Steps

NS = 1e-9


class AgentCost:
    """Per part of ``COST_PARTS``: the intervals' starts and ends (s) and the ns spent in each, in time order."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.t0: dict[str, array[float]] = {p: array("d") for p in COST_PARTS}
        self.t1: dict[str, array[float]] = {p: array("d") for p in COST_PARTS}
        self.ns: dict[str, array[float]] = {p: array("d") for p in COST_PARTS}

    def __bool__(self) -> bool:
        return bool(self.t1[COST_PARTS[1]])

    def add_records(self, records: array[int]) -> None:
        for k in range(0, len(records), 4):
            part, t0, t1, value = records[k] >> 8, records[k + 1], records[k + 2], records[k + 3]
            if not 0 <= part < len(COST_PARTS) or t1 <= t0 or value < 0:
                continue
            name = COST_PARTS[part]
            if self.t1[name] and t1 * NS <= self.t1[name][-1]:
                continue  # re-sent after a reconnect
            for col, v in ((self.t0[name], t0 * NS), (self.t1[name], t1 * NS), (self.ns[name], float(value))):
                col.append(v)
                if self.cap is not None and len(col) > self.cap:
                    del col[: len(col) - self.cap + self.cap // 4]

    def per_step(self, steps: Steps, t0: float, t1: float) -> dict[str, float] | None:
        """ns per step of each part over the intervals that ended within ``[t0, t1]``, the steps that ended within
        those intervals counted from ``steps``; None without a measured hooks part or a step in them."""
        out: dict[str, float] = {}
        hooks = COST_PARTS[0]
        i, j = bisect_left(self.t1[hooks], t0), bisect_right(self.t1[hooks], t1)
        if j <= i:
            return None
        lo, hi = self.t0[hooks][i], self.t1[hooks][j - 1]
        a, b = bisect_right(steps.end, lo), bisect_right(steps.end, hi)  # steps that ended within (lo, hi]
        if b <= a:
            return None
        for part in COST_PARTS:  # the same intervals: each part's ends within [t0, t1]
            k, m = bisect_left(self.t1[part], t0), bisect_right(self.t1[part], t1)
            out[part] = sum(self.ns[part][k:m]) / (b - a)
        out["total"] = sum(out[p] for p in COST_PARTS)
        out["steps"] = b - a
        return out

    def steps_time(self, steps: Steps) -> float:
        """Seconds of the steps that ended within the measured intervals (first to last)."""
        hooks = self.t1[COST_PARTS[0]]
        if not hooks:
            return 0.0
        a, b = steps.index_range(self.t0[COST_PARTS[0]][0], hooks[-1])
        return math.fsum(steps.dur[a:b])


LIVE_WINDOW_S = 5.0  # the live figure: over the intervals that ended in the last this many seconds


def live_per_step(run: Any, t: float, window_s: float = LIVE_WINDOW_S) -> dict[str, float] | None:
    """The run's agent cost per step (ns; ``hooks``, ``sender``, ``total``) over the last ``window_s`` before ``t``."""
    cost: AgentCost | None = getattr(run, "agent_cost", None)
    if not cost or run.measured_by != "agent":
        return None
    return cost.per_step(run.steps, t - window_s, t)


def largest_live(runs: Iterable[Any], t: float) -> float | None:
    """The highest live per-step cost (ns) among ``runs`` at ``t``, where any is measured."""
    figures = [f["total"] for run in runs if (f := live_per_step(run, t)) is not None]
    return max(figures) if figures else None


def per_step_text(ns: float) -> str:
    """ "0.9µs", "390µs", "1.2ms": a per-step cost as the status line and the time axis show it."""
    if ns < 1e4:
        return f"{ns / 1e3:.1f}µs"
    if ns < 1e6:
        return f"{ns / 1e3:.0f}µs"
    return f"{ns / 1e6:.1f}ms"
