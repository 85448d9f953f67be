"""When the loop consumed its loader: the spans a window's worker figures are judged over.

A DataLoader's workers are measured all the time, but the loop only waits on them while it takes batches from
that loader. Between its steps (warm-up, another loader's steps, the end of an epoch), in steps that stalled on
something else (evaluation, a checkpoint, a paused iterator: long steps that were mostly not data wait) and in
checkpoints, the workers fill their prefetch queue and idle: averaged in, that idle time would make busy workers
look like workers that wait. ``idle_spans`` finds those holes in a window; ``Coverage`` gives each process sample
the share of its interval that lies outside them, the weight the evidence gives it.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_right
from collections.abc import Sequence

from trainmon.diagnose.live.window import RunWindow

GAP_S = 1e-4  # steps further apart than this do not follow each other: the loop was elsewhere in between
STALL_WAIT_SHARE = 0.5  # a long step that waited on data for less than this share of it stalled on something else
MIN_WEIGHT = 0.5  # a sample mostly inside the holes is left out (where any sample is mostly outside them)


def idle_spans(w: RunWindow, long_factor: float) -> list[tuple[float, float]]:
    """Sorted, disjoint spans between the window's first steady step and its last in which the loop was not
    consuming the window's loader: gaps between its steady steps, steps longer than ``long_factor`` × the median
    that were mostly not data wait, and the run's checkpoints. Empty when the loop took batches throughout."""
    if not w.steps:
        return []
    table = w.plain_rows()
    key = (w.run.steps.total, len(w.run.steps), w.run.steps.edits, len(w.run.checkpoints), long_factor)
    if w._idle is not None and w._idle[0] == key:
        return list(w._idle[1])
    start, end, _, _ = w.columns()
    if not start:
        return []
    holes: list[tuple[float, float]] = []
    if table is None or w.run.mode == "next":  # rows of one table in opt/explicit mode follow each other exactly
        after = map(operator.sub, start[1:], end[:-1])
        holes += [(end[k], start[k + 1]) for k, gap in enumerate(after) if gap > GAP_S]
    if not math.isnan(w.step_p50_s):
        limit = long_factor * w.step_p50_s
        holes += [(s, e) for s, e, wait in w.long_steps(limit) if wait < STALL_WAIT_SHARE * (e - s)]
    lo, hi = start[0], end[-1]
    holes += [(max(lo, a), min(hi, b)) for a, b in w.run.checkpoints if a < hi and b > lo]
    merged = _merge(holes)
    w._idle = (key, merged)
    return list(merged)


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class Coverage:
    """How much of each sample's interval lies outside ``holes`` (sorted, disjoint spans)."""

    def __init__(self, holes: Sequence[tuple[float, float]]) -> None:
        # Every process's series are sampled at the same instants (the ticks): their weights are worked out once
        # per span of times, for the main process and all the workers of a run (`weights_at`).
        self._memo: dict[tuple[float, float, float, int], tuple[array[float], list[float]]] = {}
        self.starts = [a for a, _ in holes]
        self.ends = [b for _, b in holes]
        self.before = [0.0]  # hole time before each hole
        for a, b in holes:
            self.before.append(self.before[-1] + b - a)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def _upto(self, x: float) -> float:
        """Hole time before ``x``."""
        k = bisect_right(self.starts, x)
        if not k:
            return 0.0
        return self.before[k - 1] + min(x, self.ends[k - 1]) - self.starts[k - 1]

    def weights_at(self, times: array[float], previous: float) -> list[float]:
        """`weights`, kept for the next series sampled at the same instants."""
        key = (previous, times[0], times[-1], len(times))
        found = self._memo.get(key)
        if found is not None and found[0] == times:
            return found[1]
        out = self.weights(times, previous)
        self._memo[key] = (times, out)
        return out

    def weights(self, times: Sequence[float], previous: float) -> list[float]:
        """Per sample at ``times`` (each covering the time since the one before it; the first since
        ``previous``): the share of its interval outside the holes, 0 for one mostly inside them where some
        sample is mostly outside."""
        out = []
        last = previous
        for t in times:
            span = t - last
            if span > 0:
                out.append(max(0.0, 1.0 - (self._upto(t) - self._upto(last)) / span))
            else:
                k = bisect_right(self.starts, t)
                out.append(0.0 if k and t < self.ends[k - 1] else 1.0)
            last = t
        if any(x >= MIN_WEIGHT for x in out):
            out = [x if x >= MIN_WEIGHT else 0.0 for x in out]
        return out


def weighted_mean(values: array[float], weights: Sequence[float]) -> tuple[float, float]:
    """(mean of the known values weighted by ``weights``, their total weight); nan when none weighs."""
    total = acc = 0.0
    for v, wt in zip(values, weights, strict=True):
        if wt > 0 and v == v:  # v == v: not nan
            acc += v * wt
            total += wt
    return (acc / total if total else math.nan), total
