"""Two recordings (or two runs of recordings) side by side: each figure on both sides, the change, and whether
the change is beyond run-to-run noise (``trainmon.compare.bootstrap``).

A side is ``FILE`` (every run of the recording) or ``FILE#RUN`` (one of its runs): ``RUN`` is ``rank:N``,
``pid:N`` or ``N``, the N-th run of the report's runs table (from 1). Runs of the two sides are paired by rank
where every run has one, else in the report's order. The verdict and its timeline are the recording's.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmon.compare import bootstrap as bs
from trainmon.compare.samples import StepWindows, series_windows, span_of, step_windows, system_series
from trainmon.labels import run_label
from trainmon.report.schema import Report, RunRow, TimeBudgetRow

if TYPE_CHECKING:
    from trainmon.diagnose.rules import Thresholds
    from trainmon.store.run import Run
    from trainmon.store.store import Store


class DiffError(ValueError):
    """A side that cannot be read or a run that is not there: one line for the user."""


def _exposed(s: bs.Sums) -> float:
    total, wait, _samples, exposed, exposed_wait = s
    if exposed_wait <= 0 or total <= 0:
        return math.nan
    return min(1.0, exposed / exposed_wait) * wait / total


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    relative: bool  # the change as a share of A (times, throughput); else in the figure's own unit (shares)
    higher_is_worse: bool


STEP_FIGURES: list[tuple[Figure, bool, Any]] = [  # (figure, from step times rather than sums, statistic)
    (Figure("step_time_p50_ms", "step time p50 ms", True, True), True, bs.quantile_of(0.5)),
    (Figure("step_time_p95_ms", "step time p95 ms", True, True), True, bs.quantile_of(0.95)),
    (Figure("data_wait_fraction", "data wait", False, True), False, bs.ratio_of(lambda s: s[1] / s[0])),
    (Figure("exposed_wait_fraction", "exposed wait", False, True), False, bs.ratio_of(_exposed)),
    (
        Figure("samples_per_s", "samples/s", True, False),
        False,
        bs.ratio_of(lambda s: s[2] / s[0] if s[2] > 0 else math.nan),
    ),
]


@dataclass(frozen=True)
class FigureDiff:
    figure: Figure
    change: bs.MetricChange


@dataclass
class Side:
    source: str  # as given on the command line
    path: str
    selector: str | None
    report: Report
    runs: list[tuple[RunRow, StepWindows]]
    store: Store


@dataclass
class PairDiff:
    a: str  # "rank 0", "pid 706"
    b: str
    figures: list[FigureDiff]
    budgets: tuple[TimeBudgetRow | None, TimeBudgetRow | None] = (None, None)  # each side's time budget


@dataclass
class Diff:
    a: Side
    b: Side
    pairs: list[PairDiff]
    unpaired: list[str]  # "A: rank 3" for a run the other side does not have
    system: list[FigureDiff]
    resamples: int = bs.RESAMPLES
    seed: int = bs.SEED
    confidence: float = bs.CONFIDENCE
    gate: dict[str, Any] = field(default_factory=dict)


def split_source(arg: str) -> tuple[str, str | None]:
    """``FILE#RUN`` → (FILE, RUN); a path that exists as given (even with a ``#``) is a whole recording."""
    if "#" not in arg or os.path.exists(arg):
        return arg, None
    path, _, selector = arg.rpartition("#")
    return path, selector


def run_name(row: RunRow) -> str:
    return run_label(row["rank"], row["pid"])


def load_side(arg: str, thresholds: Thresholds | None = None) -> Side:
    from trainmon.record import RecordingError, load_recording
    from trainmon.report import build_report

    path, selector = split_source(arg)
    try:
        store, _warnings = load_recording(path)
    except RecordingError as exc:
        raise DiffError(f"{path}: {exc}") from None
    report = build_report(store, thresholds)
    runs = _match_runs(report, store)
    if selector is not None:
        runs = [_select(arg, selector, runs)]
    return Side(arg, path, selector, report, runs, store)


def _match_runs(report: Report, store: Store) -> list[tuple[RunRow, StepWindows]]:
    """Each run of the report with its store run's step windows."""
    with store.lock:
        left: list[Run] = list(store.runs.values())
        out = []
        for row in report["runs"]:
            for r in left:
                if (r.pid, r.rank, r.name) == (row["pid"], row["rank"], row["name"]):
                    left.remove(r)
                    out.append((row, step_windows(r)))
                    break
    return out


def _select(arg: str, selector: str, runs: list[tuple[RunRow, StepWindows]]) -> tuple[RunRow, StepWindows]:
    kind, sep, value = selector.replace("=", ":").partition(":")
    if not sep:
        kind, value = "", kind
    try:
        n = int(value)
    except ValueError:
        raise DiffError(f"{arg}: a run is rank:N, pid:N or N (its place in the runs table), not {selector!r}") from None
    if kind == "" and 1 <= n <= len(runs):
        return runs[n - 1]
    found = [
        (row, w) for row, w in runs if (row["rank"] if kind == "rank" else row["pid"] if kind == "pid" else None) == n
    ]
    if kind not in ("", "rank", "pid") or not found:
        have = ", ".join(run_name(row) for row, _ in runs) or "none"
        raise DiffError(f"{arg}: no run {selector!r} in that recording (its runs: {have})")
    return found[0]


def pair_runs(a: Side, b: Side) -> tuple[list[tuple[int, int]], list[str]]:
    """Indices of the runs compared with each other, and the runs left without a partner."""
    ra, rb = [row for row, _ in a.runs], [row for row, _ in b.runs]
    if len(ra) == 1 and len(rb) == 1:
        return [(0, 0)], []
    if all(r["rank"] is not None for r in ra + rb):
        by_rank = {r["rank"]: j for j, r in enumerate(rb)}
        pairs = [(i, by_rank[r["rank"]]) for i, r in enumerate(ra) if r["rank"] in by_rank]
    else:
        pairs = [(i, i) for i in range(min(len(ra), len(rb)))]
    paired_a, paired_b = {i for i, _ in pairs}, {j for _, j in pairs}
    unpaired = [f"A: {run_name(r)}" for i, r in enumerate(ra) if i not in paired_a]
    unpaired += [f"B: {run_name(r)}" for j, r in enumerate(rb) if j not in paired_b]
    return pairs, unpaired


def compare_steps(a: StepWindows, b: StepWindows, seed: int = bs.SEED) -> list[FigureDiff]:
    thinned = (bs.thin(a.durations_ms), bs.thin(b.durations_ms))
    out = []
    for figure, from_times, stat in STEP_FIGURES:
        if from_times:
            change = bs.compare(a.durations_ms, b.durations_ms, stat, relative=figure.relative, draw=thinned, seed=seed)
        else:
            change = bs.compare(a.sums, b.sums, stat, relative=figure.relative, seed=seed)
        if change.a is not None or change.b is not None:
            out.append(FigureDiff(figure, change))
    return out


def compare_system(a: Side, b: Side, seed: int = bs.SEED) -> list[FigureDiff]:
    """The host's figures over each side's steady span: medians, changes in their own unit (percent points)."""
    span_a = span_of(w for _, w in a.runs)
    span_b = span_of(w for _, w in b.runs)
    if span_a is None or span_b is None:
        return []
    names_a, names_b = system_series(a.store), system_series(b.store)
    out = []
    for label in [*names_a, *(n for n in names_b if n not in names_a)]:
        wa = series_windows(a.store, names_a[label], *span_a) if label in names_a else []
        wb = series_windows(b.store, names_b[label], *span_b) if label in names_b else []
        change = bs.compare(wa, wb, bs.quantile_of(0.5), relative=False, seed=seed)
        if change.a is not None or change.b is not None:
            out.append(FigureDiff(Figure(label, f"{label} p50", False, True), change))
    return out


def diff(a: Side, b: Side, seed: int = bs.SEED) -> Diff:
    pairs, unpaired = pair_runs(a, b)
    compared = [
        PairDiff(
            run_name(a.runs[i][0]),
            run_name(b.runs[j][0]),
            compare_steps(a.runs[i][1], b.runs[j][1], seed),
            (a.runs[i][0].get("time_budget"), b.runs[j][0].get("time_budget")),
        )
        for i, j in pairs
    ]
    return Diff(a, b, compared, unpaired, compare_system(a, b, seed), seed=seed)


def slowdown_gate(d: Diff, limit: float) -> str | None:
    """Why B fails ``--max-slowdown``: a pair whose step time p50 grew by more than ``limit`` of A's, beyond
    noise; or no pair with steady steps on both sides (a gate that cannot check fails rather than passes)."""
    checked = 0
    for pair in d.pairs:
        c = next((f.change for f in pair.figures if f.figure.key == "step_time_p50_ms"), None)
        if c is None or c.change is None:
            continue
        checked += 1
        if c.change > limit and c.beyond_noise:
            who = pair.b if pair.a == pair.b else f"{pair.a} → {pair.b}"
            return (
                f"{who}: step time p50 {c.a:.1f} → {c.b:.1f} ms ({c.change:+.1%}, "
                f"{d.confidence:.0%} interval {c.low:+.1%}..{c.high:+.1%}), above --max-slowdown {limit:.1%}"
            )
    if not checked:
        return "no run has steady steps on both sides to check against --max-slowdown"
    return None
