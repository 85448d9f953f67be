"""A training the agent was injected into (``trainmon attach``) keeps the reliability table's promises: when its
monitor is killed it trains on at its own pace, and a monitor started again at the same address sees the same run
come back, its step count continued. Real processes: a plain training that never imported trainmon, real
``trainmon record`` subprocesses, the real injector."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testsupport.procs import attach_cli, start_recorder, stop
from trainmon.record import load_recording

PLAIN = Path(__file__).resolve().parents[2] / "tests" / "workloads" / "plain_loop.py"
METER = re.compile(r"meter step=(\d+) .* t=([\d.]+)")

pytestmark = pytest.mark.skipif(shutil.which("gdb") is None and sys.version_info < (3, 14), reason="needs gdb")


def _meters(path: Path) -> list[tuple[int, float]]:
    return [(int(m[1]), float(m[2])) for line in path.read_text().splitlines() if (m := METER.search(line))]


def test_an_attached_training_outlives_its_monitor_and_comes_back_to_the_next(addr, tmp_path):
    out = tmp_path / "train.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_") and k != "PYTHONPATH"}
    with open(out, "w") as sink:
        train = subprocess.Popen([sys.executable, str(PLAIN), "--seconds", "40"], env=env, stdout=sink)
    first, second = str(tmp_path / "1.tmrec"), str(tmp_path / "2.tmrec")
    recorder = start_recorder(addr, first)
    try:
        deadline = time.monotonic() + 30
        while not _meters(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        res = attach_cli(train.pid, addr)
        assert res.returncode == 0, res.stderr
        time.sleep(3.0)
        recorder.kill()  # the monitor dies; a stale socket stays behind
        recorder.wait(timeout=10)
        killed_at = time.monotonic()
        time.sleep(3.0)
        recorder = start_recorder(addr, second)
        time.sleep(8.0)
    finally:
        stop(recorder)
        train.terminate()
        train.wait(timeout=20)
    before = next(r for r in load_recording(first)[0].runs.values() if r.pid == train.pid)
    after = next(r for r in load_recording(second)[0].runs.values() if r.pid == train.pid)
    assert before.hello["attached_live"] and after.hello["session"] == before.hello["session"]
    assert after.hello["connection"] == 2 and before.steps.total > 0
    assert after.steps.total > before.steps.total  # the count continued across the gap
    meters = _meters(out)
    gap = [t for _, t in meters if killed_at < t < killed_at + 3.0]
    assert len(gap) >= 2, "the training stopped stepping while its monitor was gone"
    assert train.returncode in (0, -15)
