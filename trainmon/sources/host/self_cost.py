"""What watching costs: the monitor's own CPU and memory, sampled each tick like any other series.

CPU: the process's user and system time (``time.process_time()``, every thread: sources, diagnosis, the screen,
at nanosecond resolution), and apart from it the time of its reaped child processes (``os.times()``: py-spy, one
short-lived process a second per sampled training, counted once reaped, at most about a second late). Each is the
change over the last ``WINDOW_S`` seconds of ticks over the wall time they span, in % of one core as top shows a
process: steady enough to read, recent enough to follow a change. RSS is read from ``/proc/self/statm``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque

from trainmon.sources.base import Source

log = logging.getLogger("trainmon.self_cost")
WINDOW_S = 5.0
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / (1024 * 1024) if hasattr(os, "sysconf") else 4096 / (1024 * 1024)


def rss_mb(statm: str = "/proc/self/statm") -> float:
    try:
        with open(statm, "rb") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return math.nan


class SelfCostSource(Source):
    name = "self"
    logger = log

    def __init__(self) -> None:
        super().__init__()
        self._reads: deque[tuple[float, float, float]] = deque([self._read()])

    @staticmethod
    def _read() -> tuple[float, float, float]:
        t = os.times()
        return time.monotonic(), time.process_time(), t.children_user + t.children_system

    def sample(self, now: float) -> dict[str, float]:
        reads = self._reads
        reads.append(self._read())
        while len(reads) > 2 and reads[-1][0] - reads[1][0] >= WINDOW_S:
            reads.popleft()
        (wall0, own0, kids0), (wall, own, kids) = reads[0], reads[-1]
        out = {"self.rss_mb": rss_mb()}
        if wall - wall0 >= 0.05:
            out["self.cpu_pct"] = 100.0 * (own - own0) / (wall - wall0)
            out["self.helpers_cpu_pct"] = 100.0 * (kids - kids0) / (wall - wall0)
        return out
