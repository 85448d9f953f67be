"""A run's time budget: its wall time split into parts so that every second lies in exactly one of them.

The wall time runs from the run's first sign (its hello, or an earlier first step) to its close, or to the instant
looked at while it lives; where the step table was trimmed (a long run), from its oldest step kept. Spans are laid
on that time first, in ``PRECEDENCE`` order, each taking only the seconds no earlier one took (the overlap rule):

1. ``compilation``: torch.compile's compilations (the agent's spans from torch._dynamo's compile callbacks: first
   compilations, recompilations, backward graphs compiled at their first call); first, since a long compilation is
   silent enough for the hang rule to take it for a freeze, and a collection torch runs after compiling is its own;
2. ``frozen``: silences the hang rule held over (``trainmon.diagnose.rules.hang.frozen_spans``);
3. ``checkpoints``: saves (``torch.save``, distributed checkpoints, a framework's checkpoint span);
4. ``evaluation``: phases the training named eval, validation or test (``trainmon.agent.phase``, the framework
   callbacks);
5. ``epoch_restarts``: DataLoader workers started again by a new iterator, from its start for what it cost;
6. ``gc``: garbage-collection pauses.

What is left of each step goes to ``warmup`` (a warm-up step), else to the steady parts: ``data_wait`` and
``communication`` (the step's own measurements, capped by what is left) and ``compute`` (the rest). A steady step
longer than ``long_step_factor`` × the median steady step that is not mostly waiting (on data or a collective)
keeps the median as a steady step; its excess goes to ``evaluation`` when another loader's iterator started in it
(an evaluation loop), else to ``long_steps``, by cause: the training's own phase it overlaps, or "unexplained".
Time in no step and no span is ``unobserved``: before the first step, between steps, after the last.

Runs recorded before the agent timed compilations have no compilation spans: their first-step compilation lies in
warm-up. Pure functions of one run; standard library only.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from trainmon.diagnose.rules.hang import Freeze, frozen_spans
from trainmon.diagnose.stats import quantile
from trainmon.diagnose.thresholds import Thresholds
from trainmon.store.run import Run

PARTS = (
    "unobserved_before",
    "warmup",
    "data_wait",
    "communication",
    "compute",
    "evaluation",
    "checkpoints",
    "epoch_restarts",
    "gc",
    "compilation",
    "long_steps",
    "frozen",
    "unobserved_gaps",
    "unobserved_after",
)
PRECEDENCE = ("compilation", "frozen", "checkpoints", "evaluation", "epoch_restarts", "gc")
NOT_MEASURED: tuple[str, ...] = ()  # parts no recording measures (reports list them; compilation is measured)
EVAL_WORDS = ("eval", "valid", "test")
UNEXPLAINED = "unexplained"
MOSTLY_WAITING = 0.5  # a long step waiting this share of its time or more is a data or communication wait

Span = tuple[float, float]
Piece = tuple[float, float, str]


@dataclass
class TimeBudget:
    start: float  # the run's wall time, on the store's clock
    end: float
    parts: dict[str, float]  # seconds per part of PARTS, in that order; they sum to end - start
    long_steps: dict[str, float] = field(default_factory=dict)  # the long_steps part by cause
    freezes: list[Freeze] = field(default_factory=list)  # the frozen spans, clipped to [start, end]
    trimmed: bool = False  # the run's oldest steps were no longer held: it starts at the oldest one kept
    # The compute part split: "model" (forward, backward, optimizer) and "own_code" (the loop's own code, where the
    # agent timed the model; 0 where nothing measured it); they sum to parts["compute"].
    compute: dict[str, float] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return self.end - self.start

    @property
    def total_s(self) -> float:
        return math.fsum(self.parts.values())


def is_eval(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in EVAL_WORDS)


def wall_span(run: Run, end: float) -> Span:
    """The run's wall time up to ``end`` (the instant looked at; a closed run ends at its close by then)."""
    steps = run.steps
    t1 = min(end, run.last_seen) if not run.connected else end
    if len(steps):
        t1 = max(t1, min(end, steps.end[-1]))
    t0 = run.first_seen
    if len(steps):
        t0 = steps.start[0] if steps.total > len(steps) else min(t0, steps.start[0])
    return t0, max(t0, t1)


def time_budget(run: Run, end: float, th: Thresholds) -> TimeBudget | None:
    """The run's time budget up to ``end``; None for a run with no step (sampled, or not started)."""
    steps = run.steps
    if not run.steps.total or not len(steps):
        return None
    t0, t1 = wall_span(run, end)
    j = bisect_right(steps.end, t1)  # rows [0, j): the steps that ended by t1
    freezes = [f for f in frozen_spans(run, t0, t1, th) if f.end > t0 and f.start < t1]
    pieces = paint(_layers(run, freezes), t0, t1)
    parts = dict.fromkeys(PARTS, 0.0)
    for s, e, label in pieces:
        parts[label] += e - s
    long_steps: dict[str, float] = {}
    compute = {"model": 0.0, "own_code": 0.0}
    painted = _painted_rows(run, j, pieces)
    if j:
        _steps_parts(run, j, painted, th, parts, long_steps, compute)
        first, last = steps.start[0], steps.end[j - 1]
    else:
        first = last = t1
    outside = (t1 - t0) - _covered(run, j)
    painted_outside = math.fsum(e - s for s, e, _ in pieces) - math.fsum(painted.values())
    before = (first - t0) - _painted_between(pieces, t0, first)
    after = (t1 - last) - _painted_between(pieces, last, t1)
    parts["unobserved_before"] = before
    parts["unobserved_after"] = after
    parts["unobserved_gaps"] = outside - painted_outside - before - after
    clipped = [Freeze(max(f.start, t0), min(f.end, t1), f.limit, f.p95, f.resumed) for f in freezes]
    compute["model"] = max(0.0, parts["compute"] - compute["own_code"])
    return TimeBudget(t0, t1, parts, long_steps, clipped, steps.total > len(steps), compute)


def _layers(run: Run, freezes: list[Freeze]) -> list[tuple[str, list[Span]]]:
    """The spans laid on the run's time, in PRECEDENCE order."""
    restarts = run.restarts
    gc = run.gc
    return [
        ("compilation", run.compiles.spans()),
        ("frozen", [(f.start, f.end) for f in freezes]),
        ("checkpoints", list(run.checkpoints)),
        ("evaluation", [(p0, p1) for p0, p1, name in run.phases if is_eval(name)]),
        ("epoch_restarts", [(t, t + c) for t, c in zip(restarts.t, restarts.cost, strict=True)]),
        ("gc", list(zip(gc.start, gc.end, strict=True))),
    ]


def paint(layers: list[tuple[str, list[Span]]], t0: float, t1: float) -> list[Piece]:
    """Disjoint (start, end, label) pieces in time order: each layer's spans, clipped to [t0, t1], less what the
    layers before it took."""
    taken: list[Piece] = []
    for label, spans in layers:
        ends = array("d", (e for _, e, _ in taken))
        new: list[Piece] = []
        for s, e in _merged(spans, t0, t1):
            k = bisect_right(ends, s)  # the first piece taken that ends after s
            cur = s
            while k < len(taken) and taken[k][0] < e:
                if taken[k][0] > cur:
                    new.append((cur, taken[k][0], label))
                cur = max(cur, taken[k][1])
                k += 1
            if cur < e:
                new.append((cur, e, label))
        if new:
            taken = sorted(taken + new)
    return taken


def _merged(spans: list[Span], t0: float, t1: float) -> list[Span]:
    """The spans clipped to [t0, t1], overlapping ones joined, in time order."""
    out: list[Span] = []
    for s, e in sorted((max(s, t0), min(e, t1)) for s, e in spans if e > t0 and s < t1 and e > s):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _painted_between(pieces: list[Piece], a: float, b: float) -> float:
    return math.fsum(max(0.0, min(e, b) - max(s, a)) for s, e, _ in pieces if s < b and e > a)


def _covered(run: Run, j: int) -> float:
    """Seconds the steps [0, j) cover (they follow each other: each starts where the one before ended, or later)."""
    steps = run.steps
    if not j:
        return 0.0
    cum = steps.prefix_sums()[0]
    return cum[j] - cum[0] - _overlap(steps.start, steps.end, j)


def _overlap(start: array[float], end: array[float], j: int) -> float:
    """Seconds by which steps [0, j) start before the one before them ended (none, as the deriver makes them)."""
    if j < 2 or all(map(operator.le, end[: j - 1], start[1:j])):
        return 0.0
    return math.fsum(max(0.0, e - s) for e, s in zip(end[: j - 1], start[1:j], strict=True))


def _painted_rows(run: Run, j: int, pieces: list[Piece]) -> dict[int, float]:
    """Row → the painted seconds inside that step (rows [0, j) that hold any)."""
    steps = run.steps
    start, end = steps.start, steps.end
    out: dict[int, float] = {}
    for s, e, _ in pieces:
        k = bisect_right(end, s, 0, j)  # the first step that ends after s
        while k < j and start[k] < e:
            lo = max(s, start[k], end[k - 1] if k else start[k])  # an overlapping step's shared time counted once
            hi = min(e, end[k])
            if hi > lo:
                out[k] = out.get(k, 0.0) + hi - lo
            k += 1
    return out


def _steps_parts(
    run: Run,
    j: int,
    painted: dict[int, float],
    th: Thresholds,
    parts: dict[str, float],
    long_steps: dict[str, float],
    compute: dict[str, float],
) -> None:
    """Adds the steps' own time (less what spans took: ``painted``, by row) to warm-up, the steady parts and long
    steps."""
    steps = run.steps
    dur, wait, comm, warm, own = steps.dur, steps.wait, steps.comm, steps.warm, steps.own
    warm_rows = _ones(warm[:j].tobytes())
    steady = array("d", dur[:j])
    for k in reversed(warm_rows):
        del steady[k]
    p50 = quantile(steady, 0.5)
    limit = th.long_step_factor * p50 if not math.isnan(p50) else math.inf
    long_rows = _ones(bytes(map(limit.__lt__, dur[:j]))) if math.isfinite(limit) else []
    overlapped = _overlapped_rows(steps.start, steps.end, j)
    special = sorted(set(painted) | set(warm_rows) | set(long_rows) | set(overlapped))
    # The rows no span touched, steady, of normal length: summed whole (C-level running sums).
    cum_dur, cum_wait, _ = steps.prefix_sums()
    bulk_dur = cum_dur[j] - cum_dur[0] - math.fsum(dur[k] for k in special)
    bulk_wait = cum_wait[j] - cum_wait[0] - math.fsum(wait[k] for k in special)
    bulk_comm = steps.fsum("comm", 0, j) - math.fsum(comm[k] for k in special)
    w = min(max(0.0, bulk_wait), max(0.0, bulk_dur))
    c = min(max(0.0, bulk_comm), max(0.0, bulk_dur - w))
    bulk_own = steps.fsum("own", 0, j) - math.fsum(own[k] for k in special)
    parts["data_wait"] += w
    parts["communication"] += c
    parts["compute"] += bulk_dur - w - c
    compute["own_code"] += min(max(0.0, bulk_own), max(0.0, bulk_dur - w - c))
    evals = _eval_starts(run)
    for k in special:
        lo = max(steps.start[k], steps.end[k - 1]) if k else steps.start[k]
        left = max(0.0, steps.end[k] - lo - painted.get(k, 0.0))
        if warm[k]:
            parts["warmup"] += left
            continue
        w = min(wait[k], left)
        c = min(comm[k], left - w)
        if left > limit and w + c < MOSTLY_WAITING * left:
            excess = left - p50
            cause = _cause(run, evals, steps.start[k], steps.end[k])
            if cause == "evaluation":
                parts["evaluation"] += excess
            else:
                parts["long_steps"] += excess
                long_steps[cause] = long_steps.get(cause, 0.0) + excess
            left = p50
            w = min(w, left)
            c = min(c, left - w)
        parts["data_wait"] += w
        parts["communication"] += c
        parts["compute"] += left - w - c
        compute["own_code"] += min(own[k] * (left / max(dur[k], 1e-12)), max(0.0, left - w - c))


def _ones(flags: bytes) -> list[int]:
    """Indices of the non-zero bytes."""
    zero = bytes(1)
    if flags.count(zero) == len(flags):
        return []
    return [k for k, f in enumerate(flags) if f]


def _overlapped_rows(start: array[float], end: array[float], j: int) -> list[int]:
    """Rows that start before the step before them ended (none, as the deriver makes them)."""
    if j < 2 or all(map(operator.le, end[: j - 1], start[1:j])):
        return []
    return [k + 1 for k, (e, s) in enumerate(zip(end[: j - 1], start[1:j], strict=True)) if s < e]


def _eval_starts(run: Run) -> array[float]:
    """When iterators of loaders other than the train loader started (an evaluation loop), in time order."""
    train = run.train_loader()
    return array("d", sorted(t for t, lid in run.iter_starts if train is None or lid != train.id))


def _cause(run: Run, evals: array[float], s: float, e: float) -> str:
    """What a long step's excess went to: "evaluation" (another loader's iterator started in it), the training's
    own phase it overlaps, else "unexplained"."""
    if bisect_left(evals, s) < bisect_right(evals, e):
        return "evaluation"
    names = sorted({name for p0, p1, name in run.phases if p0 < e and p1 > s and not is_eval(name)})
    return names[0] if names else UNEXPLAINED


def shares(budget: TimeBudget) -> list[tuple[str, float]]:
    """(part, share of the wall time) for the parts that hold any time, largest first."""
    wall = budget.wall_s
    if wall <= 0:
        return []
    return sorted(((k, v / wall) for k, v in budget.parts.items() if v > 0), key=lambda kv: -kv[1])


def freeze_totals(freezes: list[Freeze]) -> float:
    return math.fsum(f.seconds for f in freezes)


__all__ = ["PARTS", "PRECEDENCE", "TimeBudget", "is_eval", "paint", "shares", "time_budget", "wall_span"]
