"""bucket_series against the plain definition, on random series and axes (it takes shortcuts for speed)."""

from __future__ import annotations

import math
import random
from bisect import bisect_right

from trainmon.numbers import NAN, known
from trainmon.store.series import Series
from trainmon.view.resample import bucket_series, make_edges


def _plain(series: Series, edges: list[float], hold_s: float, how: str) -> list[float]:
    """The definition: per bucket (edges[k], edges[k+1]], the mean/min/max of its measured samples, else the
    last sample at most hold_s before the bucket's end, else nan."""
    out = []
    for k in range(len(edges) - 1):
        inside = known(v for t, v in zip(series.times, series.values, strict=True) if edges[k] < t <= edges[k + 1])
        if inside:
            out.append({"max": max, "min": min}.get(how, lambda xs: sum(xs) / len(xs))(inside))
            continue
        j = bisect_right(series.times, edges[k + 1])
        out.append(series.values[j - 1] if j and edges[k + 1] - series.times[j - 1] <= hold_s else NAN)
    return out


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def test_bucket_series_is_the_plain_definition_on_random_series() -> None:
    rnd = random.Random(7)
    checked = 0
    for _ in range(400):
        s = Series(cap=None)
        t = rnd.uniform(0, 50)
        for _ in range(rnd.choice([0, 1, 3, 40, 300])):
            t += rnd.choice([0.05, 0.3, 1.0, 1.0, 1.0, 7.0])  # bursts, 1 s sampling and gaps
            s.append(t, rnd.choice([NAN, math.inf, rnd.uniform(0, 100), 42.0]))
        t0 = rnd.uniform(-20, 120)
        edges = make_edges(t0, t0 + rnd.choice([5.0, 60.0, 300.0]), rnd.choice([1, 7, 100, 200]))
        if rnd.random() < 0.2:  # an uneven axis too
            edges = sorted({*edges, *(rnd.uniform(edges[0], edges[-1]) for _ in range(5))})
        for how in ("mean", "min", "max"):
            hold = rnd.choice([0.0, 1.5, 3.0, 30.0])
            assert _same(bucket_series(s, edges, hold, how), _plain(s, edges, hold, how)), (edges[:3], how, hold)
            checked += 1
    assert checked == 1200
    assert bucket_series(None, [0.0, 1.0], 1.0) != [1.0]  # nan: no series
