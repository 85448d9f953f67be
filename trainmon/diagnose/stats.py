"""Statistics the diagnosis, the report and diff share: the one quantile they all use, and a mean of known values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from trainmon.numbers import known


def quantile(values: Sequence[float], q: float, *, ordered: bool = False, floor: float | None = None) -> float:
    """Linear-interpolated ``q`` quantile of ``values`` (nan when empty).

    ``ordered``: the values are sorted already, so they are read in place instead of sorted into a copy.
    ``floor``: the quantile of the sorted values each raised to at least ``floor`` (as ``max(floor, x)`` raises
    them). Raising keeps their order, so only the two values interpolated between are raised: the same float as
    raising every value and then taking the quantile, without a pass over them. Raise nan values before sorting
    (``max(0.0, nan)`` is 0.0, and sorting does not order nan)."""
    if not values:
        return math.nan
    if not ordered:
        values = sorted(values)
    pos = (len(values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    a, b = values[lo], values[hi]
    if floor is not None:
        a, b = max(floor, a), max(floor, b)
    return a + (b - a) * (pos - lo)


def mean(values: Iterable[float]) -> float:
    """Mean of the known (not nan) values; nan when there are none."""
    vals = known(values)
    return sum(vals) / len(vals) if vals else math.nan
