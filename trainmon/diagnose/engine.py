"""Evaluate every rule over the current window, and keep a verdict that does not flicker."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainmon.diagnose import advice, rules
from trainmon.diagnose.change import Change, live_window
from trainmon.diagnose.evidence import gather
from trainmon.diagnose.findings import IMMEDIATE, Finding, headline
from trainmon.diagnose.host_window import host_window
from trainmon.diagnose.rules.dist import comm_bound
from trainmon.diagnose.rules.sampled import sampled_verdict
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.window import RunWindow, WindowMemo, busiest_loader, run_window
from trainmon.numbers import is_nan
from trainmon.store.store import Store

SAME_CHANGE_S = 1.0  # live changes this close together are one change found twice
FRESH_S = 10.0  # a change shortens the hold of a new verdict this long after it
STALLS_MIN_S = 5.0  # a live window cut at a change is judged for recurring stalls once it spans this long
NO_AGENT = Finding(
    "insufficient_data",
    "ok",
    "no training process has reported steps yet",
    ["attach the agent: trainmon.agent.attach(), or trainmon run -- python train.py"],
    {},
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
    (``trainmon.diagnose.change``), whose Change is appended to ``changes``. With ``since``: the steps and
    samples of [since, t] exactly, the steps of the loader that fed most of them (a report's phase).
    ``window_memo``: the caller's memo of each run's live window (``window.WindowMemo``), for a caller that asks
    every tick."""
    th = th or Thresholds()
    t0 = t - th.window_s if since is None else since
    findings: list[Finding] = []
    judged = 0
    jobs: dict[tuple[Any, ...], list[RunWindow]] = defaultdict(list)
    input_by_run: dict[int, Finding | None] = {}
    owners: list[tuple[int, Any]] = []  # (index of a run's first finding, the run): advice in its framework's words
    with store.lock:
        if window_memo is not None:
            window_memo.retain(store.runs.values())  # a run the store forgot takes its windows with it
        host = host_window(store, t0, t)
        for run in list(store.runs.values()):
            if run.first_seen > t:
                continue
            if run.measured_by == "sampling":
                if run.connected or run.last_seen >= t0:
                    span_end = t if run.connected else min(t, run.last_seen)
                    sampled = sampled_verdict(store, run, host_window(store, t0, span_end, run), t0, span_end, th)
                    findings.append(sampled)
                    judged += sampled.code != "insufficient_data"
                continue
            owners.append((len(findings), run))
            if (f := rules.hang(store, run, t, th)) is not None:
                findings.append(f)  # its window holds only the steps from before it stopped: judge nothing else
                judged += 1
                continue
            if since is None:
                w, change = live_window(run, t0, t, th, window_memo)
                if change is not None and changes is not None:
                    changes.append(change)
            else:
                w, change = run_window(run, since, t, min_steps=0, loader=busiest_loader(run, since, t)), None
            # Stalls recur: judged over a window cut at a change only once it is long enough to hold a pattern.
            stalls = change is None or w.span_s >= STALLS_MIN_S
            if w.steps == 0 and (not run.connected or run.last_seen < t0):
                continue  # ended before this window, or never stepped in it
            if stalls and (f := rules.checkpoint_stall(w, th)) is not None:
                findings.append(f)
            if (f := rules.epoch_restart(w, th, t, since)) is not None:
                findings.append(f)  # judged before steady steps are counted: restarts may leave few of them
            if (f := rules.insufficient(w, th)) is not None:
                findings.append(f)
                continue
            judged += 1
            jobs[run.job_key].append(w)
            # Host and process figures over the span the steps cover, not after the run stopped.
            span_end = t if is_nan(w.last_end) else min(t, w.last_end)
            run_host = host_window(store, w.t0, span_end, run)  # the run's usable cores, shared with its host's runs
            ev = gather(store, run, w.t0, span_end, th.throttle_power_cap_clock, w.loader_id)
            inp = rules.input_bound(w, run_host, ev, th)
            input_by_run[id(w)] = inp
            for f in (
                inp,
                rules.periodic_stall(w, th) if stalls else None,
                rules.host_to_device(w, ev, th),
                rules.host_overhead(w, ev, th),
                rules.gpu_memory(w, ev, th),
                rules.gpu_throttled(w, ev, th),
                rules.host_sync(w, ev, th),
                rules.small_work(w, ev, th),
                rules.no_tensor_cores(w, ev, th),
                rules.compute_bound(w, ev, th),
            ):
                if f is not None:
                    findings.append(f)
        advice.localise_runs(findings, owners)
        for windows in jobs.values():
            framework = advice.common_framework(w.run for w in windows)
            slow = rules.straggler(windows, input_by_run, th) if len(windows) > 1 else None
            if slow is not None:
                findings.append(advice.localise(slow, framework))
            if (f := comm_bound(windows, th, straggler_found=slow is not None)) is not None:
                findings.append(advice.localise(f, framework))
        if (f := rules.host_memory(host, th)) is not None:
            findings.append(f)
    if judged:
        findings = [f for f in findings if f.code != "insufficient_data"]
        if any(f.code != "ok.compute_bound" for f in findings):
            # One run being healthy does not make the machine healthy.
            findings = [f for f in findings if f.code != "ok.compute_bound"] + [
                f for f in findings if f.code == "ok.compute_bound"
            ]
    if not findings:
        findings.append(NO_AGENT)
    return sorted(findings, key=lambda f: f.rank)


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
