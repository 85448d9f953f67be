"""The reports of the committed recordings are byte-identical to the golden files under tests/data/reports.

A change that alters a report on purpose regenerates them: ``TRAINMON_REGEN_GOLDEN=1 pytest tests -k golden``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, child_env, trainmon_cmd

RECORDINGS = sorted((ROOT / "screenshots" / "recordings").glob("*.tmrec"))
GOLDEN = ROOT / "tests" / "data" / "reports"
FORMATS = {"json": "json", "text": "txt", "markdown": "md", "html": "html", "chrome-trace": "chrome-trace.sha256"}
REGEN = os.environ.get("TRAINMON_REGEN_GOLDEN") == "1"


def _report(recording: Path, fmt: str) -> bytes:
    res = subprocess.run(
        trainmon_cmd("report", str(recording), "--format", fmt), env=child_env(), capture_output=True, timeout=120
    )
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.stem for r in RECORDINGS])
def test_report_matches_golden(recording: Path, fmt: str) -> None:
    out = _report(recording, fmt)
    golden = GOLDEN / f"{recording.stem}.{FORMATS[fmt]}"
    if fmt == "chrome-trace":
        out = hashlib.sha256(out).hexdigest().encode() + b"\n"
    if REGEN:
        golden.write_bytes(out)
    assert golden.exists(), f"no golden file {golden.name}: run with TRAINMON_REGEN_GOLDEN=1"
    assert out == golden.read_bytes(), f"{recording.name} --format {fmt} differs from {golden.name}"
