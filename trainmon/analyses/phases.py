"""A recording's phases: where the training's behaviour changed, found over the whole recording at once.

Every bin (1 s, longer for long recordings) holds one figure per kind of evidence: each run's data-wait share
and median step time (of its steady steps), its DataLoader workers' and its main process's CPU, its GPUs'
utilisation; the host's CPU busy and iowait, the busiest disk's %util and the memory in use. Each series is
median-filtered over five bins (a long step or a short burst is not a phase) and scaled by its noise, never by
less than a third of what counts as a material change of that figure. Seeded binary segmentation (intervals
at every scale, each cut where one figure's L2 cost drops most) with narrowest-over-threshold selection
places the cuts; a cut stays when the drop beats a penalty that grows with the number of bins and the figure
moved by a material amount between the phases on either side. Pure functions of the store, standard library.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from trainmon.diagnose.evidence import run_gpus
from trainmon.diagnose.stats import mean
from trainmon.metrics import DISK, GPU, PROC
from trainmon.numbers import is_nan
from trainmon.store.run import Run
from trainmon.store.store import Store

MAX_BINS = 2000  # longer recordings get longer bins
FILTER_RADIUS = 2  # bins either side of the running median
NOISE_FLOOR = 3.0  # a figure is scaled by at most a third of its material change
PENALTY = 6.0  # x log(bins): the drop in cost a cut must beat (with a material change)
MIN_SIDE = 2  # bins either side of a cut inside an interval

# What moves a figure materially: data-wait share, log step time, CPU in % of a core or of the host, GPU and
# disk utilisation in %, memory in % of the host.
MATERIAL = {
    "wait": 0.05,
    "step": math.log(1.5),
    "main_cpu": 25.0,
    "workers_cpu": 40.0,
    "gpu": 20.0,
    "cpu": 20.0,
    "iowait": 10.0,
    "disk": 25.0,
    "mem": 5.0,
}


@dataclass
class Feature:
    name: str  # "<run label>.<kind>" or "host.<kind>"
    kind: str  # a key of MATERIAL
    values: list[float]  # per bin, nan where nothing was measured


def steady_span(store: Store) -> tuple[float, float] | None:
    """From the start of the first steady step of any run to the end of the last one (None: no steady step)."""
    lo, hi = math.inf, -math.inf
    for run in store.runs.values():
        steps = run.steps
        first = steps.warm.tobytes().find(0)
        if first < 0:
            continue
        last = len(steps) - 1 - steps.warm.tobytes()[::-1].find(0)
        lo = min(lo, steps.start[first])
        hi = max(hi, steps.end[last])
    return (lo, hi) if hi > lo else None


def bin_width(s0: float, s1: float) -> float:
    return max(1.0, (s1 - s0) / MAX_BINS)


def features(store: Store, s0: float, s1: float, dt: float) -> list[Feature]:
    """The figures the phases are cut on, per bin of ``dt`` s from ``s0``."""
    bins = max(1, math.ceil((s1 - s0) / dt))
    out: list[Feature] = []
    gpus = store.index().int_ids(GPU, "util")
    for run in store.runs.values():
        if not run.steps.total:
            continue
        label = run.label
        wait, step = _step_figures(run, s0, dt, bins)
        out += [Feature(f"{label}.wait", "wait", wait), Feature(f"{label}.step", "step", step)]
        if run.proc_pid is not None:
            main = _binned(store, PROC.key(run.proc_pid, "cpu_pct"), s0, dt, bins)
            out.append(Feature(f"{label}.main_cpu", "main_cpu", main))
            workers = [_binned(store, PROC.key(pid, "cpu_pct"), s0, dt, bins) for pid in run.worker_pids()]
            # No worker sampled while the main process was: no workers then (num_workers=0), not "unknown".
            summed = [
                math.fsum(v for v in col if not is_nan(v)) if any(not is_nan(v) for v in col) or not is_nan(m) else m
                for m, *col in zip(main, *workers, strict=True)
            ]
            out.append(Feature(f"{label}.workers_cpu", "workers_cpu", summed))
        own = run_gpus(store, run, gpus)
        if own:
            per_gpu = [_binned(store, GPU.key(g, "util"), s0, dt, bins) for g in own]
            out.append(Feature(f"{label}.gpu", "gpu", [mean(col) for col in zip(*per_gpu, strict=True)]))
    for name, kind in (("cpu.busy", "cpu"), ("cpu.iowait", "iowait"), ("mem.used_pct", "mem")):
        out.append(Feature(f"host.{kind}", kind, _binned(store, name, s0, dt, bins)))
    disks = [_binned(store, DISK.key(d, "util_pct"), s0, dt, bins) for d in store.index().ids(DISK, "util_pct")]
    if disks:
        busiest = [max((v for v in col if not is_nan(v)), default=math.nan) for col in zip(*disks, strict=True)]
        out.append(Feature("host.disk", "disk", busiest))
    return [f for f in out if any(not is_nan(v) for v in f.values)]


def _step_figures(run: Run, s0: float, dt: float, bins: int) -> tuple[list[float], list[float]]:
    """Per bin: the data-wait share and the log of the median duration of the run's steady steps ending in it."""
    waits = [0.0] * bins
    durs: list[list[float]] = [[] for _ in range(bins)]
    steps = run.steps
    i, j = steps.index_range(s0, s0 + bins * dt)
    for end, dur, wait, warm in zip(steps.end[i:j], steps.dur[i:j], steps.wait[i:j], steps.warm[i:j], strict=True):
        if warm:
            continue
        k = min(bins - 1, int((end - s0) / dt))
        waits[k] += wait
        durs[k].append(dur)
    share, step = [math.nan] * bins, [math.nan] * bins
    for k, ds in enumerate(durs):
        total = math.fsum(ds)
        if total > 0:
            share[k] = waits[k] / total
            ds.sort()
            step[k] = math.log(max(1e-6, ds[len(ds) // 2]))
    return share, step


def _binned(store: Store, name: str, s0: float, dt: float, bins: int) -> list[float]:
    """The mean of a series' samples in each bin (nan where it has none)."""
    sums, counts = [0.0] * bins, [0] * bins
    series = store.series.get(name)
    if series is not None:
        times, values = series.between(s0, s0 + bins * dt)
        for t, v in zip(times, values, strict=True):
            if not is_nan(v):
                k = min(bins - 1, max(0, int((t - s0) / dt)))
                sums[k] += v
                counts[k] += 1
    return [s / c if c else math.nan for s, c in zip(sums, counts, strict=True)]


# ---------------------------------------------------------------- segmentation


@dataclass
class _Prepared:
    kind: str
    filtered: list[float]  # running median, gaps filled
    scaled_sums: list[float]  # prefix sums of filtered / scale
    material: float


def segment(feats: list[Feature], min_bins: int) -> list[int]:
    """Bin indices where a phase starts (0 excluded), every phase at least ``min_bins`` long."""
    if not feats:
        return []
    bins = len(feats[0].values)
    if bins < 2 * min_bins:
        return []
    prepared = [_prepare(f) for f in feats]
    penalty = PENALTY * math.log(max(bins, 3))
    held: list[tuple[int, float, int, int, int]] = []  # (length, -gain, start, end, cut) of intervals that hold a cut
    for s, e in _seeded_intervals(bins, min_bins):
        gain, k, which = _best(prepared, s, e, MIN_SIDE)
        if which is not None and gain > penalty and _moved(which, s, k, e):
            held.append((e - s, -gain, s, e, k))
    # Narrowest over threshold: the narrowest interval that holds a cut gives it, unless a cut lies inside it.
    # Its cut may fall near its edge (the change is placed where it is, not a phase away from the edge); phases
    # that come out too short are joined to a neighbour afterwards.
    cuts: list[int] = []
    for _, _, s, e, k in sorted(held):
        if not any(s < c < e for c in cuts):
            cuts.append(k)
    cuts = _lengthen(prepared, sorted(cuts), bins, min_bins)
    return _prune(prepared, cuts, bins, min_bins, penalty)


def _prepare(f: Feature) -> _Prepared:
    filled = _fill(f.values)
    filtered = _running_median(filled, FILTER_RADIUS)
    material = MATERIAL[f.kind]
    scale = max(_noise(filled), material / NOISE_FLOOR)
    sums = [0.0]
    for v in filtered:
        sums.append(sums[-1] + v / scale)
    return _Prepared(f.kind, filtered, sums, material)


def _fill(values: list[float]) -> list[float]:
    """Gaps take the last value before them (the first known one at the start)."""
    first = next((v for v in values if not is_nan(v)), 0.0)
    out, last = [], first
    for v in values:
        last = last if is_nan(v) else v
        out.append(last)
    return out


def _running_median(values: list[float], radius: int) -> list[float]:
    n = len(values)
    out = []
    for k in range(n):
        window = sorted(values[max(0, k - radius) : k + radius + 1])
        out.append(window[len(window) // 2])
    return out


def _noise(values: list[float]) -> float:
    """The noise of a series as the cost of a cut sees it after the running median: the mean absolute difference
    of successive values as a Gaussian's standard deviation (a mean, not a median, so bursts count as noise),
    times the running median's long-run inflation (√(π/2): it passes slow wander and smooths only the fast)."""
    diffs = [abs(b - a) for a, b in itertools.pairwise(values)]
    return math.fsum(diffs) / len(diffs) * math.sqrt(math.pi) / 2 * math.sqrt(math.pi / 2) if diffs else 0.0


def _seeded_intervals(bins: int, min_bins: int) -> list[tuple[int, int]]:
    """Intervals at every scale: lengths shrinking by √2 from the whole down to two phases, each scale's
    intervals a quarter of their length apart (so two changes a phase apart each have one to themselves)."""
    out = {(0, bins)}
    length = bins / math.sqrt(2)
    while length >= 2 * min_bins:
        size = round(length)
        shift = max(1.0, length / 4)
        count = math.ceil((bins - size) / shift) + 1
        for i in range(count):
            s = min(bins - size, round(i * shift))
            out.add((s, s + size))
        length /= math.sqrt(2)
    return sorted(out)


def _gain(p: _Prepared, s: int, k: int, e: int) -> float:
    """How much the L2 cost of [s, e) drops when cut at k (scaled units)."""
    a, b = p.scaled_sums[k] - p.scaled_sums[s], p.scaled_sums[e] - p.scaled_sums[k]
    total = p.scaled_sums[e] - p.scaled_sums[s]
    return a * a / (k - s) + b * b / (e - k) - total * total / (e - s)


def _best(prepared: list[_Prepared], s: int, e: int, side: int) -> tuple[float, int, _Prepared | None]:
    """The largest drop in cost of any one figure cut anywhere in [s, e) at least ``side`` bins from its ends."""
    best: tuple[float, int, _Prepared | None] = (0.0, s, None)
    for p in prepared:
        for k in range(s + side, e - side + 1):
            g = _gain(p, s, k, e)
            if g > best[0]:
                best = (g, k, p)
    return best


def _moved(p: _Prepared, s: int, k: int, e: int) -> bool:
    before = math.fsum(p.filtered[s:k]) / (k - s)
    after = math.fsum(p.filtered[k:e]) / (e - k)
    return abs(after - before) >= p.material


def _cut_gain(prepared: list[_Prepared], s: int, k: int, e: int) -> float:
    """The best drop in cost a cut at k brings to [s, e), over the figures that move materially there."""
    return max((_gain(p, s, k, e) for p in prepared if _moved(p, s, k, e)), default=0.0)


def _agreed_gain(prepared: list[_Prepared], s: int, k: int, e: int) -> float:
    """The drop in cost a cut at k brings to [s, e), added up over the figures that move materially there: where a
    cut is placed, every figure that changed has its say. One figure alone can move in two steps (the data wait
    eases a little before a cache is warm, then drops), and its largest drop may lie a step early."""
    return math.fsum(_gain(p, s, k, e) for p in prepared if _moved(p, s, k, e))


def _lengthen(prepared: list[_Prepared], cuts: list[int], bins: int, min_bins: int) -> list[int]:
    """Joins each phase shorter than ``min_bins`` to a neighbour (shortest first), dropping the cut between them
    that matters least."""
    while True:
        edges = [0, *cuts, bins]
        short = [i for i in range(len(edges) - 1) if edges[i + 1] - edges[i] < min_bins]
        if not short:
            return cuts
        i = min(short, key=lambda i: edges[i + 1] - edges[i])
        # The phase [edges[i], edges[i+1]) loses its left cut (cuts[i-1]) or its right one (cuts[i]).
        options = [j for j in (i - 1, i) if 0 <= j < len(cuts)]
        drop = min(options, key=lambda j: _cut_gain(prepared, edges[j], edges[j + 1], edges[j + 2]))
        del cuts[drop]


def _prune(prepared: list[_Prepared], cuts: list[int], bins: int, min_bins: int, penalty: float) -> list[int]:
    """Each cut placed best between its neighbours (where the figures that moved agree it drops the cost most);
    the weakest cut whose phases no longer differ materially, or whose drop no longer beats the penalty, dropped,
    until every cut holds."""
    while True:
        edges = [0, *cuts, bins]
        for i in range(1, len(edges) - 1):
            s, e = edges[i - 1], edges[i + 1]
            lo, hi = max(s + min_bins, edges[i] - min_bins), min(e - min_bins, edges[i] + min_bins)
            best = max(((_agreed_gain(prepared, s, k, e), k) for k in range(lo, hi + 1)), default=None)
            if best is not None and best[0] > 0:
                edges[i] = best[1]
        cuts = edges[1:-1]
        weakest: tuple[float, int] | None = None
        for i in range(1, len(edges) - 1):
            gain = _cut_gain(prepared, edges[i - 1], edges[i], edges[i + 1])
            if gain <= penalty and (weakest is None or gain < weakest[0]):
                weakest = (gain, i - 1)
        if weakest is None:
            return cuts
        del cuts[weakest[1]]
