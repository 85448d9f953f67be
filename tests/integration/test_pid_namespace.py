"""A real CPU training in its own pid namespace (``unshare --pid --fork --mount-proc``, as in a container) under a
real ``trainmon record`` outside, over the Unix socket: the report names the training's real pid here (not 1),
its DataLoader workers are mapped, and pid 1 (this machine's init) is never read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from testsupport.procs import PY, child_env, report_json, start_recorder, stop, wait_for
from trainmon.ingest import pidns
from trainmon.record import load_recording


def _unshare_refusal() -> str | None:
    if os.geteuid() != 0:
        return "a new pid namespace needs root (unshare --pid)"
    if shutil.which("unshare") is None:
        return "unshare(1) is not installed"
    try:
        res = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if res.returncode != 0 or res.stdout.strip() != "1":
        return f"unshare --pid is refused here: {res.stderr.strip() or res.stdout.strip()}"
    return None


pytestmark = pytest.mark.skipif(bool(reason := _unshare_refusal()), reason=reason or "")


UNSHARE = ("unshare", "--pid", "--fork", "--mount-proc")
TRAIN_ARGS = ("--seconds", "6", "--workers", "2", "--persistent", "--cpu-ms", "1")


def test_training_in_a_pid_namespace_is_mapped(addr: str, tmp_path) -> None:
    rec, own = str(tmp_path / "run.tmrec"), str(tmp_path / "own.json")
    recorder = start_recorder(addr, rec)
    train = None
    try:
        train = subprocess.Popen(
            [*UNSHARE, PY, "-m", "trainmon.demo.train", *TRAIN_ARGS, "--self-report", own],
            env=child_env(TRAINMON_ADDR=addr),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # unshare forks the training: its child is the training's main process, pid 1 inside.
        main: list[int] = []
        assert wait_for(lambda: main.extend(pidns.children(train.pid)) or main, 20), "no training process"
        host_pid = main[0]
        assert (pidns.nspid(host_pid) or [])[-1] == 1
        workers: list[int] = []

        def find_workers() -> bool:
            workers[:] = [p for p in pidns.descendants(host_pid) if "python" in _cmdline(p)]
            return len(workers) >= 2

        assert wait_for(find_workers, 30), "the DataLoader workers did not start"
        _out, err = train.communicate(timeout=120)
        assert train.returncode == 0, err
        time.sleep(1.0)  # the agent's last batch is read before the recorder is stopped
    finally:
        if train is not None and train.poll() is None:
            train.kill()
            train.wait()
        stop(recorder)
    with open(own) as fh:
        assert json.load(fh)["pid"] == 1  # the training saw itself as pid 1

    (run,) = report_json(rec)["runs"]
    assert run["pid"] == host_pid != 1, run
    assert run["agent_pid"] == 1
    assert run["pid_namespace"] == "mapped"
    assert len(run["agent_worker_pids"]) == 2
    assert sorted(run["worker_pids"]) == sorted(workers[:2]), (run["worker_pids"], workers)
    assert run["processes"]["main"].get("cpu_pct") is not None  # the training's own figures, read here

    store, _warnings = load_recording(rec)
    pids = {int(key.split(".")[1]) for key in store.series if key.startswith("proc.")}
    assert 1 not in pids and not pids & set(run["agent_worker_pids"]), pids  # init and namespace pids: never read
    assert host_pid in pids and set(run["worker_pids"]) <= pids


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
