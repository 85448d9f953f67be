"""``trainmon attach``: the agent injected into real, already running Python processes that never imported trainmon,
reporting to a real Monitor over a real socket; every failure case on a real process (another user through a
real uid switch, a container through a real pid namespace, gdb missing through a PATH without it).

After every attach: the target still runs, it is not left stopped or traced, and no gdb is left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport import other_user
from testsupport.paths import ROOT
from testsupport.procs import wait_for
from trainmon.attach import (
    ALREADY,
    ATTACHED,
    EXIT_EXITED,
    EXIT_FAILED,
    EXIT_NAMESPACE,
    EXIT_NO_INJECTOR,
    EXIT_NO_PROCESS,
    EXIT_NOT_PYTHON,
    EXIT_OK,
    EXIT_OTHER_USER,
    EXIT_PERMISSION,
    EXIT_TIMEOUT,
    EXIT_UNSUPPORTED,
    attach_process,
)
from trainmon.monitor import Monitor

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="attach injects through Linux ptrace"),
    pytest.mark.skipif(shutil.which("gdb") is None, reason="gdb is not installed (apt-get install gdb)"),
    pytest.mark.timeout(240),
]

PY = sys.executable
SYSTEM_PY = "/usr/bin/python3.11"  # a statically linked interpreter on Debian (its runtime is in the executable)

# A CPU training that never imports trainmon: its DataLoader iterator and fork workers exist before any attach.
# Each step prints its count, when it ended, how many distinct agent wrappers of the DataLoader iterator's __next__
# it has seen and how deep they were ever nested (a second patch would show as 2), and whether sys.path is still
# what the script set up.
TRAIN = r"""
import os, sys, time
assert "trainmon" not in sys.modules
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import dataloader as dlmod

class Slow(Dataset):
    def __len__(self):
        return 10 ** 7
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(8), i % 3

torch.manual_seed(0)
torch.set_num_threads(1)
loader = DataLoader(Slow(), batch_size=4, num_workers=2, persistent_workers=True, multiprocessing_context="fork")
model = torch.nn.Linear(8, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
it = iter(loader)
print("WORKERS", *[w.pid for w in it._workers], flush=True)
path0 = list(sys.path)
wrappers, depth, step = set(), 0, 0
while True:
    x, y = next(it)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    f, nested = dlmod._BaseDataLoaderIter.__next__, 0
    while f is not None:
        if getattr(f, "__qualname__", "").startswith("wrap_next."):
            wrappers.add(id(f))
            nested += 1
        f = getattr(f, "__wrapped__", None)
    depth = max(depth, nested)
    print("STEP", step, time.monotonic(), len(wrappers), depth, int(sys.path == path0), flush=True)
"""

# A small Python loop without torch: the runtime, the interpreter layout and the version are what is tested.
LOOP = r"""
import os, sys, time
print("READY", sys.version.split()[0], flush=True)
n = 0
while True:
    n += 1
    time.sleep(0.01)
    if n % 20 == 0:
        print("TICK", n, flush=True)
"""


def _env() -> dict[str, str]:
    """No trainmon on the path, no trainmon settings: the process knows nothing about trainmon."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_") and k != "PYTHONPATH"}


class Lines:
    """A child's stdout, read line by line in the background."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def first(self, prefix: str, timeout: float = 60.0) -> str:
        assert wait_for(lambda: any(x.startswith(prefix) for x in self.lines), timeout), (
            f"no {prefix!r} line: {self.lines[-5:]} {self.proc.poll()}"
        )
        return next(x for x in self.lines if x.startswith(prefix))

    def count(self, prefix: str) -> int:
        return sum(1 for x in self.lines if x.startswith(prefix))


def _start(code: str, *, python: str = PY, pre: tuple[str, ...] = (), ready: str = "READY", **popen) -> Lines:
    proc = subprocess.Popen(
        [*pre, python, "-u", "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=popen.pop("env", _env()),
        **popen,
    )
    lines = Lines(proc)
    lines.first(ready)
    return lines


def _kill(lines: Lines | None) -> None:
    if lines is not None and lines.proc.poll() is None:
        lines.proc.kill()
        lines.proc.wait()


class Training:
    def __init__(self, lines: Lines) -> None:
        self.lines = lines
        self.pid = lines.proc.pid
        self.workers = [int(p) for p in lines.first("WORKERS", 120).split()[1:]]

    def steps(self) -> list[tuple[int, float, int, int, int]]:
        """(step, monotonic time it ended, agent wrappers seen, their deepest nesting, sys.path unchanged)."""
        out = []
        for line in list(self.lines.lines):
            if line.startswith("STEP "):
                _, n, t, wrappers, depth, path_ok = line.split()
                out.append((int(n), float(t), int(wrappers), int(depth), int(path_ok)))
        return out

    def last(self) -> tuple[int, float, int, int, int]:
        assert wait_for(lambda: self.steps(), 60), self.lines.lines[-5:]
        return self.steps()[-1]


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as fh:
        return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)


def _gdbs_for(pid: int) -> list[int]:
    """gdb processes working on ``pid`` (the injector passes /proc/PID/exe on gdb's command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"gdb" and f"/proc/{pid}/exe".encode() in argv:
            found.append(int(entry))
    return found


def _assert_untouched(pid: int) -> None:
    """Not traced, not stopped, no gdb left behind."""
    status = _status(pid)
    assert status["TracerPid"].strip() == "0", status
    assert status["State"][0] not in ("T", "t"), status
    assert _gdbs_for(pid) == []


def _still_running(lines: Lines, prefix: str, more: int = 3, timeout: float = 20.0) -> None:
    before = lines.count(prefix)
    assert wait_for(lambda: lines.count(prefix) >= before + more, timeout), (
        f"{prefix} lines stopped at {before}",
        lines.lines[-5:],
    )


def _agent_runs(monitor: Monitor, pid: int) -> list:
    with monitor.store.lock:
        return [r for r in monitor.store.runs.values() if r.pid == pid and r.measured_by == "agent"]


@pytest.fixture(scope="module")
def addr() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="tm-at-", dir="/tmp")
    os.chmod(d, 0o700)
    yield os.path.join(d, "m.sock")
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def monitor(addr: str) -> Iterator[Monitor]:
    m = Monitor(addr, interval=0.2)
    m.start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def training() -> Iterator[Training]:
    lines = _start(TRAIN, ready="WORKERS")
    try:
        yield Training(lines)
    finally:
        _kill(lines)


# ---------------------------------------------------------------- a live training


def test_attach_to_a_live_training(monitor: Monitor, addr: str, training: Training) -> None:
    assert wait_for(lambda: len(training.steps()) >= 50, 60), "the training does not step"
    wall_before = time.time()
    res = attach_process(training.pid, addr)
    assert (res.status, res.exit_code) == (ATTACHED, EXIT_OK), res
    assert "\n" not in res.message and f"process {training.pid}" in res.message
    assert res.stopped_s is not None and res.stopped_s < 5.0  # the figure itself: benchmarks/attach_stop.py
    _assert_untouched(training.pid)

    assert wait_for(lambda: _agent_runs(monitor, training.pid), 20), "the injected agent never connected"
    (run,) = _agent_runs(monitor, training.pid)
    assert run.hello["attached_live"] is True
    assert wall_before <= run.hello["attach_wall"] <= time.time()

    def span() -> float:
        n = len(run.steps)
        return run.steps.end[n - 1] - run.steps.end[0] if n else 0.0

    assert wait_for(lambda: span() > 4.0, 60), (run.steps.total, span())
    # Steps counted by the agent from the attach on = the script's own count over the same span.
    t0, t1 = run.steps.end[0] + 0.5, run.steps.end[len(run.steps) - 1] - 0.5
    agent = sum(1 for t in run.steps.end if t0 < t <= t1)
    own = sum(1 for _, t, *_ in training.steps() if t0 < t <= t1)
    assert own > 100 and abs(agent - own) <= 0.03 * own, (agent, own)

    # The DataLoader iterator made before the attach is measured: its waits are there, and its loader known.
    assert sum(run.steps.wait[i] for i in range(len(run.steps))) > 0
    assert run.train_loader() is not None
    # The workers forked before the attach never got the agent: no run of theirs.
    assert training.workers and all(not _agent_runs(monitor, w) for w in training.workers)
    with monitor.store.lock:
        assert not {r.pid for r in monitor.store.runs.values()} & set(training.workers)

    _still_running(training.lines, "STEP ", more=20)
    _n, _t, wrappers, depth, path_ok = training.last()
    assert (wrappers, depth) == (1, 1)  # __next__ patched once, at the class level
    assert path_ok == 1  # sys.path restored after importing the agent


def _ensure_attached(monitor: Monitor, addr: str, training: Training) -> None:
    """The shared training has the agent (attached by the first test, or here when a test runs alone)."""
    if not _agent_runs(monitor, training.pid):
        assert attach_process(training.pid, addr).exit_code == EXIT_OK
    assert wait_for(lambda: _agent_runs(monitor, training.pid), 30)


def test_a_second_attach_says_already(monitor: Monitor, addr: str, training: Training) -> None:
    _ensure_attached(monitor, addr, training)
    session = _agent_runs(monitor, training.pid)[0].hello["session"]
    res = subprocess.run(
        [PY, "-m", "trainmon", "attach", str(training.pid), "--listen", addr],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(_env(), PYTHONPATH=str(ROOT)),
    )
    assert res.returncode == EXIT_OK, res.stderr
    assert len(res.stdout.splitlines()) == 1 and "already runs" in res.stdout and res.stderr == ""
    _assert_untouched(training.pid)
    _still_running(training.lines, "STEP ", more=20)
    assert training.last()[2:4] == (1, 1)  # not patched a second time
    runs = _agent_runs(monitor, training.pid)
    assert [r.hello["session"] for r in runs] == [session]  # the same agent, no second connection


def test_a_dataloader_worker_is_refused(monitor: Monitor, addr: str, training: Training) -> None:
    worker = training.workers[0]
    res = attach_process(worker, addr)
    assert res.exit_code == EXIT_FAILED and "DataLoader worker" in res.message, res
    assert f"pid {training.pid}" in res.message
    _assert_untouched(worker)
    _still_running(training.lines, "STEP ", more=20)  # its worker still serves batches
    assert not _agent_runs(monitor, worker)


def test_the_function_reports_already_too(monitor: Monitor, addr: str, training: Training) -> None:
    _ensure_attached(monitor, addr, training)
    res = attach_process(training.pid, addr)
    assert (res.status, res.exit_code) == (ALREADY, EXIT_OK), res
    _assert_untouched(training.pid)


def test_the_monitors_token_reaches_the_injected_agent() -> None:
    """A monitor that asks agents for a token (``--token``): ``trainmon --token T attach PID`` hands T to the agent
    it injects, into a process whose environment has no TRAINMON_TOKEN."""
    token = "s3cret-" + os.urandom(4).hex()
    m = Monitor("127.0.0.1:0", interval=0.2, token=token)
    m.start()
    lines = _start(LOOP)
    try:
        assert m.agents is not None
        address = m.agents.address  # the port the monitor was given
        res = subprocess.run(
            [PY, "-m", "trainmon", "--token", token, "attach", str(lines.proc.pid), "--listen", address],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(_env(), PYTHONPATH=str(ROOT)),
        )
        assert res.returncode == EXIT_OK, res.stderr
        assert wait_for(lambda: _agent_runs(m, lines.proc.pid), 20), "the agent was refused: no token reached it"
        _assert_untouched(lines.proc.pid)
    finally:
        _kill(lines)
        m.stop()


# ---------------------------------------------------------------- interpreter layouts and versions


def _interpreters() -> list[str]:
    found = [SYSTEM_PY] if os.path.exists(SYSTEM_PY) else []
    pyenv = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
    for minor in (10, 12, 13):
        found += sorted(str(p) for p in pyenv.glob(f"3.{minor}.*/bin/python3.{minor}"))[:1]
    return found


def _layout(python: str) -> str:
    real = os.path.realpath(python)
    res = subprocess.run(["ldd", real], capture_output=True, text=True, check=False)
    return "shared libpython" if "libpython" in res.stdout else "runtime in the executable"


@pytest.mark.parametrize("python", _interpreters() or [pytest.param(None, marks=pytest.mark.skip("none found"))])
def test_other_interpreters_and_layouts(monitor: Monitor, addr: str, python: str) -> None:
    lines = _start(LOOP, python=python)
    try:
        res = attach_process(lines.proc.pid, addr, timeout=30)
        assert (res.status, res.exit_code) == (ATTACHED, EXIT_OK), (python, _layout(python), res)
        assert wait_for(lambda: _agent_runs(monitor, lines.proc.pid), 20), "the agent never connected"
        _assert_untouched(lines.proc.pid)
        _still_running(lines, "TICK")
    finally:
        _kill(lines)


def test_python_older_than_the_agent_is_refused_untouched(addr: str) -> None:
    pyenv = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
    old = sorted(pyenv.glob("3.9.*/bin/python3.9")) or sorted(pyenv.glob("3.8.*/bin/python3.8"))
    if not old:
        pytest.skip("no Python older than 3.10 here")
    lines = _start(LOOP, python=str(old[0]))
    try:
        res = attach_process(lines.proc.pid, addr)
        assert res.exit_code == EXIT_UNSUPPORTED and "3.10" in res.message, res
        assert res.stopped_s is None  # refused before gdb
        _assert_untouched(lines.proc.pid)
        _still_running(lines, "TICK")
    finally:
        _kill(lines)


# ---------------------------------------------------------------- stuck, exiting and exited processes

STUCK = r"""
import os, sys, threading, time
held = threading.Lock()
held.acquire()
go = sys.argv[1] if len(sys.argv) > 1 else ""
def beat():
    while True:
        time.sleep(0.1)
        print("BEAT", flush=True)
        if go and os.path.exists(go):
            held.release()
            return
if go or os.environ.get("BEAT"):
    threading.Thread(target=beat, daemon=True).start()
print("READY", flush=True)
held.acquire()  # the main thread waits in C, without a timeout: it runs no Python until released
print("RELEASED", flush=True)
while True:
    time.sleep(0.05)
    print("TICK", flush=True)
"""


def test_main_thread_stuck_in_a_c_call_times_out_queued_and_starts_later(
    monitor: Monitor, addr: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    proc = subprocess.Popen(
        [PY, "-u", "-c", STUCK, str(go)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env()
    )
    lines = Lines(proc)
    try:
        lines.first("READY")
        res = attach_process(proc.pid, addr, timeout=8.0)
        # Another thread ran Python, so the code was queued; the main thread never reached a safe point.
        assert res.exit_code == EXIT_TIMEOUT and "queued" in res.message and "will start" in res.message, res
        _assert_untouched(proc.pid)
        _still_running(lines, "BEAT")
        assert lines.count("RELEASED") == 0 and not _agent_runs(monitor, proc.pid)
        go.touch()  # the main thread returns to Python: the queued agent starts, as the message said
        lines.first("RELEASED", 20)
        assert wait_for(lambda: _agent_runs(monitor, proc.pid), 20), "the queued agent never started"
        _still_running(lines, "TICK")
    finally:
        _kill(lines)


SLEEPER = r"""
import signal, sys, time
signal.signal(signal.SIGWINCH, lambda *a: print("WINCH", flush=True))
signal.signal(signal.SIGUSR1, lambda *a: print("USR1", flush=True))
print("READY", flush=True)
while True:
    time.sleep(60)  # one long C call; pending calls do not end it (only a signal's handler runs meanwhile)
"""


def test_a_process_running_no_python_at_all_is_left_unchanged(addr: str) -> None:
    lines = _start(SLEEPER)
    try:
        res = attach_process(lines.proc.pid, addr, timeout=8.0)
        assert res.exit_code == EXIT_TIMEOUT and "nothing was injected" in res.message, res
        _assert_untouched(lines.proc.pid)
        time.sleep(0.3)
        assert lines.count("WINCH") == 0  # the signal that ended gdb's wait never reached the process
        lines.proc.send_signal(signal.SIGUSR1)
        lines.first("USR1", 10)  # it runs (its handler ran), and it was not stopped
        assert lines.proc.poll() is None
    finally:
        _kill(lines)


# Its main script ends at once; then an atexit handler runs Python for a while, as the process shuts down. (threading
# is imported, as in any torch job: its main thread is then known to have finished.)
EXITING = r"""
import atexit, threading, time
def linger():
    end = time.monotonic() + 20
    while time.monotonic() < end:
        time.sleep(0.01)
        print("LINGER", flush=True)
atexit.register(linger)
print("READY", flush=True)
"""


def test_a_process_shutting_down_is_not_attached(monitor: Monitor, addr: str) -> None:
    lines = _start(EXITING)
    try:
        lines.first("LINGER")  # its main script has ended: atexit handlers run Python while it shuts down
        res = attach_process(lines.proc.pid, addr)
        assert res.exit_code == EXIT_EXITED and "shutting down" in res.message, res
        _assert_untouched(lines.proc.pid)
        _still_running(lines, "LINGER")
        assert not _agent_runs(monitor, lines.proc.pid)
    finally:
        _kill(lines)


def test_a_process_that_exits_during_the_attach(addr: str) -> None:
    proc = subprocess.Popen(
        [PY, "-u", "-c", STUCK],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(_env(), BEAT="1"),
    )
    lines = Lines(proc)
    lines.first("READY")
    out: list = []
    worker = threading.Thread(target=lambda: out.append(attach_process(proc.pid, addr, timeout=20)))
    worker.start()
    time.sleep(1.5)  # queued by then (a beating thread lends itself), never run: the main thread is stuck
    proc.kill()
    proc.wait()
    worker.join(30)
    (res,) = out
    assert res.exit_code == EXIT_EXITED and "exited" in res.message, res
    assert _gdbs_for(proc.pid) == []


# ---------------------------------------------------------------- processes it must refuse


def test_not_a_python_process(addr: str) -> None:
    sleeper = subprocess.Popen(["sleep", "100"])
    try:
        time.sleep(0.2)
        res = attach_process(sleeper.pid, addr)
        assert res.exit_code == EXIT_NOT_PYTHON and "not a Python process" in res.message, res
        assert res.stopped_s is None
        _assert_untouched(sleeper.pid)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_interpreter_without_symbols_is_named_as_such(addr: str, tmp_path: Path) -> None:
    # What a fully static, stripped interpreter looks like from outside: an executable named python3.X that
    # exports no Python runtime symbol (here a copy of sleep(1) under that name).
    fake = tmp_path / "python3.12"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    proc = subprocess.Popen([str(fake), "100"])
    try:
        time.sleep(0.2)
        res = attach_process(proc.pid, addr)
        assert res.exit_code == EXIT_NOT_PYTHON and "exports no Py_AddPendingCall" in res.message, res
        assert "trainmon run" in res.message
        _assert_untouched(proc.pid)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_no_such_process(addr: str) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    res = attach_process(gone.pid, addr)
    assert res.exit_code == EXIT_NO_PROCESS and f"no process with pid {gone.pid}" in res.message, res


def test_without_gdb_the_command_says_how_to_install_it(addr: str, training: Training) -> None:
    env = dict(_env(), PYTHONPATH=str(ROOT), PATH="/nonexistent-bin")
    res = subprocess.run(
        [PY, "-m", "trainmon", "attach", str(training.pid), "--listen", addr],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == EXIT_NO_INJECTOR, res
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1
    assert "gdb not found" in res.stderr and "apt-get install gdb" in res.stderr
    _assert_untouched(training.pid)


def test_bad_pids_are_usage_errors() -> None:
    for bad in ("abc", "0", "1.5"):
        res = subprocess.run(
            [PY, "-m", "trainmon", "attach", bad],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(_env(), PYTHONPATH=str(ROOT)),
        )
        assert res.returncode == 2 and len(res.stderr.splitlines()) == 1, res
        assert res.stderr.startswith("trainmon: error: PID: expected a process id"), res.stderr


NOBODY = other_user.AS_NOBODY if other_user.nobody() else None  # the checkout may be closed to nobody: it runs a copy
needs_nobody = pytest.mark.skipif(NOBODY is None, reason=other_user.SKIP_REASON)


def _attach_as_nobody(pid: int, addr: str) -> tuple[int, str]:
    """``trainmon attach PID`` run as user nobody (the system Python: the injector needs nothing else); its exit
    status and its one line."""
    assert NOBODY is not None
    res = subprocess.run(
        [*NOBODY, SYSTEM_PY, "-m", "trainmon", "attach", str(pid), "--listen", addr, "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(_env(), PYTHONPATH=other_user.staged_path() or "", PYTHONDONTWRITEBYTECODE="1", HOME="/nonexistent"),
        cwd="/",
    )
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1, res
    return res.returncode, res.stderr


@needs_nobody
def test_another_users_process_is_refused(addr: str, training: Training) -> None:
    code, line = _attach_as_nobody(training.pid, addr)  # nobody → a root-owned training
    assert code == EXIT_OTHER_USER and "belongs to root" in line, line
    _assert_untouched(training.pid)


@needs_nobody
def test_ptrace_denied(addr: str) -> None:
    from trainmon.attach.ptrace_message import PTRACE_FIX

    # nobody's own process that made itself non-dumpable: the kernel refuses ptrace without CAP_SYS_PTRACE.
    code = "import ctypes, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nprint('READY', flush=True)\ntime.sleep(120)\n"
    assert NOBODY is not None
    lines = _start(code, python=SYSTEM_PY, pre=NOBODY, cwd="/")
    try:
        code, msg = _attach_as_nobody(lines.proc.pid, addr)
        assert code == EXIT_PERMISSION, msg
        assert "ptrace permission denied" in msg and "kernel.yama.ptrace_scope" in msg and PTRACE_FIX in msg
        assert "not dumpable" in msg
        _assert_untouched(lines.proc.pid)
    finally:
        _kill(lines)


def test_ptrace_fix_is_the_one_py_spy_shows() -> None:
    from trainmon.attach.ptrace_message import PTRACE_FIX
    from trainmon.sources.pyspy import py_spy as pyspy

    assert PTRACE_FIX == pyspy.PTRACE_FIX


def _unshare_refusal() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "a new pid namespace needs root and unshare(1)"
    res = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$"], capture_output=True, text=True
    )
    return None if res.returncode == 0 and res.stdout.strip() == "1" else f"unshare refused: {res.stderr.strip()}"


@pytest.mark.skipif(bool(_unshare_refusal()), reason=str(_unshare_refusal()))
def test_a_process_in_a_container_is_refused_with_what_to_run_inside(addr: str) -> None:
    lines = _start(LOOP, pre=("unshare", "--pid", "--fork", "--mount-proc"))
    try:
        children = Path(f"/proc/{lines.proc.pid}/task/{lines.proc.pid}/children").read_text().split()
        (inner,) = [int(c) for c in children]
        res = attach_process(inner, addr)
        assert res.exit_code == EXIT_NAMESPACE and "namespace" in res.message, res
        assert "inside that container" in res.message and "trainmon run" in res.message
        _assert_untouched(inner)
        _still_running(lines, "TICK")
    finally:
        _kill(lines)


# ---------------------------------------------------------------- the package itself


def test_the_injector_imports_only_the_standard_library() -> None:
    code = (
        "import sys, trainmon.attach, trainmon.cli.commands.attach\n"
        "bad = [m for m in ('psutil', 'textual', 'torch', 'pynvml', 'trainmon.agent') if m in sys.modules]\n"
        "print(bad)"
    )
    res = subprocess.run(
        [PY, "-c", code], capture_output=True, text=True, timeout=60, env=dict(_env(), PYTHONPATH=str(ROOT))
    )
    assert res.returncode == 0 and res.stdout.strip() == "[]", (res.stdout, res.stderr)
