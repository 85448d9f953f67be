"""A run's step table: one column per figure, bounded, with running sums for O(1) range totals."""

from __future__ import annotations

import itertools
import math
import operator
from array import array
from bisect import bisect_left, bisect_right
from typing import Any, NamedTuple

FSUM_BLOCK = 256  # rows whose exact sum Steps.fsum keeps
COUNT_BLOCK = 64  # rows whose kinds Steps.row_counts counts together
_NAN = float("nan")
KEEP_MIN_ROWS = 1000  # an age-bounded table keeps at least its newest rows (a slow training's recent past)
_BRIEF = 1e-9  # a step shorter than this (s) did not last: its share and log-duration need a guard


class RowCounts(NamedTuple):
    """Rows of some kinds among a range of the step table."""

    warm: int  # warm-up steps
    switches: int  # steps of another loader than the step before them (the range's first step not counted)
    measured: int  # steps with a measured exposed wait
    comm: int  # steps that spent time in collectives
    brief: int  # steps that lasted under _BRIEF s, or forever, or nan


def _brief(d: float) -> bool:
    return not _BRIEF <= d < math.inf


_NAN8 = array("d", [_NAN]).tobytes()


class Steps:
    """Columnar step table: start, end, duration, data wait (s), samples, warm-up flag, loader, and the time
    the training thread was blocked in collective communication (s; 0 where the agent measured none).

    ``cap`` bounds the rows kept (the store shares one budget among its runs and may lower it), ``keep_s`` their age
    (the newest ``KEEP_MIN_ROWS`` are kept however old); ``total`` counts every step ever completed."""

    __slots__ = (
        "__weakref__",  # readers may keep their own caches of a table, weakly keyed on it
        "_counts",
        "_cum",
        "_exact",
        "cap",
        "clears",
        "comm",
        "dur",
        "edits",
        "end",
        "exposed",
        "exposed_wait",
        "keep_s",
        "loader",
        "own",
        "samples",
        "start",
        "total",
        "wait",
        "warm",
    )

    def __init__(self, cap: int | None, keep_s: float | None = None) -> None:
        self.cap = cap
        self.keep_s = keep_s
        self.start = array("d")
        self.end = array("d")
        self.dur = array("d")  # end - start, kept so window sums and maxima need no per-step Python
        self.wait = array("d")
        self.exposed = array("d")  # GPU idle exposed by the step's measured waits (nan where none was measured)
        # The host time of the waits whose exposed idle was measured (0 where none was): with sampling
        # (TRAINMON_EXPOSED_EVERY) or skipped waits, the exposed share is exposed / exposed_wait × wait.
        self.exposed_wait = array("d")
        self.samples = array("l")
        self.warm = array("b")
        self.loader = array("l")  # the train loader of each step (loaders can change mid-run)
        self.comm = array("d")  # time in collectives (comm records), added to the step that holds each span
        # The loop's own code: the step's time outside the model less its data wait, where the agent timed the model
        # (agent/_outside.py); estimated from the measured steps' share between its bursts; 0 where neither told it.
        self.own = array("d")
        self.total = 0  # steps ever completed (the table itself may be trimmed)
        self.edits = 0  # rows changed in place (a measurement added to a finished step) or cleared
        self.clears = 0  # times the table was emptied (a reader's cache of its rows starts again)
        self._cum: list[Any] | None = None  # [first row, running sums of dur, wait, samples] (see prefix_sums)
        self._counts: list[Any] | None = None  # [first block, running counts of rare rows] (see row_counts)
        self._exact: dict[str, list[Any]] = {}  # column -> exact running sums per block (see fsum)

    def _columns(self) -> tuple[array[Any], ...]:
        return (
            self.start,
            self.end,
            self.dur,
            self.wait,
            self.exposed,
            self.exposed_wait,
            self.samples,
            self.warm,
            self.loader,
            self.comm,
            self.own,
        )

    def add(
        self,
        start: float,
        end: float,
        wait: float,
        samples: int,
        warm: bool,
        exposed: float,
        loader: int = 0,
        exposed_wait: float = 0.0,
        comm: float = 0.0,
        own: float = 0.0,
    ) -> None:
        self.start.append(start)
        self.end.append(end)
        self.dur.append(end - start)
        self.wait.append(wait)
        self.exposed.append(exposed)
        self.exposed_wait.append(exposed_wait if exposed == exposed else 0.0)
        self.samples.append(samples)
        self.warm.append(1 if warm else 0)
        self.loader.append(loader)
        self.comm.append(comm)
        self.own.append(own)
        self.total += 1
        self.trim()

    def extend_steady(
        self,
        start: array[float],
        end: array[float],
        dur: array[float],
        wait: array[float],
        samples: int,
        loader: int,
        own_share: float = 0.0,
    ) -> None:
        """Append steady-state steps of one loader given as columns (the batch ingest path); ``own_share``: the
        share of each step's time the loop's own code is estimated to take (from the steps whose model was timed)."""
        n = len(end)
        self.start.extend(start)
        self.end.extend(end)
        self.dur.extend(dur)
        self.wait.extend(wait)
        self.exposed.extend(array("d", [_NAN]) * n)
        self.exposed_wait.extend(array("d", [0.0]) * n)
        self.samples.extend(array("l", [samples]) * n)
        self.warm.extend(bytes(n))
        self.loader.extend(array("l", [loader]) * n)
        self.comm.extend(array("d", [0.0]) * n)
        if own_share > 0.0:
            self.own.extend(array("d", [max(0.0, min(own_share * d, d - w)) for d, w in zip(dur, wait, strict=True)]))
        else:
            self.own.extend(array("d", [0.0]) * n)
        self.total += n
        self.trim()

    def trim(self) -> None:
        """Keep at most ``cap`` rows, and none older than ``keep_s``; trims a quarter at a time so the cost is
        amortised."""
        end = self.end
        n = len(end)
        if self.cap is not None and n > self.cap:
            drop = n - self.cap + self.cap // 4
        elif self.keep_s is not None and n > KEEP_MIN_ROWS and end[-1] - end[0] > self.keep_s * 1.25:
            drop = min(bisect_left(end, end[-1] - self.keep_s), n - KEEP_MIN_ROWS)
        else:
            return
        for col in self._columns():
            del col[:drop]

    def __len__(self) -> int:
        return len(self.end)

    def clear(self) -> None:
        for col in self._columns():
            del col[:]
        self.total = 0
        self.edits += 1
        self.clears += 1
        self._cum = None
        self._counts = None
        self._exact.clear()

    def prefix_sums(self) -> tuple[array[float], array[float], array[float]]:
        """Running sums of duration, wait and samples: ``cum[j] - cum[i]`` is the sum over rows [i, j).

        Extended with the rows added since the last call and trimmed with the table, so a chart or a
        window sums any range in O(1) however many steps it spans."""
        offset = self.total - len(self.end)
        c = self._cum
        if c is None or c[0] > offset or not offset <= c[0] + len(c[1]) - 1 <= self.total:
            # Not yet taken, taken from a cleared table, or every row summed has been trimmed since.
            c = self._cum = [offset, array("d", [0.0]), array("d", [0.0]), array("d", [0.0])]
        first, cum_dur, cum_wait, cum_samples = c
        if first < offset:
            for col in (cum_dur, cum_wait, cum_samples):
                del col[: offset - first]
            c[0] = offset
        done = len(cum_dur) - 1  # rows summed so far, from the table's head
        if done < len(self.end):
            for cum, col in ((cum_dur, self.dur), (cum_wait, self.wait), (cum_samples, self.samples)):
                last = cum.pop()  # comes back first: accumulate starts from it
                cum.fromlist(list(itertools.accumulate(col[done:], initial=last)))
        return cum_dur, cum_wait, cum_samples

    def row_counts(self, i: int, j: int) -> RowCounts:
        """How many of rows [i, j) are of each kind in ``RowCounts``: O(1) for the blocks of COUNT_BLOCK rows
        inside the range, from running counts per block kept like ``prefix_sums``' (most tables have none of these
        rows, or all of them, so counting a batch of new blocks is a few C-level checks), row by row at its edges."""
        if j <= i:
            return RowCounts(0, 0, 0, 0, 0)
        offset = self.total - len(self.end)
        # Whole blocks after row i's own: a switch is counted at the row after it, and the first row of each
        # block counted is one where its loader is not the row's before, which then is in the range.
        b0, b1 = (i + offset) // COUNT_BLOCK + 1, (j + offset) // COUNT_BLOCK
        if b1 - b0 < 2:
            return self._scan_counts(i, j)
        c = self._block_counts()
        base = c[0]
        a, z = b0 * COUNT_BLOCK - offset, b1 * COUNT_BLOCK - offset
        head, tail = self._scan_counts(i, a), self._scan_counts(z, j, after=True)
        return RowCounts(
            *(h + col[b1 - base] - col[b0 - base] + t for h, col, t in zip(head, c[1:], tail, strict=True))
        )

    def _scan_counts(self, i: int, j: int, *, after: bool = False) -> RowCounts:
        """RowCounts of rows [i, j) row by row (a few dozen at the edges of a range); ``after`` counts a switch at
        row i too (the rows follow others in the range)."""
        if j <= i:
            return RowCounts(0, 0, 0, 0, 0)
        exposed, dur = self.exposed[i:j], self.dur[i:j]
        s = i if after else i + 1
        return RowCounts(
            j - i - self.warm[i:j].tobytes().count(0),
            sum(map(operator.ne, self.loader[s:j], self.loader[s - 1 : j - 1])),
            0 if exposed.tobytes() == _NAN8 * (j - i) else sum(map(operator.eq, exposed, exposed)),
            j - i - self.comm[i:j].count(0.0),
            0 if min(dur) >= _BRIEF and math.isfinite(sum(dur)) else sum(map(_brief, dur)),
        )

    def _block_counts(self) -> list[Any]:
        """[first block, running counts per kind over the whole blocks since it], extended to the last whole
        block of the table (a block's first row is a switch where its loader is not the previous row's)."""
        offset = self.total - len(self.end)
        head = -(-offset // COUNT_BLOCK)  # the first whole block still in the table
        c = self._counts
        if c is None or c[0] > head or not head <= c[0] + len(c[1]) - 1 <= self.total // COUNT_BLOCK:
            c = self._counts = [head, *(array("q", [0]) for _ in RowCounts._fields)]
        if c[0] < head:
            for col in c[1:]:
                del col[: head - c[0]]
            c[0] = head
        done = c[0] + len(c[1]) - 1  # blocks counted so far
        stop = self.total // COUNT_BLOCK
        if done < stop:
            lo, hi = done * COUNT_BLOCK - offset, stop * COUNT_BLOCK - offset
            n, blocks = hi - lo, stop - done
            warm, loader, exposed = self.warm[lo:hi], self.loader[lo:hi], self.exposed[lo:hi]
            comm, dur = self.comm[lo:hi], self.dur[lo:hi]
            prev = self.loader[lo - 1] if lo else loader[0]
            # Byte comparisons first: most batches hold no warm-up, no switch, no measurement, no collective.
            flags = (
                None if warm.tobytes().count(0) == n else bytes(map(bool, warm)),
                None
                if loader.tobytes() == array("l", [prev]).tobytes() * n
                else bytes(map(operator.ne, loader, [prev, *loader[:-1]])),
                None if exposed.tobytes() == _NAN8 * n else bytes(map(operator.eq, exposed, exposed)),
                None if comm.tobytes() == bytes(8 * n) else bytes(map(bool, comm)),
                None if min(dur) >= _BRIEF and math.isfinite(sum(dur)) else bytes(map(_brief, dur)),
            )
            for cum, flag in zip(c[1:], flags, strict=True):
                last = cum[-1]
                if flag is None:
                    cum.extend(array("q", [last]) * blocks)
                else:
                    per_block = (flag.count(1, k, k + COUNT_BLOCK) for k in range(0, n, COUNT_BLOCK))
                    cum.extend(itertools.accumulate(per_block, initial=last))
                    del cum[-blocks - 1]  # the initial value, already there
        return c

    def fsum(self, column: str, i: int, j: int, *, measured: bool = False) -> float:
        """``math.fsum`` of a column's rows [i, j) ("comm", "exposed", "exposed_wait" or "own"; with ``measured``, of
        those not nan), the same float, in O(1) for the blocks of FSUM_BLOCK rows inside the range.

        fsum rounds the exact sum of its inputs once, so the exact sum of the whole blocks may stand for their
        rows: the exact running sum up to each block is kept as a few floats (each fsum's rounding error taken out
        by the next), and the blocks' sum is the running sum at the last less the one at the first."""
        col = self._fsum_columns()[column]
        offset = self.total - len(self.end)
        b0, b1 = -(-(i + offset) // FSUM_BLOCK), (j + offset) // FSUM_BLOCK  # whole blocks within the rows
        if b1 - b0 >= 2:
            sums = self._exact_sums(column + "+" if measured else column, col, measured)
            before, upto = sums[1][b0 - sums[0]], sums[1][b1 - sums[0]]
            if before is not None and upto is not None:  # else nan or ±inf among the rows: fsum's own rules apply
                head, tail = col[i : b0 * FSUM_BLOCK - offset], col[b1 * FSUM_BLOCK - offset : j]
                parts = _known(head) + _known(tail) if measured else [*head, *tail]
                return math.fsum([*parts, *upto, *map(operator.neg, before)])
        return math.fsum(_known(col[i:j]) if measured else col[i:j])

    def _exact_sums(self, name: str, col: array[float], measured: bool) -> list[Any]:
        """[first block, the exact sum of the rows of the blocks from it up to each block (as floats, None once
        not finite)], extended to the last whole block of the table."""
        offset = self.total - len(self.end)
        head = -(-offset // FSUM_BLOCK)  # the first whole block still in the table
        stop = self.total // FSUM_BLOCK
        e = self._exact.get(name)
        if e is None or e[0] > head or not head <= e[0] + len(e[1]) - 1 <= stop:
            e = self._exact[name] = [head, [[]]]
        if e[0] < head:
            del e[1][: head - e[0]]
            e[0] = head
        sums = e[1]
        for b in range(e[0] + len(sums) - 1, stop):
            rows = col[b * FSUM_BLOCK - offset : (b + 1) * FSUM_BLOCK - offset]
            last = sums[-1]
            sums.append(None if last is None else _exact_parts([*last, *(_known(rows) if measured else rows)]))
        return e

    def _fsum_columns(self) -> dict[str, array[float]]:
        return {"comm": self.comm, "exposed": self.exposed, "exposed_wait": self.exposed_wait, "own": self.own}

    def _changed(self, k: int) -> None:
        """Row ``k`` (of the table) changed in place: its running counts are taken again from it on, its block
        summed again."""
        b = (k + self.total - len(self.end)) // FSUM_BLOCK
        for e in self._exact.values():
            if b >= e[0]:
                del e[1][b - e[0] + 1 :]  # the running sums up to row k's block hold
        c = self._counts
        if c is not None:
            keep = (k + self.total - len(self.end)) // COUNT_BLOCK - c[0] + 1  # the blocks counted before row k's
            if 0 < keep < len(c[1]):
                for col in c[1:]:
                    del col[keep:]
            elif keep <= 0:
                self._counts = None

    def add_exposed(self, t0: float, t1: float, exposed: float, loader: int) -> bool:
        """Add a measured wait's exposed GPU idle to the finished step whose span holds the wait [t0, t1]
        (a step of the same loader); False when no step in the table does."""
        k = bisect_left(self.end, t1)  # the first step ending at or after the wait's end
        if k >= len(self.end) or self.start[k] > t0 + (t1 - t0) * 0.5 or self.loader[k] != loader:
            return False
        old = self.exposed[k]
        self.exposed[k] = exposed if old != old else old + exposed
        self.exposed_wait[k] += t1 - t0
        self._changed(k)
        self.edits += 1
        return True

    def mark_warm(self, loader: int) -> int:
        """Make every row of ``loader`` warm-up (steps found unmeasured once their measurement began); how many."""
        rows = [k for k, (w, lid) in enumerate(zip(self.warm, self.loader, strict=True)) if not w and lid == loader]
        for k in rows:
            self.warm[k] = 1
        if rows:
            self._counts = None
            self.edits += 1
        return len(rows)

    def add_comm(self, t0: float, t1: float) -> bool:
        """Add a communication span [t0, t1] to the finished step that holds it (by its midpoint); False when
        no step in the table does."""
        mid = (t0 + t1) * 0.5
        k = bisect_left(self.end, mid)
        if k >= len(self.end) or self.start[k] > mid:
            return False
        self.comm[k] += t1 - t0
        self._changed(k)
        self.edits += 1
        return True

    def index_range(self, t0: float, t1: float) -> tuple[int, int]:
        """Steps that ended within ``[t0, t1]``."""
        return bisect_left(self.end, t0), bisect_right(self.end, t1)


def _known(values: array[float]) -> list[float]:
    return [v for v in values if v == v]


def _exact_parts(values: list[float]) -> list[float] | None:
    """Floats whose exact sum is that of ``values`` (None where it is not a finite number, or on overflow)."""
    try:
        parts = [math.fsum(values)]
        if not math.isfinite(parts[0]):
            return None
        rest = [*values, -parts[0]]
        for _ in range(64):  # each round leaves at most half an ulp of the last: a few rounds at most
            r = math.fsum(rest)
            if r == 0.0:
                return parts
            parts.append(r)
            rest.append(-r)
    except OverflowError:
        pass
    return None
