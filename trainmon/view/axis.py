"""The time axis' labels: tick marks along the plots and the clock shown at the cursor."""

from __future__ import annotations

import math
import time

from trainmon.view.feeds.protocol import Feed
from trainmon.view.timefmt import fmt_elapsed, fmt_rel


def axis_ticks(feed: Feed, t0: float, t1: float, cols: int, window_s: float) -> list[tuple[int, str]]:
    """Tick labels: seconds before the right edge live; time since the recording started in replay."""
    step = {60.0: 15.0, 300.0: 60.0, 900.0: 180.0}.get(window_s, window_s / 4)
    origin = None if feed.live else (feed.span() or (t0, t1))[0]
    ticks = []
    if origin is None:
        k = 0
        while k * step <= window_s + 1e-9:
            t = t1 - k * step
            col = _col(t, t0, window_s / cols)
            ticks.append((max(0, min(cols - 1, col)), "now" if k == 0 else fmt_rel(-k * step)))
            k += 1
    else:
        t = max(0, math.ceil((t0 - origin) / step)) * step + origin
        while t <= t1 + 1e-9:
            col = _col(t, t0, window_s / cols)
            if 0 <= col < cols:
                ticks.append((col, fmt_elapsed(t - origin)))
            t += step
    return sorted(ticks)


def _col(t: float, t0: float, col_dt: float) -> int:
    """The column that holds instant ``t``: column c covers (t0 + c·dt, t0 + (c + 1)·dt]."""
    return math.ceil((t - t0) / col_dt - 1e-9) - 1


def clock_label(t: float, offset: float | None, feed: Feed, t_end: float) -> str:
    parts = []
    if offset is not None:
        parts.append(time.strftime("%H:%M:%S", time.localtime(t + offset)))
    if feed.live:
        if t < t_end - 0.5:
            parts.append(fmt_rel(t - t_end))
    else:
        span = feed.span()
        if span is not None:
            parts.append("+" + fmt_elapsed(t - span[0]))
    return " ".join(parts)
