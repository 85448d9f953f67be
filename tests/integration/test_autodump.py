"""stall.hang and the stacks the monitor dumps by itself, against real processes and the real py-spy: a loop that
deadlocks on two locks after a brief pause, and one stopped with SIGSTOP. The hang limit is lowered to a few
seconds here (Thresholds(hang_min_s=...)); the default is max(30 s, 10 x the p95 step)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from testsupport.procs import child_env, wait_for
from trainmon.diagnose import Thresholds
from trainmon.monitor import Monitor, Snapshot
from trainmon.store.run import Run

DEADLOCK = """
import sys, time
import trainmon.agent
from trainmon.demo.stalls import MetricsLog

trainmon.agent.attach()
log = MetricsLog(rotate_after_s=float(sys.argv[1]))
start, step, paused = time.monotonic(), 0, False
while True:
    time.sleep(0.01)
    if not paused and time.monotonic() - start > 1.0:
        paused = True
        time.sleep(float(sys.argv[2]))  # a brief pause: shorter than the hang limit
    step += 1
    log.log(step, 0.0)
    trainmon.agent.step()
"""

STEPPER = """
import time
import trainmon.agent

trainmon.agent.attach()
while True:
    time.sleep(0.01)
    trainmon.agent.step()
"""


@pytest.fixture
def watched(addr: str) -> Iterator[tuple[Monitor, list[Snapshot]]]:
    """A real Monitor with a 3 s hang limit, ticking every 0.2 s, and every snapshot it published."""
    monitor = Monitor(addr, interval=0.2, thresholds=Thresholds(hang_min_s=3.0))
    snaps: list[Snapshot] = []
    monitor.listeners.append(snaps.append)
    monitor.start()
    yield monitor, snaps
    monitor.stop()


def start(code: str, addr: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=child_env(TRAINMON_ADDR=addr), stderr=subprocess.PIPE
    )


def only_run(monitor: Monitor) -> Run | None:
    runs = list(monitor.store.runs.values())
    return runs[0] if runs else None


def dumps(monitor: Monitor) -> list[dict]:
    """The run's dumps for stall.hang (on a loaded host a hiccup beside the pause can make a critical
    stall.periodic of them first, which is dumped too)."""
    run = only_run(monitor)
    return [d for d in run.stack_dumps if d["reason"] == "stall.hang"] if run is not None else []


def test_a_deadlocked_loop_is_a_hang_with_its_stacks_dumped_once(watched, addr):
    monitor, snaps = watched
    job = start(DEADLOCK, addr, "3.5", "1.5")
    try:
        assert wait_for(lambda: dumps(monitor), timeout=30.0), f"no stack dump; snapshots: {len(snaps)}"
        run = only_run(monitor)
        assert run is not None
        last_step = run.steps.end[-1]
        # The 1.5 s pause after the first second was below the limit: no hang before the deadlock.
        assert max(run.steps.dur) > 1.4
        hung = [s for s in snaps if any(f.code == "stall.hang" for f in s.findings)]
        assert hung and hung[0].t - last_step >= 3.0
        assert hung[0].verdict is not None and hung[0].verdict.code == "stall.hang"  # shown at once
        (dump,) = dumps(monitor)
        assert dump["reason"] == "stall.hang" and dump["t"] >= hung[0].t
        (main,) = [p for p in dump["processes"] if p["role"] == "main"]
        assert main["pid"] == job.pid and main["error"] is None
        assert main["elapsed_ms"] > 0 and main["cpu_ms"] >= 0
        threads = {t["name"]: t for t in main["threads"]}
        assert threads["MainThread"]["frames"][0][0] == "MetricsLog.log"
        assert threads["metrics-rotate"]["frames"][0][0] == "MetricsLog._rotate_later"
        # A tick later the finding names where the main thread waits; no second dump within the cooldown.
        assert wait_for(
            lambda: any("main thread in MetricsLog.log" in f.summary for f in monitor.findings), timeout=5.0
        )
        time.sleep(1.0)
        assert len(dumps(monitor)) == 1
        assert job.poll() is None  # still deadlocked, alive
    finally:
        job.kill()
        job.wait()


def test_a_stopped_process_is_a_hang_and_is_dumped_without_resuming_it(watched, addr):
    monitor, _ = watched
    job = start(STEPPER, addr)
    try:
        assert wait_for(lambda: (r := only_run(monitor)) is not None and r.steps.total > 100, timeout=30.0)
        os.kill(job.pid, signal.SIGSTOP)
        assert wait_for(lambda: dumps(monitor), timeout=30.0)
        (dump,) = dumps(monitor)
        (main,) = [p for p in dump["processes"] if p["role"] == "main"]
        assert main["error"] is None, main["error"]
        frames = [f[0] for t in main["threads"] if t["main"] for f in t["frames"]]
        assert "<module>" in frames
        with open(f"/proc/{job.pid}/stat") as fh:
            assert fh.read().rsplit(")", 1)[1].split()[0] == "T"  # py-spy --nonblocking left it stopped
        run = only_run(monitor)
        assert run is not None and run.connected
        hang = next(f for f in monitor.findings if f.code == "stall.hang")
        assert hang.evidence["main_cpu_pct"] is not None and hang.evidence["main_cpu_pct"] < 5.0
    finally:
        os.kill(job.pid, signal.SIGCONT)
        job.kill()
        job.wait()


def test_critical_findings_are_dumped_once_per_run_and_code_within_the_cooldown():
    from trainmon.autodump import AutoDumper
    from trainmon.diagnose.findings import Finding
    from trainmon.diagnose.verdicts import verdict
    from trainmon.store.store import Store

    sleeper = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        store = Store()
        store.hello(1, 0.0, {"pid": sleeper.pid})
        store.hello(2, 0.0, {"pid": 4321, "pid_namespace": "unmapped", "peer_pid": None})
        store.info(2, 0.0, {"workers": {"loader": 1, "pids": [7, 8]}})
        dumper = AutoDumper(store.info, cooldown_s=60.0, workers_for=lambda code: verdict(code).dump_workers)
        critical = Finding("stall.periodic", "critical", "x", [], {"run": f"pid {sleeper.pid}"})
        assert dumper.consider(store, 10.0, [critical, Finding("ok.compute_bound", "ok", "fine")]) == 1
        assert dumper.consider(store, 20.0, [critical]) == 0  # within the cooldown
        hang = Finding("stall.hang", "critical", "x", [], {"run": f"pid {sleeper.pid}"})
        assert dumper.consider(store, 21.0, [hang]) == 1  # another code of the same run
        assert dumper.consider(store, 71.0, [critical]) == 1  # the cooldown is over
        nobody = Finding("memory.host_pressure", "critical", "x", [], {})
        assert dumper.consider(store, 72.0, [nobody]) == 0  # names no run: nothing to dump
        unmapped = Finding("stall.hang", "critical", "x", [], {"run": "pid 4321"})
        assert dumper.consider(store, 73.0, [unmapped]) == 1
        assert dumper.wait_idle(60.0)
        dumps = store.runs[1].stack_dumps
        assert [d["reason"] for d in dumps] == ["stall.periodic", "stall.hang", "stall.periodic"]
        assert all(d["processes"][0]["threads"] and d["processes"][0]["pid"] == sleeper.pid for d in dumps)
        (other,) = store.runs[2].stack_dumps
        # Never dumped: no py-spy run (none took any time), every process "n/a (other pid namespace)".
        assert [(p["role"], p["pid"], p["error"], p["elapsed_ms"]) for p in other["processes"]] == [
            ("main", 4321, "n/a (other pid namespace)", None),
            ("worker", 7, "n/a (other pid namespace)", None),
            ("worker", 8, "n/a (other pid namespace)", None),
        ]
        dumper.close()
    finally:
        sleeper.kill()
        sleeper.wait()
