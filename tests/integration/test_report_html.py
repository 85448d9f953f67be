"""HTML and Chrome-trace reports from a real recording; the HTML is rendered in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from testsupport.browser import CHROMIUM, headless_flags
from testsupport.procs import child_env, record_training, trainmon_cmd


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    addr = f"/tmp/tm-html-{os.getpid()}.sock"
    return record_training(
        addr,
        str(d / "r.tmrec"),
        "--steps",
        "150",
        "--workers",
        "0",
        "--cpu-ms",
        "1",
        "--checkpoint-every",
        "50",
        "--checkpoint-mb",
        "4",
    )


def _report(path: str, fmt: str) -> str:
    res = subprocess.run(
        trainmon_cmd("report", path, "--format", fmt), env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_html_is_self_contained_and_complete(recording):
    page = _report(recording, "html")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    for absent in ("<script", "http://", "https://", "<link"):
        assert absent not in page  # nothing loaded from anywhere
    assert "input.main_process" in page and "Verdict over time" in page
    assert page.count("<svg") >= 4  # verdict strip, step time, CPU, a disk
    assert "Step time" in page and "data wait" in page and "Host CPU" in page
    assert "GPU: " in page or "GPU utilisation" in page


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_html_renders_in_headless_chromium(recording, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(_report(recording, "html"))
    profile = tempfile.mkdtemp(prefix="tm-chromium-")
    flags = headless_flags(profile)
    try:
        dom = subprocess.run(
            [CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
        )
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert "input.main_process" in dom.stdout and "<svg" in dom.stdout and "<rect" in dom.stdout
        png = tmp_path / "shot.png"
        shot = subprocess.run(
            [CHROMIUM, *flags, "--window-size=1000,1400", f"--screenshot={png}", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shot.returncode == 0 and png.stat().st_size > 20_000  # a real picture, not a blank page
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_chrome_trace_has_steps_waits_checkpoints_and_counters(recording):
    trace = json.loads(_report(recording, "chrome-trace"))
    events = trace["traceEvents"]
    names = {(e["ph"], e["name"]) for e in events}
    assert ("X", "step") in names and ("X", "data wait") in names and ("X", "checkpoint") in names
    assert ("C", "cpu.busy") in names
    steps = [e for e in events if e["name"] == "step"]
    assert len(steps) == 150 and all(e["dur"] > 0 and e["ts"] >= 0 for e in steps)
    assert sum(1 for e in events if e["name"] == "checkpoint") == 3
    assert any(e["name"].startswith("verdict: ") for e in events)
