"""Resampling on the shared time axis: every series, and every run's steps, to one value per bucket on the same
edges, and the values at one instant (the cursor).

The plot area has ``cols`` columns, the last one holding ``t_end``; each column covers ``window_s / cols`` seconds,
and every series is resampled to ``cols * sub`` buckets on the same edges (``sub`` = 2 when the charts draw two
samples per cell with braille), so a column means the same instant in every pane. The columns sit on absolute time
(:func:`grid`): as time goes on the plot moves a whole column at a time and a column once complete holds the same
values in every later frame, so what is drawn from it can be kept (:class:`StepBucketCache`, the chart cells'
memo in ``tui/charts.py``) and only the newest columns are worked out again.
"""

from __future__ import annotations

import math
import weakref
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainmon.numbers import NAN, is_nan, known
from trainmon.store.batches import tokens_per_sample
from trainmon.store.run import Run
from trainmon.store.series import Series
from trainmon.view.frames import RunValues

STEP_SPAN_S = 1.0  # steps are averaged over at least this long per bucket: a smooth line at 1 Hz sampling
RATE_SPAN_S = 2.0  # samples/s and data-wait % over at least this long
CURSOR_SPAN_S = 5.0  # the training figures shown at the cursor: the last 5 s of steps


def make_edges(t0: float, t1: float, n: int) -> list[float]:
    step = (t1 - t0) / n
    return [t0 + step * k for k in range(n + 1)]


@dataclass(frozen=True)
class Grid:
    """The plot's columns on absolute time: column ``c`` covers ``((first + c) * col_dt, (first + c + 1) * col_dt]``
    and the last one holds ``t_end``. Bucket edges past ``t_end`` are clamped to it, so a bucket of the last column
    still in the future repeats that column's latest instant (a zero-width bucket: held values)."""

    t0: float  # the first column's left edge
    t_end: float
    col_dt: float
    edges: list[float]  # cols * sub buckets: (edges[k], edges[k + 1]]
    col_edges: list[float]  # cols columns
    base: int  # the absolute index of the first bucket: bucket k is the same instant in every frame as base + k

    @property
    def bucket_dt(self) -> float:
        return self.col_dt * (len(self.col_edges) - 1) / (len(self.edges) - 1)

    def complete(self, k: int) -> bool:
        """Bucket ``k`` ends at or before ``t_end`` (not cut short at the live edge)."""
        return self.edges[k + 1] < self.t_end


def grid(t_end: float, window_s: float, cols: int, sub: int) -> Grid:
    col_dt = window_s / cols
    last = math.ceil(t_end / col_dt - 1e-9) - 1  # the column holding t_end
    first = last - cols + 1
    bucket = col_dt / sub
    base = first * sub
    edges = [min(t_end, (base + k) * bucket) for k in range(cols * sub + 1)]
    return Grid(first * col_dt, t_end, col_dt, edges, edges[::sub], base)


def bucket_series(series: Series | None, edges: Sequence[float], hold_s: float, how: str = "mean") -> list[float]:
    """One value per bucket ``(edges[k], edges[k+1]]``: the mean (or min/max) of the samples in it, else the
    last sample at most ``hold_s`` before the bucket's end, else nan."""
    n = len(edges) - 1
    out = [NAN] * n
    if series is None or not len(series) or n <= 0:
        return out
    times, values = series.times, series.values
    first, last = bisect_right(times, edges[0]), bisect_right(times, edges[-1])
    if first == last:  # no sample on the axis: only the one before it, held while it is recent enough
        if first:
            t, v = times[first - 1], values[first - 1]
            for k in range(n):
                if edges[k + 1] - t > hold_s:
                    break
                out[k] = v
        return out
    idx = [bisect_right(times, e, first, last) for e in edges]
    for k in range(n):
        i, j = idx[k], idx[k + 1]
        if j == i + 1:  # the common case at 1 s sampling: one sample, its own mean, minimum and maximum
            v = values[i]
            if v == v:
                out[k] = v
                continue
        elif j > i:
            vals = known(values[i:j])
            if vals:
                if how == "max":
                    out[k] = max(vals)
                elif how == "min":
                    out[k] = min(vals)
                else:
                    out[k] = sum(vals) / len(vals)
                continue
        if j > 0 and edges[k + 1] - times[j - 1] <= hold_s:
            out[k] = values[j - 1]
    return out


def value_at(series: Series | None, t: float, hold_s: float) -> float:
    """The latest sample at or before ``t`` if it is at most ``hold_s`` old, else nan."""
    if series is None:
        return NAN
    i = bisect_right(series.times, t)
    if not i or t - series.times[i - 1] > hold_s:
        return NAN
    return series.values[i - 1]


# A bucket's own figures, before holding over gaps: (steps in its span, wait ms, compute ms, steps in its rate span,
# samples/s, wait %).
RawBucket = tuple[bool, float, float, bool, float, float]


class StepBucketCache:
    """Each run's complete buckets' own figures, by bucket width and absolute bucket index (see :func:`grid`): a
    bucket that ended before the run's latest step never changes, so a frame works out only the buckets at the live
    edge. Kept per step table (weakly: an ended run's table goes with it), started again when the table was cleared
    or the wait became measured; a bucket whose steps the table has trimmed since is worked out again, so the figures
    are always those of the table as it is."""

    WIDTHS = 3  # the windows kept per table (a key cycles through three)

    def __init__(self) -> None:
        self._tables: weakref.WeakKeyDictionary[object, tuple[tuple, dict[float, dict[int, RawBucket]]]] = (
            weakref.WeakKeyDictionary()
        )

    def buckets(self, run: Run, width: float) -> dict[int, RawBucket]:
        key = (run.steps.clears, run.wait_measured)
        held = self._tables.get(run.steps)
        if held is None or held[0] != key:
            held = (key, {})
            self._tables[run.steps] = held
        widths = held[1]
        got = widths.get(width)
        if got is None:
            if len(widths) >= self.WIDTHS:
                widths.clear()
            got = widths[width] = {}
        return got


def step_buckets(
    run: Run, edges: Sequence[float], cache: StepBucketCache | None = None, g: Grid | None = None
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per bucket: mean data wait (ms), mean compute (ms), samples/s and data-wait %, held over short gaps. With
    ``cache`` and the frame's ``g`` (whose edges these are), complete buckets' figures come from the cache."""
    n = len(edges) - 1
    wait_ms, compute_ms, rate, wait_pct = [NAN] * n, [NAN] * n, [NAN] * n, [NAN] * n
    if not len(run.steps) or n <= 0:
        return wait_ms, compute_ms, rate, wait_pct
    s = run.steps
    dt = (edges[-1] - edges[0]) / n if g is None else g.bucket_dt
    step_span = max(dt, STEP_SPAN_S)
    rate_span = max(dt, RATE_SPAN_S)
    last_end = s.end[-1]
    first_end = s.end[0]
    trimmed = len(s) < s.total  # the table lost its oldest steps: a kept bucket may hold some it no longer has
    reach = max(step_span, rate_span)  # how far before its end a bucket's figures look
    known = cache.buckets(run, dt) if cache is not None and g is not None else None
    base = g.base if g is not None else 0
    if known is not None and len(known) > 4 * n:  # the plot moved on: what is left of it is not drawn again
        for old in [a for a in known if a < base]:
            del known[old]
    raw = _raw_bucket(run, step_span, rate_span)
    for k in range(n):
        e = edges[k + 1]
        got = None
        if known is not None:
            got = known.get(base + k)
            if got is not None and trimmed and first_end > e - reach:
                got = None  # trimmed since: what the table holds now
        if got is None:
            got = raw(e)
            if known is not None and g is not None and g.complete(k) and last_end > e:
                known[base + k] = got
        has_step, w_ms, c_ms, has_rate, r, pct = got
        if has_step:
            wait_ms[k], compute_ms[k] = w_ms, c_ms
        elif k and compute_ms[k - 1] == compute_ms[k - 1] and e <= last_end + 3 * step_span:
            wait_ms[k], compute_ms[k] = wait_ms[k - 1], compute_ms[k - 1]
        if has_rate:
            rate[k], wait_pct[k] = r, pct
        elif k and rate[k - 1] == rate[k - 1] and e <= last_end + rate_span:
            rate[k], wait_pct[k] = rate[k - 1], wait_pct[k - 1]
    return wait_ms, compute_ms, rate, wait_pct


def _raw_bucket(run: Run, step_span: float, rate_span: float) -> Callable[[float], RawBucket]:
    s = run.steps
    ends = s.end
    cum_dur, cum_wait, cum_samples = s.prefix_sums()  # O(1) per bucket however many steps it holds
    wait_measured = run.wait_measured
    measured = 1.0 if wait_measured else NAN  # no loader and the model not timed: the wait is unknown, not 0

    def raw(e: float) -> RawBucket:
        i, j = bisect_right(ends, e - step_span), bisect_right(ends, e)
        ri, rj = bisect_right(ends, e - rate_span), j
        w_ms = c_ms = r = pct = NAN
        if j > i:
            cnt = j - i
            dur = cum_dur[j] - cum_dur[i]
            w = cum_wait[j] - cum_wait[i]
            w_ms = w / cnt * 1e3 * measured
            c_ms = max(0.0, dur - (w if wait_measured else 0.0)) / cnt * 1e3
        if rj > ri:
            dur = cum_dur[rj] - cum_dur[ri]
            r = (cum_samples[rj] - cum_samples[ri]) / rate_span
            pct = (cum_wait[rj] - cum_wait[ri]) / dur * 100.0 * measured if dur > 0 else NAN
        return j > i, w_ms, c_ms, rj > ri, r, pct

    return raw


def run_values(run: Run, t: float, span: float = CURSOR_SPAN_S) -> RunValues:
    s = run.steps
    i, j = bisect_right(s.end, t - span), bisect_right(s.end, t)
    v = RunValues(steps_total=s.total - (len(s) - j))
    if j <= i:
        return v
    cnt = j - i
    dur = sum(s.end[i:j]) - sum(s.start[i:j])
    w = sum(s.wait[i:j])
    v.step_ms = dur / cnt * 1e3
    if not run.wait_measured:  # no loader and the model not timed: the wait is unknown, not 0
        w = NAN
    v.wait_ms = w / cnt * 1e3
    v.compute_ms = max(0.0, dur - (0.0 if is_nan(w) else w)) / cnt * 1e3
    v.wait_pct = w / dur * 100.0 if dur > 0 else NAN
    covered = min(span, max(1e-9, t - s.start[i]))
    v.samples_s = sum(s.samples[i:j]) / covered
    train = run.train_loader()
    if train is not None:
        v.tokens_s = v.samples_s * tokens_per_sample(train.config)
    v.steps_s = cnt / covered
    return v


def run_marks(run: Run, edges: Sequence[float], cols: int) -> list[str]:
    """Per column: C a checkpoint save, E an evaluation pass, M a user mark (most important wins)."""
    marks = [""] * cols
    t0, t1 = edges[0], edges[-1]
    width = (edges[1] - t0) if len(edges) > 2 else (t1 - t0) / cols  # the last column may be cut at the live edge
    if width <= 0:
        return marks

    def put(a: float, b: float, letter: str) -> None:
        if b < t0 or a > t1:
            return
        c0 = max(0, min(cols - 1, int((a - t0) / width)))
        c1 = max(0, min(cols - 1, int((b - t0) / width)))
        for c in range(c0, c1 + 1):
            if not marks[c] or "CEM".index(letter) < "CEM".index(marks[c]):
                marks[c] = letter

    for t, _name in run.marks:
        put(t, t, "M")
    train = run.train_loader()
    for t, lid in run.iter_starts:
        if train is not None and lid != train.id:
            put(t, t, "E")
    for a, b, name in run.phases:
        if "eval" in name.lower() or "valid" in name.lower():
            put(a, b, "E")
    for a, b in run.checkpoints:
        put(a, b, "C")
    return marks
