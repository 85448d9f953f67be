"""Noisy runs made of regimes, for the live change detection and the report's phases.

``phased_store`` builds a run whose loop goes through ``Regime`` after ``Regime`` (data wait, compute, workers'
CPU), with jittered steps, occasional long steps and noisy host and process figures sampled every second: what a
real run looks like to the rules, with the true change times known. ``feed`` hands the same events to any
``Ingest`` (a Monitor's) second by second, as the agent's sender would.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from trainmon import protocol as P
from trainmon.store.store import Ingest, Store

T0 = 1000.0
PID = 4242
WORKERS = (5000, 5001)
NS = 1_000_000_000


@dataclass(frozen=True)
class Regime:
    seconds: float
    wait_ms: float  # mean DataLoader wait per step
    compute_ms: float  # mean compute per step
    workers_cpu: float = 40.0  # each worker, % of a core
    main_cpu: float = 100.0
    loader: int = 1  # a regime with another loader id switches DataLoaders (a new iterator) as it begins
    workers: int = 2  # that loader's num_workers


@dataclass(frozen=True)
class Noise:
    jitter: float = 0.25  # relative spread of compute and wait per step
    long_every: float = 0.02  # chance that a step is 4-8x longer (GC, logging)
    figures: float = 6.0  # spread of the sampled CPU figures, percentage points


def phased_store(regimes: list[Regime], *, seed: int = 0, noise: Noise | None = None) -> tuple[Store, list[float]]:
    """A store holding the run, and the times at which each regime after the first began."""
    store = Store()
    for _ in feed(store, regimes, seed=seed, noise=noise):
        pass
    return store, _change_times(regimes)


def feed(
    sink: Ingest,
    regimes: list[Regime],
    *,
    seed: int = 0,
    noise: Noise | None = None,
    each_second: Callable[[float], None] | None = None,
) -> Iterator[float]:
    """Hands the run to ``sink`` one second at a time (events, then the samples of that second), calling
    ``each_second(now)`` after each; yields each second's time."""
    rng = random.Random(seed)
    noise = noise or Noise()
    sink.meta(T0, {"interval": 1.0, "gpus": [], "gpu_error": "no NVIDIA driver"})
    sink.hello(1, T0, {"pid": PID, "name": "train.py"})
    by_loader = {r.loader: r for r in regimes}
    for r in by_loader.values():
        loader = {"id": r.loader, "batch_size": 32, "num_workers": r.workers, "persistent_workers": True}
        sink.info(1, T0, {"loader": loader})
        if r.workers:
            sink.info(1, T0, {"workers": {"loader": r.loader, "pids": list(WORKERS[: r.workers])}})
    steps = list(_steps(regimes, rng, noise))
    end = T0 + sum(r.seconds for r in regimes)
    now, i, current = T0, 0, None
    while now < end:
        now += 1.0
        batch = array("q")
        while i < len(steps) and steps[i][3] <= now:
            lid, s, w, e = steps[i]
            if lid != current:  # a new DataLoader: its first iterator starts
                batch.extend([P.K_ITER_START | lid << 8, _ns(s), _ns(s), by_loader[lid].workers])
                current = lid
            batch.extend([P.K_WAIT | lid << 8, _ns(s), _ns(w), 0, P.K_OPT, _ns(e), _ns(e), 0])
            i += 1
        if batch:
            sink.events(1, now, batch)
        sink.sample(now, _figures(_regime_at(regimes, now - 0.5), rng, noise))
        if each_second is not None:
            each_second(now)
        yield now


def _steps(regimes: list[Regime], rng: random.Random, noise: Noise) -> Iterator[tuple[int, float, float, float]]:
    """(loader, start, end of the wait, end) of every step."""
    t = T0
    for k, r in enumerate(regimes):
        stop = T0 + sum(x.seconds for x in regimes[: k + 1])
        while t < stop:
            wait = max(0.0, rng.gauss(r.wait_ms, noise.jitter * r.wait_ms)) / 1e3
            compute = max(0.1, rng.gauss(r.compute_ms, noise.jitter * r.compute_ms)) / 1e3
            if rng.random() < noise.long_every:
                compute *= rng.uniform(4, 8)
            yield r.loader, t, t + wait, t + wait + compute
            t += wait + compute


def _figures(r: Regime, rng: random.Random, noise: Noise) -> dict[str, float]:
    def around(x: float, lo: float = 0.0, hi: float = 100.0) -> float:
        return min(hi, max(lo, rng.gauss(x, noise.figures)))

    out = {
        "cpu.cores": 8.0,
        "cpu.busy": around(30.0 + 2 * r.workers_cpu / 8),
        "cpu.iowait": around(2.0),
        "mem.used_pct": 40.0 + rng.gauss(0.0, 0.3),
        "swap.used_mb": 0.0,
        "disk.sda.util_pct": around(5.0),
        f"proc.{PID}.cpu_pct": around(r.main_cpu, hi=200.0),
    }
    for pid in WORKERS[: r.workers]:
        out[f"proc.{pid}.cpu_pct"] = around(r.workers_cpu)
        out[f"proc.{pid}.state_main_R"] = r.workers_cpu / 100
        out[f"proc.{pid}.state_main_S"] = 1 - r.workers_cpu / 100
        out[f"proc.{pid}.state_main_D"] = 0.0
    return out


def _regime_at(regimes: list[Regime], t: float) -> Regime:
    for start, r in zip([T0, *(T0 + c for c in _offsets(regimes))], regimes, strict=False):
        if t < start + r.seconds:
            return r
    return regimes[-1]


def _offsets(regimes: list[Regime]) -> list[float]:
    out, total = [], 0.0
    for r in regimes[:-1]:
        total += r.seconds
        out.append(total)
    return out


def _change_times(regimes: list[Regime]) -> list[float]:
    return [T0 + c for c in _offsets(regimes)]


def _ns(t: float) -> int:
    return round(t * NS)
