"""A run's garbage-collection pauses (the agent's ``gc`` records): start, end and generation, in time order."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

GENERATIONS = 3  # CPython's collector: 0 (young) to 2 (everything)
NS = 1e-9


class GcSpans:
    """Columns of pauses, bounded by ``cap`` (trimmed a quarter at a time); ``total`` counts every pause seen."""

    __slots__ = ("cap", "end", "gen", "start", "total")

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.start = array("d")
        self.end = array("d")
        self.gen = array("b")
        self.total = 0

    def __len__(self) -> int:
        return len(self.end)

    def add_records(self, records: array[int]) -> None:
        """Append the agent's ``gc`` records (flat int64: tag, t0 ns, t1 ns, generation); a malformed one (ending
        before it starts, or not a generation) is dropped."""
        start, end, gen = array("d"), array("d"), array("b")
        for k in range(0, len(records), 4):
            t0, t1, g = records[k + 1], records[k + 2], records[k + 3]
            if t1 >= t0 and 0 <= g < GENERATIONS:
                start.append(t0 * NS)
                end.append(t1 * NS)
                gen.append(g)
        self.extend(start, end, gen)

    def extend(self, start: array[float], end: array[float], gen: array[int]) -> None:
        """Append pauses: in time order as the agent records them; sorted where they are not."""
        if not end:
            return
        self.total += len(end)
        tail = self.end[-1:]
        self.start.extend(start)
        self.end.extend(end)
        self.gen.extend(gen)
        if not _ascending(tail + end):
            # Out of order (a batch re-sent after a reconnect): collections never overlap, so sorting by start
            # keeps both columns in order.
            rows = sorted(zip(self.start, self.end, self.gen, strict=True))
            self.start = array("d", [r[0] for r in rows])
            self.end = array("d", [r[1] for r in rows])
            self.gen = array("b", [r[2] for r in rows])
        if self.cap is not None and len(self.end) > self.cap:
            drop = len(self.end) - self.cap + self.cap // 4
            for col in self._cols():
                del col[:drop]

    def _cols(self) -> tuple[array[float], array[float], array[int]]:
        return self.start, self.end, self.gen

    def between(self, t0: float, t1: float) -> tuple[array[float], array[float], array[int]]:
        """The pauses that ended within ``[t0, t1]`` (C-level slices)."""
        i, j = bisect_left(self.end, t0), bisect_right(self.end, t1)
        return self.start[i:j], self.end[i:j], self.gen[i:j]

    def overlap(self, t0: float, t1: float, generation: int) -> float:
        """Seconds of ``generation``'s pauses inside ``[t0, t1]``."""
        return self._overlap(t0, t1, generation)

    def overlap_all(self, t0: float, t1: float) -> float:
        """Seconds of pauses of any generation inside ``[t0, t1]``."""
        return self._overlap(t0, t1, None)

    def _overlap(self, t0: float, t1: float, generation: int | None) -> float:
        i, j = bisect_left(self.end, t0), bisect_right(self.start, t1)  # pauses never overlap: both columns sorted
        total = 0.0
        for k in range(i, j):
            if generation is None or self.gen[k] == generation:
                total += max(0.0, min(t1, self.end[k]) - max(t0, self.start[k]))
        return total


def _ascending(values: array[float]) -> bool:
    return all(map(float.__le__, values, values[1:]))
