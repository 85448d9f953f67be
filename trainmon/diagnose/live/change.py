"""The live window follows a change: where a run's recent steps differ from the rest of the window, judge
them alone.

The live window holds the last 20 s, so a new cause would take most of that to outweigh the old one. Each
evaluation looks for the latest change in the window's steady steps instead: a split after which the data-wait
share or the step time moved materially (``change_wait``, ``change_step_ratio``), on both halves of what
follows it (one long step or wait is not a change), and significantly (a rank statistic, so outliers weigh
no more than any other step). A switch to another DataLoader is a change too. Pure functions of the store.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from trainmon.diagnose.live.memo import WindowMemo
from trainmon.diagnose.live.window import RunWindow, run_window
from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan
from trainmon.store.run import Run

MAX_BLOCKS = 240  # a window of more steps is cut into this many blocks of consecutive steps
MAX_CHANGES = 3  # changes looked for after one another inside a window
_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class Change:
    t: float  # start of the first step after the change
    what: str  # "data_wait", "step_time" or "loader"
    before: float  # data-wait share or median step time (s) before; nan for a loader switch
    after: float


@dataclass
class _Blocks:
    first: list[int]  # index of each block's first step
    start: list[float]  # start of that step
    end: list[float]  # end of its last step
    steps: list[int]
    dur: list[float]  # summed
    wait: list[float]


def latest_change(w: RunWindow, th: Thresholds) -> Change | None:
    """The latest material change among the window's steady steps, with at least ``change_min_steps`` steps on
    either side and ``change_min_s`` after it; None when the window is steady."""
    switch = w.loader_since()
    if not is_nan(switch):
        return Change(switch, "loader", math.nan, math.nan)
    # The steps' columns are sliced only where a change is found, or where the steps are not rows of the table.
    rows = w.plain_rows()
    columns = w.columns() if rows is None else None
    n = len(columns[2]) if columns is not None else rows[2] - rows[1] if rows is not None else 0
    m = th.change_min_steps
    if n < 2 * m:
        return None
    blocks = _blocks(w, n, columns, rows)
    seg, lo, found = 0, 0, None
    for _ in range(MAX_CHANGES):
        split = _best_split(blocks, lo, th)
        if split is None:
            break
        seg, (lo, found) = lo, split
    if found is None:
        return None
    start, _, dur, wait = columns or w.columns()
    k = _refine(blocks, seg, lo, found.what, dur, wait, m // 2, w.lasted())
    return Change(start[k], found.what, found.before, found.after)


def _blocks(w: RunWindow, n: int, columns: tuple[Any, ...] | None, rows: tuple[Any, int, int] | None) -> _Blocks:
    """The window's ``n`` steady steps in blocks, read from ``columns`` (its ``columns()``) or, where they are
    the step table's ``rows`` (table, i, j), from the table and its running sums."""
    size = -(-n // MAX_BLOCKS)
    if size == 1:
        start, end, dur, wait = columns or w.columns()
        return _Blocks(list(range(n)), list(start), list(end), [1] * n, list(dur), list(wait))
    # Aligned to the end: the latest steps make whole blocks, the oldest block may be short.
    first = n - (n // size) * size
    edges = ([0] if first else []) + list(range(first, n, size))
    stops = [*edges[1:], n]
    steps = [z - a for a, z in zip(edges, stops, strict=True)]
    sums = w.block_sums(first, size, n)
    if rows is not None and sums is not None:
        table, i, _ = rows
        starts = [table.start[i + a] for a in edges]
        return _Blocks(edges, starts, [table.end[i + z - 1] for z in stops], steps, *sums)
    start, end, dur, wait = columns or w.columns()
    sums = sums or (
        [sum(dur[a:z]) for a, z in zip(edges, stops, strict=True)],
        [sum(wait[a:z]) for a, z in zip(edges, stops, strict=True)],
    )
    return _Blocks(edges, [start[a] for a in edges], [end[z - 1] for z in stops], steps, *sums)


def _refine(b: _Blocks, seg: int, split: int, what: str, dur: Any, wait: Any, reach: int, lasted: bool) -> int:
    """The step near the block boundary ``split`` (within a block or ``reach`` steps) where the means of ``what``
    before it (from block ``seg`` on) and after it differ most: the CUSUM statistic. Ranks find that a change
    happened; the means, with every step of the segment, place it on the step."""
    a = b.first[seg]
    durs, waits = dur[a:], wait[a:]
    # C-level where every step lasted (``lasted``: none nan or under 1 ns): the same values, in the same order.
    values: Iterable[float]
    if what == "data_wait":
        values = (
            map(operator.truediv, waits, durs)
            if lasted
            else [w / d if d > 0 else 0.0 for w, d in zip(waits, durs, strict=True)]
        )
    else:
        values = map(math.log, durs) if lasted else [math.log(max(d, 1e-9)) for d in durs]
    n = len(durs)
    size = b.steps[split]
    centre = b.first[split] - a
    lo, hi = max(1, centre - max(size, reach)), min(n - 1, centre + max(size, reach))
    # The running sums from the start, kept only where the split may be, and the last (the total).
    running = itertools.chain((0.0,), itertools.accumulate(values))
    sums = dict(enumerate(itertools.islice(running, lo, hi + 1), lo)) if hi >= lo else {}
    rest = deque(running, maxlen=1)
    total = rest[0]  # the chain holds n + 1 sums, the last never taken above
    best, at = -1.0, centre
    for j in range(lo, hi + 1):
        gap = abs(sums[j] / j - (total - sums[j]) / (n - j)) * math.sqrt(j * (n - j))
        if gap > best:
            best, at = gap, j
    return a + at


def _ranks(values: list[float]) -> tuple[list[float], float]:
    """Average ranks (1-based) and the tie correction factor of the rank-sum variance."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    if len(set(values)) == len(values):  # no ties (nan equals nothing, as below; 0.0 and -0.0 are a tie)
        deque(map(ranks.__setitem__, order, map(float, range(1, len(order) + 1))), maxlen=0)  # ranks[order[p]] = p+1
        return ranks, 1.0
    ties = 0.0
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        r = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = r
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    n = len(values)
    return ranks, (1 - ties / (n**3 - n)) if n > 1 else 1.0


def _best_split(b: _Blocks, lo: int, th: Thresholds) -> tuple[int, Change] | None:
    """The most significant material split of blocks [lo, end), as (block index, its Change)."""
    n = len(b.dur) - lo
    if n < 4:
        return None
    shares = [w / d if d > 0 else 0.0 for w, d in zip(b.wait[lo:], b.dur[lo:], strict=True)]
    times = [d / s for d, s in zip(b.dur[lo:], b.steps[lo:], strict=True)]
    steps_after = _suffix_sums(b.steps[lo:], 0)
    total = steps_after[0]
    m = th.change_min_steps
    candidates = [
        k
        for k in range(2, n - 1)
        if steps_after[k] >= m and total - steps_after[k] >= m and b.end[-1] - b.start[lo + k] >= th.change_min_s
    ]
    if not candidates:
        return None
    # The split is the strongest material candidate, the first of equals in (what, k) order: the strong ones are
    # tried strongest first, so only those stronger than the first material one are tested for materiality.
    strong: list[tuple[float, int, int, str]] = []
    centres = [(n - k) * (n + 1) / 2 for k in candidates]  # the rank sum after k expected without a change
    pairs = [k * (n - k) for k in candidates]
    for what, values in (("data_wait", shares), ("step_time", times)):
        ranks, tie = _ranks(values)
        var_unit = (n + 1) / 12 * tie
        if var_unit <= 0:
            continue
        after = _suffix_sums(ranks, 0.0)
        # |z| = |after[k] - centre| / sqrt(k (n - k) var_unit) for every candidate, the same floats, C-level.
        deviations = map(operator.sub, map(after.__getitem__, candidates), centres)
        sds = map(math.sqrt, map(operator.mul, pairs, itertools.repeat(var_unit)))
        zs = list(map(abs, map(operator.truediv, deviations, sds)))
        if max(zs) >= th.change_z:  # most windows hold no strong candidate at all
            strong.extend((-z, len(strong), k, what) for z, k in zip(zs, candidates, strict=True) if z >= th.change_z)
    for _, _, k, what in sorted(strong):
        if (material := _material(b, lo, k, what, th)) is not None:
            before, after_value = material
            return lo + k, Change(b.start[lo + k], what, before, after_value)
    return None


def _suffix_sums(values: list[_N], zero: _N) -> list[_N]:
    """``out[k]`` = values[k] + (values[k + 1] + (... + zero)), added from the end as a loop from the end adds."""
    out = list(itertools.accumulate(reversed(values), operator.add, initial=zero))
    out.reverse()
    return out


def _material(b: _Blocks, lo: int, k: int, what: str, th: Thresholds) -> tuple[float, float] | None:
    """(before, after) when the blocks from ``lo + k`` differ materially from those before, in the same
    direction on both halves of what follows; else None."""
    split = lo + k
    n = len(b.dur)
    half = split + (n - split) // 2
    parts = [(lo, split), (split, n), (split, half), (half, n)]
    if what == "data_wait":
        vals = [_share(b, a, z) for a, z in parts]
        limit = th.change_wait
        deltas = [v - vals[0] for v in vals[1:]]
    else:
        vals = [_median_step(b, a, z) for a, z in parts]
        limit = math.log(th.change_step_ratio)
        deltas = [math.log(v / vals[0]) if v > 0 and vals[0] > 0 else 0.0 for v in vals[1:]]
    if all(d >= limit for d in deltas) or all(d <= -limit for d in deltas):
        return vals[0], vals[1]
    return None


def _share(b: _Blocks, a: int, z: int) -> float:
    d = math.fsum(b.dur[a:z])
    return math.fsum(b.wait[a:z]) / d if d > 0 else 0.0


def _median_step(b: _Blocks, a: int, z: int) -> float:
    per_step = sorted(d / s for d, s in zip(b.dur[a:z], b.steps[a:z], strict=True))
    return per_step[len(per_step) // 2] if per_step else math.nan


def live_window(
    run: Run, t0: float, t1: float, th: Thresholds, window_memo: WindowMemo | None = None
) -> tuple[RunWindow, Change | None]:
    """The run's live window over [t0, t1] (at least ``window_steps`` steps), or, after a change inside it,
    the window of the steps since the change (when there are at least ``min_steps`` of them). ``window_memo``: the
    caller's memo of each run's windows (the live window and its change are memoised there, the cut ones are
    not); without one, computed afresh."""
    w = run_window(run, t0, t1, min_steps=th.window_steps, window_memo=window_memo)
    key = (
        run.steps.total,
        len(run.checkpoints),
        t0,
        t1,
        th.window_steps,
        th.min_steps,
        th.change_min_steps,
        th.change_min_s,
        th.change_wait,
        th.change_step_ratio,
        th.change_z,
    )
    if window_memo is not None and (hit := window_memo.live.get(run, key)) is not None:
        return hit
    change = latest_change(w, th)
    out: tuple[RunWindow, Change | None] = (w, None)
    if change is not None:
        # The steps that ended after the change began (the first of them is the first after it), no reach-back.
        cut = run_window(run, math.nextafter(change.t, math.inf), t1, min_steps=0, window_memo=window_memo, memo=False)
        if cut.steps >= th.min_steps:
            out = (cut, change)
        elif change.what == "loader" and (before := _loader_before(run, change.t)) is not None:
            # The new loader has fed too few steps to judge: until it has, the old one's steps say what holds.
            before_w = run_window(
                run, t0, change.t, min_steps=th.window_steps, loader=before, window_memo=window_memo, memo=False
            )
            out = (before_w, None)
    if window_memo is not None:
        window_memo.live.put(run, key, out)
    return out


def _loader_before(run: Run, t: float) -> int | None:
    """The loader that fed the last step ending at or before ``t``."""
    _, j = run.steps.index_range(t, t)
    return (run.steps.loader[j - 1] or None) if j > 0 else None
