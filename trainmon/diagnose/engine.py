"""Evaluate every rule over the current window, and keep a verdict that does not flicker."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from trainmon.diagnose import rules
from trainmon.diagnose.evidence import gather
from trainmon.diagnose.findings import Finding, headline
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.window import RunWindow, host_window, run_window
from trainmon.numbers import is_nan
from trainmon.store.store import Store

NO_AGENT = Finding(
    "insufficient_data",
    "ok",
    "no training process has reported steps yet",
    ["attach the agent: trainmon.agent.attach(), or trainmon run -- python train.py"],
    {},
)


def evaluate(store: Store, t: float, th: Thresholds | None = None) -> list[Finding]:
    """All findings that hold at time ``t``, best-ranked first (pure: reads the store only)."""
    th = th or Thresholds()
    t0 = t - th.window_s
    findings: list[Finding] = []
    judged = 0
    jobs: dict[tuple[Any, ...], list[RunWindow]] = defaultdict(list)
    input_by_run: dict[int, Finding | None] = {}
    with store.lock:
        host = host_window(store, t0, t)
        for run in list(store.runs.values()):
            if run.first_seen > t:
                continue
            w = run_window(run, t0, t, min_steps=th.window_steps)
            if w.steps == 0 and (not run.connected or run.last_seen < t0):
                continue  # ended before this window, or never stepped in it
            if (f := rules.checkpoint_stall(w, th)) is not None:
                findings.append(f)
            if (f := rules.insufficient(w, th)) is not None:
                findings.append(f)
                continue
            judged += 1
            jobs[run.job_key].append(w)
            # Host and process figures over the span the steps cover, not after the run stopped.
            span_end = t if is_nan(w.last_end) else min(t, w.last_end)
            run_host = host_window(store, w.t0, span_end)
            ev = gather(store, run, w.t0, span_end, th.throttle_power_cap_clock)
            inp = rules.input_bound(w, run_host, ev, th)
            input_by_run[id(w)] = inp
            for f in (
                inp,
                rules.periodic_stall(w, th),
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
        for windows in jobs.values():
            if len(windows) > 1 and (f := rules.straggler(windows, input_by_run, th)) is not None:
                findings.append(f)
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
    """Hysteresis: the shown verdict changes only once a new headline code has held ``hold_s``."""

    hold_s: float = 3.0
    current: Finding | None = None
    since: float | None = None
    _candidate: str | None = None
    _candidate_since: float = 0.0
    changes: list[tuple[float, str]] = field(default_factory=list)

    def update(self, t: float, findings: list[Finding]) -> Finding | None:
        top = headline(findings)
        if top is None:
            return self.current
        if self.current is None:
            self._switch(t, top)
        elif top.code == self.current.code:
            self.current = top  # same cause, fresher numbers
            self._candidate = None
        else:
            if self._candidate != top.code:
                self._candidate = top.code
                self._candidate_since = t
            if t - self._candidate_since >= self.hold_s:
                self._switch(self._candidate_since, top)
        return self.current

    def _switch(self, t: float, finding: Finding) -> None:
        self.current = finding
        self.since = t
        self._candidate = None
        self.changes.append((t, finding.code))
