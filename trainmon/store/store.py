"""The store: every run and every sampled series, on the monotonic clock.

All inputs arrive through the ``Ingest`` calls, live from the sources or replayed from a
recording, so the monitor, the recorder, the report and replay share one code path.
"""

from __future__ import annotations

import math
import threading
from array import array
from typing import Any, Protocol

from trainmon.store.run import Run
from trainmon.store.series import Series


class Ingest(Protocol):
    def hello(self, run_id: int, t: float, hello: dict[str, Any]) -> None: ...
    def events(self, run_id: int, t: float, records: array) -> None: ...
    def info(self, run_id: int, t: float, info: dict[str, Any]) -> None: ...
    def closed(self, run_id: int, t: float, reason: str) -> None: ...
    def sample(self, t: float, values: dict[str, float]) -> None: ...
    def meta(self, t: float, meta: dict[str, Any]) -> None: ...


class Store:
    """Thread-safe: writers and readers take ``lock``. ``cap=None`` keeps everything (reports)."""

    def __init__(self, cap: int | None = 200_000, series_cap: int | None = 20_000) -> None:
        self.lock = threading.RLock()
        self.runs: dict[int, Run] = {}
        self.series: dict[str, Series] = {}
        self.metadata: dict[str, Any] = {}
        self.first_t: float | None = None
        self.last_t: float | None = None
        self._cap = cap
        self._series_cap = series_cap

    def _touch(self, t: float) -> None:
        if self.first_t is None or t < self.first_t:
            self.first_t = t
        if self.last_t is None or t > self.last_t:
            self.last_t = t

    # ------------------------------------------------------------ Ingest

    def hello(self, run_id: int, t: float, hello: dict[str, Any]) -> None:
        with self.lock:
            self._touch(t)
            run = self.runs.get(run_id)
            if run is None:
                self.runs[run_id] = Run(run_id, hello, t, self._cap)
            else:  # the same run reconnected (a restarted monitor or a dropped connection)
                run.hello = hello
                run.connected = True
                run.ended = None
                run.connections += 1
                if hello.get("device"):
                    run.device = hello["device"]

    def events(self, run_id: int, t: float, records: array) -> None:
        with self.lock:
            self._touch(t)
            run = self.runs.get(run_id)
            if run is not None:
                run.apply_events(records)
                run.last_seen = max(run.last_seen, t)

    def info(self, run_id: int, t: float, info: dict[str, Any]) -> None:
        with self.lock:
            self._touch(t)
            run = self.runs.get(run_id)
            if run is not None:
                run.apply_info(info)

    def closed(self, run_id: int, t: float, reason: str) -> None:
        with self.lock:
            self._touch(t)
            run = self.runs.get(run_id)
            if run is not None:
                run.connected = False
                if run.ended is None:
                    run.ended = reason
                run.last_seen = max(run.last_seen, t)

    def sample(self, t: float, values: dict[str, float]) -> None:
        with self.lock:
            self._touch(t)
            for name, value in values.items():
                series = self.series.get(name)
                if series is None:
                    series = self.series[name] = Series(self._series_cap)
                series.append(t, float(value) if value is not None else math.nan)

    def meta(self, t: float, meta: dict[str, Any]) -> None:
        with self.lock:
            self.metadata.update(meta)

    # ------------------------------------------------------------ queries

    def latest(self, name: str) -> float | None:
        series = self.series.get(name)
        last = series.last() if series is not None else None
        return last[1] if last is not None else None

    def values_between(self, name: str, t0: float, t1: float) -> array:
        series = self.series.get(name)
        if series is None:
            return array("d")
        return series.between(t0, t1)[1]

    def series_names(self, prefix: str) -> list[str]:
        return sorted(n for n in self.series if n.startswith(prefix))
