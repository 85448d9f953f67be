"""Array-backed time series on the monotonic clock, bounded by age and count."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator


class Series:
    """Samples ``(t, value)`` in time order; ``nan`` marks a value that was not available."""

    __slots__ = ("cap", "times", "values")

    def __init__(self, cap: int | None = 20_000) -> None:
        self.cap = cap
        self.times = array("d")
        self.values = array("d")

    def append(self, t: float, value: float) -> None:
        self.times.append(t)
        self.values.append(value)
        if self.cap is not None and len(self.times) > self.cap:
            drop = len(self.times) - self.cap + self.cap // 4
            del self.times[:drop]
            del self.values[:drop]

    def __len__(self) -> int:
        return len(self.times)

    def last(self) -> tuple[float, float] | None:
        if not self.times:
            return None
        return self.times[-1], self.values[-1]

    def between(self, t0: float, t1: float) -> tuple[array, array]:
        i = bisect_left(self.times, t0)
        j = bisect_right(self.times, t1)
        return self.times[i:j], self.values[i:j]

    def at(self, t: float) -> float | None:
        """The latest value at or before ``t``."""
        i = bisect_right(self.times, t)
        return self.values[i - 1] if i else None

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.times, self.values, strict=True)
