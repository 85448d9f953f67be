"""Soak, short form: 30 s of 8 agents coming and going against a real ``trainmon record``; its RSS,
descriptors and threads stay flat. The 30-minute form is ``make soak`` (benchmarks/soak.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testsupport.paths import ROOT
from testsupport.procs import child_env
from testsupport.reliability import note


@pytest.mark.slow
def test_soak_20_s_with_8_agents():
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--seconds", "20", "--agents", "8", "--json"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    result = json.loads(res.stdout)
    note("soak20", **{k: v for k, v in result.items() if k != "samples"})
    assert res.returncode == 0 and result["flat"], result["problems"]
    assert result["agents_started"] >= 16  # they came and went
    assert result["final"]["fds"] <= result["idle"]["fds"] + 1
    assert result["threads_range"] == [result["idle"]["threads"]] * 2
