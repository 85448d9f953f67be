"""Column folds: the regular stretches of a batch of records (every step one pattern: a train batch then the step's
boundary; with loader-driven steps, train batches in a row) appended to the step table as whole columns, in C-level
maps and slices, with what the step state machine (``trainmon.store.derive``) would have given record by record.

Each fold checks first that the deriver's state and the records allow it, and declines (returns 0 records folded)
where they do not; ``trainmon.store.stretches`` decides where to try one. ``min_steps`` is the fewest steps worth a
fold.
"""

from __future__ import annotations

import functools
import operator
from array import array
from bisect import bisect_left, bisect_right
from itertools import repeat
from typing import cast

from trainmon.protocol import K_OPT, K_STEP, K_WAIT
from trainmon.store.derive import StepDeriver
from trainmon.store.gcspans import GcSpans
from trainmon.store.loaders import LoaderInfo

NS = 1e-9

FoldState = tuple[int, LoaderInfo]  # the train loader (id, info) a fold appends steps of


def fold_regular(d: StepDeriver, records: array[int], tags: array[int], boundary: int, min_steps: int) -> int:
    """Fold the steps right after record ``boundary`` (which just closed a step) in whole columns, when the
    rest of the batch repeats one step pattern (see ``pattern``); returns how many records were folded (0 when
    the state or the batch does not allow it).

    Gives the same steps and loader figures as ``StepDeriver.apply_each`` does record by record."""
    start = fold_start(d, tags, boundary, exact=False)
    if start is None:
        return 0
    state, pat, lo, m = start
    period = len(pat)
    hi = lo + m * period
    if m < min_steps or any(tags[lo + q : hi : period].count(tag) != m for q, tag in enumerate(pat)):
        return 0
    fold_columns(d, records, lo, m, period, state, exact=False)
    return m * period


def fold_prefix(d: StepDeriver, records: array[int], tags: array[int], boundary: int, min_steps: int) -> int:
    """Like fold_regular, for the regular steps that follow record ``boundary`` up to the first record that breaks
    the pattern, and only where the columns equal what ``apply_each`` gives bit for bit: no garbage collection near
    the waits, no step table trim among the folded steps. Returns the records folded."""
    start = fold_start(d, tags, boundary, exact=True)
    if start is None:
        return 0
    state, pat, lo, m = start
    period = len(pat)
    m = room(d, m)
    if m < min_steps:
        return 0
    m = regular_run(tags, lo, pat, m)
    if m < min_steps:
        return 0
    if d.gc.total:
        w0 = records[4 * lo + 1 : 4 * (lo + m * period) : 4 * period]
        w1 = records[4 * lo + 2 : 4 * (lo + m * period) : 4 * period]
        if gc_near(d.gc, w0, w1):
            return 0
    fold_columns(d, records, lo, m, period, state, exact=True)
    return m * period


def fold_next(d: StepDeriver, records: array[int], tags: array[int], lo: int, min_steps: int) -> int:
    """In mode "next", right after a train wait: fold the train waits in a row from record ``lo`` on in whole
    columns (each closes the step the one before began), where that gives bit for bit what ``apply_each`` gives;
    returns the records folded."""
    ready = train_ready(d)
    if ready is None or d.cur_batches != 1 or d.cur_exposed_wait or d.cur_comm:
        return 0
    lid, train = ready
    m = room(d, len(tags) - lo)
    if m < min_steps:
        return 0
    m = regular_run(tags, lo, [lid << 8 | K_WAIT], m)
    if m < min_steps:
        return 0
    w0 = records[4 * lo + 1 : 4 * (lo + m) : 4]
    w1 = records[4 * lo + 2 : 4 * (lo + m) : 4]
    if d.gc.total and gc_near(d.gc, w0, w1):
        return 0
    mul, sub, ns = operator.mul, operator.sub, repeat(NS)
    end = array("d", map(mul, w0, ns))
    start = array("d", [cast(float, d.cur_start)])  # not None: train_ready checked
    start.extend(end[:-1])
    dur = array("d", map(sub, end, start))
    raw_wait = array("d", map(sub, map(mul, w1, ns), end))
    wait = array("d", [d.cur_wait])  # each step's wait is the batch that began it
    wait.extend(raw_wait[:-1])
    if any(map(operator.gt, wait, dur)):
        wait = array("d", map(min, wait, dur))
    batch = train.batch_size
    d.steps.extend_steady(
        start, end, dur, wait, batch if isinstance(batch, int) else 0, lid or 0, d.own_share_now(end[-1])
    )
    train.batches += m
    train.wait_s = functools.reduce(operator.add, raw_wait, train.wait_s)
    d.last_wait_loader = lid
    d.cur_start = d.last_end = end[-1]
    d.cur_wait = raw_wait[-1]
    return m


def fold_columns(
    d: StepDeriver, records: array[int], lo: int, m: int, period: int, state: FoldState, exact: bool
) -> None:
    """Append the ``m`` regular steps of ``period`` records from record ``lo`` on as columns."""
    lid, train = state
    hi = lo + m * period
    t0s = records[4 * lo + 1 : 4 * hi : 4]
    t1s = records[4 * lo + 2 : 4 * hi : 4]
    mul, sub, ns = operator.mul, operator.sub, repeat(NS)  # t * NS: the float the record-by-record path makes
    end = array("d", map(mul, t0s[period - 1 :: period], ns))
    start = array("d", [cast(float, d.cur_start)])  # not None: fold_state checked
    start.extend(end[:-1])
    dur = array("d", map(sub, end, start))
    raw_wait = array("d", map(sub, map(mul, t1s[0::period], ns), map(mul, t0s[0::period], ns)))
    if not exact and d.gc.total:
        discount_gc(d.gc, array("d", map(mul, t0s[0::period], ns)), array("d", map(mul, t1s[0::period], ns)), raw_wait)
    # A wait is longer than its step only when it began before the step did (rare): cap those.
    wait = array("d", map(min, raw_wait, dur)) if any(map(operator.gt, raw_wait, dur)) else raw_wait
    batch = train.batch_size
    d.steps.extend_steady(
        start, end, dur, wait, batch if isinstance(batch, int) else 0, lid or 0, d.own_share_now(end[-1])
    )
    train.batches += m
    # In order, one addition at a time, as record by record (sum() compensates from Python 3.12 on).
    train.wait_s = functools.reduce(operator.add, raw_wait, train.wait_s) if exact else sum(raw_wait, train.wait_s)
    d.last_wait_loader = lid
    d.cur_start = d.last_end = end[-1]


# ------------------------------------------------------------ whether a fold may start, and where


def fold_start(
    d: StepDeriver, tags: array[int], boundary: int, exact: bool
) -> tuple[FoldState, list[int], int, int] | None:
    """(fold state, step pattern, first record, whole patterns left) for a fold after record ``boundary``, or
    None when the state or the records that follow allow none."""
    state = fold_state(d, exact=exact)
    pat = pattern(d.mode, tags, boundary, state[0]) if state is not None else None
    if state is None or pat is None:
        return None
    lo = boundary + 1
    return state, pat, lo, (len(tags) - lo) // len(pat)


def fold_state(d: StepDeriver, exact: bool) -> FoldState | None:
    """The train loader (id, info) when the state just after a closed step allows a fold, else None.

    ``exact`` (fold_prefix) also asks for what makes the columns match record-by-record ingestion bit for
    bit, and in explicit mode ignores other loaders' pending waits, which only an optimizer step reads."""
    ready = train_ready(d)
    if (
        ready is None
        or d.cur_batches
        or d.cur_wait
        or (d.pending_wait and not (exact and d.mode == "explicit"))
        or not d.seen_any_wait
        or (exact and (d.cur_comm or d.train_ended))
    ):
        return None
    return ready


def train_ready(d: StepDeriver) -> FoldState | None:
    """The train loader (id, info) when what every fold needs holds: a step under way with no exposed idle
    measured in it, the warm-up over, the loader's workers not being started again; else None."""
    lid = d.train
    train = d.loaders.get(lid) if lid is not None else None
    if (
        lid is None
        or train is None
        or d.cur_start is None
        or d.cur_exposed == d.cur_exposed
        or d.cur_outside_n  # a step no loader fed is being told: record by record
        or d.steps.total < d.warm_until
        or d.restarts.waiting(lid)
    ):
        return None
    return lid, train


def room(d: StepDeriver, m: int) -> int:
    """``m`` rows, or fewer where the step table's cap would trim among them."""
    cap = d.steps.cap
    return m if cap is None else min(m, cap - len(d.steps))


def pattern(mode: str, tags: array[int], boundary: int, lid: int) -> list[int] | None:
    """The tags of one regular step after record ``boundary``: [train wait, boundary] or, with explicit
    steps, [train wait, optimizer step, step]; None when the mode and the boundary make no such pattern."""
    end_tag = tags[boundary]
    wait_tag = lid << 8 | K_WAIT
    if mode == "explicit" and end_tag & 0xFF == K_STEP:
        if boundary + 2 < len(tags) and tags[boundary + 2] & 0xFF == K_OPT:
            return [wait_tag, tags[boundary + 2], end_tag]
        return [wait_tag, end_tag]
    if mode == "opt" and end_tag & 0xFF == K_OPT:
        return [wait_tag, end_tag]
    return None


def regular_run(tags: array[int], lo: int, pat: list[int], m: int) -> int:
    """How many of the ``m`` repeats of ``pat`` from tag ``lo`` on come in a row: the longest regular run, found
    with a few C-level slice comparisons."""
    period = len(pat)
    expected = array("q", pat) * m
    if tags[lo : lo + m * period] == expected:
        return m
    good, bad = 0, m
    while bad - good > 1:
        mid = (good + bad) // 2
        if tags[lo : lo + mid * period] == expected[: mid * period]:
            good = mid
        else:
            bad = mid
    return good


# ------------------------------------------------------------ garbage collections near the folded waits


def gc_near(gc: GcSpans, w0: array[int], w1: array[int]) -> bool:
    """Whether waits [w0, w1) (ns) must go record by record: a collection inside one, or a wait ending before
    it began."""
    return any(map(operator.gt, w0, w1)) or bisect_left(gc.end, min(w0) * NS) < bisect_right(gc.start, max(w1) * NS)


def discount_gc(gc: GcSpans, w0: array[float], w1: array[float], wait: array[float]) -> None:
    """Take the collections that ran inside each wait [w0, w1] out of it: the DataLoader's own allocations set
    them off, and the loop was paused for the collector, not starved of data."""
    start, end, _ = gc.between(w0[0], w1[-1])
    for s, e in zip(start, end, strict=True):
        k = bisect_right(w0, s) - 1
        if k >= 0 and e <= w1[k]:
            wait[k] = max(0.0, wait[k] - (e - s))
