"""Golden report files under tests/data/reports: one per report and format, the Chrome trace as its SHA-256.

A change that alters a report on purpose regenerates them: ``TRAINMON_REGEN_GOLDEN=1 pytest tests -k golden``.
"""

from __future__ import annotations

import hashlib
import os

from testsupport.paths import GOLDEN_REPORTS

FORMATS = {"json": "json", "text": "txt", "markdown": "md", "html": "html", "chrome-trace": "chrome-trace.sha256"}
REGEN = os.environ.get("TRAINMON_REGEN_GOLDEN") == "1"


def check_golden(name: str, fmt: str, out: bytes) -> None:
    """``out`` (the report ``name`` in format ``fmt``) is byte-identical to its golden file, or becomes it."""
    golden = GOLDEN_REPORTS / f"{name}.{FORMATS[fmt]}"
    if fmt == "chrome-trace":
        out = hashlib.sha256(out).hexdigest().encode() + b"\n"
    if REGEN:
        golden.write_bytes(out)
    assert golden.exists(), f"no golden file {golden.name}: run with TRAINMON_REGEN_GOLDEN=1"
    assert out == golden.read_bytes(), f"{name} --format {fmt} differs from {golden.name}"
