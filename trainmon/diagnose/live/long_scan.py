"""The incremental scan for a step table's long steps: the candidates every window's ``long_steps`` reads."""

from __future__ import annotations

import itertools
import math
import weakref
from bisect import bisect_left

from trainmon.store.steps import Steps

LONG_MARGIN = 0.8  # a rescan keeps steps over 0.8× the limit, so a median that drops a little needs no rescan
LONG_SLACK = 0.6  # ... and rescans once the limit has risen so far that candidates over 0.6× it would pile up
# Per step table: (its clears, threshold, rows scanned, candidates). Weakly keyed: a table the store forgets goes.
# A cache, not state: every result equals a scan from scratch (tests/unit/test_diagnose_fast_paths.py).
_SCANS: weakref.WeakKeyDictionary[Steps, tuple[int, float, int, list[tuple[int, float]]]] = weakref.WeakKeyDictionary()


def long_candidates(steps: Steps, limit: float) -> list[tuple[int, float]]:
    """(global index, duration) of every step in the table longer than a threshold at most ``limit``.

    Kept per table (weakly keyed; started again when the table is cleared) and extended with the steps added since
    the last call, so a window that slides by a second looks at a second of new steps, not at all of them.
    Rescanned when the threshold is too far below ``limit`` (candidates would pile up) or above it."""
    offset = steps.total - len(steps)
    cache = _SCANS.get(steps)
    if (
        cache is None
        or cache[0] != steps.clears
        or not (LONG_SLACK * limit <= cache[1] <= limit)
        or cache[2] > steps.total
    ):
        rows: list[tuple[int, float]] = []
        threshold, scanned = LONG_MARGIN * limit, offset
    else:
        _, threshold, scanned, rows = cache
        if rows and rows[0][0] < offset:  # trimmed off the table
            rows = rows[bisect_left(rows, (offset, -math.inf)) :]
    scanned = max(scanned, offset)
    new = steps.dur[scanned - offset :]
    if new and (max(new) > threshold or not math.isfinite(sum(new))):  # max() skips a nan only after the first
        over = bytes(map(threshold.__lt__, new))
        if over.count(1):
            rows.extend(
                zip(itertools.compress(range(scanned, steps.total), over), itertools.compress(new, over), strict=True)
            )
    _SCANS[steps] = (steps.clears, threshold, steps.total, rows)
    return rows
