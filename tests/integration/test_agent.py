"""The agent in real training processes talking to a real monitor over a real socket."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from testsupport.paths import LOOP
from testsupport.procs import child_env, start_python, wait_for
from trainmon.monitor import Monitor


def _loop(
    addr: str, steps: int = 60, workers: int = 0, ctx: str = "none", sleep_ms: float = 0.0, **env: str
) -> subprocess.Popen:
    return start_python(LOOP, str(steps), str(workers), ctx, str(sleep_ms), env={"TRAINMON_ADDR": addr, **env})


def _finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def _runs_done(monitor: Monitor, n: int):
    return lambda: len(monitor.store.runs) >= n and all(r.ended for r in monitor.store.runs.values())


def test_attach_without_monitor_is_fast_and_silent(sock_dir):
    code = (
        "import time, json, trainmon.agent as a\n"
        "t = time.perf_counter(); ok = a.attach(%r); dt = time.perf_counter() - t\n"
        "print(json.dumps({'ok': ok, 'dt': dt}))" % (sock_dir + "/nobody.sock")
    )
    res = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == ""
    out = json.loads(res.stdout)
    assert out["ok"] is True
    assert out["dt"] < 0.05  # no connect on the caller's thread (the real figure is in benchmarks/)


def test_training_without_monitor_runs_normally_and_quietly(sock_dir):
    proc = _loop(sock_dir + "/nobody.sock", steps=40, workers=2, ctx="fork")
    result, err = _finish(proc)
    assert result["steps"] == 40 and result["attached"] is True
    assert err == ""


def test_monitor_appearing_later_receives_every_step(addr, sock_dir):
    proc = _loop(addr, steps=200, sleep_ms=5)  # ~4 s of training
    time.sleep(1.0)
    m = Monitor(addr, interval=0.2)
    m.start()
    try:
        assert wait_for(lambda: len(m.store.runs) == 1, 15), "agent never connected"
        result, _ = _finish(proc)
        assert wait_for(_runs_done(m, 1), 10)
        run = next(iter(m.store.runs.values()))
        assert run.pid == result["pid"]
        assert run.steps.total == result["steps"] == 200  # buffered while nobody listened
        assert run.ended == "exit"
    finally:
        m.stop()


def test_two_agents_at_once(monitor, addr):
    procs = [_loop(addr, steps=80, sleep_ms=1), _loop(addr, steps=50, sleep_ms=1)]
    results = [_finish(p)[0] for p in procs]
    assert wait_for(_runs_done(monitor, 2), 10)
    by_pid = {r.pid: r for r in monitor.store.runs.values()}
    assert {r["pid"] for r in results} == set(by_pid)
    for res in results:
        assert by_pid[res["pid"]].steps.total == res["steps"]


@pytest.mark.parametrize("ctx", ["fork", "spawn", "forkserver"])
def test_dataloader_workers_stay_inert_and_are_reported(monitor, addr, ctx):
    result, _ = _finish(_loop(addr, steps=60, workers=2, ctx=ctx))
    assert wait_for(_runs_done(monitor, 1), 10)
    assert len(monitor.store.runs) == 1, "a DataLoader worker opened its own connection"
    run = next(iter(monitor.store.runs.values()))
    assert run.steps.total == result["steps"] == 60
    assert sorted(run.worker_pids()) == sorted(result["worker_pids"]) and len(result["worker_pids"]) == 2
    assert run.train_loader().config["num_workers"] == 2
    assert run.train_loader().config["multiprocessing_context"] == ctx


def test_trainmon_disable_makes_attach_a_no_op(monitor, addr):
    result, _ = _finish(_loop(addr, steps=20, TRAINMON_DISABLE="1"))
    assert result["attached"] is False and result["patched"] is False
    time.sleep(0.5)
    assert monitor.store.runs == {}


def test_hello_carries_identity_config_and_redacted_argv(monitor, addr):
    code = (
        "import sys, torch, trainmon.agent as a\nsys.argv = ['train.py', '--api-key=SECRET1', '--lr', '1']\n"
        "a.attach(name='exp-7')\n"
        "dl = torch.utils.data.DataLoader(list(range(12)), batch_size=3, pin_memory=False, drop_last=True)\n"
        "for _ in dl: a.step()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(TRAINMON_ADDR=addr, RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", MASTER_PORT="29500"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert wait_for(_runs_done(monitor, 1), 10)
    run = next(iter(monitor.store.runs.values()))
    h = run.hello
    assert (h["name"], h["rank"], h["world_size"], h["local_rank"]) == ("exp-7", 3, 4, 1)
    assert h["torch"] and h["host"] and "SECRET1" not in json.dumps(h)
    assert "--api-key=***" in h["argv"] and "MASTER_PORT" in h["job"]
    cfg = run.train_loader().config
    assert cfg["batch_size"] == 3 and cfg["num_workers"] == 0 and cfg["drop_last"] is True
    assert run.steps.total == 4 and run.mode == "explicit"


def test_marks_phases_and_checkpoints_reach_the_monitor(monitor, addr, tmp_path):
    code = (
        "import torch, trainmon.agent as a\na.attach()\n"
        "a.mark('lr-drop')\n"
        "with a.phase('eval'):\n    pass\n"
        f"torch.save({{'w': torch.zeros(10)}}, {str(tmp_path / 'c.pt')!r})\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], env=child_env(TRAINMON_ADDR=addr), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert wait_for(_runs_done(monitor, 1), 10)
    run = next(iter(monitor.store.runs.values()))
    assert [m[1] for m in run.marks] == ["lr-drop"]
    assert [p[2] for p in run.phases] == ["eval"]
    assert len(run.checkpoints) == 1 and run.checkpoints[0][1] >= run.checkpoints[0][0]
    assert (tmp_path / "c.pt").exists()


def test_attach_before_torch_import_patches_on_import(monitor, addr):
    code = (
        "import sys, trainmon.agent as a\na.attach()\nassert 'torch' not in sys.modules\n"
        "import torch\nm = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for x in torch.utils.data.DataLoader(torch.ones(20, 2), batch_size=2):\n"
        "    o.zero_grad(); m(x).sum().backward(); o.step()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], env=child_env(TRAINMON_ADDR=addr), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert wait_for(_runs_done(monitor, 1), 10)
    run = next(iter(monitor.store.runs.values()))
    assert run.steps.total == 10 and run.mode == "opt"


def _frames_received(addr: str, done: threading.Event) -> list[tuple[float, list[int]]]:
    """A bare listener on ``addr``: (arrival, the records' end times in ns) of each events frame, until ``done``."""
    from trainmon import protocol as P

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(addr)
    listener.listen(1)
    listener.settimeout(30)
    frames: list[tuple[float, list[int]]] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(0.2)
        reader = P.FrameReader()
        while not done.is_set():
            try:
                data = conn.recv(1 << 16)
            except TimeoutError:
                continue
            if not data:
                break
            now = time.monotonic()
            for kind, payload in reader.feed(data):
                if kind == P.F_EVENTS:
                    frames.append((now, list(P.decode_events(payload)[2 :: P.RECORD_FIELDS])))
        conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return frames


def test_a_slow_loop_shares_frames_and_each_step_still_arrives_within_a_tick(addr):
    # 10 steps a second (4 items of 25 ms): two records a step, sent in frames of a few steps, not one a tick.
    done = threading.Event()
    frames = _frames_received(addr, done)
    proc = _loop(addr, steps=30, sleep_ms=25)
    try:
        result, _ = _finish(proc)
    finally:
        done.set()
    assert result["steps"] == 30
    events = [f for f in frames if f[1]]
    span = events[-1][0] - events[0][0]
    assert sum(len(ends) for _, ends in events) >= 60  # every wait and optimizer step
    assert len(events) <= span / 0.2 + 2  # at most ~4 a second (one a tick would be ~10)
    lateness = [arrival - end / 1e9 for arrival, ends in events for end in ends]
    assert max(lateness) < 0.6  # held at most 0.25 s, then a tick: well within the monitor's 1 s tick
