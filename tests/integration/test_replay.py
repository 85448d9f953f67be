"""A real recording replayed: into frames, by ``trainmon replay`` without a terminal, and on a real
pseudo-terminal (with ``trainmon demo``), where the screen must come up, show the verdict and quit on ``q``."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from testsupport.procs import child_env, record_training, trainmon_cmd
from trainmon.record import load_recording
from trainmon.view import FrameBuilder, Layout, ReplayFeed


@pytest.fixture(scope="module")
def real_recording(tmp_path_factory):
    """A real CPU training with data loaded in the main process, recorded by ``trainmon record``."""
    d = tmp_path_factory.mktemp("recording")
    addr = f"/tmp/tm-replay-{os.getpid()}.sock"
    return record_training(addr, str(d / "main-process.tmrec"), "--steps", "150", "--workers", "0", "--cpu-ms", "1.5")


# ---------------------------------------------------------------- into frames, and as status lines


def test_a_real_recording_replays_into_frames(real_recording):
    store, warnings = load_recording(real_recording)
    assert not warnings
    feed = ReplayFeed(store)
    (recorded,) = store.runs.values()
    feed.clock.seek(recorded.steps.end[-1])  # the recorder outlives the training by a moment or more
    frame = FrameBuilder(feed).build(Layout(50, 2))
    run = frame.runs[0]
    assert run.values.steps_total == 150 and run.loader.startswith("bs 32 · 0 workers")
    assert any(x == x for x in run.wait_ms)
    assert frame.procs and frame.procs[0].role == "main"
    assert frame.verdict is not None and frame.verdict.code in {"input.main_process", "insufficient_data"}
    assert frame.gpu_error  # no GPU on this machine, or the fake-free real NVML says why


def test_replay_command_prints_status_lines_without_a_terminal(real_recording, tmp_path):
    res = subprocess.run(
        trainmon_cmd("replay", real_recording, "--speed", "4"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) >= 3 and all("▶" in ln for ln in lines)
    assert any("input.main_process" in ln for ln in lines)
    for args, fragment in (
        (["replay", str(tmp_path / "nope.tmrec")], "no such file"),
        (["replay", real_recording, "--speed", "0"], "--speed"),
        (["replay", real_recording, "--speed", "fast"], "--speed"),
    ):
        bad = subprocess.run(trainmon_cmd(*args), env=child_env(), capture_output=True, text=True, timeout=60)
        err = bad.stderr.strip().splitlines()
        assert bad.returncode == 2 and len(err) == 1 and err[0].startswith("trainmon: error:") and fragment in err[0]


# ---------------------------------------------------------------- real commands in a real pseudo-terminal


def run_in_pty(
    args: list[str], cols: int, rows: int, until: list[str], timeout: float, env: dict[str, str]
) -> tuple[int, str]:
    """Start ``trainmon ARGS`` on a pty of the given size, wait for every string in ``until`` to appear, press q."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmon", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
        start_new_session=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
            shown = out.decode("utf-8", "replace")
            if all(s in shown for s in until):
                break
        shown = out.decode("utf-8", "replace")
        missing = [s for s in until if s not in shown]
        assert not missing, f"never shown: {missing}\n{shown[-3000:]}"
        os.write(master, b"q")
        end = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:
                    break
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return rc, out.decode("utf-8", "replace")


def test_replay_command_in_a_terminal_80x24(real_recording):
    env = child_env(TERM="xterm-256color", LANG="C.UTF-8", TZ="UTC")
    rc, shown = run_in_pty(
        ["replay", real_recording, "--speed", "8"],
        80,
        24,
        ["input.main_process", "step", "CPU", "no NVIDIA GPU", "END"],
        40,
        env,
    )
    assert rc == 0 and "Traceback" not in shown


@pytest.mark.slow
def test_demo_command_in_a_terminal_shows_a_verdict_and_quits_cleanly():
    env = child_env(TERM="xterm-256color", LANG="C.UTF-8")
    start = time.monotonic()
    rc, shown = run_in_pty(
        ["demo", "--scenario", "main-process", "--seconds", "12"],
        80,
        24,
        ["input.main_process", "step", "CPU", "GPU", "PID"],
        30,
        env,
    )
    assert time.monotonic() - start < 30
    assert rc == 0 and "Traceback" not in shown
    assert "trainmon report" in shown  # the report follows the screen
