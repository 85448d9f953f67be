"""What a diff resamples, read from a replayed store: each run's steady steps and the host's sampled series,
cut into time windows (``trainmon.compare.bootstrap`` draws whole windows)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from trainmon.compare.bootstrap import Sums, Values
from trainmon.metrics import DISK, GPU
from trainmon.store.run import Run
from trainmon.store.store import Store

WINDOW_S = 2.0
MIN_WINDOWS = 8  # a short recording gets narrower windows rather than too few to resample


def window_width(t0: float, t1: float) -> float:
    span = max(0.0, t1 - t0)
    return WINDOW_S if span >= WINDOW_S * MIN_WINDOWS else max(span / MIN_WINDOWS, 1e-3)


@dataclass
class StepWindows:
    """One run's steady steps: step times (ms) per window, and per window the sums
    (step time, data wait, samples, exposed GPU idle, measured wait) that the ratio figures divide."""

    t0: float
    t1: float
    durations_ms: list[Values]
    sums: list[Sums]


def step_windows(run: Run) -> StepWindows:
    steps = run.steps
    starts = [k for k in range(len(steps)) if not steps.warm[k]]
    if not starts:
        return StepWindows(math.nan, math.nan, [], [])
    t0, t1 = steps.start[starts[0]], steps.end[starts[-1]]
    width = window_width(t0, t1)
    durations: dict[int, Values] = {}
    sums: dict[int, list[float]] = {}
    for k in starts:
        w = int((steps.start[k] - t0) / width)
        d = steps.end[k] - steps.start[k]
        durations.setdefault(w, []).append(d * 1e3)
        s = sums.setdefault(w, [0.0, 0.0, 0.0, 0.0, 0.0])
        s[0] += d
        s[1] += steps.wait[k]
        s[2] += steps.samples[k]
        if steps.exposed[k] == steps.exposed[k]:  # measured (CUDA)
            s[3] += steps.exposed[k]
            s[4] += steps.exposed_wait[k]
    order = sorted(durations)
    return StepWindows(t0, t1, [durations[w] for w in order], [tuple(sums[w]) for w in order])


def series_windows(store: Store, name: str, t0: float, t1: float) -> list[Values]:
    """A sampled series over ``[t0, t1]`` cut into windows (NaN samples skipped)."""
    series = store.series.get(name)
    if series is None or not (t1 > t0):
        return []
    times, values = series.between(t0, t1)
    width = window_width(t0, t1)
    out: dict[int, Values] = {}
    for t, v in zip(times, values, strict=True):
        if v == v:
            out.setdefault(int((t - t0) / width), []).append(v)
    return [out[w] for w in sorted(out)]


def system_series(store: Store) -> dict[str, str]:
    """The host figures a diff compares, by the label it shows them under → series name."""
    index = store.index()
    out = {"CPU busy %": "cpu.busy", "CPU iowait %": "cpu.iowait", "memory used %": "mem.used_pct"}
    for gpu in index.int_ids(GPU, "util"):
        out[f"GPU {gpu} util %"] = GPU.key(gpu, "util")
    for disk in index.ids(DISK, "util_pct"):
        out[f"disk {disk} util %"] = DISK.key(disk, "util_pct")
    return {label: name for label, name in out.items() if name in store.series}


def span_of(windows: Iterable[StepWindows]) -> tuple[float, float] | None:
    """From the first steady step to the last, over the runs given."""
    spans = [(w.t0, w.t1) for w in windows if w.durations_ms]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)
