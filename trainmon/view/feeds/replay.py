"""Replay a recording through the same screens: a playback clock over the recording's own monotonic times, and
the verdict re-evaluated at each recorded tick (with the live hysteresis) as playback or the cursor reaches it."""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator

from trainmon.diagnose.engine import VerdictTracker, evaluate
from trainmon.diagnose.live.change import Change
from trainmon.diagnose.rules import Thresholds
from trainmon.labels import status_run_part, status_text
from trainmon.numbers import is_nan
from trainmon.store.store import Store
from trainmon.view.feeds.protocol import VerdictPoint, clip_points
from trainmon.view.resample import run_values
from trainmon.view.timefmt import fmt_elapsed

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


class ReplayClock:
    """Playback position in recording time: moves at ``speed`` × real time while playing, stops at the end."""

    def __init__(
        self, start: float, end: float, speed: float = 1.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.start = start
        self.end = max(start, end)
        self.speed = speed
        self._clock = clock
        self._pos = start
        self._since: float | None = None  # real time when playback (re)started; None while paused
        self._lock = threading.Lock()

    @property
    def playing(self) -> bool:
        return self._since is not None and self.position() < self.end

    def position(self) -> float:
        with self._lock:
            if self._since is None:
                return self._pos
            return min(self.end, self._pos + (self._clock() - self._since) * self.speed)

    def play(self) -> None:
        pos = self.position()
        with self._lock:
            self._pos = pos
            self._since = self._clock()

    def pause(self) -> None:
        pos = self.position()
        with self._lock:
            self._pos = pos
            self._since = None

    def seek(self, t: float) -> None:
        with self._lock:
            self._pos = min(max(t, self.start), self.end)
            if self._since is not None:
                self._since = self._clock()

    def set_speed(self, speed: float) -> None:
        pos = self.position()
        with self._lock:
            self._pos = pos
            if self._since is not None:
                self._since = self._clock()
            self.speed = speed


class ReplayFeed:
    """A loaded recording as a :class:`~trainmon.view.feeds.protocol.Feed`."""

    live = False

    def __init__(
        self,
        store: Store,
        speed: float = 1.0,
        *,
        thresholds: Thresholds | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "",
    ) -> None:
        self.store = store
        self.name = name
        self.thresholds = thresholds or Thresholds()
        self.ticks = _tick_times(store)
        start = self.ticks[0] if self.ticks else (store.first_t or 0.0)
        end = self.ticks[-1] if self.ticks else (store.last_t or start)
        self.clock = ReplayClock(start, end, speed, clock=clock)
        self._tracker = VerdictTracker(hold_s=self.thresholds.hold_s, change_hold_s=self.thresholds.change_hold_s)
        self._points: list[VerdictPoint] = []
        self._done = 0  # ticks evaluated so far
        self._lock = threading.Lock()

    # ---- Feed

    def head(self) -> float | None:
        return self.clock.position()

    def span(self) -> tuple[float, float] | None:
        return self.clock.start, self.clock.end

    def interval(self) -> float:
        value = self.store.metadata.get("interval")
        return float(value) if isinstance(value, (int, float)) and value > 0 else 1.0

    def verdicts(self, t0: float, t1: float) -> list[VerdictPoint]:
        self.evaluate_until(t1)
        with self._lock:
            return clip_points(self._points, t0, t1)

    def evaluate_until(self, t: float) -> None:
        """Run the rules at every recorded tick up to ``t`` (once each, in order, as the live monitor did)."""
        with self._lock:
            stop = bisect_right(self.ticks, t)
            while self._done < stop:
                tick = self.ticks[self._done]
                changes: list[Change] = []
                findings = evaluate(self.store, tick, self.thresholds, changes=changes)
                verdict = self._tracker.update(tick, findings, changes)
                self._points.append(VerdictPoint(tick, verdict, findings))
                self._done += 1

    def gpu_error(self) -> str | None:
        error = self.store.metadata.get("gpu_error")
        return str(error) if error else None

    def extra_roles(self) -> dict[int, str | tuple[str, str]]:
        return {}

    def wall_offset(self) -> float | None:
        wall, mono = self.store.metadata.get("wall"), self.store.metadata.get("monotonic")
        if isinstance(wall, (int, float)) and isinstance(mono, (int, float)):
            return float(wall) - float(mono)
        return None

    def set_playing(self, playing: bool, at: float | None = None) -> None:
        if not playing:
            self.clock.pause()
            return
        if at is not None:
            self.clock.seek(at)
        if self.clock.position() >= self.clock.end:
            self.clock.seek(self.clock.start)  # play again from the top
        self.clock.play()

    def status_label(self, paused: bool, t_end: float) -> tuple[str, str]:
        where = f"{fmt_elapsed(t_end - self.clock.start)}/{fmt_elapsed(self.clock.end - self.clock.start)}"
        if not paused and self.clock.position() >= self.clock.end:
            return "END", where
        if paused or not self.clock.playing:
            return "PAUSED", where
        return "REPLAY", f"{self.clock.speed:g}× {where}"

    def dump(self, pid: int) -> list[str]:
        return [
            f"pid {pid}: stack dumps need the live process; this screen replays a recording",
            "run `trainmon` (or `trainmon --pid PID`) next to the training job to dump its stacks",
        ]

    def attach(self, pid: int) -> tuple[bool, str]:
        return False, f"pid {pid}: this screen replays a recording; run `trainmon attach {pid}` next to the job"

    def subscribe(self, callback: Callable[[], None]) -> bool:
        return False  # the playback clock moves on its own: the screen polls it

    def change_speed(self, direction: int) -> float:
        """The next speed of :data:`SPEEDS` up (``direction`` > 0) or down, staying at the last one at either end."""
        cur = self.clock.speed
        if direction > 0:
            nxt = next((s for s in SPEEDS if s > cur + 1e-9), SPEEDS[-1])
        else:
            nxt = next((s for s in reversed(SPEEDS) if s < cur - 1e-9), SPEEDS[0])
        self.clock.set_speed(nxt)
        return nxt


def _tick_times(store: Store) -> list[float]:
    """The monitor's tick times: every sample call writes cpu.busy; else the times of the fullest series."""
    with store.lock:
        series = store.series.get("cpu.busy")
        if series is None and store.series:
            series = max(store.series.values(), key=len)
        if series is not None and len(series):
            return list(series.times)
        if store.first_t is not None and store.last_t is not None:
            n = int(store.last_t - store.first_t) + 1
            return [store.first_t + k for k in range(n)]
    return []


def status_lines(feed: ReplayFeed, every_s: float = 1.0) -> Iterator[str]:
    """The recording as the live monitor's status lines, one per recorded second (for pipes and CI)."""
    offset = feed.wall_offset()
    last = -math.inf
    for t in feed.ticks:
        if t - last < every_s - 1e-6:
            continue
        last = t
        points = feed.verdicts(t, t)
        verdict = points[-1].verdict if points else None
        clock = time.strftime("%H:%M:%S", time.localtime(t + offset)) if offset is not None else ""
        parts = []
        with feed.store.lock:
            runs = [r for r in feed.store.runs.values() if r.first_seen <= t <= r.last_seen + 1.0]
            for run in runs[:4]:
                v = run_values(run, t)
                steps_s = 0.0 if is_nan(v.steps_s) else v.steps_s
                parts.append(status_run_part(run.label, steps_s, v.wait_pct / 100, v.steps_total))
        shown = (verdict.code, verdict.summary) if verdict is not None else None
        text = status_text(parts, shown, "no training process attached")
        yield f"+{fmt_elapsed(t - feed.clock.start)} {clock}  {text}"
