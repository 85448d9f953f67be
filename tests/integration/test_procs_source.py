"""ProcSource against real processes: spinning, sleeping, reading, exiting, starved of CPU, owned by someone else.

Missing and unreadable /proc files, on a fake /proc: tests/unit/test_procs_proc_root.py."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.files import write_random_file
from testsupport.paths import ROOT
from trainmon.sources.host.procs import ProcSource

HAS_SCHEDSTAT = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat")


class Children:
    """Python children that print 'ready' once set up; every one is killed and reaped at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, code: str, *, cpus: set[int] | None = None, asleep: bool = False) -> subprocess.Popen:
        prelude = f"import os\nos.sched_setaffinity(0, {sorted(cpus)!r})\n" if cpus else ""
        proc = subprocess.Popen(
            [sys.executable, "-c", prelude + textwrap.dedent(code)], stdout=subprocess.PIPE, text=True
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the child is set up
        assert line.strip() == "ready", f"child failed to start: {line!r}"
        if asleep:
            wait_asleep(proc.pid)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()


def wait_asleep(pid: int, timeout: float = 10.0) -> None:
    """On a loaded machine a child may stay runnable a while after saying 'ready': wait until it sleeps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        if data[data.rfind(b")") + 2 :][:1] == b"S":
            return
        time.sleep(0.01)
    raise AssertionError(f"child {pid} never went to sleep")


@pytest.fixture
def children() -> Iterator[Children]:
    kids = Children()
    yield kids
    kids.close()


def measure(src: ProcSource, seconds: float = 1.5) -> dict[str, float]:
    src.sample(time.monotonic())
    time.sleep(seconds)
    return src.sample(time.monotonic())


SPIN = "print('ready', flush=True)\nwhile True:\n    pass\n"
SLEEP = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def test_spinning_process_is_a_full_core_and_runnable(children, source_for) -> None:
    pid = children.start(SPIN).pid
    out = measure(source_for({pid: "worker"}))
    p = f"proc.{pid}."
    cpu = out[p + "cpu_pct"]
    assert 1.0 <= cpu <= 115.0, out
    assert out[p + "state_R"] >= 0.8 and out[p + "state_main_R"] >= 0.8, out
    if HAS_SCHEDSTAT:
        # Always runnable: every wall second is spent either on a core or waiting for one, whatever the load.
        wait_pct = out[p + "runq_wait_ms_s"] / 10.0
        assert 75.0 <= cpu + wait_pct <= 115.0, out
        if wait_pct < 10.0:  # a core was free: the spinner used all of it
            assert cpu >= 80.0, out
    else:
        assert cpu >= 50.0, out
    assert out[p + "threads"] == 1.0
    assert out[p + "rss_mb"] > 1.0


def test_sleeping_process_is_idle(children, source_for) -> None:
    pid = children.start(SLEEP, asleep=True).pid
    out = measure(source_for({pid: "worker"}))
    p = f"proc.{pid}."
    assert out[p + "cpu_pct"] < 5.0
    assert out[p + "state_S"] >= 0.9 and out[p + "state_main_S"] >= 0.9, out
    assert out[p + "state_R"] <= 0.1 and out[p + "state_D"] <= 0.1
    if HAS_SCHEDSTAT:
        assert out[p + "runq_wait_ms_s"] < 20.0


def test_thread_shares_are_per_thread_and_main_alone(children, source_for) -> None:
    # Main thread spins, three helper threads sleep: a quarter of thread observations are R, the main's all R.
    code = """
        import threading, time
        for _ in range(3):
            threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        print('ready', flush=True)
        while True:
            pass
    """
    pid = children.start(code).pid
    out = measure(source_for({pid: "main"}, hz_states=20.0))
    p = f"proc.{pid}."
    assert out[p + "threads"] == 4.0
    assert 0.15 <= out[p + "state_R"] <= 0.45, out
    assert 0.55 <= out[p + "state_S"] <= 0.85, out
    assert out[p + "state_main_R"] >= 0.8, out


def test_states_are_sampled_several_times_per_interval(children, source_for) -> None:
    # Busy 70 ms, asleep 130 ms: only repeated observations within one interval give a share strictly between 0 and 1.
    code = """
        import time
        print('ready', flush=True)
        while True:
            end = time.monotonic() + 0.07
            while time.monotonic() < end:
                pass
            time.sleep(0.13)
    """
    pid = children.start(code).pid
    out = measure(source_for({pid: "worker"}, hz_states=20.0), seconds=2.0)
    p = f"proc.{pid}."
    assert 0.05 < out[p + "state_R"] < 0.95, out
    assert 0.05 < out[p + "state_S"] < 0.95, out


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    return write_random_file(tmp_path / "data.bin", 64)


def test_direct_reads_reach_the_disk_and_page_cache_reads_do_not(children, source_for, big_file: Path) -> None:
    direct = f"""
        import mmap, os
        path = {str(big_file)!r}
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            buf = mmap.mmap(-1, 1 << 20)  # page aligned, as O_DIRECT needs
            os.preadv(fd, [buf], 0)
            mode = 'direct'
        except OSError:
            fd = os.open(path, os.O_RDONLY)
            buf = bytearray(1 << 20)
            mode = 'cached'
        print('ready', flush=True)
        print(mode, flush=True)
        off = 0
        while True:
            n = os.preadv(fd, [buf], off)
            off = 0 if n <= 0 else off + n
    """
    cached = f"""
        path = {str(big_file)!r}
        data = open(path, 'rb').read()  # now in the page cache
        print('ready', flush=True)
        while True:
            with open(path, 'rb') as f:
                while f.read(1 << 20):
                    pass
    """
    reader = children.start(direct)
    assert reader.stdout is not None
    mode = reader.stdout.readline().strip()
    cache_reader = children.start(cached)
    out = measure(source_for({reader.pid: "worker", cache_reader.pid: "worker"}))
    d, c = f"proc.{reader.pid}.", f"proc.{cache_reader.pid}."
    assert out[d + "rchar_mb_s"] > 1.0, out
    if mode == "direct":
        assert out[d + "read_mb_s"] > 1.0, out
        assert out[d + "read_mb_s"] >= 0.5 * out[d + "rchar_mb_s"]
        # Blocked on the device: uninterruptible sleep shows up among the observations.
        assert out[d + "state_D"] > 0.0, out
    # Page-cache hits: lots of read chars, (almost) no bytes from the device.
    assert out[c + "rchar_mb_s"] > 10.0, out
    assert out[c + "read_mb_s"] < 0.1 * out[c + "rchar_mb_s"], out


def test_writes_are_counted(children, source_for, tmp_path: Path) -> None:
    code = f"""
        import os
        fd = os.open({str(tmp_path / "out.bin")!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        chunk = b'x' * (1 << 20)
        print('ready', flush=True)
        while True:
            for _ in range(8):
                os.write(fd, chunk)
            os.fsync(fd)
            os.lseek(fd, 0, 0)
    """
    pid = children.start(code).pid
    out = measure(source_for({pid: "worker"}))
    assert out[f"proc.{pid}.wchar_mb_s"] > 1.0, out
    assert out[f"proc.{pid}.write_mb_s"] > 1.0, out


def test_process_exiting_between_samples_is_dropped(children, source_for, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="trainmon.procs")
    quitter = children.start(SLEEP)
    zombie = children.start(SLEEP)
    stayer = children.start(SLEEP, asleep=True)
    src = source_for({quitter.pid: "worker", zombie.pid: "worker", stayer.pid: "main"})
    first = src.sample(time.monotonic())
    assert f"proc.{quitter.pid}.rss_mb" in first and f"proc.{zombie.pid}.rss_mb" in first
    quitter.kill()
    quitter.wait()
    zombie.kill()  # not reaped yet: a zombie is gone too
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and b") Z" not in Path(f"/proc/{zombie.pid}/stat").read_bytes():
        time.sleep(0.01)
    time.sleep(0.3)
    for _ in range(3):
        out = src.sample(time.monotonic())
        assert not any(k.startswith((f"proc.{quitter.pid}.", f"proc.{zombie.pid}.")) for k in out), out
        assert f"proc.{stayer.pid}.cpu_pct" in out
    assert all(not k.startswith(f"proc.{quitter.pid}.") for k in src.na_reasons)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert src.roles() == {quitter.pid: "worker", zombie.pid: "worker", stayer.pid: "main"}


def _other_users_pid() -> int | None:
    """A pid whose /proc/<pid>/io we cannot read, if this machine has one (pid 1 when run as a normal user)."""
    try:
        with open("/proc/1/io", "rb") as f:
            f.read()  # the access check happens on read, not open
    except PermissionError:
        return 1
    except OSError:
        return None
    return None


def test_permission_denied_for_another_users_process(source_for, caplog) -> None:
    pid = _other_users_pid()
    if pid is None:
        pytest.skip("no process here whose /proc/<pid>/io is unreadable: see the dropped-privileges test")
    caplog.set_level(logging.WARNING, logger="trainmon.procs")
    src = source_for({pid: "child"})
    for _ in range(3):
        out = src.sample(time.monotonic())
        time.sleep(0.05)
    p = f"proc.{pid}."
    for key in ("read_mb_s", "write_mb_s", "rchar_mb_s", "wchar_mb_s"):
        assert math.isnan(out[p + key])
        assert "permission denied" in src.na_reasons[p + key]
    assert math.isfinite(out[p + "cpu_pct"]) and out[p + "threads"] >= 1
    assert len([r for r in caplog.records if "permission denied" in r.getMessage()]) == 1


def _python_for_nobody() -> str | None:
    for exe in (sys.executable, "/usr/bin/python3"):
        try:
            probe = subprocess.run(
                [exe, "-c", "import trainmon.sources.host.procs"],
                user=65534,
                group=65534,
                extra_groups=[],
                cwd="/",
                env={"PYTHONPATH": str(ROOT)},
                capture_output=True,
            )
        except OSError:  # e.g. the interpreter lives under a 0700 home
            continue
        if probe.returncode == 0:
            return exe
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another uid")
def test_permission_denied_as_unprivileged_user_watching_root_process(children) -> None:
    exe = _python_for_nobody()
    if exe is None:
        pytest.skip("no python interpreter that uid 65534 can run with this checkout importable")
    pid = children.start(SLEEP, asleep=True).pid
    code = f"""
        import json, time
        from trainmon.sources.host.procs import ProcSource
        src = ProcSource(lambda: {{{pid}: 'rank'}})
        src.sample(0)
        time.sleep(0.3)
        out = src.sample(0)
        src.close()
        print(json.dumps({{'out': out, 'na': src.na_reasons}}))
    """
    run = subprocess.run(
        [exe, "-c", textwrap.dedent(code)],
        user=65534,
        group=65534,
        extra_groups=[],
        cwd="/",
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    out, na = result["out"], result["na"]
    p = f"proc.{pid}."
    assert math.isnan(out[p + "read_mb_s"]) and "permission denied" in na[p + "read_mb_s"]
    assert out[p + "state_S"] >= 0.9 and out[p + "threads"] == 1


@pytest.mark.skipif(not HAS_SCHEDSTAT, reason="kernel without schedstat (CONFIG_SCHED_INFO)")
def test_cpu_starved_worker_waits_on_the_run_queue(children, source_for) -> None:
    # Four spinners on two cores (pinned, so this holds on any machine): each gets about half a core and spends
    # the rest waiting for one. A sleeper on the same cores barely waits.
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    spinners = [children.start(SPIN, cpus=cpus).pid for _ in range(2 * len(cpus))]
    sleeper = children.start(SLEEP, cpus=cpus, asleep=True).pid
    src = source_for({**dict.fromkeys(spinners, "worker"), sleeper: "worker"})
    out = measure(src, seconds=2.0)
    waits = [out[f"proc.{pid}.runq_wait_ms_s"] for pid in spinners]
    cpu = [out[f"proc.{pid}.cpu_pct"] for pid in spinners]
    assert max(waits) > 200.0, (waits, cpu)
    assert min(cpu) < 90.0, (waits, cpu)  # busy, yet well short of a core: starved, not idle
    assert out[f"proc.{sleeper}.runq_wait_ms_s"] < 20.0
    assert out[f"proc.{sleeper}.cpu_pct"] < 5.0


def test_tracked_failures_bad_pids_and_close(children, source_for) -> None:
    pid = children.start(SLEEP, asleep=True).pid
    calls = {"n": 0}

    def tracked() -> dict:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("registry busy")
        return {pid: "main", "junk": "worker", -5: "worker", str(os.getpid()): "rank"}

    src = ProcSource(tracked, hz_states=50.0)
    try:
        src.sample(0.0)
        assert src.roles() == {pid: "main", os.getpid(): "rank"}
        assert src._thread is not None and src._thread.is_alive()
        time.sleep(0.1)
        out = src.sample(0.0)  # tracked() raises: the last set is kept
        assert f"proc.{pid}.cpu_pct" in out
    finally:
        src.close()
    assert src._thread is None
    out = src.sample(0.0)  # still works without the sampler thread
    assert out[f"proc.{pid}.state_S"] == 1.0


def test_no_sampler_thread_when_hz_is_zero(children) -> None:
    pid = children.start(SLEEP, asleep=True).pid
    with ProcSource(lambda: {pid: "worker"}, hz_states=0) as src:
        src.sample(0.0)
        out = src.sample(0.0)
        assert src._thread is None
        assert out[f"proc.{pid}.state_S"] == 1.0


def test_a_tick_between_passes_of_a_budgeted_sampler_repeats_its_look(children, monkeypatch) -> None:
    """A big tree stretches the sampler's passes beyond a tick (its read budget): the ticks in between show its
    latest look instead of reading every thread again themselves."""
    import trainmon.sources.host.procs as procs

    pid = children.start(SLEEP, asleep=True).pid
    monkeypatch.setattr(procs, "THREAD_READS_PER_S", 0.5)  # one thread: a pass every 2 s
    looks: list[str] = []
    with ProcSource(lambda: {pid: "worker"}, hz_states=10.0) as src:
        real = src._observe

        def observe(p: int):
            looks.append(threading.current_thread().name)
            return real(p)

        src._observe = observe  # type: ignore[method-assign]
        src.sample(0.0)
        deadline = time.monotonic() + 10
        while "trainmon-procs-states" not in looks and time.monotonic() < deadline:
            time.sleep(0.02)
        outs = []
        for _ in range(4):
            outs.append(src.sample(0.0))
            time.sleep(0.3)
        tick_looks = looks.count(threading.current_thread().name)
        assert looks.count("trainmon-procs-states") >= 1
        assert tick_looks == 1, looks  # the first tick only, before the sampler had looked
        assert all(out[f"proc.{pid}.state_S"] == 1.0 for out in outs), outs
