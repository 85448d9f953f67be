"""The reports of the committed recordings, made by ``trainmon report``, are byte-identical to the golden files
under tests/data/reports (testsupport.golden says how to regenerate them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testsupport.golden import FORMATS, check_golden
from testsupport.paths import RECORDINGS
from testsupport.procs import child_env, trainmon_cmd

RECORDED = sorted(RECORDINGS.glob("*.tmrec"))


def _report(recording: Path, fmt: str) -> bytes:
    res = subprocess.run(
        trainmon_cmd("report", str(recording), "--format", fmt), env=child_env(), capture_output=True, timeout=120
    )
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("recording", RECORDED, ids=[r.stem for r in RECORDED])
def test_report_matches_golden(recording: Path, fmt: str) -> None:
    check_golden(recording.stem, fmt, _report(recording, fmt))
