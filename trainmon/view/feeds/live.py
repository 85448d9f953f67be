"""The live Monitor as a :class:`~trainmon.view.feeds.protocol.Feed`, and the part of the Monitor it relies on."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from trainmon.diagnose.findings import Finding
from trainmon.store.store import Store
from trainmon.view.feeds.protocol import VerdictPoint, clip_points


class SnapshotLike(Protocol):
    """One Monitor tick, as far as the screen reads it."""

    @property
    def t(self) -> float: ...

    @property
    def verdict(self) -> Finding | None: ...

    @property
    def findings(self) -> Sequence[Finding]: ...


class GpuLike(Protocol):
    @property
    def error(self) -> str | None:
        """Why the GPU source is unavailable, in one line; None while it works."""


class Listeners(Protocol):
    """Where the Monitor keeps the callbacks it calls after every tick."""

    def append(self, listener: Callable[[SnapshotLike], None], /) -> None: ...

    def remove(self, listener: Callable[[SnapshotLike], None], /) -> None: ...


class MonitorLike(Protocol):
    """What LiveFeed uses of the headless Monitor (``trainmon.monitor.Monitor``), and nothing more."""

    @property
    def store(self) -> Store: ...

    @property
    def interval(self) -> float:
        """Seconds between ticks."""

    @property
    def gpu(self) -> GpuLike | None:
        """The GPU source; None when the Monitor samples no GPU."""

    @property
    def extra_pids(self) -> Mapping[int, str]:
        """pid → role of the processes tracked besides the agents' runs."""

    @property
    def last_snapshot(self) -> SnapshotLike | None: ...

    @property
    def listeners(self) -> Listeners: ...

    def dump_stacks(self, pid: int) -> list[str]:
        """Readable Python stacks of ``pid`` now (or why there are none)."""

    def found_roles(self) -> dict[int, tuple[str, str]]:
        """pid → (role, name) of the trainings found running on the host (mains, ranks, workers)."""

    def attach(self, pid: int) -> tuple[bool, str]:
        """Inject the agent into the running process ``pid``: whether it reports now, and one line."""


class LiveFeed:
    """The live Monitor as a Feed; it keeps the verdict of every tick for the history strip and the cursor."""

    live = True

    def __init__(
        self, monitor: MonitorLike, keep_s: float = 1200.0, dumper: Callable[[int], list[str]] | None = None
    ) -> None:
        self.monitor = monitor
        self.store: Store = monitor.store
        self.keep_s = keep_s
        self._dumper = dumper
        self._lock = threading.Lock()
        self._points: deque[VerdictPoint] = deque()
        self._subscribers: list[Callable[[], None]] = []
        self._offset = time.time() - time.monotonic()
        if monitor.last_snapshot is not None:
            self.on_snapshot(monitor.last_snapshot)
        monitor.listeners.append(self.on_snapshot)

    def on_snapshot(self, snap: SnapshotLike) -> None:
        with self._lock:
            self._points.append(VerdictPoint(snap.t, snap.verdict, list(snap.findings)))
            while self._points and self._points[0].t < snap.t - self.keep_s:
                self._points.popleft()
        for callback in list(self._subscribers):
            callback()

    def subscribe(self, callback: Callable[[], None]) -> bool:
        self._subscribers.append(callback)
        return True

    def head(self) -> float | None:
        with self._lock:
            if self._points:
                return self._points[-1].t
        return self.store.last_t

    def span(self) -> tuple[float, float] | None:
        head = self.head()
        if head is None:
            return None
        with self._lock:
            first = self._points[0].t if self._points else head
        lo = self.store.first_t if self.store.first_t is not None else first
        return max(lo, head - self.keep_s), head

    def interval(self) -> float:
        return float(self.monitor.interval)

    def verdicts(self, t0: float, t1: float) -> list[VerdictPoint]:
        with self._lock:
            points = list(self._points)
        return clip_points(points, t0, t1)

    def gpu_error(self) -> str | None:
        gpu = self.monitor.gpu
        if gpu is not None:
            return gpu.error
        return self.store.metadata.get("gpu_error")

    def extra_roles(self) -> dict[int, str | tuple[str, str]]:
        # Trainings found running count too: they are listed before their run is made.
        roles: dict[int, str | tuple[str, str]] = dict(self.monitor.found_roles())
        roles.update(self.monitor.extra_pids)
        return roles

    def wall_offset(self) -> float | None:
        return self._offset

    def set_playing(self, playing: bool, at: float | None = None) -> None:
        return None  # live data never stops; only the view freezes

    def change_speed(self, direction: int) -> float | None:
        return None  # live data arrives at the speed of time

    def status_label(self, paused: bool, t_end: float) -> tuple[str, str]:
        return ("PAUSED" if paused else "LIVE"), ""

    def dump(self, pid: int) -> list[str]:
        if self._dumper is not None:
            return self._dumper(pid)
        return self.monitor.dump_stacks(pid)

    def attach(self, pid: int) -> tuple[bool, str]:
        return self.monitor.attach(pid)

    def close(self) -> None:
        self._subscribers.clear()
        try:
            self.monitor.listeners.remove(self.on_snapshot)
        except ValueError:
            pass
