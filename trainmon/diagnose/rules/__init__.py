"""Rules: pure functions ``rule(ctx: RuleContext) -> Finding | None``, one module per family of causes.

Each rule declares its stage and the codes it gives where it is defined (``@rule(Stage.PER_RUN, ...)``,
``diagnose/rules/stage.py``); every module of this package is imported here, and the stages the engine
(trainmon.diagnose.engine) runs are built from those declarations. What each code means, and how every consumer
treats it, is declared once in ``trainmon.diagnose.verdicts``. docs/architecture.md says how to add one.
"""

import importlib
import pkgutil

from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import Rule, RuleContext
from trainmon.diagnose.rules.hang import hang_episodes
from trainmon.diagnose.rules.stage import Stage, stage_rules
from trainmon.diagnose.thresholds import Thresholds

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# A run found without an agent: judged from samples alone.
(SAMPLED,) = stage_rules(Stage.SAMPLED)
ENDING: tuple[Rule, ...] = stage_rules(Stage.ENDING)
BEFORE_WARMUP: tuple[Rule, ...] = stage_rules(Stage.BEFORE_WARMUP)
WARMUP_GATE: tuple[Rule, ...] = stage_rules(Stage.WARMUP_GATE)
PER_RUN: tuple[Rule, ...] = stage_rules(Stage.PER_RUN)
PER_JOB: tuple[Rule, ...] = stage_rules(Stage.PER_JOB)
PER_HOST: tuple[Rule, ...] = stage_rules(Stage.PER_HOST)

__all__ = [
    "BEFORE_WARMUP",
    "ENDING",
    "PER_HOST",
    "PER_JOB",
    "PER_RUN",
    "SAMPLED",
    "WARMUP_GATE",
    "Rule",
    "RuleContext",
    "Stage",
    "Thresholds",
    "base_evidence",
    "hang_episodes",
]
