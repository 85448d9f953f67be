"""Where the checkout's files are: the repository root, the test workloads, the committed recordings."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
WORKLOADS = TESTS / "workloads"
LOOP = str(WORKLOADS / "loop.py")  # a DataLoader loop under the agent: steps, workers, start method, sleep
STEADY = str(WORKLOADS / "steady.py")  # a training that reports its own step times
TINY = str(WORKLOADS / "tiny_agent.py")  # an agent without torch: steps at a given rate, or a flood
GOLDEN_REPORTS = TESTS / "data" / "reports"
RECORDINGS = ROOT / "screenshots" / "recordings"
