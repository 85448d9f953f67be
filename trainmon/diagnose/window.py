"""Figures over a time window: what every rule reads. Pure functions of the store."""

from __future__ import annotations

import itertools
import math
import operator
import weakref
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainmon.metrics import PROC
from trainmon.numbers import is_nan, known
from trainmon.store.run import Run
from trainmon.store.steps import Steps
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


def mean(values: Iterable[float]) -> float:
    vals = known(values)
    return sum(vals) / len(vals) if vals else math.nan


LONG_MARGIN = 0.8  # a rescan keeps steps over 0.8× the limit, so a median that drops a little needs no rescan
LONG_SLACK = 0.6  # ... and rescans once the limit has risen so far that candidates over 0.6× it would pile up
MAX_DETAIL = 1024  # the step-time quantiles of a longer window come from an even sample of at most this many


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
    checkpoint_s: float = 0.0
    checkpoints: int = 0
    last_end: float = math.nan
    exposed_s: float = 0.0
    exposed_wait_s: float = 0.0  # host time of the waits that were measured (sampling may skip some)
    exposed_steps: int = 0
    comm_s: float = 0.0  # time the training thread was blocked in collectives (agent comm records)
    sorted_durations: list[float] = field(default_factory=list)  # all steady steps', or an even sample
    checkpoint_spans: list[tuple[float, float]] = field(default_factory=list)
    loader_id: int | None = None
    # Where the steady steps are: the step table, global indices [first, stop) and, when warm-up or
    # another loader's steps lie between, a byte mask of the steady ones. Read on demand, never copied.
    _rows: tuple[Steps, int, int, bytes | None] | None = None
    # Figures read from the rows on demand, with the state of the step table they were read from.
    _memo: dict[str, tuple[tuple[Any, ...], float]] = field(default_factory=dict, repr=False, compare=False)

    def columns(self) -> tuple[array[float], array[float], array[float], array[float]]:
        """start, end, duration and wait of every steady step in the window (C-level slices)."""
        if self._rows is None:
            return array("d"), array("d"), array("d"), array("d")
        steps = self._rows[0]
        start, end, dur, wait = self._steady((steps.start, steps.end, steps.dur, steps.wait))
        return start, end, dur, wait

    def plain_rows(self) -> tuple[Steps, int, int] | None:
        """(step table, i, j) when the steady steps are all of its rows [i, j) (no warm-up or other loader's steps
        between them, none trimmed since the window was taken): ``columns()`` are those rows' slices."""
        if self._rows is None or self._rows[3] is not None:
            return None
        steps, first, stop, _ = self._rows
        offset = steps.total - len(steps)
        if first < offset:
            return None
        return steps, first - offset, max(0, stop - offset)

    def _steady(self, cols: tuple[array[float], ...], stride: int = 1) -> list[array[float]]:
        """The steady steps' rows of columns of the window's step table (every ``stride``-th of them)."""
        assert self._rows is not None
        steps, first, stop, mask = self._rows
        offset = steps.total - len(steps)  # steps trimmed from the table since the window was taken
        i, j = max(0, first - offset), max(0, stop - offset)
        if mask is None:
            return [c[i:j:stride] for c in cols]
        segments = _segments(mask[len(mask) - (j - i) :] if j > i else b"")
        return [_pick(c, i, segments)[::stride] for c in cols]

    def compute_p50_s(self) -> float:
        """Median over the steady steps (an even sample of at most MAX_DETAIL) of step − data wait −
        communication: the rank's own work per step."""
        if self._rows is None or not self.steps:
            return math.nan
        steps = self._rows[0]
        key = ("compute_p50", steps.total, len(steps), steps.edits)
        if (hit := self._memo.get("compute_p50")) is not None and hit[0] == key:
            return hit[1]
        dur, wait, comm = self._steady((steps.dur, steps.wait, steps.comm), _stride(self.steps))
        own = list(map(operator.sub, map(operator.sub, dur, wait), comm))
        if own and math.isfinite(sum(own)):
            # Clamping at 0 keeps the order, so the median of the clamped values is that of the sorted ones clamped.
            own.sort()
            value = _clamped_quantile(own, 0.5)
        else:
            value = quantile([max(0.0, x) for x in own], 0.5)
        self._memo["compute_p50"] = (key, value)
        return value

    def comm_share_p50(self) -> float:
        """Median over the steady steps (an even sample of at most MAX_DETAIL) of each step's share blocked in
        collectives (nan: none measured)."""
        if self._rows is None or not self.steps or not self.run.comm_by_op:
            return math.nan
        steps = self._rows[0]
        key = ("comm_share_p50", steps.total, len(steps), steps.edits)
        if (hit := self._memo.get("comm_share_p50")) is not None and hit[0] == key:
            return hit[1]
        dur, comm = self._steady((steps.dur, steps.comm), _stride(self.steps))
        if dur and math.isfinite(sum(dur)) and min(dur) > 0:
            value = quantile(list(map(operator.truediv, comm, dur)), 0.5)
        else:
            value = quantile([c / d if d > 0 else 0.0 for d, c in zip(dur, comm, strict=True)], 0.5)
        self._memo["comm_share_p50"] = (key, value)
        return value

    def comm_rows(self) -> tuple[array[float], array[float], array[float]]:
        """End, duration and time in collectives of every steady step (C-level slices)."""
        if self._rows is None:
            return array("d"), array("d"), array("d")
        steps = self._rows[0]
        end, dur, comm = self._steady((steps.end, steps.dur, steps.comm))
        return end, dur, comm

    def spans_and_waits(self) -> tuple[list[tuple[float, float]], list[float]]:
        """Each steady step's (start, end) and wait."""
        start, end, _, wait = self.columns()
        return list(zip(start, end, strict=True)), wait.tolist()

    def long_durations(self, limit: float) -> list[float]:
        """Durations of the steady steps longer than ``limit`` s, exactly (no sampling)."""
        return [d for _, d in self._long_rows(limit)]

    def long_steps(self, limit: float) -> list[tuple[float, float, float]]:
        """(start, end, wait) of every steady step longer than ``limit`` s, exactly (no sampling)."""
        if self._rows is None:
            return []
        steps = self._rows[0]
        offset = steps.total - len(steps)
        return [
            (steps.start[g - offset], steps.end[g - offset], steps.wait[g - offset])
            for g, _ in self._long_rows(limit)
            if g >= offset
        ]

    def _long_rows(self, limit: float) -> list[tuple[int, float]]:
        if not self.steps or self._rows is None:
            return []
        steps, first, stop, mask = self._rows
        rows = long_candidates(steps, limit)
        lo = bisect_left(rows, (first, -math.inf))
        hi = bisect_left(rows, (stop, -math.inf))
        return [(g, d) for g, d in rows[lo:hi] if d > limit and (mask is None or mask[g - first])]

    @property
    def exposed_fraction(self) -> float:
        """GPU idle exposed by data waits / step time (CUDA only; nan where not measured).

        Estimated from the measured waits only: (exposed / measured wait) × the wait share, so waits the agent
        skipped (sampling, a full event pool) do not count as hidden. Equals exposed / step time when every
        wait was measured."""
        if not self.exposed_steps or self.step_time_s <= 0:
            return math.nan
        if self.exposed_wait_s > 0 and not is_nan(self.wait_fraction):
            return min(1.0, self.exposed_s / self.exposed_wait_s) * self.wait_fraction
        return self.exposed_s / self.step_time_s

    @property
    def comm_fraction(self) -> float:
        """Time blocked in collective communication / step time (nan where the run reported none: not
        distributed, or an agent that does not measure it)."""
        if not self.run.comm_by_op or self.step_time_s <= 0:
            return math.nan
        return self.comm_s / self.step_time_s

    @property
    def starving_fraction(self) -> float:
        """The wait that starved the accelerator: the exposed share where measured, else the whole wait."""
        exposed = self.exposed_fraction
        return self.wait_fraction if is_nan(exposed) else exposed

    def block_sums(self, first: int, size: int, n: int) -> tuple[list[float], list[float]] | None:
        """Summed duration and wait of the first ``n`` steady steps (positions in ``columns()``) in blocks: [0, first)
        when ``first``, then every ``size`` steps from ``first`` (``n - first`` a multiple of ``size``). In O(1) each
        from the step table's running sums; None when warm-up or another loader's steps lie between them."""
        if self._rows is None or self._rows[3] is not None:
            return None
        steps, start, _, _ = self._rows
        i = start - (steps.total - len(steps))
        if i < 0:
            return None  # trimmed from the table since the window was taken
        out = []
        for cum in steps.prefix_sums()[:2]:
            edges = cum[i + first : i + n + 1 : size]  # the running sum at each block's edge, C-level
            if first:
                edges.insert(0, cum[i])
            out.append(list(map(operator.sub, edges[1:], edges[:-1])))
        return out[0], out[1]

    def lasted(self) -> bool:
        """Every steady step lasted at least 1 ns (none nan or endless): shares and log-durations need no guard."""
        if self._rows is None:
            return False
        steps, first, stop, _ = self._rows
        offset = steps.total - len(steps)
        i, j = max(0, first - offset), max(0, stop - offset)
        return steps.row_counts(i, j).brief == 0

    def loader_since(self) -> float:
        """Start of the first step of this window's loader after another loader's steps in the window (the job
        switched DataLoaders inside it); nan when none precede it."""
        if self._rows is None or self._rows[3] is None:
            return math.nan
        steps, first, stop, _ = self._rows
        offset = steps.total - len(steps)
        i, j = max(0, first - offset), max(0, stop - offset)
        if j <= i:
            return math.nan
        ours = bytes(map((self.loader_id or 0).__eq__, steps.loader[i:j]))
        k = ours.rfind(0)
        return steps.start[i + k + 1] if 0 <= k < j - i - 1 else math.nan

    def overlaps_checkpoint(self, s: float, e: float) -> bool:
        return any(c0 < e and c1 > s for c0, c1 in self.checkpoint_spans)

    def phase_names_in(self, spans: list[tuple[float, float]]) -> set[str]:
        return {name for p0, p1, name in self.run.phases for s, e in spans if p0 < e and p1 > s}

    def eval_in(self, spans: list[tuple[float, float]]) -> bool:
        train = self.run.train_loader()
        return any(s <= t <= e for t, lid in self.run.iter_starts for s, e in spans if train is None or lid != train.id)

    @property
    def wait_fraction(self) -> float:
        return self.wait_s / self.step_time_s if self.step_time_s > 0 else math.nan

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.step_time_s if self.step_time_s > 0 and self.samples else math.nan

    @property
    def span_s(self) -> float:
        return self.t1 - self.t0

    @property
    def loader(self) -> dict[str, Any]:
        """Config of the loader feeding this window's steps."""
        info = self.run.loaders.get(self.loader_id) if self.loader_id else self.run.train_loader()
        return dict(info.config) if info is not None else {}


def run_window(
    run: Run,
    t0: float,
    t1: float,
    min_steps: int = 20,
    max_lookback_s: float = 120.0,
    *,
    loader: int | None = None,
    memo: bool = True,
) -> RunWindow:
    """Steady-state steps that ended in [t0, t1]; reaches back further for at least ``min_steps``. The steps of
    ``loader`` (a loader id), by default those of the loader feeding the latest steps.

    Memoised per run (steps so far, window): the engine and the status line ask for the same window
    every tick (``memo=False`` for another window that should not displace it). Windows are read-only for
    their users. The memo holds runs weakly, so a run the store forgets takes its latest window (and its step
    table) with it.
    """
    key = (run.steps.total, len(run.checkpoints), t0, t1, min_steps, max_lookback_s, loader)
    hit = _latest_window.get(run)
    if hit is not None and hit[0] == key:
        return hit[1]
    w = _compute_window(run, t0, t1, min_steps, max_lookback_s, loader)
    if memo:
        _latest_window[run] = (key, w)
    return w


def busiest_loader(run: Run, t0: float, t1: float) -> int | None:
    """The loader that fed the most steady steps ending in [t0, t1] (None when none did)."""
    steps = run.steps
    i, j = steps.index_range(t0, t1)
    counts: dict[int, int] = {}
    for lid, warm in zip(steps.loader[i:j], steps.warm[i:j], strict=True):
        if not warm:
            counts[lid] = counts.get(lid, 0) + 1
    return max(counts, key=lambda lid: counts[lid]) if counts else None


_latest_window: weakref.WeakKeyDictionary[Run, tuple[tuple[Any, ...], RunWindow]] = weakref.WeakKeyDictionary()


def _compute_window(
    run: Run, t0: float, t1: float, min_steps: int, max_lookback_s: float, loader: int | None = None
) -> RunWindow:
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
    if j > i:
        # Judge the loader feeding the latest steps: after a switch, the old loader's steps are history.
        current = steps.loader[j - 1] if loader is None else loader
        w.loader_id = current or None
        _fill(w, steps, i, j, current)
    for c0, c1 in run.checkpoints:
        overlap = min(c1, t1) - max(c0, w.t0)
        if overlap > 0:
            w.checkpoint_s += overlap
            w.checkpoints += 1
            w.checkpoint_spans.append((c0, c1))
    return w


def _fill(w: RunWindow, steps: Steps, i: int, j: int, current: int) -> None:
    """Sums, maxima and quantiles of the steady steps in rows [i, j): C-level slices, no per-step Python."""
    n = j - i
    warm_rows, switches, measured, in_comm, _ = steps.row_counts(i, j)
    mask = None
    if switches or steps.loader[i] != current:
        loaders, warm = steps.loader[i:j], steps.warm[i:j]
        ours = bytes(map(current.__eq__, loaders))
        mask = bytes(map(operator.and_, ours, map(operator.not_, warm)))
        w.warm_steps = sum(map(operator.and_, ours, warm))
    elif warm_rows:
        mask = steps.warm[i:j].tobytes().translate(_FLIP)
        w.warm_steps = n - mask.count(1)
    offset = steps.total - len(steps)
    w._rows = (steps, i + offset, j + offset, mask)
    segments = [(0, n)] if mask is None else _segments(mask)
    m = sum(b - a for a, b in segments)
    w.steps = m
    if not m:
        return
    cum_dur, cum_wait, cum_samples = steps.prefix_sums()  # sums in O(1) per run of steady steps
    w.step_time_s = sum(cum_dur[i + b] - cum_dur[i + a] for a, b in segments)
    w.wait_s = sum(cum_wait[i + b] - cum_wait[i + a] for a, b in segments)
    w.samples = round(sum(cum_samples[i + b] - cum_samples[i + a] for a, b in segments))
    w.last_end = steps.end[i + segments[-1][1] - 1]
    if in_comm and mask is None:  # from the table's block sums: the same float, without a pass over every row
        w.comm_s = steps.fsum("comm", i, j)
    elif in_comm:  # some step in the rows spent time in collectives (0 otherwise, as the sum of zeros is)
        w.comm_s = math.fsum(_pick(steps.comm, i, segments))
    if measured and mask is None:
        w.exposed_s = steps.fsum("exposed", i, j, measured=True)
        w.exposed_wait_s = steps.fsum("exposed_wait", i, j)
        w.exposed_steps = measured
    exposed = _pick(steps.exposed, i, segments) if measured and mask is not None else None
    if exposed is not None and exposed.tobytes() != _NAN8 * m:  # a step has a measured exposed wait (CUDA)
        known_exposed = known(exposed)
        w.exposed_s = math.fsum(known_exposed)
        w.exposed_wait_s = math.fsum(_pick(steps.exposed_wait, i, segments))
        w.exposed_steps = len(known_exposed)
    stride = _stride(m)
    sample = array("d")
    for a, b in segments:  # strided straight off the table: a long window is never copied whole
        sample += steps.dur[i + a : i + b : stride]
    ordered = w.sorted_durations = sorted(sample)
    w.step_p50_s = _sorted_quantile(ordered, 0.5)
    w.step_p95_s = _sorted_quantile(ordered, 0.95)


_NAN8 = array("d", [math.nan]).tobytes()
_FLIP = bytes([1, 0]) + bytes(254)  # warm flag -> steady flag
# Sampling strides are primes, so a loop that is slow every 10th, 50th or 100th step is sampled at every phase.
_PRIMES = (
    2,
    3,
    5,
    7,
    11,
    13,
    17,
    19,
    23,
    29,
    31,
    37,
    41,
    43,
    47,
    53,
    59,
    61,
    67,
    71,
    73,
    79,
    83,
    89,
    97,
    101,
    127,
    151,
    199,
    251,
    307,
    401,
    503,
    601,
    701,
    809,
    907,
    1009,
)


def _stride(m: int) -> int:
    need = -(-m // MAX_DETAIL)
    if need <= 1:
        return 1
    return next((p for p in _PRIMES if p >= need), need)


def long_candidates(steps: Steps, limit: float) -> list[tuple[int, float]]:
    """(global index, duration) of every step in the table longer than a threshold at most ``limit``.

    Kept on the table and extended with the steps added since the last call, so a window that slides
    by a second looks at a second of new steps, not at all of them. Rescanned when the threshold is
    too far below ``limit`` (candidates would pile up) or above it, or the table was cleared."""
    offset = steps.total - len(steps)
    cache = steps.scan
    if cache is None or not (LONG_SLACK * limit <= cache[0] <= limit) or cache[1] > steps.total:
        threshold, scanned, rows = LONG_MARGIN * limit, offset, []
    else:
        threshold, scanned, rows = cache
        if rows and rows[0][0] < offset:  # trimmed off the table
            rows = rows[bisect_left(rows, (offset, -math.inf)) :]
    scanned = max(scanned, offset)
    new = steps.dur[scanned - offset :]
    if new and (max(new) > threshold or not math.isfinite(sum(new))):  # max() skips a nan only after the first
        over = bytes(map(threshold.__lt__, new))
        if over.count(1):
            rows.extend(
                zip(itertools.compress(range(scanned, steps.total), over), itertools.compress(new, over), strict=True)
            )
    steps.scan = (threshold, steps.total, rows)
    return rows


def _segments(mask: bytes) -> list[tuple[int, int]]:
    """The runs of ones in a 0/1 byte mask as [start, stop) pairs (warm-up and loader switches are rare,
    so a window's steady steps are a few long runs)."""
    out = []
    pos, n = 0, len(mask)
    while pos < n:
        a = mask.find(1, pos)
        if a < 0:
            break
        b = mask.find(0, a)
        b = n if b < 0 else b
        out.append((a, b))
        pos = b
    return out


def _pick(col: array[float], base: int, segments: list[tuple[int, int]]) -> array[float]:
    if len(segments) == 1:
        a, b = segments[0]
        return col[base + a : base + b]
    out: array[float] = array(col.typecode)
    for a, b in segments:
        out += col[base + a : base + b]
    return out


def _clamped_quantile(ordered: list[float], q: float) -> float:
    """``_sorted_quantile`` of the sorted values each raised to at least 0 (as max(0.0, x) raises them)."""
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    a, b = max(0.0, ordered[lo]), max(0.0, ordered[hi])
    return a + (b - a) * (pos - lo)


def _sorted_quantile(ordered: list[float], q: float) -> float:
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class HostWindow:
    cpu_busy: float = math.nan  # % of the usable cores busy (the host's busy % where nothing limits them)
    cpu_iowait: float = math.nan  # host-wide iowait, % of all logical CPUs
    cores: int = 1  # usable cores, whole (at least 1): min(CPU affinity, cgroup CPU quota)
    mem_used_pct_max: float = math.nan
    swap_used_mb_max: float = math.nan
    swap_growth_mb: float = math.nan
    host_cores: int = 0  # the host's logical CPUs (0: not recorded)
    cores_usable: float = math.nan  # usable cores as measured (a quota may give 2.5)
    cores_source: str = "host"  # what limits them: host, affinity, cgroup v2 cpu.max, cgroup v1 cpu.cfs_quota_us
    cores_of: str = "host"  # whose limits those are: the run's main process ("run"), the monitor's, or the host's
    sharing_runs: int = 1  # runs on this host drawing on the same cores in the window: they share the idle ones
    host_cpu_busy: float = math.nan  # busy % of all the host's CPUs (cpu_busy is of the usable ones)

    @property
    def iowait_cores(self) -> float:
        """Host iowait as a number of CPUs: each task blocked on I/O holds at most one idle CPU in iowait."""
        return self.cpu_iowait / 100 * (self.host_cores or self.cores)

    @property
    def idle_cores(self) -> float:
        """This run's share of the idle usable cores (ranks on one host share one budget)."""
        if is_nan(self.cpu_busy):
            return math.nan
        usable = self.cores if is_nan(self.cores_usable) else self.cores_usable
        return max(0.0, usable * (1 - self.cpu_busy / 100)) / max(1, self.sharing_runs)

    def cores_evidence(self) -> dict[str, Any]:
        """Where the usable cores come from, for a finding's evidence."""
        return {
            "cores_usable": round(self.cores_usable, 2) if not is_nan(self.cores_usable) else None,
            "cores_source": self.cores_source,
            "cores_of": self.cores_of,
            "host_cores": self.host_cores or None,
            "host_cpu_busy_all_pct": round(self.host_cpu_busy, 1) if not is_nan(self.host_cpu_busy) else None,
            "cores_shared_by_runs": self.sharing_runs,
            "idle_cores_share": round(self.idle_cores, 2) if not is_nan(self.idle_cores) else None,
        }


def host_window(store: Store, t0: float, t1: float, run: Run | None = None) -> HostWindow:
    """Host figures over [t0, t1]. With ``run``: its usable cores (its main process's CPU affinity and cgroup
    quota, else the monitor's own), the busy share of those cores, and how many runs on this host share them."""
    h = HostWindow()
    h.cpu_busy = mean(store.values_between("cpu.busy", t0, t1))
    h.cpu_iowait = mean(store.values_between("cpu.iowait", t0, t1))
    cores = store.latest("cpu.cores")
    h.host_cores = int(cores) if cores and not is_nan(cores) else 0
    h.cores = h.host_cores or 1
    h.host_cpu_busy = h.cpu_busy
    _usable_cores(h, store, t0, t1, run)
    if run is not None:
        h.sharing_runs = _sharing_runs(store, run, t0, t1)
    mem = known(store.values_between("mem.used_pct", t0, t1))
    h.mem_used_pct_max = max(mem) if mem else math.nan
    swap = known(store.values_between("swap.used_mb", t0, t1))
    if swap:
        h.swap_used_mb_max = max(swap)
        h.swap_growth_mb = swap[-1] - swap[0]
    return h


def _last(store: Store, key: str, t0: float, t1: float) -> float:
    vals = known(store.values_between(key, t0, t1))
    return vals[-1] if vals else math.nan


def _usable_cores(h: HostWindow, store: Store, t0: float, t1: float, run: Run | None) -> None:
    pid = run.proc_pid if run is not None else None
    names = {f: PROC.key(pid, "cpu_" + f) for f in _BUDGET} if pid is not None else {}
    if pid is None or is_nan(_last(store, names["usable"], t0, t1)):
        names, h.cores_of = {f: "cpu." + f for f in _BUDGET}, "monitor"
    usable = _last(store, names["usable"], t0, t1)
    if is_nan(usable):
        h.cores_of = "host"
        return
    if h.cores_of != "monitor":
        h.cores_of = "run"
    h.cores_usable = usable
    affinity = _last(store, names["affinity"], t0, t1)
    quotas = [(q, v) for v in (2, 1) if not is_nan(q := _last(store, names[f"quota_v{v}"], t0, t1))]
    if quotas and min(quotas)[0] < (affinity if not is_nan(affinity) else math.inf):
        h.cores_source = "cgroup v2 cpu.max" if min(quotas)[1] == 2 else "cgroup v1 cpu.cfs_quota_us"
    elif not is_nan(affinity) and h.host_cores and affinity < h.host_cores:
        h.cores_source = "affinity"
    if h.cores_source == "host":
        return  # nothing limits the run: the host's figures as they are
    h.cores = max(1, int(usable + 1e-9))
    busy = mean(store.values_between(names["usable_busy"], t0, t1))
    if not is_nan(busy):
        h.cpu_busy = busy


_BUDGET = ("usable", "affinity", "quota_v2", "quota_v1", "usable_busy", "budget_id")


def _sharing_runs(store: Store, run: Run, t0: float, t1: float) -> int:
    """Runs of this host in [t0, t1] whose main processes draw on the same cores as ``run``'s (itself included)."""

    def budget(r: Run) -> float:
        return math.nan if r.proc_pid is None else _last(store, PROC.key(r.proc_pid, "cpu_budget_id"), t0, t1)

    mine = budget(run)
    n = 0
    for other in store.runs.values():
        if other.host != run.host or other.first_seen > t1 or other.last_seen < t0:
            continue
        theirs = budget(other)
        if other is run or is_nan(mine) or is_nan(theirs) or theirs == mine:
            n += 1
    return max(1, n)
