"""Trainings started without trainmon, found by a monitor that was never told about them: listed with their role and
name, sampled, judged, recorded and reported as sampled runs (real processes, real /proc, real py-spy)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testsupport import other_user
from trainmon.monitor import Monitor
from trainmon.sources.discovery import discover
from trainmon.sources.discovery.discover import Discovery
from trainmon.view import extract

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "workloads" / "examples_imagenet.py"
PY = sys.executable
METER = re.compile(r"meter step=(\d+) data_time_sum=([\d.]+) batch_time_sum=([\d.]+) t=([\d.]+)")


def plain_env(**extra: str) -> dict[str, str]:
    """The environment of a job started without trainmon: nothing of trainmon's on its path or in its variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_") and k != "PYTHONPATH"}
    return env | extra


def start_training(case: str, seconds: float = 120.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [PY, str(EXAMPLES), "--case", case, "--seconds", str(seconds), "--print-freq", "2"],
        env=plain_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(ROOT / "tests" / "workloads"),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "start case=…": torch is imported and the loader made
    assert line.startswith("start"), line
    return proc


def meters(lines: list[str]) -> list[tuple[int, float, float, float]]:
    return [(int(m[1]), float(m[2]), float(m[3]), float(m[4])) for line in lines if (m := METER.search(line))]


def stop(proc: subprocess.Popen[str]) -> list[str]:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.splitlines()


def wait_for(predicate, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


@pytest.fixture
def discovering_monitor(addr: str):
    m = Monitor(addr, interval=0.5, discover=True, dump_on_critical=False)
    m.start()
    yield m
    m.stop()


def test_a_training_started_without_trainmon_is_listed_at_once_then_sampled_and_judged(discovering_monitor):
    m = discovering_monitor
    proc = start_training("one-worker")
    try:
        t_ready = time.monotonic()
        roles = wait_for(lambda: m.tracked_pids().get(proc.pid) == "main" and m.tracked_pids(), 5.0)
        listed_after = time.monotonic() - t_ready
        assert roles, f"pid {proc.pid} not found: {m.tracked_pids()}"
        assert listed_after < 2.0, listed_after
        # Named in the process table from the moment it is found, before it is sampled (no run yet).
        found_rows = {r.pid: r for r in extract.proc_rows(m.store, m.found_roles(), time.monotonic(), 3.0)}
        if not any(r.pid == proc.pid for r in m.store.runs.values()) and proc.pid in found_rows:
            assert "examples_imagenet.py" in found_rows[proc.pid].name, found_rows[proc.pid]
        assert m.found_roles()[proc.pid] == ("main", "examples_imagenet.py")
        # Its DataLoader worker is found as its worker, and the process table names both.
        workers = wait_for(
            lambda: [p for p, r in m.tracked_pids().items() if r == "worker" and _ppid(p) == proc.pid], 10.0
        )
        assert workers, m.tracked_pids()
        run = wait_for(lambda: next((r for r in m.store.runs.values() if r.pid == proc.pid), None), 5.0)
        assert run is not None and run.measured_by == "sampling" and run.steps.total == 0
        t = time.monotonic()
        rows = {r.pid: r for r in extract.proc_rows(m.store, m.found_roles(), t, 3.0)}
        assert rows[proc.pid].role == "main" and "examples_imagenet.py" in rows[proc.pid].name
        assert any(rows[w].role == "worker" and "examples_imagenet.py" in rows[w].name for w in workers if w in rows)

        def sampled_finding():
            return next(
                (
                    f
                    for f in m.findings
                    if f.evidence.get("measured_by") == "sampling"
                    and f.evidence.get("run") == f"pid {proc.pid}"
                    and f.code.startswith("input.")
                ),
                None,
            )

        found = wait_for(sampled_finding, 25.0, 0.5)
        assert found is not None, [(f.code, f.summary) for f in m.findings]
        judged_after = time.monotonic() - t_ready
        assert judged_after < 20.0 + 5.0, judged_after  # 20 s on a quiet host; the machine may be shared
        assert found.code.startswith("input."), (found.code, found.summary)
        assert found.summary.startswith("sampled examples_imagenet.py"), found.summary
        assert any(f"trainmon attach {proc.pid}" in a for a in found.advice)
        assert m.last_snapshot is not None
        status = next(r for r in m.last_snapshot.runs if r.pid == proc.pid)
        assert status.measured_by == "sampling" and 0.0 <= status.wait_fraction <= 1.0
    finally:
        stop(proc)
    # Gone: its run ends ("exit") and it leaves the process table.
    ended = wait_for(lambda: (r := next(r for r in m.store.runs.values() if r.pid == proc.pid)).ended and r, 5.0)
    assert ended and ended.ended == "exit" and not ended.connected
    assert wait_for(lambda: proc.pid not in m.tracked_pids(), 3.0)


LINGERS = """
import time, torch, trainmon.agent
time.sleep(5)  # the dataset is built before attach(): trainmon's address in the environment says an agent is coming
trainmon.agent.attach()
model, data = torch.nn.Linear(64, 64), torch.utils.data.DataLoader(torch.randn(4096, 64), batch_size=32)
end = time.monotonic() + 3
while time.monotonic() < end:
    for x in data:
        model(x).sum().backward()
        if time.monotonic() > end:
            break
trainmon.agent.detach()  # the agent says goodbye; the process group and CUDA teardown still take seconds
print("detached", flush=True)
time.sleep(4)
"""


def test_a_training_whose_agent_said_goodbye_is_not_sampled_while_it_tears_down(discovering_monitor, addr):
    m = discovering_monitor
    proc = subprocess.Popen(
        [PY, "-c", LINGERS], env=plain_env(PYTHONPATH=str(ROOT), TRAINMON_ADDR=addr), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "detached"
        agent = wait_for(
            lambda: next((r for r in m.store.runs.values() if r.pid == proc.pid and r.measured_by == "agent"), None),
            5.0,
        )
        assert agent is not None and agent.steps.total > 0, [(r.pid, r.measured_by) for r in m.store.runs.values()]
        assert wait_for(lambda: not agent.connected, 5.0)
        time.sleep(3.0)  # three seconds alive with torch mapped after the goodbye: well past the settle time
        assert proc.poll() is None
        runs = [(r.measured_by, r.ended) for r in m.store.runs.values() if r.pid == proc.pid]
        assert runs == [("agent", agent.ended)], runs
    finally:
        stop(proc)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2 :].split()[1])


def test_discovery_skips_itself_its_ancestors_and_examines_a_process_once():
    # This test process imports torch and is the monitor's ancestor in every CLI test: never a training to sample.
    d = Discovery()
    first = d.scan()
    assert os.getpid() not in first and os.getppid() not in first
    examined = d.examined
    d.scan()
    d.scan()
    # Nothing new started: only young Python processes without torch are looked at again.
    young_python = [p for p in d.procs.values() if not p.torch]
    assert d.examined - examined <= 2 * len(young_python)


@pytest.mark.skipif(other_user.nobody() is None, reason=other_user.SKIP_REASON)
def test_another_users_trainings_are_not_read():
    proc = start_training("healthy", seconds=60)
    try:
        code = (
            "import json; from trainmon.sources.discovery.discover import Discovery; "
            "print(json.dumps(sorted(Discovery().scan())))"
        )
        out = subprocess.run(
            [*other_user.AS_NOBODY, other_user.SYSTEM_PY, "-c", code],  # a copy of trainmon nobody can read
            capture_output=True,
            text=True,
            timeout=60,
            env=plain_env(PYTHONPATH=other_user.staged_path() or ""),
            cwd="/",
        )
        assert out.returncode == 0, out.stderr
        assert proc.pid not in json.loads(out.stdout)
        assert proc.pid in Discovery().scan()  # the same scan as its owner finds it
    finally:
        stop(proc)


def test_record_beside_a_training_started_before_it_reports_it_as_sampled(tmp_path, sock_dir):
    # Loading in the main process, about a third of each step (2 ms of CPU per sample, 8 a batch, 20 ms "device").
    proc = subprocess.Popen(
        [PY, str(ROOT / "tests" / "workloads" / "plain_loop.py"), "--workers", "0", "--item-ms", "2"],
        env=plain_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith("start")
    # Beside it, a Python process that imported torch and does nothing (a notebook kernel): found, not a run.
    idle = subprocess.Popen(
        [PY, "-c", "import torch, time; print('ready', flush=True); time.sleep(120)"],
        env=plain_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert idle.stdout is not None and idle.stdout.readline().startswith("ready")
    rec = tmp_path / "run.tmrec"
    try:
        time.sleep(1.0)
        t_rec = time.monotonic()
        out = subprocess.run(
            [
                PY,
                "-m",
                "trainmon",
                "record",
                "--output",
                str(rec),
                "--duration",
                "25",
                "--quiet",
                "--listen",
                os.path.join(sock_dir, "r.sock"),
            ],
            env=plain_env(PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        t_end = time.monotonic()
    finally:
        lines = stop(proc)
        idle.kill()
        idle.wait()
    report = json.loads(
        subprocess.run(
            [PY, "-m", "trainmon", "report", str(rec), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=plain_env(PYTHONPATH=str(ROOT)),
        ).stdout
    )
    (run,) = [r for r in report["runs"] if r["pid"] == proc.pid]
    assert idle.pid not in [r["pid"] for r in report["runs"]]
    assert {"pid": idle.pid, "name": "python -c"} in report["idle_processes"]
    assert run["measured_by"] == "sampling" and run["attached_at"] is None and run["steps"] is None
    assert run["name"] == "plain_loop.py" and run["dataloader"]["num_workers"] == 0
    assert run["data_wait_samples"] >= 30
    own = [m for m in meters(lines) if t_rec + 2.0 <= m[3] <= t_end]  # sampled from a second after it began
    assert len(own) >= 3, lines[-5:]
    # The script's own figure over the recording (its meter lines within the recorded span).
    _, d0, b0, _ = own[0]
    _, d1, b1, _ = own[-1]
    truth = (d1 - d0) / (b1 - b0)
    assert run["data_wait_fraction"] == pytest.approx(truth, abs=0.10), (run["data_wait_fraction"], truth)
    assert truth > 0.15, truth  # the loading is a material share of the step: a starved loop
    ours = [f for f in [report["verdict"], *report["findings"]] if f["evidence"].get("run") == f"pid {proc.pid}"]
    assert ours and ours[0]["code"] == "input.main_process", (truth, ours)
    assert ours[0]["evidence"]["measured_by"] == "sampling" and ours[0]["summary"].startswith("sampled plain_loop.py")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_ranks_of_a_torchrun_job_started_without_trainmon_are_one_job(discovering_monitor):
    m = discovering_monitor
    ddp = ROOT / "tests" / "workloads" / "ddp_plain.py"
    launcher = subprocess.Popen(
        [
            PY,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            str(ddp),
            "--seconds",
            "40",
        ],
        env=plain_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        ranks: dict[int, int] = {}
        said: list[str] = []
        while len(ranks) < 2:
            line = launcher.stdout.readline()
            assert line, f"torchrun ended before both ranks started: {''.join(said)[-2000:]}"
            said.append(line)
            # both ranks write to one pipe: a rank's line can land on the other's before its newline
            ranks.update((int(r), int(p)) for r, p in re.findall(r"start rank=(\d) pid=(\d+)", line))

        def runs():
            got = {r.pid: r for r in m.store.runs.values() if r.pid in ranks.values()}
            return got if len(got) == 2 else None

        by_pid = wait_for(runs, 10.0)
        assert by_pid, m.tracked_pids()
        assert launcher.pid not in m.tracked_pids()  # the launcher is not a training
        for rank, pid in ranks.items():
            run = by_pid[pid]
            assert run.measured_by == "sampling" and run.rank == rank and run.role == "rank"
            assert run.hello["world_size"] == 2
            assert wait_for(lambda run=run, pid=pid: [w for w in run.worker_pids() if _ppid(w) == pid], 10.0)
        assert len({r.job_id for r in by_pid.values()}) == 1 and next(iter(by_pid.values())).job_id
        assert len({r.job_key for r in by_pid.values()}) == 1
    finally:
        launcher.terminate()
        try:
            launcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.communicate()


def test_a_young_python_process_is_not_re_read_until_it_maps_something(monkeypatch):
    # A Python process without torch, idle: looked at each scan while young, its maps read once while its size
    # holds; once it maps more (an anonymous 64 MB mapping here, as importing torch maps its libraries), again.
    code = (
        "import mmap, sys, time; sys.stdout.write('up\\n'); sys.stdout.flush(); sys.stdin.readline(); "
        "m = mmap.mmap(-1, 64 << 20); sys.stdout.write('mapped\\n'); sys.stdout.flush(); time.sleep(60)"
    )
    proc = subprocess.Popen([PY, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=plain_env())
    reads: list[str] = []
    read = discover._read
    monkeypatch.setattr(discover, "_read", lambda path, limit: reads.append(path) or read(path, limit))
    maps = f"/proc/{proc.pid}/maps"
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "up\n"
        d = Discovery()
        d.scan()
        assert d.procs[proc.pid].python and not d.procs[proc.pid].torch
        for _ in range(3):
            d.scan()
        assert reads.count(maps) == 1
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "mapped\n"
        d.scan()
        assert reads.count(maps) == 2
        assert not d.procs[proc.pid].torch and d.procs[proc.pid].python
    finally:
        proc.kill()
        proc.wait()
