"""Where the step deriver folds a batch of records in columns and where it goes record by record.

A wholly regular batch is folded by ``fold_regular``; regular stretches between irregular records by
``fold_prefix`` and (loader-driven steps) ``fold_next``; everything else goes through ``StepDeriver.apply_each``
record by record. Each fold declines where it would not be bit-identical to going record by record
(``trainmon.store.folds``), so the schedule only decides where trying one is worth it.
"""

from __future__ import annotations

from array import array

from trainmon.protocol import K_OPT, K_STEP, K_WAIT
from trainmon.store.derive import StepDeriver
from trainmon.store.folds import fold_next, fold_prefix, fold_regular

FAST_MIN_STEPS = 8  # a batch with fewer regular steps than this goes record by record


class Stretches:
    """One run's schedule of folds over its deriver. The folds are called through its methods so that a test can
    swap one out and compare with record by record; ``FAST_MIN_STEPS`` is read at each call for the same reason."""

    def __init__(self, deriver: StepDeriver) -> None:
        self.d = deriver

    def apply(self, records: array[int], kinds: bytes) -> None:
        """Fold a batch of flat int64 step records (tag, t0, t1, value; see trainmon.protocol) into the deriver."""
        d = self.d
        n = len(records) // 4
        tags = records[0::4]
        t0s = records[1::4]
        t1s = records[2::4]
        vals = records[3::4]
        lo = 0
        if n >= 2 * FAST_MIN_STEPS and d.mode != "next":
            # Record by record up to the first step boundary, so the regular stretch starts just after one.
            first = next((i for i in range(min(n, 8)) if tags[i] & 0xFF in (K_STEP, K_OPT)), None)
            if first is not None:
                d.apply_each(tags, t0s, t1s, vals, 0, first + 1)
                folded = self.fold_regular(records, tags, first)
                lo = first + 1 + folded
                if not folded:
                    lo = self._boundary_stretches(records, tags, t0s, t1s, vals, kinds, lo)
        elif n >= 2 * FAST_MIN_STEPS:
            lo = self._train_wait_stretches(records, tags, t0s, t1s, vals)
        d.apply_each(tags, t0s, t1s, vals, lo, n)

    def _boundary_stretches(
        self,
        records: array[int],
        tags: array[int],
        t0s: array[int],
        t1s: array[int],
        vals: array[int],
        kinds: bytes,
        lo: int,
    ) -> int:
        """From record ``lo`` (just after a step boundary) on: regular stretches in columns (fold_prefix), the
        steps between them record by record. Returns where the rest of the batch starts (record by record)."""
        d = self.d
        n = len(tags)
        pos = lo
        while n - pos >= 2 * FAST_MIN_STEPS and d.mode != "next":
            folded = self.fold_prefix(records, tags, pos - 1)
            pos += folded
            # Record by record through the step that broke the pattern; after a refusal, through several, so
            # that an irregular stretch costs one attempt per FAST_MIN_STEPS steps.
            boundary = K_STEP if d.mode == "explicit" else K_OPT
            nxt = pos - 1
            for _ in range(1 if folded else FAST_MIN_STEPS):
                nxt = kinds.find(boundary, nxt + 1)
                if nxt < 0:
                    return pos
            d.apply_each(tags, t0s, t1s, vals, pos, nxt + 1)
            pos = nxt + 1
        return pos

    def _train_wait_stretches(
        self, records: array[int], tags: array[int], t0s: array[int], t1s: array[int], vals: array[int]
    ) -> int:
        """Loader-driven steps (mode "next", each train batch starts a step): record by record through a train
        wait, then the train waits that follow it in a row in columns (fold_next), and so on. Returns where the
        rest of the batch starts (record by record)."""
        d = self.d
        n = len(tags)
        pos = 0
        skip = 1  # after a refusal, several train waits record by record: one attempt per FAST_MIN_STEPS steps
        while n - pos >= 2 * FAST_MIN_STEPS and d.mode == "next" and d.train is not None:
            wait_tag = d.train << 8 | K_WAIT
            nxt = pos - 1
            try:
                for _ in range(skip):
                    nxt = tags.index(wait_tag, nxt + 1)
            except ValueError:
                return pos
            d.apply_each(tags, t0s, t1s, vals, pos, nxt + 1)
            pos = nxt + 1
            folded = 0
            if d.mode == "next" and d.train is not None and d.train << 8 | K_WAIT == wait_tag:
                folded = self.fold_next(records, tags, pos)
            pos += folded
            skip = 1 if folded else FAST_MIN_STEPS
        return pos

    def fold_regular(self, records: array[int], tags: array[int], boundary: int) -> int:
        return fold_regular(self.d, records, tags, boundary, FAST_MIN_STEPS)

    def fold_prefix(self, records: array[int], tags: array[int], boundary: int) -> int:
        return fold_prefix(self.d, records, tags, boundary, FAST_MIN_STEPS)

    def fold_next(self, records: array[int], tags: array[int], lo: int) -> int:
        return fold_next(self.d, records, tags, lo, FAST_MIN_STEPS)
