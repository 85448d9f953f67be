"""The rule engine: pure functions from store windows to Findings with the fixed verdict codes.

``engine`` runs the stages of ``rules`` over each run's live window (``live``: the window, its change, its long
steps and idle spans, the host over its span); ``verdicts`` declares every code; ``thresholds`` holds every figure a
rule compares against; ``evidence``, ``advice``, ``findings`` and ``stats`` are what the rules build their findings
from. Analyses of a whole run (time budget, phases, energy) are in ``trainmon.analyses``."""

from trainmon.diagnose.engine import VerdictTracker, evaluate
from trainmon.diagnose.findings import CODES, Finding, headline
from trainmon.diagnose.thresholds import Thresholds

__all__ = ["CODES", "Finding", "Thresholds", "VerdictTracker", "evaluate", "headline"]
