"""Resampling on the shared time axis: every series, and every run's steps, to one value per bucket on the same
edges, and the values at one instant (the cursor).

The plot area has ``cols`` columns ending at ``t_end``; each column covers ``window_s / cols`` seconds, and every
series is resampled to ``cols * sub`` buckets on the same edges (``sub`` = 2 when the charts draw two samples per
cell with braille), so a column means the same instant in every pane.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

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


def _step_slices(run: Run, edges: Sequence[float], span: float) -> list[tuple[int, int]]:
    """For each bucket, the steps that ended within ``span`` before its right edge."""
    ends = run.steps.end
    return [(bisect_right(ends, e - span), bisect_right(ends, e)) for e in edges[1:]]


def step_buckets(run: Run, edges: Sequence[float]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per bucket: mean data wait (ms), mean compute (ms), samples/s and data-wait %, held over short gaps."""
    n = len(edges) - 1
    wait_ms, compute_ms, rate, wait_pct = [NAN] * n, [NAN] * n, [NAN] * n, [NAN] * n
    if not len(run.steps) or n <= 0:
        return wait_ms, compute_ms, rate, wait_pct
    s = run.steps
    dt = (edges[-1] - edges[0]) / n
    step_span = max(dt, STEP_SPAN_S)
    rate_span = max(dt, RATE_SPAN_S)
    last_end = s.end[-1]
    cum_dur, cum_wait, cum_samples = s.prefix_sums()  # O(1) per bucket however many steps it holds
    measured = 1.0 if run.wait_measured else NAN  # no loader and the model not timed: the wait is unknown, not 0
    for k, ((i, j), (ri, rj)) in enumerate(
        zip(_step_slices(run, edges, step_span), _step_slices(run, edges, rate_span), strict=True)
    ):
        if j > i:
            cnt = j - i
            dur = cum_dur[j] - cum_dur[i]
            w = cum_wait[j] - cum_wait[i]
            wait_ms[k] = w / cnt * 1e3 * measured
            compute_ms[k] = max(0.0, dur - (w if run.wait_measured else 0.0)) / cnt * 1e3
        elif k and compute_ms[k - 1] == compute_ms[k - 1] and edges[k + 1] <= last_end + 3 * step_span:
            wait_ms[k], compute_ms[k] = wait_ms[k - 1], compute_ms[k - 1]
        if rj > ri:
            dur = cum_dur[rj] - cum_dur[ri]
            rate[k] = (cum_samples[rj] - cum_samples[ri]) / rate_span
            wait_pct[k] = (cum_wait[rj] - cum_wait[ri]) / dur * 100.0 * measured if dur > 0 else NAN
        elif k and rate[k - 1] == rate[k - 1] and edges[k + 1] <= last_end + rate_span:
            rate[k], wait_pct[k] = rate[k - 1], wait_pct[k - 1]
    return wait_ms, compute_ms, rate, wait_pct


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
    width = (t1 - t0) / cols

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
