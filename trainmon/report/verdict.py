"""The report's verdict: the recording cut into phases, the rules judged over each phase's own steps, and the
headline weighed by severity and time.

A phase starts wherever the training's behaviour changed (``trainmon.analyses.phases``) and lasts at least
``phase_min_s``; neighbours with the same verdict are one phase. The headline is the worst cause that headed
phases for at least ``headline_share`` of the steady state (the longest held among those of that severity),
else the cause that headed the longest. A freeze (``stall.hang``: a silence the hang rule held over, found in the
recording by ``trainmon.diagnose.rules.hang.frozen_spans``) is a phase of its own, from the run's last activity to
its next one (it resumed) or to its end; the other phases are cut around it. It heads the report when it never
resumed, or when the run's freezes took ``freeze_headline_share`` of its wall time or more. Every finding carries
the seconds it held, headline or not.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from trainmon.analyses.phases import bin_width, features, segment, steady_span
from trainmon.analyses.time_budget import wall_span
from trainmon.diagnose.engine import evaluate
from trainmon.diagnose.findings import IMMEDIATE, SEVERITIES, Finding, code_advice, headline, ranked
from trainmon.diagnose.rules import Thresholds
from trainmon.diagnose.rules.hang import freeze_finding, frozen_spans
from trainmon.report.schema import HeldFinding, TimelineEntry
from trainmon.store.store import Store

Span = tuple[float, float]
MIN_PIECE_S = 1.0  # a span the cut around a freeze left shorter than this is joined to its neighbour

NO_STEPS = Finding(
    "insufficient_data",
    "ok",
    "no training steps were recorded",
    [],
    {},
    advice_items=code_advice("attach the agent: trainmon.agent.attach(), or trainmon run -- python train.py"),
)


@dataclass
class TimelinePhase:
    start: float
    end: float
    findings: list[Finding]  # everything that held over the phase, best-ranked first

    @property
    def top(self) -> Finding:
        return headline(self.findings) or NO_STEPS

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Judgement:
    verdict: HeldFinding
    findings: list[HeldFinding]  # every other cause that held, worst first
    timeline: list[TimelineEntry]  # every phase, seconds from the start


def finding_dict(f: Finding, held_s: float) -> HeldFinding:
    return {
        "code": f.code,
        "severity": f.severity,
        "summary": f.summary,
        "advice": list(f.advice),
        "advice_items": [item.to_dict() for item in f.advice_items],
        "evidence": dict(f.evidence),
        "held_s": round(held_s, 1),
    }


def judge(store: Store, first: float, end: float, th: Thresholds) -> Judgement:
    """Phases over the steady state (and the warm-up before it), the headline and every finding's time."""
    frozen = hang_phases(store, first, end, th)
    phases = judge_phases(store, th, [(p.start, p.end) for p in frozen])
    warmup: TimelinePhase | None = None
    if not phases:
        phases = [TimelinePhase(first, end, evaluate(store, end, th, since=first))]
    elif phases[0].start - first >= 1.0:
        warmup = TimelinePhase(first, phases[0].start, [_warmup(store, first, phases[0].start)])
    phases = sorted(phases + frozen, key=lambda p: p.start)
    top = headline_phase(phases, th).top
    held = held_seconds(phases)
    findings = _representatives(phases)
    timeline = [_entry(p, first) for p in ([warmup] if warmup is not None else []) + phases]
    others = [
        finding_dict(f, held[code])
        for f in ranked(list(findings.values()))
        if (code := f.code) not in (top.code, "insufficient_data")
    ]
    return Judgement(verdict=finding_dict(top, held.get(top.code, 0.0)), findings=others, timeline=timeline)


def judge_phases(store: Store, th: Thresholds, frozen: list[Span] | None = None) -> list[TimelinePhase]:
    """The steady state cut where behaviour changed, and around the ``frozen`` spans (which are phases of their
    own), each phase judged on its own; neighbours that come out with the same verdict (or a phase too thin to
    judge) are joined and judged again."""
    with store.lock:
        span = steady_span(store)
        if span is None:
            return []
        s0, s1 = span
        dt = bin_width(s0, s1)
        cuts = segment(features(store, s0, s1, dt), max(1, math.ceil(th.phase_min_s / dt - 1e-9)))
    edges = [s0, *(s0 + k * dt for k in cuts), s1]
    spans = _joined([piece for a, b in itertools.pairwise(edges) for piece in _outside((a, b), frozen or [])])
    phases = [TimelinePhase(a, b, evaluate(store, b, th, since=a)) for a, b in spans]
    while (i := _mergeable(phases)) is not None:  # each join leaves one phase fewer
        a, b = phases[i], phases[i + 1]
        phases[i : i + 2] = [TimelinePhase(a.start, b.end, evaluate(store, b.end, th, since=a.start))]
    return phases


def _outside(span: Span, frozen: list[Span]) -> list[Span]:
    """The parts of ``span`` outside every frozen span."""
    pieces = [span]
    for f0, f1 in frozen:
        pieces = [p for a, b in pieces for p in ((a, min(b, f0)), (max(a, f1), b)) if p[1] > p[0]]
    return pieces


def _joined(spans: list[Span]) -> list[Span]:
    """A sliver the cut around a freeze left (under MIN_PIECE_S) joined to the span it touches, if any."""
    out: list[Span] = []
    for a, b in spans:
        if out and out[-1][1] == a and (b - a < MIN_PIECE_S or out[-1][1] - out[-1][0] < MIN_PIECE_S):
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _mergeable(phases: list[TimelinePhase]) -> int | None:
    """The first phase to join with the next (they touch: no freeze between them): the same verdict and cause (its
    ``sub_cause``: busy workers and waiting ones joined would be judged on their average), or one side could not
    be judged."""
    for i in range(len(phases) - 1):
        a, b = phases[i].top, phases[i + 1].top
        same = (a.code, a.evidence.get("sub_cause")) == (b.code, b.evidence.get("sub_cause"))
        if phases[i].end == phases[i + 1].start and (same or "insufficient_data" in (a.code, b.code)):
            return i
    return None


def headline_phase(phases: list[TimelinePhase], th: Thresholds) -> TimelinePhase:
    """The phase whose cause heads the report: of the causes that headed phases for ``headline_share`` of the
    judged time or more, the worst (then the longest held); else the one held longest. Its longest phase at its
    worst severity."""
    judged = [p for p in phases if p.top.code != "insufficient_data"] or phases
    total = math.fsum(p.seconds for p in judged)
    shown: dict[str, float] = {}
    worst: dict[str, int] = {}
    for p in judged:
        shown[p.top.code] = shown.get(p.top.code, 0.0) + p.seconds
        worst[p.top.code] = max(worst.get(p.top.code, 0), SEVERITIES.index(p.top.severity))
    weighty = [c for c, s in shown.items() if s >= th.headline_share * total - 1e-9]
    code = max(weighty or shown, key=lambda c: (worst[c] if weighty else 0, shown[c]))
    code = next((p.top.code for p in judged if heads_at_once(p.top, th)), code)
    ours = [p for p in judged if p.top.code == code]
    return max(ours, key=lambda p: (SEVERITIES.index(p.top.severity), p.seconds))


def heads_at_once(f: Finding, th: Thresholds) -> bool:
    """A hang heads the report whatever else held: one that never resumed (it ended the run's work), or freezes that
    took ``freeze_headline_share`` of the run's wall time or more."""
    if f.code not in IMMEDIATE:
        return False
    share = f.evidence.get("frozen_share")
    return f.evidence.get("resumed") is not True or (share is not None and share >= th.freeze_headline_share)


def hang_phases(store: Store, first: float, end: float, th: Thresholds) -> list[TimelinePhase]:
    """Each freeze of each run (``frozen_spans``) within [first, end], a phase of its own judged by
    ``freeze_finding``: a hung run has no steps to cut phases from, and a freeze that resumed lies inside one."""
    out: list[TimelinePhase] = []
    with store.lock:
        for run in store.runs.values():
            freezes = frozen_spans(run, first, end, th)
            if not freezes:
                continue
            t0, t1 = wall_span(run, end)
            frozen_s = math.fsum(min(f.end, t1) - max(f.start, t0) for f in freezes)
            found = [(f, freeze_finding(store, run, f, t1 - t0, frozen_s)) for f in freezes]
            listing = [  # every freeze of the run, in each one's evidence: the report keeps one finding per code
                {
                    "t": round(f.start - first, 2),
                    "length_s": round(f.seconds, 1),
                    "resumed": f.resumed,
                    "main_thread_in": finding.evidence.get("main_thread_in"),
                }
                for f, finding in found
            ]
            for f, finding in found:
                finding.evidence["freezes"] = listing
                a, b = max(f.start, first), min(f.end, end)
                if b > a:
                    out.append(TimelinePhase(a, b, [finding]))
    return out


def held_seconds(phases: list[TimelinePhase]) -> dict[str, float]:
    """Seconds each code held, over every phase (as the headline or beside it)."""
    held: dict[str, float] = {}
    for p in phases:
        for code in {f.code for f in p.findings}:
            held[code] = held.get(code, 0.0) + p.seconds
    return held


def _representatives(phases: list[TimelinePhase]) -> dict[str, Finding]:
    """Per code, its finding from the phase where it was worst (then longest)."""
    best: dict[str, tuple[int, float, Finding]] = {}
    for p in phases:
        for f in p.findings:
            key = (SEVERITIES.index(f.severity), p.seconds)
            if f.code not in best or key > best[f.code][:2]:
                best[f.code] = (*key, f)
    return {code: f for code, (_, _, f) in best.items()}


def _warmup(store: Store, first: float, steady: float) -> Finding:
    """Before the first steady step: the recording's start, and the first steps (compilation, workers starting)."""
    with store.lock:
        spans = [r.steps.index_range(first, steady) for r in store.runs.values()]
    steps = sum(j - i for i, j in spans)
    what = f"warm-up: {steps} step(s) before the steady state, not judged" if steps else "no training step yet"
    return Finding("insufficient_data", "ok", what, [], {"steps": steps})


def _entry(p: TimelinePhase, first: float) -> TimelineEntry:
    top = p.top
    return {
        "t": round(p.start - first, 2),
        "code": top.code,
        "end": round(p.end - first, 2),
        "severity": top.severity,
        "summary": top.summary,
    }
