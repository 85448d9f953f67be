"""``trainmon --json`` and ``trainmon record --json`` as scripts use them: a real monitor process beside a real
training, its stdout read line by line and each line checked against the published schema."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator

import jsonschema

from testsupport.procs import child_env, force_stop_all, start_python, trainmon_cmd, wait_for
from trainmon.export.json_stream import SCHEMA_VERSION, schema

ANSI = re.compile(r"\x1b\[")
TRAIN = ("-m", "trainmon.demo.train", "--workers", "1", "--cpu-ms", "1", "--seconds", "60", "--steps", "1000000")


def _lines(proc: subprocess.Popen, n: int, timeout: float) -> Iterator[str]:
    """Up to ``n`` lines of the child's stdout as they come, for at most ``timeout`` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for _ in range(n):
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            return
        yield line


def _json_monitor(addr: str, interval: str) -> subprocess.Popen:
    """`trainmon --json` listening on ``addr``, started and listening when this returns."""
    monitor = subprocess.Popen(
        trainmon_cmd("--json", "--listen", addr, "--interval", interval),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert wait_for(lambda: os.path.exists(addr) or monitor.poll() is not None, 20)
    return monitor


def test_thirty_ticks_of_a_live_training_each_valid_against_the_schema(addr):
    monitor = _json_monitor(addr, "0.25")
    training = None
    try:
        training = start_python(*TRAIN, env={"TRAINMON_ADDR": addr})
        validator = jsonschema.Draft202012Validator(schema())
        ticks = []
        # 30 ticks once the training reports steps (what a script waits for), each a whole line.
        for line in _lines(monitor, 400, 90):
            assert line.endswith("\n") and not ANSI.search(line), line
            tick = json.loads(line)
            validator.validate(tick)
            if any(r["steps"] for r in tick["runs"]):
                ticks.append(tick)
            if len(ticks) == 30:
                break
        assert len(ticks) == 30, f"{len(ticks)} ticks with steps"
        assert [t["trainmon_tick"] for t in ticks] == [SCHEMA_VERSION] * 30
        times = [t["t"] for t in ticks]
        assert times == sorted(times) and len(set(times)) == 30
        run = ticks[-1]["runs"][0]
        assert run["measured_by"] == "agent" and run["connected"] and run["pid"] == training.pid
        assert run["steps"] > ticks[0]["runs"][0]["steps"]  # the figures move with the training
        assert 0 <= run["data_wait_fraction"] <= 1 and run["steps_per_s"] > 0
        last = ticks[-1]
        assert last["verdict"] is not None and last["verdict"]["code"] in {f["code"] for f in last["findings"]}
        assert last["host"]["cpu.busy"] is not None and len(last["host"]["cores_busy_pct"]) == os.cpu_count()
        assert last["gpus"] == []  # no GPU here: an empty list, not an error
    finally:
        force_stop_all([training, monitor])
    assert monitor.stderr is not None and "Traceback" not in monitor.stderr.read()


def test_the_stream_ends_when_its_reader_leaves(addr):
    # `trainmon --json | head -3`: the monitor exits on its own once head has its lines, with no traceback.
    pipeline = subprocess.run(
        ["bash", "-c", f"{' '.join(trainmon_cmd('--json', '--listen', addr, '--interval', '0.2'))} | head -3"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = pipeline.stdout.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["trainmon_tick"] == SCHEMA_VERSION for line in lines)
    assert "Traceback" not in pipeline.stderr and "BrokenPipe" not in pipeline.stderr, pipeline.stderr


def test_record_json_writes_the_recording_and_the_stream(addr, tmp_path):
    output = tmp_path / "r.tmrec"
    recorder = subprocess.Popen(
        trainmon_cmd("record", "--json", "-o", str(output), "--listen", addr, "--interval", "0.25"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = list(_lines(recorder, 5, 30))
        assert len(lines) == 5 and all(json.loads(line)["trainmon_tick"] == SCHEMA_VERSION for line in lines)
    finally:
        force_stop_all([recorder])
    assert recorder.returncode == 0 and output.stat().st_size > 0


def test_record_json_without_an_output_is_a_usage_error(tmp_path):
    res = subprocess.run(
        trainmon_cmd("record", "--json"), env=child_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stdout == ""
    assert "--output" in res.stderr.strip().splitlines()[-1], res.stderr


def _cpu_s(pid: int) -> float:
    """The process's own user + system CPU seconds, read from /proc as any outside tool would."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_monitors_own_cost_agrees_with_proc_read_from_outside(addr):
    monitor = _json_monitor(addr, "0.5")
    training = None
    try:
        training = start_python(*TRAIN, env={"TRAINMON_ADDR": addr})
        shown, outside = [], []
        for line in _lines(monitor, 44, 60):
            outside.append((time.monotonic(), _cpu_s(monitor.pid)))
            tick = json.loads(line)
            shown.append((tick["self"]["cpu_pct"], tick["self"]["rss_mb"]))
        assert len(shown) == 44
        # The last 25 ticks (12.5 s, the training reporting): the mean of what the monitor showed against the CPU
        # /proc says it used over the same span (each shown figure covers the 5 s before its tick).
        (t0, c0), (t1, c1) = outside[19 - 10], outside[-1]
        from_proc = 100.0 * (c1 - c0) / (t1 - t0)
        mean_shown = sum(cpu for cpu, _ in shown[19:]) / len(shown[19:])
        assert abs(mean_shown - from_proc) <= max(0.2 * from_proc, 0.3), (mean_shown, from_proc)
        with open(f"/proc/{monitor.pid}/status") as f:
            rss_mb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        assert abs(shown[-1][1] - rss_mb) <= 0.2 * rss_mb, (shown[-1][1], rss_mb)
    finally:
        force_stop_all([training, monitor])
