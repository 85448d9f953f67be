"""Where a rule runs, declared on the rule itself: ``@rule(Stage.PER_RUN, "input.io", ...)``.

A rule's stage says what its context holds (a run's window, a job's ranks, the host) and what its finding does to
the judgement (ends it, or stands beside the others). The codes it gives order it within its stage by their place in
``VERDICTS`` (a job's rule that reads what an earlier one found, as ``dist.comm`` reads ``dist.straggler``, comes
after it because its code does). ``diagnose/rules/__init__.py`` imports every module of the package and builds the
stages from these declarations, so a new verdict is its declaration in ``diagnose/verdicts.py`` and its rule module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from trainmon.diagnose.findings import PRIORITY
from trainmon.diagnose.rules.context import Rule


class Stage(Enum):
    """The engine (trainmon.diagnose.engine) runs them in this order."""

    SAMPLED = "a training found without an agent, judged from samples alone"
    ENDING = "first, for every run with an agent: a finding ends its judgement (a hang's window holds only old steps)"
    BEFORE_WARMUP = (
        "over the run's window before steady steps are counted (restarts and recompilation storms leave few of them)"
    )
    WARMUP_GATE = "a finding (too few steady steps) ends the run's judgement"
    PER_RUN = "over the run's steady steps, its host figures and its evidence"
    PER_JOB = "over the ranks of one job (ctx.job), each with its own findings (ctx.run_findings)"
    PER_HOST = "over the host (ctx.host)"


@dataclass(frozen=True)
class DeclaredRule:
    fn: Rule
    stage: Stage
    gives: tuple[str, ...]  # the codes its findings carry; the first in VERDICTS places it in its stage

    @property
    def priority(self) -> int:
        return min((PRIORITY[code] for code in self.gives), default=len(PRIORITY))


DECLARED: list[DeclaredRule] = []


def rule(stage: Stage, *gives: str) -> Callable[[Rule], Rule]:
    """Declare the decorated function a rule of ``stage`` that gives ``gives`` (codes declared in VERDICTS)."""
    unknown = [code for code in gives if code not in PRIORITY]
    if unknown:
        raise ValueError(f"rule gives codes VERDICTS does not declare: {', '.join(unknown)}")

    def declare(fn: Rule) -> Rule:
        DECLARED.append(DeclaredRule(fn, stage, gives))
        return fn

    return declare


def stage_rules(stage: Stage) -> tuple[Rule, ...]:
    """The rules declared for ``stage``, in the order of their codes' priority (stable for equal ones)."""
    return tuple(d.fn for d in sorted((d for d in DECLARED if d.stage is stage), key=lambda d: d.priority))
