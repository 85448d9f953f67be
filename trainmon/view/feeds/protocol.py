"""What the screen reads its data from: a :class:`Feed` (the live Monitor or a replayed recording), and the
verdict timeline both keep."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from trainmon.diagnose.findings import Finding
from trainmon.store.store import Store


@dataclass
class VerdictPoint:
    """The verdict shown at ``t`` (after hysteresis) and every finding that held then."""

    t: float
    verdict: Finding | None
    findings: list[Finding]


def clip_points(points: Sequence[VerdictPoint], t0: float, t1: float) -> list[VerdictPoint]:
    """The points with ``t0 <= t <= t1``, and the last one before ``t0`` (the verdict that held at ``t0``)."""
    times = [p.t for p in points]
    i = max(0, bisect_left(times, t0) - 1)
    j = bisect_right(times, t1)
    return list(points[i:j])


class Feed(Protocol):
    store: Store
    live: bool

    def head(self) -> float | None:
        """The newest instant there is data for (live: the last tick; replay: the playback clock)."""

    def span(self) -> tuple[float, float] | None:
        """The range the cursor may visit."""

    def interval(self) -> float: ...

    def verdicts(self, t0: float, t1: float) -> list[VerdictPoint]:
        """Verdict points with ``t0 <= t <= t1`` (and the last one before ``t0``), oldest first."""

    def gpu_error(self) -> str | None: ...

    def extra_roles(self) -> dict[int, str | tuple[str, str]]: ...  # pid → role, or (role, name)

    def wall_offset(self) -> float | None:
        """wall clock minus monotonic clock, to print times of day; None when unknown."""

    def set_playing(self, playing: bool, at: float | None = None) -> None: ...

    def change_speed(self, direction: int) -> float | None:
        """One playback speed up (``direction`` > 0) or down: the new speed, or None where the feed plays at the
        speed of time (live)."""

    def status_label(self, paused: bool, t_end: float) -> tuple[str, str]:
        """The state in one word (LIVE, PAUSED, REPLAY, END) and a detail ("2× 0:12/0:30" in replay)."""

    def dump(self, pid: int) -> list[str]:
        """A stack dump of ``pid`` as lines (or one line saying why not). Slow: call off the UI thread."""

    def attach(self, pid: int) -> tuple[bool, str]:
        """Inject the agent into the running process ``pid`` (``trainmon attach``): whether it reports now, and
        one line saying so or why not. Slow (seconds): call off the UI thread."""

    def subscribe(self, callback: Callable[[], None]) -> bool:
        """Call ``callback`` (on any thread) when new data arrives; False when the feed must be polled instead."""
