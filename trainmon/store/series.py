"""Array-backed time series on the monotonic clock, bounded by age and count."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator


class Series:
    """Samples ``(t, value)`` in time order; ``nan`` marks a value that was not available.

    Bounded by count (``cap``) and by age (``keep_s``: samples older than that behind the newest go,
    a fifth at a time so the cost is amortised); ``None`` keeps everything."""

    __slots__ = ("cap", "keep_s", "times", "values")

    def __init__(self, cap: int | None = 20_000, keep_s: float | None = None) -> None:
        self.cap = cap
        self.keep_s = keep_s
        self.times = array("d")
        self.values = array("d")

    def append(self, t: float, value: float) -> None:
        times = self.times
        times.append(t)
        self.values.append(value)
        if self.cap is not None and len(times) > self.cap:
            drop = len(times) - self.cap + self.cap // 4
            del times[:drop]
            del self.values[:drop]
        if self.keep_s is not None and t - times[0] > self.keep_s * 1.2:
            drop = bisect_left(times, t - self.keep_s)
            del times[:drop]
            del self.values[:drop]

    def __len__(self) -> int:
        return len(self.times)

    def last(self) -> tuple[float, float] | None:
        if not self.times:
            return None
        return self.times[-1], self.values[-1]

    def between(self, t0: float, t1: float) -> tuple[array[float], array[float]]:
        i = bisect_left(self.times, t0)
        j = bisect_right(self.times, t1)
        return self.times[i:j], self.values[i:j]

    def last_known(self, t0: float, t1: float) -> float:
        """The latest value in [t0, t1] that is not nan; nan where there is none. Walks back from ``t1`` (a few
        samples, not the window)."""
        times, values = self.times, self.values
        k = bisect_right(times, t1) - 1
        while k >= 0 and times[k] >= t0:
            v = values[k]
            if v == v:
                return v
            k -= 1
        return float("nan")

    def at(self, t: float) -> float | None:
        """The latest value at or before ``t``."""
        i = bisect_right(self.times, t)
        return self.values[i - 1] if i else None

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.times, self.values, strict=True)
