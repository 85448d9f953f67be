"""``trainmon report --fail-on / --max-data-wait`` as CI runs it: the real CLI on the committed recordings."""

from __future__ import annotations

import functools
import json
import subprocess

import pytest

from testsupport.paths import RECORDINGS
from testsupport.procs import child_env, trainmon_cmd
from trainmon.diagnose.findings import CODES

SWITCH = str(RECORDINGS / "switch.tmrec")  # a main-process loader, then workers: two causes held
HEALTHY = str(RECORDINGS / "healthy.tmrec")


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(trainmon_cmd("report", *args), env=child_env(), capture_output=True, text=True, timeout=120)


@functools.cache
def _switch_json() -> dict:
    res = _report(SWITCH, "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_verdicts_code_fails_the_gate_and_the_report_is_still_written():
    switch_json = _switch_json()
    code = switch_json["verdict"]["code"]
    res = _report(SWITCH, "--format", "json", "--fail-on", code)
    assert res.returncode == 1
    assert json.loads(res.stdout)["verdict"]["code"] == code  # the whole report, on stdout
    lines = res.stderr.strip().splitlines()
    assert lines == [f"trainmon: gate failed: verdict {code} is listed in --fail-on"]


def test_a_finding_that_held_beside_the_verdict_fails_the_gate():
    switch_json = _switch_json()
    held = [f for f in switch_json["findings"] if f["held_s"] > 0]
    assert held, "the switch recording has a second cause"
    code = held[0]["code"]
    res = _report(SWITCH, "--fail-on", f"{code},stall.hang")
    assert res.returncode == 1
    assert f"{code} held for {held[0]['held_s']:g} s" in res.stderr and res.stderr.count("\n") == 1


def test_codes_that_did_not_hold_pass_and_a_family_pattern_matches():
    switch_json = _switch_json()
    held = {switch_json["verdict"]["code"], *(f["code"] for f in switch_json["findings"])}
    absent = [c for c in CODES if c not in held]
    res = _report(SWITCH, "--fail-on", ",".join(absent))
    assert res.returncode == 0, res.stderr
    assert "VERDICT" in res.stdout and res.stderr == ""
    family = switch_json["verdict"]["code"].split(".")[0]
    assert _report(SWITCH, "--fail-on", f"{family}.*").returncode == 1


def test_max_data_wait_compares_the_worst_run():
    switch_json = _switch_json()
    wait = max(r["data_wait_fraction"] for r in switch_json["runs"])
    below = _report(SWITCH, "--max-data-wait", f"{(wait - 0.02) * 100:.1f}%")
    assert below.returncode == 1 and "waited on data" in below.stderr and "above --max-data-wait" in below.stderr
    assert below.stdout.startswith("trainmon report")
    above = _report(SWITCH, "--max-data-wait", f"{wait + 0.02:.3f}")
    assert above.returncode == 0, above.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on", "input.bogus"], "unknown verdict code 'input.bogus'"),
        (["--fail-on", "nosuch.*"], "unknown verdict code 'nosuch.*'"),
        (["--fail-on", ","], "needs at least one verdict code"),
        (["--max-data-wait", "30"], "above 1"),
        (["--max-data-wait", "lots"], "expected a share 0..1"),
        (["--max-data-wait", "150%"], "above 100%"),
    ],
)
def test_bad_gate_arguments_are_one_line_and_status_2(args, message):
    res = _report(HEALTHY, *args)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and message in res.stderr and "Traceback" not in res.stderr
