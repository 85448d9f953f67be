"""What every rule is given: one context object, so every rule has the one signature ``rule(ctx) -> Finding | None``.

The engine fills in what the rule's scope has: a run's rules get its window, its host figures and its evidence; a
job's rules the windows of its ranks and the findings each rank already has; the host's rules the host window. A
rule reads what it needs through the typed accessors, which say so when the engine did not give it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.live.host_window import HostWindow
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.thresholds import Thresholds
from trainmon.store.run import Run
from trainmon.store.store import Store


@dataclass
class RuleContext:
    store: Store
    th: Thresholds
    t: float  # the end of what is judged (monotonic s)
    since: float | None = None  # a report's phase starts here; None: live
    run: Run | None = None
    window: RunWindow | None = None  # the run's steady steps judged
    host: HostWindow | None = None  # the host's figures over the run's span (its usable cores), or the host's
    evidence: Evidence | None = None  # the run's processes, disks and GPUs over its span
    stalls: bool = True  # the window is long enough to hold a recurring pattern (false: cut at a recent change)
    job: list[RunWindow] = field(default_factory=list)  # the windows of a job's ranks (job rules)
    run_findings: dict[int, list[Finding]] = field(default_factory=dict)  # each rank's own findings, by run id
    found: list[Finding] = field(default_factory=list)  # what this scope's earlier rules found

    @property
    def w(self) -> RunWindow:
        return _given(self.window, "a run window")

    @property
    def ev(self) -> Evidence:
        return _given(self.evidence, "evidence")

    @property
    def h(self) -> HostWindow:
        return _given(self.host, "host figures")

    @property
    def r(self) -> Run:
        return _given(self.run, "a run")


T = TypeVar("T")


def _given(value: T | None, what: str) -> T:
    if value is None:
        raise ValueError(f"this rule needs {what}, which its scope does not give")
    return value


Rule = Callable[[RuleContext], "Finding | None"]
