"""The store: every run and every sampled series, on the monotonic clock.

All inputs arrive through the ``Ingest`` calls, live from the sources or replayed from a
recording, so the monitor, the recorder, the report and replay share one code path.
"""

from __future__ import annotations

import math
import threading
from array import array
from typing import Any, Protocol

from trainmon.metrics import SeriesIndex
from trainmon.protocol import events_payload, step_marks
from trainmon.store.run import Run
from trainmon.store.series import Series


class Ingest(Protocol):
    def hello(self, run_id: int, t: float, hello: dict[str, Any]) -> None: ...
    def events(self, run_id: int, t: float, records: array[int]) -> None: ...
    def info(self, run_id: int, t: float, info: dict[str, Any]) -> None: ...
    def closed(self, run_id: int, t: float, reason: str) -> None: ...
    def sample(self, t: float, values: dict[str, float]) -> None: ...
    def meta(self, t: float, meta: dict[str, Any]) -> None: ...


MAX_ENDED_RUNS = 32  # a live store forgets the oldest ended runs beyond this (a monitor left running for days)
SERIES_IDLE_S = 1200.0  # ... and series nobody has updated for this long (processes long gone; the TUI shows 15 min)
SERIES_KEEP_S = 960.0  # ... and samples older than this (the TUI's longest window is 15 min; a recording keeps all)
SERIES_SWEEP_S = 60.0
# Step rows (~80 B each with their running sums) all runs of a live store share: one run keeps up to its cap
# (200 000 steps), 16 fast ranks on one host 18 750 to 25 000 each (trimmed a quarter at a time), about the
# diagnosis window (20 s) at 1000 steps/s. Charts of such a run show its last ~20 s of steps; counts are never trimmed.
STEP_BUDGET = 400_000
MIN_RUN_STEPS = 20_000


class Store:
    """Thread-safe: writers and readers take ``lock``. ``cap=None`` keeps everything (reports);
    a capped store is bounded: rings per run and series, and old ended runs and idle series dropped."""

    def __init__(
        self, cap: int | None = 200_000, series_cap: int | None = 20_000, series_keep_s: float | None = SERIES_KEEP_S
    ) -> None:
        self.lock = threading.RLock()
        self.runs: dict[int, Run] = {}
        self.series: dict[str, Series] = {}
        self.metadata: dict[str, Any] = {}
        self.first_t: float | None = None
        self.last_t: float | None = None
        self._cap = cap
        self._series_cap = series_cap
        self._series_keep_s = series_keep_s if series_cap is not None else None
        self._seen: dict[int, _Seen] = {}  # per run: counts of what this store ingested (continuity)
        self._next_sweep = -math.inf
        self.series_version = 0  # changes whenever a series is added or dropped (for caches of series names)
        self._index: SeriesIndex | None = None
        self._index_version = -1

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
                # Steps are kept as long as samples: at 10 steps a second the step budget alone would take hours to
                # fill, and the screen's RSS would grow all that time for steps no window shows.
                run = self.runs[run_id] = Run(run_id, hello, t, self._cap, self._series_keep_s)
                self._share_step_budget()
            else:  # the same run reconnected (a restarted monitor or a dropped connection)
                run.revision += 1
                run.hello = hello
                run.connected = True
                run.ended = None
                run.connections += 1
                if hello.get("device"):
                    run.device = hello["device"]
            dropped = hello.get("dropped_records")
            if isinstance(dropped, int):
                run.dropped_records = max(run.dropped_records, dropped)
            run.steps.total += self._missed_steps(run, hello.get("counts"))

    def _missed_steps(self, run: Run, counts: Any) -> int:
        """Steps the agent had handed off before this connection that never reached this store.

        A restarted monitor (or one that missed a broken connection's last frame) continues the
        step count where the agent's own counts put it. See docs/protocol.md, "Step continuity".
        """
        if not isinstance(counts, dict):
            return 0
        seen = self._seen.setdefault(run.id, _Seen())
        step: int = counts.get("step", 0)
        opt: int = counts.get("opt", 0)
        groups: int = counts.get("groups", 0)
        # The counts tell which events mark the agent's steps: a store that meets the run mid-way
        # starts in that mode (and so never discards the carried-over steps as merely inferred).
        if step:
            run.mode = "explicit"
        elif opt and run.mode == "next":
            run.mode = "opt"
        if run.mode == "explicit":
            return max(0, step - seen.step)
        last = counts.get("last", 0)
        if groups > seen.groups or last != seen.last:
            run.resume_mid_step(last)
        if run.mode == "opt":
            return max(0, groups - seen.groups)
        waits: dict[int, int] = {int(lid): n for lid, n in (counts.get("wait") or {}).items()}
        if not waits:
            return 0
        train = max(waits, key=lambda lid: waits[lid])
        run.seed_train_loader(train, waits[train])
        return max(0, waits[train] - seen.waits.get(train, 0))

    def events(self, run_id: int, t: float, records: array[int]) -> None:
        with self.lock:
            self._touch(t)
            run = self.runs.get(run_id)
            if run is not None:
                run.apply_events(records)
                run.last_seen = max(run.last_seen, t)
                self._seen.setdefault(run_id, _Seen()).add(records)

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
                run.revision += 1
                run.connected = False
                if run.ended is None:
                    run.ended = reason
                run.last_seen = max(run.last_seen, t)
                if self._cap is not None:
                    self._forget_old_runs()

    def _forget_old_runs(self) -> None:
        ended = [run for run in self.runs.values() if not run.connected]
        ended.sort(key=lambda run: run.last_seen)
        for run in ended[: max(0, len(ended) - MAX_ENDED_RUNS)]:
            del self.runs[run.id]
            self._seen.pop(run.id, None)  # if it comes back, its hello's counts carry it on
        self._share_step_budget()

    def _share_step_budget(self) -> None:
        """Each run's step table gets an equal share of STEP_BUDGET (within [MIN_RUN_STEPS, cap]):
        a monitor's memory does not grow with the number of ranks it watches."""
        if self._cap is None:
            return
        share = max(MIN_RUN_STEPS, min(self._cap, STEP_BUDGET // max(1, len(self.runs))))
        for run in self.runs.values():
            run.steps.cap = share
            run.steps.trim()

    def sample(self, t: float, values: dict[str, float]) -> None:
        with self.lock:
            self._touch(t)
            for name, value in values.items():
                series = self.series.get(name)
                if series is None:
                    series = self.series[name] = Series(self._series_cap, self._series_keep_s)
                    self.series_version += 1
                series.append(t, float(value) if value is not None else math.nan)
            if self._series_cap is not None and t >= self._next_sweep:
                self._next_sweep = t + SERIES_SWEEP_S
                for name in [n for n, s in self.series.items() if s.times and s.times[-1] < t - SERIES_IDLE_S]:
                    del self.series[name]
                    self.series_version += 1

    def meta(self, t: float, meta: dict[str, Any]) -> None:
        with self.lock:
            self.metadata.update(meta)

    # ------------------------------------------------------------ queries

    def latest(self, name: str) -> float | None:
        series = self.series.get(name)
        last = series.last() if series is not None else None
        return last[1] if last is not None else None

    def last_known(self, name: str, t0: float, t1: float) -> float:
        """The latest measured value of ``name`` in [t0, t1], else nan."""
        series = self.series.get(name)
        return math.nan if series is None else series.last_known(t0, t1)

    def values_between(self, name: str, t0: float, t1: float) -> array[float]:
        series = self.series.get(name)
        if series is None:
            return array("d")
        return series.between(t0, t1)[1]

    def index(self) -> SeriesIndex:
        """The ids (GPUs, disks, pids, cores) the series belong to; rebuilt only when the set of series changes."""
        with self.lock:
            if self._index is None or self._index_version != self.series_version:
                self._index = SeriesIndex(self.series)
                self._index_version = self.series_version
            return self._index


class _Seen:
    """What one store ingested of a run, counted as the agent counts what it hands off."""

    __slots__ = ("groups", "last", "opt", "step", "waits")

    def __init__(self) -> None:
        self.step = self.opt = self.groups = self.last = 0
        self.waits: dict[int, int] = {}

    def add(self, records: array[int]) -> None:
        step, opt, groups, self.last, waits = step_marks(events_payload(records), self.last)
        self.step += step
        self.opt += opt
        self.groups += groups
        for lid, n in waits.items():
            self.waits[lid] = self.waits.get(lid, 0) + n
