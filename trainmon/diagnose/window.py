"""Figures over a time window: what every rule reads. Pure functions of the store."""

from __future__ import annotations

import math
import operator
from array import array
from dataclasses import dataclass, field
from typing import Any

from trainmon.store.run import Run
from trainmon.store.store import Store


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of unsorted values (nan when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values) -> float:
    vals = [v for v in values if v == v]
    return sum(vals) / len(vals) if vals else math.nan


@dataclass
class RunWindow:
    run: Run
    t0: float
    t1: float
    steps: int = 0
    warm_steps: int = 0
    step_time_s: float = 0.0
    wait_s: float = 0.0
    samples: int = 0
    step_p50_s: float = math.nan
    step_p95_s: float = math.nan
    step_max_s: float = math.nan
    checkpoint_s: float = 0.0
    checkpoints: int = 0
    last_end: float = math.nan
    exposed_s: float = 0.0
    exposed_steps: int = 0
    durations: list[float] = field(default_factory=list)
    step_spans: list[tuple[float, float]] = field(default_factory=list)
    step_waits: list[float] = field(default_factory=list)
    sorted_durations: list[float] = field(default_factory=list)
    _slices: tuple | None = None  # (start, end, wait) arrays when the spans were not built per step

    def spans_and_waits(self) -> tuple[list[tuple[float, float]], list[float]]:
        """Each steady step's (start, end) and wait, built on demand (only the periodic rule needs them)."""
        if self._slices is not None and not self.step_spans:
            start, end, wait = self._slices
            self.step_spans = list(zip(start, end, strict=True))
            self.step_waits = wait.tolist()
        return self.step_spans, self.step_waits
    checkpoint_spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def exposed_fraction(self) -> float:
        """GPU idle exposed by data waits / step time (CUDA only; nan where not measured)."""
        if not self.exposed_steps or self.step_time_s <= 0:
            return math.nan
        return self.exposed_s / self.step_time_s

    @property
    def starving_fraction(self) -> float:
        """The wait that starved the accelerator: the exposed share where measured, else the whole wait."""
        exposed = self.exposed_fraction
        return exposed if exposed == exposed else self.wait_fraction

    def overlaps_checkpoint(self, s: float, e: float) -> bool:
        return any(c0 < e and c1 > s for c0, c1 in self.checkpoint_spans)

    def phase_names_in(self, spans: list[tuple[float, float]]) -> set[str]:
        return {name for p0, p1, name in self.run.phases for s, e in spans if p0 < e and p1 > s}

    def eval_in(self, spans: list[tuple[float, float]]) -> bool:
        return any(s <= t <= e for t, lid in self.run.iter_starts for s, e in spans
                   if self.run.train_loader() is None or lid != self.run.train_loader().id)

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / self.step_time_s if self.step_time_s > 0 else math.nan

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.step_time_s if self.step_time_s > 0 and self.samples else math.nan

    @property
    def span_s(self) -> float:
        return self.t1 - self.t0

    loader_id: int | None = None

    @property
    def loader(self) -> dict[str, Any]:
        """Config of the loader feeding this window's steps."""
        info = self.run.loaders.get(self.loader_id) if self.loader_id else self.run.train_loader()
        return dict(info.config) if info is not None else {}


_MEMO: dict[tuple, RunWindow] = {}
_MEMO_MAX = 64
_NAN8 = array("d", [math.nan]).tobytes()


def run_window(run: Run, t0: float, t1: float, min_steps: int = 20, max_lookback_s: float = 120.0) -> RunWindow:
    """Steady-state steps that ended in [t0, t1]; reaches back further for at least ``min_steps``.

    Memoised per (run, steps so far, window): the engine and the status line ask for the same window
    every tick. Windows are read-only for their users.
    """
    key = (id(run), run.steps.total, len(run.checkpoints), t0, t1, min_steps, max_lookback_s)
    hit = _MEMO.get(key)
    if hit is not None and hit.run is run:
        return hit
    w = _compute_window(run, t0, t1, min_steps, max_lookback_s)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = w
    return w


def _compute_window(run: Run, t0: float, t1: float, min_steps: int, max_lookback_s: float) -> RunWindow:
    steps = run.steps
    i, j = steps.index_range(t0, t1)
    if j - i < min_steps:
        lo, _ = steps.index_range(t1 - max_lookback_s, t1)
        k = j
        count = 0
        while k > lo and count < min_steps:
            k -= 1
            if not steps.warm[k]:
                count += 1
        i = min(i, k)
    w = RunWindow(run, steps.start[i] if j > i else t0, t1)
    # Judge the loader feeding the latest steps: after a switch, the old loader's steps are history.
    current = steps.loader[j - 1] if j > i else None
    w.loader_id = current or None
    n = j - i
    if n and steps.loader[i:j].count(current) == n and steps.warm[i:j].count(0) == n:
        _fill_fast(w, steps, i, j)
    else:
        _fill_each(w, steps, i, j, current)
    if w.durations:
        ordered = w.sorted_durations = sorted(w.durations)
        w.step_p50_s = _sorted_quantile(ordered, 0.5)
        w.step_p95_s = _sorted_quantile(ordered, 0.95)
        w.step_max_s = ordered[-1]
    for c0, c1 in run.checkpoints:
        overlap = min(c1, t1) - max(c0, w.t0)
        if overlap > 0:
            w.checkpoint_s += overlap
            w.checkpoints += 1
            w.checkpoint_spans.append((c0, c1))
    return w


def _fill_fast(w: RunWindow, steps, i: int, j: int) -> None:
    """The common case (one loader, no warm-up inside): C-level slices and sums, no per-step Python."""
    start, end, wait = steps.start[i:j], steps.end[i:j], steps.wait[i:j]
    w.durations = list(map(operator.sub, end, start))
    w.steps = j - i
    w.step_time_s = math.fsum(w.durations)
    w.wait_s = math.fsum(wait)
    w.samples = sum(steps.samples[i:j])
    w._slices = (start, end, wait)
    w.last_end = end[-1]
    exposed = steps.exposed[i:j]
    if exposed.tobytes() != _NAN8 * (j - i):
        measured = [x for x in exposed if x == x]
        w.exposed_s = math.fsum(measured)
        w.exposed_steps = len(measured)


def _fill_each(w: RunWindow, steps, i: int, j: int, current: int | None) -> None:
    for k in range(i, j):
        if current is not None and steps.loader[k] != current:
            continue
        if steps.warm[k]:
            w.warm_steps += 1
            continue
        d = steps.end[k] - steps.start[k]
        w.steps += 1
        w.step_time_s += d
        w.wait_s += steps.wait[k]
        w.samples += steps.samples[k]
        w.durations.append(d)
        w.step_spans.append((steps.start[k], steps.end[k]))
        w.step_waits.append(steps.wait[k])
        w.last_end = steps.end[k]
        x = steps.exposed[k]
        if x == x:
            w.exposed_s += x
            w.exposed_steps += 1


def _sorted_quantile(ordered: list[float], q: float) -> float:
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class HostWindow:
    cpu_busy: float = math.nan
    cpu_iowait: float = math.nan
    cores: int = 1
    mem_used_pct_max: float = math.nan
    swap_used_mb_max: float = math.nan
    swap_growth_mb: float = math.nan


def host_window(store: Store, t0: float, t1: float) -> HostWindow:
    h = HostWindow()
    h.cpu_busy = mean(store.values_between("cpu.busy", t0, t1))
    h.cpu_iowait = mean(store.values_between("cpu.iowait", t0, t1))
    cores = store.latest("cpu.cores")
    h.cores = int(cores) if cores and cores == cores else 1
    mem = [v for v in store.values_between("mem.used_pct", t0, t1) if v == v]
    h.mem_used_pct_max = max(mem) if mem else math.nan
    swap = [v for v in store.values_between("swap.used_mb", t0, t1) if v == v]
    if swap:
        h.swap_used_mb_max = max(swap)
        h.swap_growth_mb = swap[-1] - swap[0]
    return h
