"""Shared fixtures: short socket paths, the project's Python, CLI subprocess helpers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


@pytest.fixture
def sock_dir() -> Iterator[str]:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be longer.
    d = tempfile.mkdtemp(prefix="tm-", dir="/tmp")
    os.chmod(d, 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def addr(sock_dir: str) -> str:
    return os.path.join(sock_dir, "m.sock")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def trainmon_cmd(*args: str) -> list[str]:
    return [PY, "-m", "trainmon", *args]


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def start_recorder(addr: str, output: str, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        trainmon_cmd("record", "--output", output, "--listen", addr, "-q", *extra),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert wait_for(lambda: os.path.exists(addr) or proc.poll() is not None, 20), "recorder did not start"
    assert proc.poll() is None, proc.communicate()
    return proc


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> tuple[str, str]:
    if proc.poll() is None:
        proc.terminate()
    out, err = proc.communicate(timeout=timeout)
    return out, err


def run_train(addr: str | None, *args: str, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    extra = {"TRAINMON_ADDR": addr} if addr else {}
    extra.update(env)
    return subprocess.run(
        [PY, "-m", "trainmon.demo.train", *args],
        env=child_env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def report_json(path: str) -> dict:
    res = subprocess.run(
        trainmon_cmd("report", path, "--format", "json"), env=child_env(), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def record_training(addr: str, output: str, *train_args: str) -> str:
    """A real training under a real ``trainmon record``; returns the recording's path."""
    recorder = start_recorder(addr, output)
    try:
        res = run_train(addr, *train_args)
        assert res.returncode == 0, res.stderr
        time.sleep(1.0)  # the agent's last batch is read before the recorder is stopped
    finally:
        stop(recorder)
    return output
