"""``trainmon diff`` as a user runs it: two runs of one real ``trainmon record`` (FILE#RUN), both formats that
machines read, the slowdown gate, and bad sides."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from testsupport.paths import LOOP, RECORDINGS
from testsupport.procs import child_env, start_python, start_recorder, stop, trainmon_cmd


def _diff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(trainmon_cmd("diff", *args), env=child_env(), capture_output=True, text=True, timeout=120)


@functools.cache
def _two_runs() -> tuple[str, dict[int, int]]:
    """One recording of two trainings at once: 1.5 ms and 4 ms of loading per sample, in the main process."""
    tmp = Path(tempfile.mkdtemp(prefix="trainmon-diff-"))
    atexit.register(shutil.rmtree, tmp, True)
    addr = str(tmp / "m.sock")
    rec = str(tmp / "two.tmrec")
    recorder = start_recorder(addr, rec)
    try:
        fast = start_python(LOOP, "300", "0", "none", "1.5", env={"TRAINMON_ADDR": addr})
        slow = start_python(LOOP, "300", "0", "none", "4", env={"TRAINMON_ADDR": addr})
        for p in (fast, slow):
            _out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        stop(recorder)
    return rec, {fast.pid: 1, slow.pid: 4}


def test_two_runs_of_one_recording_slower_beyond_noise_and_the_gate():
    two_runs = _two_runs()
    rec, sleeps = two_runs
    fast, slow = sorted(sleeps, key=sleeps.get)
    res = _diff(f"{rec}#pid:{fast}", f"{rec}#pid:{slow}", "--format", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["a"]["run"] == f"pid:{fast}" and out["b"]["runs"] == [slow]
    p50 = out["runs"][0]["figures"]["step_time_p50_ms"]
    assert p50["b"] > 1.8 * p50["a"] and p50["change"] > 0.8 and p50["beyond_noise"] is True
    assert p50["interval"][0] > 0 and out["method"]["seed"] == 0
    sps = out["runs"][0]["figures"]["samples_per_s"]
    assert sps["change"] < 0 and sps["beyond_noise"] is True

    gate = _diff(f"{rec}#pid:{fast}", f"{rec}#pid:{slow}", "--max-slowdown", "5%")
    assert gate.returncode == 1 and gate.stdout.startswith("trainmon diff")
    (line,) = gate.stderr.strip().splitlines()
    assert line.startswith(f"trainmon: gate failed: pid {fast} → pid {slow}: step time p50") and "5.0%" in line
    faster = _diff(f"{rec}#pid:{slow}", f"{rec}#pid:{fast}", "--max-slowdown", "0.05", "--format", "markdown")
    assert faster.returncode == 0, faster.stderr
    assert "| step time p50 ms |" in faster.stdout and "better" in faster.stdout


def test_whole_recordings_pair_their_runs():
    two_runs = _two_runs()
    rec, _ = two_runs
    res = _diff(rec, rec, "--format", "json", "--max-slowdown", "1%")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert len(out["runs"]) == 2 and out["unpaired"] == []
    assert all(not f["beyond_noise"] for r in out["runs"] for f in r["figures"].values())
    assert out["gate"] == {"max_slowdown": 0.01, "failed": None}


@pytest.mark.parametrize(
    ("a", "message"),
    [
        ("{healthy}#rank:7", "no run 'rank:7'"),
        ("{healthy}#x:1", "no run 'x:1'"),
        ("/nonexistent/r.tmrec", "/nonexistent/r.tmrec"),
    ],
)
def test_bad_sides_are_one_line_and_status_2(a, message):
    res = _diff(a.format(healthy=RECORDINGS / "healthy.tmrec"), str(RECORDINGS / "healthy.tmrec"))
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1 and message in res.stderr


def test_a_bad_slowdown_is_refused():
    res = _diff(str(RECORDINGS / "healthy.tmrec"), str(RECORDINGS / "switch.tmrec"), "--max-slowdown", "5")
    assert res.returncode == 2 and "--max-slowdown: 5 is above 1" in res.stderr
