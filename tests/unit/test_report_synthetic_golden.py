"""Reports of synthetic stores with what the committed recordings lack (GPUs and throttling, two ranks,
checkpoints, a process only py-spy saw, disks), rendered in process, against golden files under tests/data/reports."""

from __future__ import annotations

import pytest

from testsupport.golden import FORMATS, check_golden
from testsupport.report_stores import SYNTHETIC_STORES
from trainmon.report import build_report, render


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", sorted(SYNTHETIC_STORES))
def test_synthetic_report_matches_golden(name: str, fmt: str) -> None:
    store = SYNTHETIC_STORES[name]()
    check_golden(name, fmt, render(build_report(store), fmt, store=store).encode())
