"""The report's verdict: the rules replayed over the whole recording, weighed by how long each cause held."""

from __future__ import annotations

from dataclasses import dataclass

from trainmon.diagnose.engine import VerdictTracker, evaluate
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.rules import Thresholds
from trainmon.report.schema import FindingDict, HeldFinding, TimelineEntry
from trainmon.store.store import Store

MAX_EVALUATIONS = 900
NO_STEPS = Finding(
    "insufficient_data",
    "ok",
    "no training steps were recorded",
    ["attach the agent: trainmon.agent.attach(), or trainmon run -- python train.py"],
    {},
)


@dataclass
class Judgement:
    verdict: FindingDict
    findings: list[HeldFinding]  # every other cause seen, worst first
    timeline: list[TimelineEntry]  # each change of the shown verdict, seconds from the start


def finding_dict(f: Finding) -> FindingDict:
    return {
        "code": f.code,
        "severity": f.severity,
        "summary": f.summary,
        "advice": list(f.advice),
        "evidence": dict(f.evidence),
    }


def judge(store: Store, first: float, end: float, th: Thresholds) -> Judgement:
    """Evaluate the rules at up to MAX_EVALUATIONS times from ``first`` to ``end``.

    The verdict is the cause shown longest (``insufficient_data`` only when nothing else was ever shown).
    """
    tracker = VerdictTracker(hold_s=th.hold_s)
    held: dict[str, float] = {}
    latest: dict[str, Finding] = {}
    dt = max(1.0, max(0.0, end - first) / MAX_EVALUATIONS)
    t = first + dt
    prev_t, prev_code = None, None
    while t <= end + 1e-9 or prev_t is None:
        findings = evaluate(store, min(t, end), th)
        for f in findings:
            latest[f.code] = f
        shown = tracker.update(t, findings)
        if shown is not None:
            if prev_t is not None and prev_code is not None:
                held[prev_code] = held.get(prev_code, 0.0) + (t - prev_t)
            prev_t, prev_code = t, shown.code
        if t >= end:
            break
        t = min(t + dt, end)
    judged = {c: s for c, s in held.items() if c != "insufficient_data"}
    if judged:
        code = max(judged, key=lambda c: judged[c])
    elif tracker.current is not None:
        code = tracker.current.code
    else:
        code = "insufficient_data"
    others: list[HeldFinding] = [
        {**finding_dict(f), "held_s": round(held.get(c, 0.0), 1)}
        for c, f in sorted(latest.items(), key=lambda kv: kv[1].rank)
        if c not in (code, "insufficient_data", "ok.compute_bound")
    ]
    return Judgement(
        verdict=finding_dict(_finding_for(code, tracker, latest)),
        findings=others,
        timeline=[{"t": round(tc - first, 2), "code": c} for tc, c in tracker.changes],
    )


def _finding_for(code: str, tracker: VerdictTracker, latest: dict[str, Finding]) -> Finding:
    if tracker.current is not None and tracker.current.code == code:
        return tracker.current
    return latest.get(code, NO_STEPS)
