"""Binned time series for reports: step time split into wait and compute, GPU, CPU, disk."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from trainmon.metrics import DISK, GPU
from trainmon.numbers import is_nan
from trainmon.report.schema import RunSeries, SeriesSection
from trainmon.store.run import Run
from trainmon.store.store import Store

MAX_BINS = 600
GPU_CHARTED = ("util", "util_min", "mem_used_mb", "power_w")
DISK_CHARTED = ("read_mb_s", "write_mb_s", "util_pct")  # of the four busiest disks


def _known(values: Iterable[float]) -> Iterator[float]:
    return (v for v in values if not is_nan(v))


def _bins(first: float, last: float, interval: float) -> tuple[float, int]:
    span = max(last - first, 1e-9)
    n = max(1, min(MAX_BINS, math.ceil(span / interval)))
    return span / n, n


def _binned(times: Iterable[float], values: Iterable[float], first: float, width: float, n: int) -> list[float | None]:
    sums = [0.0] * n
    counts = [0] * n
    for t, v in zip(times, values, strict=False):
        if is_nan(v):
            continue
        k = min(n - 1, max(0, int((t - first) / width)))
        sums[k] += v
        counts[k] += 1
    return [round(s / c, 3) if c else None for s, c in zip(sums, counts, strict=True)]


def _run_series(run: Run, first: float, width: float, n: int) -> RunSeries:
    st = run.steps
    step_ms = [0.0] * n
    wait_ms = [0.0] * n
    steps = [0] * n
    for k in range(len(st)):
        b = min(n - 1, max(0, int((st.end[k] - first) / width)))
        step_ms[b] += (st.end[k] - st.start[k]) * 1e3
        wait_ms[b] += st.wait[k] * 1e3
        steps[b] += 1
    return {
        "run": run.label,
        "step_ms": [round(s / c, 3) if c else None for s, c in zip(step_ms, steps, strict=True)],
        "wait_ms": [round(w / c, 3) if c else None for w, c in zip(wait_ms, steps, strict=True)],
        "steps_per_s": [round(c / width, 2) for c in steps],
        "checkpoints": [round(c0 - first, 3) for c0, _ in run.checkpoints][:1000],
    }


def series_section(store: Store, interval: float = 1.0) -> SeriesSection:
    """Runs' step series and the host's metric series, binned on one time axis from the first sample."""
    with store.lock:
        if store.first_t is None:
            return {"dt": 1.0, "bins": 0, "runs": [], "metrics": {}}
        first, last = store.first_t, store.last_t or store.first_t
        for run in store.runs.values():
            if len(run.steps):
                last = max(last, run.steps.end[-1])
        width, n = _bins(first, last, interval)
        names = ["cpu.busy", "cpu.iowait", "mem.used_pct"]
        index = store.index()
        gpu_names = (GPU.key(g, f) for g in index.ids(GPU) for f in GPU_CHARTED)
        names += sorted(name for name in gpu_names if name in store.series)
        disks = sorted(index.ids(DISK, "util_pct"))
        busiest = sorted(disks, key=lambda d: -max(_known(store.series[DISK.key(d, "util_pct")].values), default=0.0))
        for d in busiest[:4]:
            names += [DISK.key(d, f) for f in DISK_CHARTED]
        metrics: dict[str, list[float | None]] = {}
        for name in names:
            s = store.series.get(name)
            if s is not None:
                metrics[name] = _binned(s.times, s.values, first, width, n)
        runs = [_run_series(r, first, width, n) for r in store.runs.values()]
    return {"dt": round(width, 4), "bins": n, "runs": runs, "metrics": metrics}
