"""Is a change beyond run-to-run noise? A seeded block bootstrap, standard library only.

Consecutive steps (and consecutive samples of a series) are not independent: a slow second makes several slow
steps. So each side is cut into time windows (blocks) and the bootstrap draws whole windows with replacement,
both sides independently, ``resamples`` times; the change's interval is the percentile interval of the
resampled changes. A change is beyond noise when that interval excludes zero.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from trainmon.diagnose.stats import quantile

RESAMPLES = 1000
CONFIDENCE = 0.95
SEED = 0
MAX_POOL = 4000  # values a quantile is taken over per resample (windows are thinned alike beyond this)

Values = list[float]  # a window's values, for a quantile
Sums = tuple[float, ...]  # a window's sums, for a ratio of sums
W = TypeVar("W")


@dataclass(frozen=True)
class MetricChange:
    a: float | None
    b: float | None
    change: float | None  # b - a, or (b - a) / a for a relative figure
    low: float | None  # the interval of ``change``
    high: float | None

    @property
    def beyond_noise(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _percentiles(values: list[float], confidence: float) -> tuple[float | None, float | None]:
    values = [v for v in values if math.isfinite(v)]
    if len(values) < 10:
        return None, None
    tail = (1 - confidence) / 2
    return quantile(values, tail), quantile(values, 1 - tail)


def compare(
    a: Sequence[W],
    b: Sequence[W],
    stat: Callable[[Sequence[W]], float],
    *,
    relative: bool,
    draw: tuple[Sequence[W], Sequence[W]] | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> MetricChange:
    """``stat`` on both sides' windows, the change, and its bootstrap interval (None with under 2 windows a side).
    ``draw``: the windows to resample where they differ from the ones measured (thinned, see ``thin``)."""
    va, vb = stat(a), stat(b)
    point = _change(va, vb, relative)
    low = high = None
    da, db = draw if draw is not None else (a, b)
    if len(da) >= 2 and len(db) >= 2 and point is not None:
        rng = random.Random(seed)
        drawn = [
            _change(stat(rng.choices(da, k=len(da))), stat(rng.choices(db, k=len(db))), relative)
            for _ in range(resamples)
        ]
        low, high = _percentiles([d for d in drawn if d is not None], confidence)
    return MetricChange(_finite(va), _finite(vb), point, low, high)


def _change(a: float, b: float, relative: bool) -> float | None:
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    if relative:
        return (b - a) / a if a != 0 else None
    return b - a


def quantile_of(q: float) -> Callable[[Sequence[Values]], float]:
    """The ``q`` quantile of the pooled values of the windows given."""

    def stat(windows: Sequence[Values]) -> float:
        pooled: list[float] = []
        for w in windows:
            pooled.extend(w)
        return quantile(pooled, q)

    return stat


def ratio_of(fn: Callable[[Sums], float]) -> Callable[[Sequence[Sums]], float]:
    """``fn`` of the windows' sums, added component by component."""

    def stat(windows: Sequence[Sums]) -> float:
        if not windows:
            return math.nan
        return fn(tuple(math.fsum(col) for col in zip(*windows, strict=True)))

    return stat


def thin(windows: list[Values], cap: int = MAX_POOL) -> list[Values]:
    """Every k-th value of each window, k chosen so all together hold about ``cap``: a resample's quantile then
    costs the same on a long recording as on a short one."""
    total = sum(len(w) for w in windows)
    k = max(1, math.ceil(total / cap))
    return windows if k == 1 else [w[::k] for w in windows if w[::k]]
