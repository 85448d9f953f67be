"""Evaluate every rule over the current window, and keep a verdict that does not flicker."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainmon.diagnose import advice, rules
from trainmon.diagnose.evidence import gather
from trainmon.diagnose.findings import IMMEDIATE, Finding, code_advice, headline, ranked
from trainmon.diagnose.live.change import Change, live_window
from trainmon.diagnose.live.host_window import host_window
from trainmon.diagnose.live.memo import WindowMemo
from trainmon.diagnose.live.spans import idle_spans
from trainmon.diagnose.live.window import RunWindow, busiest_loader, run_window, window_key
from trainmon.diagnose.rules import Rule, RuleContext
from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan
from trainmon.store.store import Store

SAME_CHANGE_S = 1.0  # live changes this close together are one change found twice
FRESH_S = 10.0  # a change shortens the hold of a new verdict this long after it
STALLS_MIN_S = 5.0  # a live window cut at a change is judged for recurring stalls once it spans this long
NO_AGENT = Finding(
    "insufficient_data",
    "ok",
    "no training process has reported steps yet",
    [],
    {},
    advice_items=code_advice("attach the agent: trainmon.agent.attach(), or trainmon run -- python train.py"),
)


def evaluate(
    store: Store,
    t: float,
    th: Thresholds | None = None,
    *,
    since: float | None = None,
    changes: list[Change] | None = None,
    window_memo: WindowMemo | None = None,
) -> list[Finding]:
    """All findings that hold at time ``t``, best-ranked first (pure: reads the store only).

    Live (``since`` None): each run's window is its last ``window_s``, or the steps since a change inside it
    (``trainmon.diagnose.live.change``), whose Change is appended to ``changes``. With ``since``: the steps and
    samples of [since, t] exactly, the steps of the loader that fed most of them (a report's phase).
    ``window_memo``: the caller's memo of each run's live window (``window.WindowMemo``), for a caller that asks
    every tick."""
    th = th or Thresholds()
    t0 = t - th.window_s if since is None else since
    findings: list[Finding] = []
    judged = 0
    jobs: dict[tuple[Any, ...], list[RunWindow]] = defaultdict(list)
    run_findings: dict[int, list[Finding]] = {}
    owners: list[tuple[int, Any]] = []  # (index of a run's first finding, the run): advice in its framework's words
    with store.lock:
        if window_memo is not None:
            window_memo.retain(store.runs.values())  # a run the store forgot takes its windows with it
        for run in list(store.runs.values()):
            if run.first_seen > t:
                continue
            if run.measured_by == "sampling":
                # An agent took over (trainmon attach): its exact figures judge the training from then on.
                if run.ended != "attached" and (run.connected or run.last_seen >= t0):
                    end = t if run.connected else min(t, run.last_seen)
                    ctx = RuleContext(store, th, end, t0, run=run, host=host_window(store, t0, end, run))
                    findings.append(sampled := rules.SAMPLED(ctx) or NO_AGENT)
                    judged += sampled.code != "insufficient_data"
                continue
            owners.append((len(findings), run))
            ctx = RuleContext(store, th, t, since, run=run)
            if ended := _first(rules.ENDING, ctx):
                findings.append(ended)
                judged += 1
                continue
            key = _unchanged_key(run, t0, t, th) if since is None and window_memo is not None else None
            cached = window_memo.judged.get(run, key) if key is not None and window_memo is not None else None
            if cached is None:
                cached = _judge(store, run, t, t0, since, th, ctx, window_memo)
                if key is not None and window_memo is not None:
                    window_memo.judged.put(run, key, cached)
            elif window_memo is not None and cached.window is not None:
                # the status line asks for this tick's window: the one judged, since the run sent nothing new
                window_memo.windows.put(run, window_key(run, t0, t, th.window_steps), cached.window)
            if cached.change is not None and changes is not None:
                changes.append(cached.change)
            own = list(cached.findings)
            if cached.window is None or not cached.judged:
                findings += own
                continue
            judged += 1
            jobs[run.job_key].append(cached.window)
            run_findings[run.id] = own
            findings += own
        advice.localise_runs(findings, owners)
        for windows in jobs.values():
            framework = advice.common_framework(w.run for w in windows)
            ctx = RuleContext(store, th, t, since, job=windows, run_findings=run_findings)
            findings += [advice.localise(f, framework) for f in _all(rules.PER_JOB, ctx)]
        findings += _all(rules.PER_HOST, RuleContext(store, th, t, since, host=host_window(store, t0, t)))
    if judged:
        findings = [f for f in findings if f.code != "insufficient_data"]
    if not findings:
        findings.append(NO_AGENT)
    return ranked(findings)


@dataclass
class RunJudgement:
    """What a run's window gave: the window judged (None: no steps in it, nothing judged), its live change, the
    run's own findings (or those before the warm-up gate and the gate's), and whether it passed the gate."""

    window: RunWindow | None
    change: Change | None
    findings: list[Finding]
    judged: bool


def _judge(
    store: Store,
    run: Any,
    t: float,
    t0: float,
    since: float | None,
    th: Thresholds,
    ctx: RuleContext,
    window_memo: WindowMemo | None,
) -> RunJudgement:
    """A run's window taken and judged by the per-run rules (after the ending rules found nothing)."""
    if since is None:
        w, change = live_window(run, t0, t, th, window_memo)
    else:
        w, change = run_window(run, since, t, min_steps=0, loader=busiest_loader(run, since, t)), None
    if w.steps == 0 and (not run.connected or run.last_seen < t0):
        return RunJudgement(None, change, [], False)  # ended before this window, or never stepped in it
    # Stalls recur: judged over a window cut at a change only once it is long enough to hold a pattern.
    ctx.window, ctx.stalls = w, change is None or w.span_s >= STALLS_MIN_S
    own = _all(rules.BEFORE_WARMUP, ctx)
    if gate := _first(rules.WARMUP_GATE, ctx):
        return RunJudgement(w, change, [*own, gate], False)
    # Host and process figures over the span the steps cover, not after the run stopped.
    end = t if is_nan(w.last_end) else min(t, w.last_end)
    ctx.host = host_window(store, w.t0, end, run)  # the run's usable cores, shared with its host's runs
    idle = idle_spans(w, th.long_step_factor)  # the workers are judged while the loop consumed their loader
    ctx.evidence = gather(store, run, w.t0, end, th.throttle_power_cap_clock, w.loader_id, idle)
    own += _all(rules.PER_RUN, ctx)
    return RunJudgement(w, change, [advice.fit_to_window(f, w) for f in own], True)  # no advice for what it has


def _unchanged_key(run: Any, t0: float, t: float, th: Thresholds) -> tuple[Any, ...]:
    """What a run's live judgement depends on besides the clock: everything the run sent (its revision, its step
    table), its connection, and whether it was last heard of inside the window. A run that sent nothing since the
    last tick keeps its judgement, and costs the tick its ending rules only (a hang is still found as time passes);
    its window stays the one taken when it last sent something (where the live window would reach back for its
    last ``window_steps`` steps anyway)."""
    steps = run.steps
    return (
        run.revision,
        steps.index_range(t0, t)[1],  # the steps that ended by t: a replay's cursor moving through a whole recording
        steps.total,
        len(steps),
        steps.edits,
        len(run.checkpoints),
        run.connected,
        run.ended,
        run.last_seen >= t0,
        id(th),
    )


def _first(stage: tuple[Rule, ...], ctx: RuleContext) -> Finding | None:
    """The first finding of a stage whose finding ends the judgement."""
    for rule in stage:
        if (f := rule(ctx)) is not None:
            return f
    return None


def _all(stage: tuple[Rule, ...], ctx: RuleContext) -> list[Finding]:
    """Every finding of a stage, in its order; each rule sees what the earlier ones found (``ctx.found``)."""
    for rule in stage:
        if (f := rule(ctx)) is not None:
            ctx.found.append(f)
    found, ctx.found = ctx.found, []
    return found


@dataclass
class VerdictTracker:
    """Hysteresis: the shown verdict changes only once a new headline code has held ``hold_s``, or
    ``change_hold_s`` when a run's live window was cut at a recent change the shown verdict does not reflect yet
    (the new cause is judged on the steps after the change alone, so it needs no long hold to be trusted). A
    change is reflected once a verdict was shown from a window cut at it; one older than ``FRESH_S`` never
    shortens the hold (the shown verdict outlived it)."""

    hold_s: float = 3.0
    change_hold_s: float = 1.0
    current: Finding | None = None
    since: float | None = None
    _candidate: str | None = None
    _candidate_since: float = 0.0
    _reflected: float = -math.inf  # the latest change the shown verdict was judged after
    changes: list[tuple[float, str]] = field(default_factory=list)

    def update(self, t: float, findings: list[Finding], changes: Sequence[Change] = ()) -> Finding | None:
        top = headline(findings)
        if top is None:
            return self.current
        latest = max((c.t for c in changes), default=-math.inf)
        if self.current is None:
            self._switch(t, top)
            self._reflected = max(self._reflected, latest)
        elif top.code == self.current.code:
            self.current = top  # same cause, fresher numbers
            self._candidate = None
        else:
            if self._candidate != top.code:
                self._candidate = top.code
                self._candidate_since = t
            hold = self.hold_s
            # The same change found a little earlier or later as its steps come in is not a new one.
            fresh = latest > self._reflected + SAME_CHANGE_S and t - latest <= FRESH_S
            if top.code != "insufficient_data" and fresh:
                hold = min(hold, self.change_hold_s)
            if t - self._candidate_since >= hold or top.code in IMMEDIATE:
                self._switch(self._candidate_since, top)
                self._reflected = max(self._reflected, latest)
        return self.current

    def _switch(self, t: float, finding: Finding) -> None:
        self.current = finding
        self.since = t
        self._candidate = None
        self.changes.append((t, finding.code))
