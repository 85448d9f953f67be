"""The diagnosis tests: each demo scenario is a real small training with one known bottleneck,
run under a real `trainmon record`; the report must name that bottleneck."""

from __future__ import annotations

import subprocess

import pytest

from testsupport.procs import child_env, report_json, start_recorder, stop
from trainmon.demo.scenarios import SCENARIOS, command


def run_scenario(name: str, addr: str, tmp_path) -> dict:
    scenario = SCENARIOS[name]
    rec = str(tmp_path / f"{name}.tmrec")
    recorder = start_recorder(addr, rec)
    try:
        res = subprocess.run(
            command(scenario), env=child_env(TRAINMON_ADDR=addr), capture_output=True, text=True, timeout=240
        )
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        stop(recorder)
    return report_json(rec)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_is_diagnosed(name, addr, tmp_path):
    scenario = SCENARIOS[name]
    report = run_scenario(name, addr, tmp_path)
    verdict = report["verdict"]
    detail = f"{verdict['code']}: {verdict['summary']} | timeline {report['timeline']}"
    assert verdict["code"] == scenario.expected, detail
    assert verdict["advice"] and verdict["evidence"]
    assert len(report["runs"]) == scenario.ranks
    if scenario.timeline:
        judged = [e["code"] for e in report["timeline"] if e["code"] != "insufficient_data"]
        positions = [judged.index(code) for code in scenario.timeline if code in judged]
        assert len(positions) == len(scenario.timeline) and positions == sorted(positions), detail
    if name == "healthy":
        assert not [f for f in report["findings"] if f["severity"] != "ok"], report["findings"]
    if name == "straggler":
        assert verdict["evidence"]["rank"] == 1
    if name == "slow-storage":
        assert verdict["evidence"]["sub_cause"] == "disk"
    if name == "remote-storage":
        assert verdict["evidence"]["sub_cause"] == "remote"
