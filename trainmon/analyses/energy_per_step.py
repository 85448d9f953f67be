"""Energy per step, per sample and per token of a run, on its own GPUs (``evidence.run_gpus``).

Each GPU's energy series (``gpu.<i>.energy_j``, written by ``trainmon.sources.gpu.energy_counter``) is read as a curve,
linear between samples. A step's energy is the curve's rise from the step's start to its end, summed over the run's
GPUs; a step that touches an interval no sample measured (the GPU answered nothing, or the counter went back with
no power to fall back on) is left out, as are warm-up steps. Joules per step are the energy of the steps counted
over their number; per sample over their samples; per token over their tokens (sequence batches).

Where another run watched over the same time trains on one of these GPUs, the energy cannot be told apart by run:
the figures stay the whole GPUs' (an upper bound for each run) and ``shared_with`` names the others. Nothing is
split (NVML's per-process figures are SM shares, not watts), and summing such runs counts a GPU twice.

Two spans: the live window (the steps that ended in the last ``window_s`` before an instant: the screen, the
Prometheus gauges) and the steady state (every step past warm-up: the report).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from trainmon.diagnose.evidence import run_gpus
from trainmon.diagnose.thresholds import Thresholds
from trainmon.metrics import GPU
from trainmon.numbers import NAN, is_nan
from trainmon.store.batches import tokens_per_sample
from trainmon.store.run import Run
from trainmon.store.steps import Steps
from trainmon.store.store import Store

COUNTER, POWER, MIXED = "nvml_counter", "power_integration", "mixed"
LIVE_WINDOW_S = Thresholds().window_s  # the live diagnosis window


@dataclass
class RunEnergy:
    """A run's GPU energy over the steps counted (see the module's docstring)."""

    joules: float
    steps: int
    samples: int
    tokens: float  # NaN: not sequence batches
    method: str  # COUNTER, POWER, or MIXED where some intervals were measured one way and some the other
    gpus: list[int]
    shared_with: list[str] = field(default_factory=list)  # labels of the other runs on these GPUs meanwhile
    unmeasured_steps: int = 0  # steps left out: some interval they touch was not measured
    t0: float = NAN  # the span of the steps counted
    t1: float = NAN

    @property
    def joules_per_step(self) -> float:
        return self.joules / self.steps if self.steps else NAN

    @property
    def joules_per_sample(self) -> float:
        return self.joules / self.samples if self.samples else NAN

    @property
    def joules_per_token(self) -> float:
        return self.joules / self.tokens if self.tokens > 0 else NAN


class Curve:
    """One GPU's energy against time, over the samples that cover ``[lo, hi]``: linear between samples; an interval
    is measured when its end sample says how (``energy_counter`` 1 or 0) and the joules at both its ends are known."""

    def __init__(self, store: Store, gpu: int, lo: float = -math.inf, hi: float = math.inf) -> None:
        energy = store.series.get(GPU.key(gpu, "energy_j"))
        how = store.series.get(GPU.key(gpu, "energy_counter"))
        if energy is None:
            times, values = [], []
        else:  # one sample either side of the span
            i = max(0, bisect_right(energy.times, lo) - 1)
            j = bisect_left(energy.times, hi) + 1
            times, values = list(energy.times[i:j]), list(energy.values[i:j])
        self.times = times
        counted = [0.0]  # joules of measured intervals up to each sample
        bad, by_counter, by_power = [0], [0], [0]  # per interval k (from 1): unmeasured, counter, power
        for k in range(1, len(times)):
            m = how.at(times[k]) if how is not None else None
            rise = values[k] - values[k - 1]
            ok = m is not None and not is_nan(m) and not is_nan(rise) and rise >= 0
            counted.append(counted[-1] + (rise if ok else 0.0))
            bad.append(0 if ok else 1)
            by_counter.append(1 if ok and m == 1.0 else 0)
            by_power.append(1 if ok and m == 0.0 else 0)
        self.counted = counted
        self.bad = list(accumulate(bad))
        self.by_counter = list(accumulate(by_counter))
        self.by_power = list(accumulate(by_power))

    def __bool__(self) -> bool:
        return len(self.times) > 1

    def _at(self, t: float, k: int) -> float:
        """Measured joules up to ``t``, which lies in interval ``k`` (from sample k-1 to sample k)."""
        t0, t1 = self.times[k - 1], self.times[k]
        e0, e1 = self.counted[k - 1], self.counted[k]
        return e0 + (e1 - e0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)

    def rise(self, a: float, b: float) -> tuple[float, int, int] | None:
        """(joules from ``a`` to ``b``, intervals measured by the counter, by power), or None where some interval
        between them was not measured or they lie outside the samples."""
        times = self.times
        if not self or a < times[0] or b > times[-1] or b < a:
            return None
        ka = max(1, bisect_right(times, a))  # the interval holding a (a on a sample: the one after it)
        kb = max(1, bisect_left(times, b))  # the interval holding b (b on a sample: the one before it)
        ka = min(ka, kb)
        if self.bad[kb] - self.bad[ka - 1]:
            return None
        joules = self._at(b, kb) - self._at(a, ka)
        return (
            max(0.0, joules),
            self.by_counter[kb] - self.by_counter[ka - 1],
            self.by_power[kb] - self.by_power[ka - 1],
        )


def run_energy(store: Store, run: Run, steps: range, gpus: list[int] | None = None) -> RunEnergy | None:
    """The energy of the run's steps (indices of ``run.steps``; warm-up ones left out) on its GPUs (by default
    ``run_gpus``), or None where it has none, one has no energy series, or no step could be measured. Call under
    the store's lock."""
    table = run.steps
    blocks = _blocks(table, steps)
    if not blocks:
        return None
    if gpus is None:
        gpus = run_gpus(store, run, store.index().int_ids(GPU, "util"))
    lo, hi = table.start[blocks[0][0]], max(table.end[k1] for _, k1 in blocks)
    curves = [Curve(store, g, lo, hi) for g in gpus]
    if not curves or not all(curves):
        return None
    total = _Total(curves, table)
    for k0, k1 in blocks:
        total.add_block(k0, k1)
    if not total.steps:
        return None
    train = run.train_loader()
    per_sample = tokens_per_sample(train.config) if train is not None else NAN
    method = MIXED if total.by_counter and total.by_power else COUNTER if total.by_counter else POWER
    energy = RunEnergy(total.joules, total.steps, total.samples, total.samples * per_sample, method, list(gpus))
    energy.unmeasured_steps, energy.t0, energy.t1 = total.unmeasured, total.t0, total.t1
    energy.shared_with = _sharing(store, run, gpus, total.t0, total.t1)
    return energy


class _Total:
    """The energy and steps summed so far on ``curves``, and how the intervals they lie in were measured."""

    def __init__(self, curves: list[Curve], table: Steps) -> None:
        self.curves, self.table = curves, table
        self.joules, self.steps, self.samples, self.unmeasured, self.by_counter, self.by_power = 0.0, 0, 0, 0, 0, 0
        self.t0, self.t1 = math.inf, -math.inf

    def add_block(self, k0: int, k1: int) -> None:
        """Back-to-back steps ``k0``..``k1``: their whole span at once where every GPU measured it, else halves
        until the steps that touch an unmeasured interval are found, and left out."""
        if self._add(k0, k1):
            return
        if k0 == k1:
            self.unmeasured += 1
            return
        mid = (k0 + k1) // 2
        self.add_block(k0, mid)
        self.add_block(mid + 1, k1)

    def _add(self, k0: int, k1: int) -> bool:
        table = self.table
        a, b = table.start[k0], table.end[k1]
        rises = [r for c in self.curves if (r := c.rise(a, b)) is not None]
        if len(rises) < len(self.curves):
            return False
        self.joules += sum(r[0] for r in rises)
        self.by_counter += sum(r[1] for r in rises)
        self.by_power += sum(r[2] for r in rises)
        self.steps += k1 - k0 + 1
        self.samples += int(sum(table.samples[k0 : k1 + 1]))
        self.t0, self.t1 = min(self.t0, a), max(self.t1, b)
        return True


def _blocks(table: Steps, steps: range) -> list[tuple[int, int]]:
    """The steps past warm-up among ``steps``, as runs of back-to-back steps (each starting where the one before
    ended): the energy of such a run is the curve's rise over its whole span, one reading instead of one per step."""
    i, j = max(0, steps.start), min(len(table), steps.stop)
    if j <= i:
        return []
    if not any(table.warm[i:j]) and table.start[i + 1 : j] == table.end[i : j - 1]:
        return [(i, j - 1)]  # the usual case, found without a loop in Python
    out: list[tuple[int, int]] = []
    for k in range(i, j):
        if table.warm[k]:
            continue
        if out and out[-1][1] == k - 1 and table.start[k] == table.end[k - 1]:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def steady_energy(store: Store, run: Run) -> RunEnergy | None:
    """Over every step the run's table holds, warm-up left out: the report's steady state."""
    return run_energy(store, run, range(len(run.steps)))


def live_energy(
    store: Store, run: Run, t: float, window_s: float = LIVE_WINDOW_S, gpus: list[int] | None = None
) -> RunEnergy | None:
    """Over the steps that ended in the ``window_s`` before ``t``: the live figure."""
    ends = run.steps.end
    return run_energy(store, run, range(bisect_right(ends, t - window_s), bisect_right(ends, t)), gpus)


def _sharing(store: Store, run: Run, gpus: list[int], t0: float, t1: float) -> list[str]:
    """Labels of the other runs seen between ``t0`` and ``t1`` that train on one of ``gpus``."""
    every = store.index().int_ids(GPU, "util")
    mine = set(gpus)
    out = []
    for other in store.runs.values():
        if other is run or other.last_seen < t0 or other.first_seen > t1:
            continue
        if other.measured_by == "sampling" and other.ended == "attached":
            continue  # the same training, measured by its agent since: listed once
        if mine & set(run_gpus(store, other, every)):
            out.append(other.label)
    return sorted(set(out))
