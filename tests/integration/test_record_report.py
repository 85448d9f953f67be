"""trainmon record (a real subprocess) + real CPU training over a real socket → trainmon report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from testsupport.procs import (
    PY,
    child_env,
    record_training,
    report_json,
    run_train,
    start_recorder,
    stop,
    trainmon_cmd,
    wait_for,
)


def test_report_matches_the_training_scripts_own_measurement(addr, tmp_path):
    rec, own = str(tmp_path / "run.tmrec"), str(tmp_path / "own.json")
    recorder = start_recorder(addr, rec)
    try:
        # Two workers, 1 ms of CPU per sample, 32 per batch: the loop waits on data for part of each step.
        res = run_train(
            addr, "--steps", "300", "--workers", "2", "--cpu-ms", "1", "--batch-size", "32", "--self-report", own
        )
        assert res.returncode == 0, res.stderr
        time.sleep(1.0)
    finally:
        _, err = stop(recorder)
    assert recorder.returncode == 0, err
    with open(own) as fh:
        mine = json.load(fh)
    report = report_json(rec)
    assert set(report) >= {"trainmon_report", "duration_s", "runs", "verdict", "findings", "timeline"}
    assert report["trainmon_report"] == 1
    (run,) = report["runs"]
    assert run["pid"] == mine["pid"]
    assert run["steps"] == mine["steps"] == 300
    assert abs(run["data_wait_fraction"] - mine["data_wait_fraction"]) <= 0.03, (run, mine)
    assert run["dataloader"] == {
        "batch_size": 32,
        "num_workers": 2,
        "pin_memory": False,
        "prefetch_factor": 2,
        "persistent_workers": False,
    }
    assert run["step_time_ms"]["p50"] > 0 and run["step_time_ms"]["p95"] >= run["step_time_ms"]["p50"]
    assert run["samples_per_s"] > 0
    assert report["verdict"]["code"] in {"input.too_few_workers", "input.workers_cpu", "ok.compute_bound"}
    assert {"code", "severity", "summary", "advice", "evidence"} <= set(report["verdict"])
    assert report["timeline"] and report["timeline"][0]["t"] >= 0


def _record_some(addr: str, rec: str, **kwargs) -> subprocess.Popen:
    recorder = start_recorder(addr, rec)
    res = run_train(addr, "--steps", "60", "--workers", "0", "--cpu-ms", "0.5")
    assert res.returncode == 0, res.stderr
    return recorder


def test_sigint_finishes_the_file_cleanly(addr, tmp_path):
    rec = str(tmp_path / "a.tmrec")
    recorder = _record_some(addr, rec)
    time.sleep(0.8)
    recorder.send_signal(signal.SIGINT)
    _, err = recorder.communicate(timeout=20)
    assert recorder.returncode == 0 and "wrote" in err
    assert not os.path.exists(addr), "socket left behind"
    assert report_json(rec)["runs"][0]["steps"] == 60


def test_kill_9_loses_at_most_the_last_second(addr, tmp_path):
    rec = str(tmp_path / "k.tmrec")
    recorder = _record_some(addr, rec)
    time.sleep(1.5)  # > one flush interval after the training ended
    recorder.kill()
    recorder.communicate(timeout=20)
    res = subprocess.run(
        trainmon_cmd("report", rec, "--format", "json"), env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["runs"][0]["steps"] == 60


def test_duration_stops_the_recorder(addr, tmp_path):
    rec = str(tmp_path / "d.tmrec")
    proc = subprocess.run(
        trainmon_cmd("record", "-o", rec, "--listen", addr, "--duration", "1.5", "-q"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    report = report_json(rec)
    assert report["runs"] == [] and report["verdict"]["code"] == "insufficient_data"
    assert report["duration_s"] >= 1.0


def _report(path: str, fmt: str = "text") -> subprocess.CompletedProcess:
    return subprocess.run(
        trainmon_cmd("report", path, "--format", fmt), env=child_env(), capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def good_recording(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    addr = f"/tmp/tm-good-{os.getpid()}.sock"
    return record_training(addr, str(d / "good.tmrec"), "--steps", "120", "--workers", "0", "--cpu-ms", "1")


def _one_line_error(res: subprocess.CompletedProcess, fragment: str) -> None:
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainmon: error:") and fragment in lines[0], res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_report_on_missing_empty_and_foreign_files(tmp_path):
    _one_line_error(_report(str(tmp_path / "nope.tmrec")), "no such file")
    (tmp_path / "empty").write_bytes(b"")
    _one_line_error(_report(str(tmp_path / "empty")), "empty")
    (tmp_path / "foreign").write_text("hello world, not a recording\n" * 10)
    _one_line_error(_report(str(tmp_path / "foreign")), "not a trainmon recording")
    _one_line_error(_report(str(tmp_path)), "directory")
    (tmp_path / "head").write_bytes(b"TRAINMON-R")
    _one_line_error(_report(str(tmp_path / "head")), "truncated")


def test_report_on_truncated_and_corrupt_files_reads_up_to_the_damage(good_recording, tmp_path):
    with open(good_recording, "rb") as fh:
        data = fh.read()
    full = json.loads(_report(good_recording, "json").stdout)
    truncated = tmp_path / "t.tmrec"
    truncated.write_bytes(data[: len(data) - 7])
    res = _report(str(truncated), "json")
    assert res.returncode == 0 and "warning" in res.stderr and "truncated" in res.stderr
    part = json.loads(res.stdout)
    assert part["warnings"] and 0 <= part["runs"][0]["steps"] <= full["runs"][0]["steps"]
    corrupt = bytearray(data)
    for i in range(len(data) // 2, len(data) // 2 + 16):
        corrupt[i] ^= 0xFF
    (tmp_path / "c.tmrec").write_bytes(bytes(corrupt))
    res = _report(str(tmp_path / "c.tmrec"))
    assert res.returncode == 0 and "corrupt" in res.stderr and "Traceback" not in res.stderr
    assert "VERDICT" in res.stdout


@pytest.mark.parametrize("fmt, marker", [("text", "VERDICT"), ("markdown", "**Verdict:"), ("json", '"verdict"')])
def test_report_formats(good_recording, fmt, marker):
    res = _report(good_recording, fmt)
    assert res.returncode == 0 and marker in res.stdout
    assert "input.main_process" in res.stdout  # num_workers=0 with 1 ms of CPU per sample


def test_bad_arguments_get_one_line_and_status_2(tmp_path):
    res = subprocess.run(
        trainmon_cmd("report", "x", "--format", "pdf"), env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "invalid choice" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run(
        trainmon_cmd("record", "-o", str(tmp_path / "x"), "--duration", "-1"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "must be greater than 0" in res.stderr
    res = subprocess.run(
        trainmon_cmd("record", "-o", "/nonexistent-dir/x.tmrec", "--duration", "1"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "cannot write" in res.stderr


@pytest.mark.parametrize(
    "scenario_args",
    # Main-process loading: a wait worth estimating. A healthy run (both near 0) is held against the training's own
    # meter in test_sampling_accuracy.py.
    [("--workers", "0", "--cpu-ms", "1.5")],
    ids=["main-process"],
)
def test_agentless_pyspy_estimate_agrees_with_the_agent(addr, tmp_path, scenario_args):
    rec = str(tmp_path / "p.tmrec")
    train = subprocess.Popen(
        [PY, "-m", "trainmon.demo.train", *scenario_args, "--seconds", "14", "--steps", "1000000"],
        env=child_env(TRAINMON_ADDR=addr),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3.0)  # past torch's import: py-spy then sees the training loop
    recorder = subprocess.Popen(
        trainmon_cmd("record", "-o", rec, "--listen", addr, "--pid", str(train.pid), "-q"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: os.path.exists(addr) or recorder.poll() is not None, 20)
        assert recorder.poll() is None, recorder.communicate()
        train.communicate(timeout=120)
        assert train.returncode == 0
        time.sleep(1.0)
    finally:
        stop(recorder)
    (run,) = report_json(rec)["runs"]
    assert run["pid"] == train.pid and run["pyspy_data_wait_share"] is not None
    assert abs(run["pyspy_data_wait_share"] - run["data_wait_fraction"]) <= 0.1, run
