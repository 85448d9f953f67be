"""The rule engine: pure functions from store windows to Findings with the fixed verdict codes."""

from trainmon.diagnose.engine import VerdictTracker, evaluate
from trainmon.diagnose.findings import CODES, Finding, headline
from trainmon.diagnose.thresholds import Thresholds

__all__ = ["CODES", "Finding", "Thresholds", "VerdictTracker", "evaluate", "headline"]
