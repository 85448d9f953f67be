"""The verdict registry: one declaration per code, read by everything that treats verdicts differently.

The engine (which codes end a run's judgement), the verdict tracker and the report's headline (``immediate``), the
monitor (``reads_states``: the thread-state sampler looks fast while such a finding stands), automatic stack dumps
(``dump_workers``), every report format (``colour``, ``meaning``), Prometheus (the code set) and the verdict
reference, docs/verdicts.md (written from it by scripts/reference.py; a test fails when the page is stale) all read
it. The declarations are in five modules, a tier of priority each (``stop_verdicts``, ``input_verdicts``,
``step_verdicts``, ``resource_verdicts``, ``judgement_verdicts``); their order, tier after tier, is the priority
among findings of the same severity (the first wins). Codes are a public contract: add, never rename.

Adding a verdict: its declaration, placed in its tier's tuple where its priority is, its rule in
``diagnose/rules/`` declared with ``@rule(stage, code)``, a scenario (docs/architecture.md, "Where a change goes");
``python scripts/reference.py`` writes its reference entry.
"""

from __future__ import annotations

from trainmon.diagnose.verdicts.declaration import GREY, INPUT_COLOUR, Verdict
from trainmon.diagnose.verdicts.input_verdicts import INPUT
from trainmon.diagnose.verdicts.judgement_verdicts import JUDGEMENTS
from trainmon.diagnose.verdicts.resource_verdicts import RESOURCES
from trainmon.diagnose.verdicts.step_verdicts import STEP
from trainmon.diagnose.verdicts.stop_verdicts import STOPS

__all__ = ["BY_CODE", "GREY", "INPUT_COLOUR", "VERDICTS", "Verdict", "verdict"]

# The order is the priority among findings of the same severity (the first wins).
VERDICTS: tuple[Verdict, ...] = (*STOPS, *INPUT, *STEP, *RESOURCES, *JUDGEMENTS)

BY_CODE: dict[str, Verdict] = {v.code: v for v in VERDICTS}


def verdict(code: str) -> Verdict:
    """The declaration of ``code``; a code this trainmon does not know gets a neutral one (from a newer
    recording, or a Prometheus label)."""
    return BY_CODE.get(code) or Verdict(code, "a code this trainmon does not know")
