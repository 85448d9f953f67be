"""ProcSource on a fake /proc (``proc_root``): unreadable and missing files give n/a with a reason, once."""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import pytest


def _fake_proc(root: Path, pid: int, *, io: str | None, schedstat: bool) -> None:
    task = root / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    fields = ["S"] + ["0"] * 10 + ["150", "50"] + ["0"] * 4 + ["1", "0", "777", "0", "256"] + ["0"] * 20
    stat = f"{pid} (fake) proc) " + " ".join(fields) + "\n"
    (root / str(pid) / "stat").write_text(stat)
    (task / "stat").write_text(stat)
    if schedstat:
        (task / "schedstat").write_text("1000 2000 3\n")
    if io == "dir":
        (root / str(pid) / "io").mkdir()
    elif io is not None:
        (root / str(pid) / "io").write_text(io)


def test_unreadable_and_missing_files_via_proc_root(tmp_path: Path, source_for, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="trainmon.procs")
    io_text = "rchar: 10\nwchar: 0\nsyscr: 1\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
    _fake_proc(tmp_path, 100, io="dir", schedstat=True)
    _fake_proc(tmp_path, 101, io=None, schedstat=False)
    _fake_proc(tmp_path, 102, io=io_text, schedstat=True)
    src = source_for({100: "worker", 101: "worker", 102: "main", 103: "worker"}, proc_root=str(tmp_path))
    src.sample(0.0)
    time.sleep(0.05)
    out = src.sample(0.0)
    assert math.isnan(out["proc.100.read_mb_s"]) and "cannot read" in src.na_reasons["proc.100.read_mb_s"]
    assert out["proc.100.runq_wait_ms_s"] == 0.0
    assert math.isnan(out["proc.101.rchar_mb_s"]) and "not available" in src.na_reasons["proc.101.rchar_mb_s"]
    assert math.isnan(out["proc.101.runq_wait_ms_s"]) and "schedstat" in src.na_reasons["proc.101.runq_wait_ms_s"]
    assert out["proc.102.rchar_mb_s"] == 0.0 and not any(k.startswith("proc.102.") for k in src.na_reasons)
    # comm with ') ' inside is parsed from the last ')': utime+stime=200 ticks, 1 thread, 256 pages.
    assert out["proc.102.threads"] == 1.0 and out["proc.102.cpu_pct"] == 0.0
    assert out["proc.102.rss_mb"] == pytest.approx(256 * os.sysconf("SC_PAGE_SIZE") / 2**20)
    assert out["proc.102.state_S"] == 1.0
    assert not any(k.startswith("proc.103.") for k in out)  # never existed
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3, warnings  # one per distinct reason, not per sample or per metric
