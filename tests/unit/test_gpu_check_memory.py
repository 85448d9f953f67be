"""scripts/gpu_check.py's CUDA memory check judged on made-up reads (no GPU here): the agent's peaks must lie between
the training's own reads around them and end at its last, and memory.creep's rate must be the leak's."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from testsupport.paths import ROOT

MB = 1 << 20


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OWN = [(float(t), (500 + t) * MB) for t in range(1, 11)]  # the training's own reads: 1 MB more each step


def test_peaks_between_the_trainings_own_reads_and_the_leaks_rate_pass():
    gc = load()
    row = {"own": OWN, "agent": [(1.5, 501 * MB), (4.2, 504 * MB), (10.5, 510 * MB)], "creep_mb_per_1000_steps": 990.0}
    status, why = gc.check_memory(row)
    assert status == "pass", why
    assert "3 agent reads, 0 outside the training's own" in why


def test_a_peak_the_training_never_had_fails():
    gc = load()
    row = {"own": OWN, "agent": [(4.2, 520 * MB), (10.5, 510 * MB)], "creep_mb_per_1000_steps": 1000.0}
    assert gc.check_memory(row)[0] == "fail"


def test_a_wrong_rate_a_missing_creep_or_no_reads_fail():
    gc = load()
    agent = [(10.5, 510 * MB)]
    assert gc.check_memory({"own": OWN, "agent": agent, "creep_mb_per_1000_steps": 700.0})[0] == "fail"
    assert gc.check_memory({"own": OWN, "agent": agent, "creep_mb_per_1000_steps": None})[0] == "fail"
    assert gc.check_memory({"own": OWN, "agent": []})[0] == "fail"
    assert gc.check_memory({"error": "the training failed"}) == ("fail", "the training failed")
