"""Numeric helpers every layer shares: NaN stands for "not measured", and reports write it as null."""

from __future__ import annotations

import math
from collections.abc import Iterable

NAN = math.nan


def is_nan(x: float | None) -> bool:
    """True for NaN and for None (a value nobody measured)."""
    return x is None or x != x


def finite(x: float | None) -> bool:
    """A real number: not None, NaN or ±inf."""
    return x is not None and not math.isnan(x) and not math.isinf(x)


def known(values: Iterable[float]) -> list[float]:
    """The values that were measured (NaN dropped), as a list. Fast on long arrays: one comprehension."""
    return [v for v in values if v == v]


def rounded(x: float | None, digits: int = 2) -> float | None:
    """``x`` rounded for a report, or None where it is not a finite number."""
    if x is None or not finite(x):
        return None
    return round(x, digits)
