"""What DataLoader iterators cost the loop before their first batch, and which of them were worker restarts.

A restart is a new iterator of a loader that had one before and whose workers were not kept
(``persistent_workers=False``): every epoch (and every validation run) starts its workers again. Its cost is
the time the loop was held by it: the previous iterator's last ``__next__`` (the old workers are shut down
inside it), making the new iterator (the new workers start) and the waits for its first batches, one from each
new worker (they take batches in turn), beyond the loader's normal wait for a batch. Warm-up flags keep those
steps out of the steady state; this keeps their cost.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from typing import Any


class Restarts:
    """Restarts in time order (when their iterator began), their cost in seconds and running sums of it.

    ``cap`` bounds the rows kept; ``total`` and ``before_s`` keep counting what was trimmed."""

    __slots__ = ("_ended", "_first", "_open", "before_s", "cap", "cost", "cum", "first_t", "loader", "t", "total")

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.t = array("d")  # when each restart's iterator began
        self.cost = array("d")  # what it held the loop, s
        self.loader = array("l")
        self.cum = array("d", [0.0])  # cum[j] - cum[i]: the cost of restarts [i, j)
        self.total = 0  # restarts ever counted
        self.before_s = 0.0  # the cost of those trimmed from the table
        self.first_t = math.nan  # the run's first iterator with workers: where its loading wall time starts
        # loader → [start, cost so far, restart, batches still to come from new workers]
        self._open: dict[int, list[Any]] = {}
        self._ended: dict[int, float] = {}  # loader → its last iterator's final (StopIteration) __next__, s
        self._first: dict[int, tuple[float, int]] = {}  # loader → first-batch waits (s, count): not normal waits

    @property
    def pending(self) -> bool:
        """Some loader's new workers have not all delivered their first batch yet."""
        return bool(self._open)

    def waiting(self, lid: int) -> bool:
        """Loader ``lid``'s new workers have not all delivered their first batch (those waits go record by record)."""
        return lid in self._open

    def iter_end(self, lid: int, t0: float, t1: float) -> None:
        self._open.pop(lid, None)  # an iterator that ended without a batch
        self._ended[lid] = max(0.0, t1 - t0)

    def iter_start(self, lid: int, t0: float, t1: float, workers: int, restart: bool) -> None:
        """Loader ``lid`` made a new iterator over [t0, t1] with ``workers`` workers; ``restart``: they are new."""
        ended = self._ended.pop(lid, 0.0)
        if workers <= 0:
            self._open.pop(lid, None)
            return
        if self.first_t != self.first_t:
            self.first_t = t0
        self._open[lid] = [t0, (ended if restart else 0.0) + max(0.0, t1 - t0), restart, workers]

    def first_wait(self, lid: int, t0: float, t1: float, batches: int, wait_s: float) -> None:
        """A wait of loader ``lid``, whose totals before it are ``batches`` and ``wait_s``: while its new workers
        deliver their first batches, what each wait takes beyond the loader's normal wait counts; with the last
        of them a restart's cost is known."""
        opened = self._open.get(lid)
        if opened is None:
            return
        first_s, first_n = self._first.get(lid, (0.0, 0))
        steady = batches - first_n
        normal = max(0.0, (wait_s - first_s) / steady) if steady > 0 else 0.0
        wait = max(0.0, t1 - t0)
        self._first[lid] = (first_s + wait, first_n + 1)
        opened[1] += max(0.0, wait - normal)
        opened[3] -= 1
        if opened[3] > 0:
            return
        del self._open[lid]
        start, cost, restart, _ = opened
        if restart:
            self._add(start, cost, lid)

    def _add(self, t: float, cost: float, lid: int) -> None:
        k = bisect_right(self.t, t)  # in time order; another loader's restart may have come first
        self.t.insert(k, t)
        self.cost.insert(k, cost)
        self.loader.insert(k, lid)
        if k == len(self.t) - 1:
            self.cum.append(self.cum[-1] + cost)
        else:
            del self.cum[k + 1 :]
            for c in self.cost[k:]:
                self.cum.append(self.cum[-1] + c)
        self.total += 1
        if self.cap is not None and len(self.t) > self.cap:
            drop = len(self.t) - self.cap + self.cap // 4
            self.before_s += self.cum[drop] - self.cum[0]
            for col in (self.t, self.cost, self.loader, self.cum):
                del col[:drop]

    def __len__(self) -> int:
        return len(self.t)

    def between(self, t0: float, t1: float) -> tuple[int, float]:
        """How many restarts began in [t0, t1], and their cost (s)."""
        i, j = bisect_left(self.t, t0), bisect_right(self.t, t1)
        return j - i, self.cum[j] - self.cum[i]

    def until(self, t: float) -> tuple[int, float]:
        """How many restarts began by ``t`` since the run started (trimmed ones included), and their cost."""
        j = bisect_right(self.t, t)
        trimmed = self.total - len(self.t)
        return trimmed + j, self.before_s + self.cum[j] - self.cum[0]
