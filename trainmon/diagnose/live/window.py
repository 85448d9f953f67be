"""A run's window: the figures of its steady steps over a time span, what every rule reads (``RunWindow``), taken
by ``run_window``, a pure function of the run, memoised where the caller passes a ``WindowMemo``."""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from trainmon.diagnose.live.long_scan import long_candidates
from trainmon.diagnose.live.memo import WindowMemo
from trainmon.diagnose.live.slices import gather, sample_stride, segments_of
from trainmon.diagnose.stats import quantile
from trainmon.numbers import is_nan, known
from trainmon.store.run import Run
from trainmon.store.steps import Steps


@dataclass
class RunWindow:
    run: Run
    t0: float
    t1: float
    steps: int = 0
    warm_steps: int = 0
    step_time_s: float = 0.0
    wait_s: float = 0.0
    samples: int = 0
    step_p50_s: float = math.nan
    step_p95_s: float = math.nan
    checkpoint_s: float = 0.0
    checkpoints: int = 0
    last_end: float = math.nan
    exposed_s: float = 0.0
    exposed_wait_s: float = 0.0  # host time of the waits that were measured (sampling may skip some)
    exposed_steps: int = 0
    comm_s: float = 0.0  # time the training thread was blocked in collectives (agent comm records)
    sorted_durations: list[float] = field(default_factory=list)  # all steady steps', or an even sample
    checkpoint_spans: list[tuple[float, float]] = field(default_factory=list)
    loader_id: int | None = None
    # Where the steady steps are: the step table, global indices [first, stop) and, when warm-up or
    # another loader's steps lie between, a byte mask of the steady ones. Read on demand, never copied.
    _rows: tuple[Steps, int, int, bytes | None] | None = None
    # Figures read from the rows on demand, with the state of the step table they were read from.
    _memo: dict[str, tuple[tuple[Any, ...], float]] = field(default_factory=dict, repr=False, compare=False)
    # The spans the loop was not consuming the loader (``spans.idle_spans``), with the state they were read from.
    _idle: tuple[tuple[Any, ...], list[tuple[float, float]]] | None = field(default=None, repr=False, compare=False)

    def columns(self) -> tuple[array[float], array[float], array[float], array[float]]:
        """start, end, duration and wait of every steady step in the window (C-level slices)."""
        if self._rows is None:
            return array("d"), array("d"), array("d"), array("d")
        steps = self._rows[0]
        start, end, dur, wait = self._steady((steps.start, steps.end, steps.dur, steps.wait))
        return start, end, dur, wait

    def plain_rows(self) -> tuple[Steps, int, int] | None:
        """(step table, i, j) when the steady steps are all of its rows [i, j) (no warm-up or other loader's steps
        between them, none trimmed since the window was taken): ``columns()`` are those rows' slices."""
        if self._rows is None or self._rows[3] is not None:
            return None
        steps, first, stop, _ = self._rows
        offset = steps.total - len(steps)
        if first < offset:
            return None
        return steps, first - offset, max(0, stop - offset)

    def _steady(self, cols: tuple[array[float], ...], stride: int = 1) -> list[array[float]]:
        """The steady steps' rows of columns of the window's step table (every ``stride``-th of them)."""
        assert self._rows is not None
        steps, first, stop, mask = self._rows
        offset = steps.total - len(steps)  # steps trimmed from the table since the window was taken
        i, j = max(0, first - offset), max(0, stop - offset)
        if mask is None:
            return [c[i:j:stride] for c in cols]
        segments = segments_of(mask[len(mask) - (j - i) :] if j > i else b"")
        return [gather(c, i, segments)[::stride] for c in cols]

    def compute_p50_s(self) -> float:
        """Median over the steady steps (an even sample of at most MAX_DETAIL) of step − data wait −
        communication: the rank's own work per step."""
        if self._rows is None or not self.steps:
            return math.nan
        steps = self._rows[0]
        key = ("compute_p50", steps.total, len(steps), steps.edits)
        if (hit := self._memo.get("compute_p50")) is not None and hit[0] == key:
            return hit[1]
        dur, wait, comm = self._steady((steps.dur, steps.wait, steps.comm), sample_stride(self.steps))
        own = list(map(operator.sub, map(operator.sub, dur, wait), comm))
        if own and math.isfinite(sum(own)):
            # Clamping at 0 keeps the order, so the median of the clamped values is that of the sorted ones clamped.
            own.sort()
            value = quantile(own, 0.5, ordered=True, floor=0.0)
        else:
            value = quantile([max(0.0, x) for x in own], 0.5)
        self._memo["compute_p50"] = (key, value)
        return value

    def comm_share_p50(self) -> float:
        """Median over the steady steps (an even sample of at most MAX_DETAIL) of each step's share blocked in
        collectives (nan: none measured)."""
        if self._rows is None or not self.steps or not self.run.comm_by_op:
            return math.nan
        steps = self._rows[0]
        key = ("comm_share_p50", steps.total, len(steps), steps.edits)
        if (hit := self._memo.get("comm_share_p50")) is not None and hit[0] == key:
            return hit[1]
        dur, comm = self._steady((steps.dur, steps.comm), sample_stride(self.steps))
        if dur and math.isfinite(sum(dur)) and min(dur) > 0:
            value = quantile(list(map(operator.truediv, comm, dur)), 0.5)
        else:
            value = quantile([c / d if d > 0 else 0.0 for d, c in zip(dur, comm, strict=True)], 0.5)
        self._memo["comm_share_p50"] = (key, value)
        return value

    def comm_rows(self) -> tuple[array[float], array[float], array[float]]:
        """End, duration and time in collectives of every steady step (C-level slices)."""
        if self._rows is None:
            return array("d"), array("d"), array("d")
        steps = self._rows[0]
        end, dur, comm = self._steady((steps.end, steps.dur, steps.comm))
        return end, dur, comm

    def spans_and_waits(self) -> tuple[list[tuple[float, float]], list[float]]:
        """Each steady step's (start, end) and wait."""
        start, end, _, wait = self.columns()
        return list(zip(start, end, strict=True)), wait.tolist()

    def long_durations(self, limit: float) -> list[float]:
        """Durations of the steady steps longer than ``limit`` s, exactly (no sampling)."""
        return [d for _, d in self._long_rows(limit)]

    def long_steps(self, limit: float) -> list[tuple[float, float, float]]:
        """(start, end, wait) of every steady step longer than ``limit`` s, exactly (no sampling)."""
        if self._rows is None:
            return []
        steps = self._rows[0]
        offset = steps.total - len(steps)
        return [
            (steps.start[g - offset], steps.end[g - offset], steps.wait[g - offset])
            for g, _ in self._long_rows(limit)
            if g >= offset
        ]

    def _long_rows(self, limit: float) -> list[tuple[int, float]]:
        if not self.steps or self._rows is None:
            return []
        steps, first, stop, mask = self._rows
        rows = long_candidates(steps, limit)
        lo = bisect_left(rows, (first, -math.inf))
        hi = bisect_left(rows, (stop, -math.inf))
        return [(g, d) for g, d in rows[lo:hi] if d > limit and (mask is None or mask[g - first])]

    @property
    def exposed_fraction(self) -> float:
        """GPU idle exposed by data waits / step time (CUDA only; nan where not measured).

        Estimated from the measured waits only: (exposed / measured wait) × the wait share, so waits the agent
        skipped (sampling, a full event pool) do not count as hidden. Equals exposed / step time when every
        wait was measured."""
        if not self.exposed_steps or self.step_time_s <= 0:
            return math.nan
        if self.exposed_wait_s > 0 and not is_nan(self.wait_fraction):
            return min(1.0, self.exposed_s / self.exposed_wait_s) * self.wait_fraction
        return self.exposed_s / self.step_time_s

    @property
    def comm_fraction(self) -> float:
        """Time blocked in collective communication / step time (nan where the run reported none: not
        distributed, or an agent that does not measure it)."""
        if not self.run.comm_by_op or self.step_time_s <= 0:
            return math.nan
        return self.comm_s / self.step_time_s

    def own_fraction(self, long_step_s: float = math.inf) -> float:
        """The loop's own code (``Steps.own``) / step time over the steady steps no longer than ``long_step_s`` (the
        per-step work: an eval every N steps or a collection's pause is a long step, judged as a stall; nan where the
        agent never timed the model beside a measured data wait)."""
        if self._rows is None or not self.steps or self.step_time_s <= 0 or not self.run.deriver.own_steps:
            return math.nan
        steps = self._rows[0]
        key = ("own", steps.total, len(steps), steps.edits, long_step_s)
        if (hit := self._memo.get("own")) is not None and hit[0] == key:
            return hit[1]
        plain = self.plain_rows()
        own = steps.fsum("own", plain[1], plain[2]) if plain is not None else math.fsum(self._steady((steps.own,))[0])
        time = self.step_time_s
        if math.isfinite(long_step_s):
            offset = steps.total - len(steps)
            long_rows = [(g - offset, d) for g, d in self._long_rows(long_step_s) if g >= offset]
            own -= math.fsum(steps.own[i] for i, _ in long_rows)
            time -= math.fsum(d for _, d in long_rows)
        value = min(1.0, max(0.0, own) / time) if time > 0 else math.nan
        self._memo["own"] = (key, value)
        return value

    @property
    def starving_fraction(self) -> float:
        """The wait that starved the accelerator: the exposed share where measured, else the whole wait."""
        exposed = self.exposed_fraction
        return self.wait_fraction if is_nan(exposed) else exposed

    def block_sums(self, first: int, size: int, n: int) -> tuple[list[float], list[float]] | None:
        """Summed duration and wait of the first ``n`` steady steps (positions in ``columns()``) in blocks: [0, first)
        when ``first``, then every ``size`` steps from ``first`` (``n - first`` a multiple of ``size``). In O(1) each
        from the step table's running sums; None when warm-up or another loader's steps lie between them."""
        if self._rows is None or self._rows[3] is not None:
            return None
        steps, start, _, _ = self._rows
        i = start - (steps.total - len(steps))
        if i < 0:
            return None  # trimmed from the table since the window was taken
        out = []
        for cum in steps.prefix_sums()[:2]:
            edges = cum[i + first : i + n + 1 : size]  # the running sum at each block's edge, C-level
            if first:
                edges.insert(0, cum[i])
            out.append(list(map(operator.sub, edges[1:], edges[:-1])))
        return out[0], out[1]

    def lasted(self) -> bool:
        """Every steady step lasted at least 1 ns (none nan or endless): shares and log-durations need no guard."""
        if self._rows is None:
            return False
        steps, first, stop, _ = self._rows
        offset = steps.total - len(steps)
        i, j = max(0, first - offset), max(0, stop - offset)
        return steps.row_counts(i, j).brief == 0

    def loader_since(self) -> float:
        """Start of the first step of this window's loader after another loader's steps in the window (the job
        switched DataLoaders inside it); nan when none precede it."""
        if self._rows is None or self._rows[3] is None:
            return math.nan
        steps, first, stop, _ = self._rows
        offset = steps.total - len(steps)
        i, j = max(0, first - offset), max(0, stop - offset)
        if j <= i:
            return math.nan
        ours = bytes(map((self.loader_id or 0).__eq__, steps.loader[i:j]))
        k = ours.rfind(0)
        return steps.start[i + k + 1] if 0 <= k < j - i - 1 else math.nan

    def overlaps_checkpoint(self, s: float, e: float) -> bool:
        return any(c0 < e and c1 > s for c0, c1 in self.checkpoint_spans)

    def phase_names_in(self, spans: list[tuple[float, float]]) -> set[str]:
        return {name for p0, p1, name in self.run.phases for s, e in spans if p0 < e and p1 > s}

    def eval_in(self, spans: list[tuple[float, float]]) -> bool:
        train = self.run.train_loader()
        return any(s <= t <= e for t, lid in self.run.iter_starts for s, e in spans if train is None or lid != train.id)

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / self.step_time_s if self.step_time_s > 0 else math.nan

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.step_time_s if self.step_time_s > 0 and self.samples else math.nan

    @property
    def span_s(self) -> float:
        return self.t1 - self.t0

    @property
    def loader(self) -> dict[str, Any]:
        """Config of the loader feeding this window's steps."""
        info = self.run.loaders.get(self.loader_id) if self.loader_id else self.run.train_loader()
        return dict(info.config) if info is not None else {}


def run_window(
    run: Run,
    t0: float,
    t1: float,
    min_steps: int = 20,
    max_lookback_s: float = 120.0,
    *,
    loader: int | None = None,
    window_memo: WindowMemo | None = None,
    memo: bool = True,
) -> RunWindow:
    """Steady-state steps that ended in [t0, t1]; reaches back further for at least ``min_steps``. The steps of
    ``loader`` (a loader id), by default those of the loader feeding the latest steps.

    With ``window_memo``: the run's window memoised there when it is this one (same steps so far, same window),
    else computed and memoised (``memo=False`` for another window that should not displace it). Windows are
    read-only for their users. Without ``window_memo``, computed afresh: a pure function of the run.
    """
    key = window_key(run, t0, t1, min_steps, max_lookback_s, loader)
    if window_memo is not None and isinstance(hit := window_memo.windows.get(run, key), RunWindow):
        return hit
    w = _compute_window(run, t0, t1, min_steps, max_lookback_s, loader)
    if window_memo is not None and memo:
        window_memo.windows.put(run, key, w)
    return w


def window_key(
    run: Run, t0: float, t1: float, min_steps: int = 20, max_lookback_s: float = 120.0, loader: int | None = None
) -> tuple[Any, ...]:
    """What ``run_window`` memoises a window under: the run's steps and checkpoints so far, and the window asked."""
    return (run.steps.total, len(run.checkpoints), t0, t1, min_steps, max_lookback_s, loader)


def busiest_loader(run: Run, t0: float, t1: float) -> int | None:
    """The loader that fed the most steady steps ending in [t0, t1] (None when none did)."""
    steps = run.steps
    i, j = steps.index_range(t0, t1)
    counts: dict[int, int] = {}
    for lid, warm in zip(steps.loader[i:j], steps.warm[i:j], strict=True):
        if not warm:
            counts[lid] = counts.get(lid, 0) + 1
    return max(counts, key=lambda lid: counts[lid]) if counts else None


def _compute_window(
    run: Run, t0: float, t1: float, min_steps: int, max_lookback_s: float, loader: int | None = None
) -> RunWindow:
    steps = run.steps
    i, j = steps.index_range(t0, t1)
    if j - i < min_steps:
        lo, _ = steps.index_range(t1 - max_lookback_s, t1)
        k = j
        count = 0
        while k > lo and count < min_steps:
            k -= 1
            if not steps.warm[k]:
                count += 1
        i = min(i, k)
    w = RunWindow(run, steps.start[i] if j > i else t0, t1)
    if j > i:
        # Judge the loader feeding the latest steps: after a switch, the old loader's steps are history.
        current = steps.loader[j - 1] if loader is None else loader
        w.loader_id = current or None
        _fill(w, steps, i, j, current)
    for c0, c1 in run.checkpoints:
        overlap = min(c1, t1) - max(c0, w.t0)
        if overlap > 0:
            w.checkpoint_s += overlap
            w.checkpoints += 1
            w.checkpoint_spans.append((c0, c1))
    return w


def _fill(w: RunWindow, steps: Steps, i: int, j: int, current: int) -> None:
    """Sums, maxima and quantiles of the steady steps in rows [i, j): C-level slices, no per-step Python."""
    n = j - i
    warm_rows, switches, measured, in_comm, _ = steps.row_counts(i, j)
    mask = None
    if switches or steps.loader[i] != current:
        loaders, warm = steps.loader[i:j], steps.warm[i:j]
        ours = bytes(map(current.__eq__, loaders))
        mask = bytes(map(operator.and_, ours, map(operator.not_, warm)))
        w.warm_steps = sum(map(operator.and_, ours, warm))
    elif warm_rows:
        mask = steps.warm[i:j].tobytes().translate(_FLIP)
        w.warm_steps = n - mask.count(1)
    offset = steps.total - len(steps)
    w._rows = (steps, i + offset, j + offset, mask)
    segments = [(0, n)] if mask is None else segments_of(mask)
    m = sum(b - a for a, b in segments)
    w.steps = m
    if not m:
        return
    cum_dur, cum_wait, cum_samples = steps.prefix_sums()  # sums in O(1) per run of steady steps
    w.step_time_s = sum(cum_dur[i + b] - cum_dur[i + a] for a, b in segments)
    w.wait_s = sum(cum_wait[i + b] - cum_wait[i + a] for a, b in segments)
    w.samples = round(sum(cum_samples[i + b] - cum_samples[i + a] for a, b in segments))
    w.last_end = steps.end[i + segments[-1][1] - 1]
    if in_comm and mask is None:  # from the table's block sums: the same float, without a pass over every row
        w.comm_s = steps.fsum("comm", i, j)
    elif in_comm:  # some step in the rows spent time in collectives (0 otherwise, as the sum of zeros is)
        w.comm_s = math.fsum(gather(steps.comm, i, segments))
    if measured and mask is None:
        w.exposed_s = steps.fsum("exposed", i, j, measured=True)
        w.exposed_wait_s = steps.fsum("exposed_wait", i, j)
        w.exposed_steps = measured
    exposed = gather(steps.exposed, i, segments) if measured and mask is not None else None
    if exposed is not None and exposed.tobytes() != _NAN8 * m:  # a step has a measured exposed wait (CUDA)
        known_exposed = known(exposed)
        w.exposed_s = math.fsum(known_exposed)
        w.exposed_wait_s = math.fsum(gather(steps.exposed_wait, i, segments))
        w.exposed_steps = len(known_exposed)
    stride = sample_stride(m)
    sample = array("d")
    for a, b in segments:  # strided straight off the table: a long window is never copied whole
        sample += steps.dur[i + a : i + b : stride]
    ordered = w.sorted_durations = sorted(sample)
    w.step_p50_s = quantile(ordered, 0.5, ordered=True)
    w.step_p95_s = quantile(ordered, 0.95, ordered=True)


_NAN8 = array("d", [math.nan]).tobytes()
_FLIP = bytes([1, 0]) + bytes(254)  # warm flag -> steady flag
