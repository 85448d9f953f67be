"""The process source keeps its /proc files open between ticks: each read is what a fresh open reads, and the files
of threads and processes that have gone are closed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from trainmon.metrics import PROC
from trainmon.sources.host.procfs import HeldFiles as _Held
from trainmon.sources.host.procs import ProcSource

# A child that spins on one thread (its CPU figures move) and, once told on stdin, starts a new thread and lets a
# second one exit: as many threads as before, not the same ones.
CHILD = r"""
import sys, threading, time
stop = threading.Event()
helper = threading.Thread(target=stop.wait)
helper.start()
threading.Thread(target=lambda: [sum(range(1000)) for _ in iter(int, 1)], daemon=True).start()
print(threading.get_native_id(), helper.native_id, flush=True)
sys.stdin.readline()
born = threading.Thread(target=time.sleep, args=(60,), daemon=True)
born.start()
stop.set()
helper.join()
print(born.native_id, flush=True)
time.sleep(60)
"""


def _child() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    _, helper = proc.stdout.readline().split()
    return proc, helper


def _utime(stat: bytes) -> int:
    return int(stat[stat.rfind(b")") + 2 :].split()[11])


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_kept_file_reads_fresh_content_and_a_gone_process_is_read_by_path():
    proc, _ = _child()
    held = _Held(limit=8)
    path = f"/proc/{proc.pid}/stat"
    try:
        first = _utime(held.read(proc.pid, "stat", "", path))
        deadline = time.monotonic() + 10
        while _utime(held.read(proc.pid, "stat", "", path)) == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _utime(held.read(proc.pid, "stat", "", path)) > first  # CPU time moved: not a stale copy
        with open(path, "rb") as fh:
            assert held.read(proc.pid, "stat", "", path).split()[:3] == fh.read().split()[:3]
    finally:
        proc.kill()
        proc.wait()
    try:
        held.read(proc.pid, "stat", "", path)
    except FileNotFoundError:
        pass  # gone, exactly as a fresh open says: the kept descriptor (ESRCH) was dropped first
    else:
        raise AssertionError("a reaped process read as present")
    assert held._n == 0
    held.close()


def test_files_of_exited_threads_and_forgotten_pids_are_closed():
    proc, helper = _child()
    before = _fds()
    source = ProcSource(lambda: {proc.pid: "worker"}, hz_states=0)
    try:
        source.sample()
        source.sample()
        kept = source._held._fds[proc.pid]
        assert helper in kept["schedstat"] and helper in kept["task-stat"]
        assert proc.stdin is not None and proc.stdout is not None
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        assert len(kept["schedstat"]) == threads
        proc.stdin.write("\n")
        proc.stdin.flush()
        born = proc.stdout.readline().strip()
        deadline = time.monotonic() + 10  # join() returns just before the thread itself has exited
        while helper in (listed := set(os.listdir(f"/proc/{proc.pid}/task"))) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(listed) == threads and born in listed
        source.sample()
        assert helper not in kept["schedstat"] and helper not in kept["task-stat"]
        # The exited thread's file no longer read: the threads were listed again, the new one is counted.
        assert set(kept["schedstat"]) == listed == set(source._prev[proc.pid].wait_ns or ())
        open_now = len(_fds() - before)
        assert open_now == source._held._n > 0
    finally:
        proc.kill()
        proc.wait()
    out = source.sample()
    assert not any(key.startswith(PROC.id_prefix(proc.pid)) for key in out)
    assert proc.pid not in source._held._fds and source._held._n == 0
    source.close()
    assert _fds() <= before


def test_beyond_the_limit_files_are_read_by_path_and_close_releases_all():
    proc, _ = _child()
    before = _fds()
    held = _Held(limit=2)
    try:
        tids = os.listdir(f"/proc/{proc.pid}/task")
        for _ in range(2):
            for tid in tids:
                data = held.read(proc.pid, "schedstat", tid, f"/proc/{proc.pid}/task/{tid}/schedstat")
                assert len(data.split()) == 3
        assert held._n == 2 and len(_fds() - before) == 2
        held.close()
        assert _fds() <= before
        held.read(proc.pid, "stat", "", f"/proc/{proc.pid}/stat")  # after close: by path, nothing kept
        assert held._n == 0 and _fds() <= before
    finally:
        proc.kill()
        proc.wait()


def test_a_tree_that_is_not_procfs_is_read_by_path(tmp_path):
    """A copied or fake tree (``proc_root``) keeps nothing open: a pid whose directory is removed is gone at once."""
    stat = "200 (w) S " + " ".join(["0"] * 16 + ["1", "0", "777", "0", "256"] + ["0"] * 20) + "\n"
    task = tmp_path / "200" / "task" / "200"
    task.mkdir(parents=True)
    for path, text in ((tmp_path / "200" / "stat", stat), (task / "stat", stat), (task / "schedstat", "1 2 3\n")):
        path.write_text(text)
    source = ProcSource(lambda: {200: "worker"}, hz_states=0, proc_root=str(tmp_path))
    try:
        assert source.sample()[PROC.key(200, "threads")] == 1.0
        assert source._held._n == 0
        for path in sorted(tmp_path.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        assert not any(key.startswith(PROC.id_prefix(200)) for key in source.sample())
    finally:
        source.close()
