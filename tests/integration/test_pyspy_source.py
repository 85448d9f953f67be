"""py-spy source against real processes and the real py-spy binary (the parsing and the classification of its
output, and the ptrace checks: tests/unit/test_pyspy_stacks.py)."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmon.sources.pyspy import py_spy as pyspy
from trainmon.sources.pyspy import py_stacks as stacks
from trainmon.sources.pyspy.py_spy import PySpySampler

READY_TIMEOUT_S = 60.0  # importing torch on a loaded CI machine can take a while

SLEEPER = """
import threading, time

def idle_worker():
    threading.Event().wait()

def deep_sleeper():
    while True:
        time.sleep(0.5)

def outer():
    deep_sleeper()

if WITH_IDLE_THREAD:
    threading.Thread(target=idle_worker, name="idler", daemon=True).start()
print("ready", flush=True)
outer()
"""

TRAIN_PRELUDE = """
import time
import torch
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
torch.manual_seed(0)
"""

DATA_BOUND = (
    TRAIN_PRELUDE
    + """
class SlowDataset(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.zeros(8)

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(SlowDataset(), batch_size=4, num_workers=0)
for step, x in enumerate(loader):
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 2:
        print("ready", flush=True)
"""
)

WORKER_BOUND = (
    TRAIN_PRELUDE
    + """
class SlowDataset(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.zeros(8)

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(SlowDataset(), batch_size=4, num_workers=1)
for step, x in enumerate(loader):
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 2:
        print("ready", flush=True)
"""
)

COMPUTE_BOUND = (
    TRAIN_PRELUDE
    + """
class TinyDataset(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        return torch.zeros(256)

model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                            torch.nn.ReLU(), torch.nn.Linear(1024, 256))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
loader = DataLoader(TinyDataset(), batch_size=64, num_workers=0)
for step, x in enumerate(loader):
    for _ in range(4):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if step == 2:
        print("ready", flush=True)
"""
)


@pytest.fixture(scope="module")
def pyspy_bin() -> str:
    binary = pyspy.find_pyspy()
    if binary is None:
        pytest.skip(pyspy.NOT_FOUND)
    return binary


def _spawn(tmp_path: Path, source: str, name: str = "target.py") -> subprocess.Popen[str]:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    if not line or line[0].strip() != "ready":
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"target did not start: {err[-2000:]}")
    return proc


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator:
    procs: list[subprocess.Popen[str]] = []

    def start(source: str) -> subprocess.Popen[str]:
        proc = _spawn(tmp_path, source, f"target{len(procs)}.py")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


def _dump_or_skip(pid: int) -> stacks.StackDump:
    result = pyspy.dump(pid, timeout=15.0)
    if result.error and "permission denied" in result.error:
        pytest.skip(f"py-spy cannot attach here: {result.error}")
    assert result.error is None, result.error
    return result


# ---------------------------------------------------------------- dump


def test_dump_finds_function_in_main_thread(pyspy_bin: str, spawn) -> None:
    proc = spawn("WITH_IDLE_THREAD = False\n" + SLEEPER)
    result = _dump_or_skip(proc.pid)
    main = result.main_thread()
    assert main is not None
    assert main.os_thread_id == proc.pid
    names = [f.name for f in main.frames]
    assert "deep_sleeper" in names
    # innermost first: deep_sleeper is called by outer, which is called by <module>
    assert names.index("deep_sleeper") < names.index("outer") < names.index("<module>")
    frame = main.frames[names.index("deep_sleeper")]
    assert frame.filename.endswith("target0.py") and frame.line > 0
    assert frame.label().startswith("deep_sleeper (target0.py:")
    assert result.elapsed_s > 0


def test_dump_includes_idle_thread_and_marks_it(pyspy_bin: str, spawn) -> None:
    proc = spawn("WITH_IDLE_THREAD = True\n" + SLEEPER)
    result = _dump_or_skip(proc.pid)
    assert len(result.threads) == 2
    idler = next(t for t in result.threads if t.name == "idler")
    assert idler.idle and not idler.is_main
    assert any(f.name == "idle_worker" for f in idler.frames)

    lines = result.summary(max_frames=3)
    assert lines[0] == f"pid {proc.pid}: 2 Python threads"
    assert lines[1].startswith(f"thread {proc.pid} 'MainThread' (main")  # the main thread comes first
    assert "deep_sleeper" in lines[2]
    idle_header = next(line for line in lines if "'idler'" in line)
    assert "idle" in idle_header
    assert any(line.strip().startswith("...") for line in lines)  # idler's deep stack is cut at 3 frames


def test_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: None)
    result = pyspy.dump(os.getpid())
    assert result.error == "py-spy not found: pip install py-spy"
    assert result.threads == []
    assert result.summary() == [f"pid {os.getpid()}: py-spy not found: pip install py-spy"]

    sampler = PySpySampler(os.getpid(), interval=0.01)
    sampler._thread.join(5)  # a missing binary is fatal: the thread ends by itself
    assert not sampler.running
    assert sampler.error == pyspy.NOT_FOUND
    values = sampler.sample()
    assert math.isnan(values[f"pyspy.{os.getpid()}.data_wait_share"])
    assert values[f"pyspy.{os.getpid()}.samples"] == 0
    assert sampler.hot_frames() == []
    sampler.close()


def test_binary_path_that_vanished(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: str(tmp_path / "no-such-py-spy"))
    assert pyspy.dump(os.getpid()).error == pyspy.NOT_FOUND


def test_find_pyspy_prefers_the_interpreters_bin_dir(pyspy_bin: str) -> None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.exists(beside):
        assert pyspy_bin == beside
    assert pyspy.pyspy_version(pyspy_bin)


def test_exited_process(pyspy_bin: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert pyspy.dump(proc.pid).error == f"process {proc.pid} has exited"


def test_zombie_process_counts_as_exited(pyspy_bin: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while pyspy.process_gone(proc.pid) is False and time.monotonic() < deadline:
            time.sleep(0.05)  # not reaped yet: a zombie until wait()
        assert pyspy.dump(proc.pid).error == f"process {proc.pid} has exited"
    finally:
        proc.wait(timeout=30)


def test_sampler_stops_when_the_process_exits(pyspy_bin: str, spawn) -> None:
    proc = spawn("WITH_IDLE_THREAD = False\n" + SLEEPER)
    sampler = PySpySampler(proc.pid, interval=0.05)
    try:
        deadline = time.monotonic() + 15
        while sampler.dumps < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=10)
        sampler._thread.join(15)
        assert not sampler.running
        assert sampler.error == f"process {proc.pid} has exited"
    finally:
        sampler.close()


def test_not_a_python_process(pyspy_bin: str) -> None:
    sleeper = shutil.which("sleep")
    if sleeper is None:
        pytest.skip("no sleep binary")
    proc = subprocess.Popen([sleeper, "30"])
    try:
        time.sleep(0.2)
        error = pyspy.dump(proc.pid).error
        assert error is not None
        if "permission denied" not in error:
            assert "does not look like a Python process" in error, error
    finally:
        proc.kill()
        proc.wait()


def test_timeout_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hang = tmp_path / "py-spy"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: str(hang))
    t0 = time.monotonic()
    result = pyspy.dump(os.getpid(), timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert result.error == f"py-spy dump of pid {os.getpid()} timed out after 0.5 s"


def test_permission_denied_names_the_fix(
    pyspy_bin: str, spawn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Run the real py-spy as an unprivileged user against a root-owned process."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run py-spy as another user")
    proc = spawn("WITH_IDLE_THREAD = False\n" + SLEEPER)
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f'#!/bin/sh\nexec {setpriv} --reuid=65534 --regid=65534 --clear-groups {pyspy_bin} "$@"\n')
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "--version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot run py-spy as uid 65534: {probe.stderr.strip()[:200]}")
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: str(wrapper))
    error = pyspy.dump(proc.pid).error
    assert error is not None and "\n" not in error
    assert "permission denied" in error
    for fix in (
        "ptrace_scope",
        "sudo sysctl kernel.yama.ptrace_scope=0",
        "--cap-add SYS_PTRACE",
        "securityContext.capabilities.add: [SYS_PTRACE]",
    ):
        assert fix in error


# ---------------------------------------------------------------- agentless sampling of real training


def _sample_training(
    spawn, source: str, seconds: float = 3.0, **kwargs: float
) -> tuple[dict[str, float], PySpySampler, int]:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    proc = spawn(source)
    _dump_or_skip(proc.pid)
    sampler = PySpySampler(proc.pid, interval=0.05, **kwargs)
    try:
        time.sleep(seconds)
    finally:
        sampler.close()
    values = sampler.sample()
    assert sampler.error is None, sampler.error
    return values, sampler, proc.pid


def test_sampler_sees_data_wait_in_a_data_bound_training(pyspy_bin: str, spawn) -> None:
    values, sampler, pid = _sample_training(spawn, DATA_BOUND)
    assert values[f"pyspy.{pid}.samples"] >= 10, values
    assert values[f"pyspy.{pid}.data_wait_share"] > 0.6, values
    share, n = values[f"pyspy.{pid}.data_wait_share"], values[f"pyspy.{pid}.samples"]
    assert values[f"pyspy.{pid}.data_wait_se"] == pytest.approx(math.sqrt(share * (1 - share) / n))
    assert all("dataloader.py" not in label for label, _ in sampler.hot_frames())
    again = sampler.sample()  # nothing new since the previous call
    assert again[f"pyspy.{pid}.samples"] == 0 and math.isnan(again[f"pyspy.{pid}.data_wait_share"])
    assert math.isnan(again[f"pyspy.{pid}.data_wait_se"])


def test_sampler_counts_an_idle_main_thread_waiting_on_a_worker(pyspy_bin: str, spawn) -> None:
    """The main thread blocked in the DataLoader's queue.get is idle: py-spy record drops it without --idle."""
    values, _, pid = _sample_training(spawn, WORKER_BOUND)
    assert values[f"pyspy.{pid}.samples"] >= 10, values
    assert values[f"pyspy.{pid}.data_wait_share"] > 0.6, values


def test_close_keeps_the_samples_of_the_chunk_under_way(pyspy_bin: str, spawn) -> None:
    values, sampler, pid = _sample_training(spawn, DATA_BOUND, seconds=2.5, chunk=60)
    assert sampler.dumps == 1 and sampler.dump_seconds < 30  # one py-spy run, ended early by close()
    assert values[f"pyspy.{pid}.samples"] >= 10, values
    assert sampler.rate_hz == 20
    assert 0 < sampler.cpu_seconds < sampler.dump_seconds


def test_sampler_sees_compute_in_a_compute_bound_training(pyspy_bin: str, spawn) -> None:
    values, sampler, pid = _sample_training(spawn, COMPUTE_BOUND)
    assert values[f"pyspy.{pid}.samples"] >= 10, values
    assert values[f"pyspy.{pid}.data_wait_share"] < 0.3, values
    hot = sampler.hot_frames(3)
    assert 1 <= len(hot) <= 3
    assert all(0 < share <= 1 for _, share in hot)
    assert sum(share for _, share in hot) <= 1 + 1e-9
    assert hot == sorted(hot, key=lambda item: -item[1])
    assert all(" (" in label and label.endswith(")") for label, _ in hot)


def _flaky_pyspy(tmp_path, real: str, failures: int) -> str:
    """A py-spy that fails its first ``failures`` calls as a read of a moving stack does, then is the real one."""
    count = tmp_path / "calls"
    script = tmp_path / "py-spy"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{count}" 2>/dev/null || echo 0); echo $((n + 1)) > "{count}"\n'
        f'if [ "$n" -lt {failures} ]; then echo "Error: Failed to get stack traces" >&2; exit 1; fi\n'
        f'exec "{real}" "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


def test_a_torn_dump_is_read_again(pyspy_bin: str, spawn, tmp_path, monkeypatch) -> None:
    proc = spawn("WITH_IDLE_THREAD = False\n" + SLEEPER)
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: _flaky_pyspy(tmp_path, pyspy_bin, failures=1))
    result = _dump_or_skip(proc.pid)
    assert "deep_sleeper" in [f.name for f in result.main_thread().frames]
    assert (tmp_path / "calls").read_text().strip() == "2"


def test_a_dump_that_keeps_failing_says_why_after_its_attempts(pyspy_bin: str, spawn, tmp_path, monkeypatch) -> None:
    proc = spawn("WITH_IDLE_THREAD = False\n" + SLEEPER)
    monkeypatch.setattr(pyspy, "find_pyspy", lambda: _flaky_pyspy(tmp_path, pyspy_bin, failures=99))
    result = pyspy.dump(proc.pid, timeout=15.0)
    assert result.error == f"py-spy dump of pid {proc.pid} failed (exit 1): Failed to get stack traces"
    assert (tmp_path / "calls").read_text().strip() == str(pyspy.DUMP_ATTEMPTS)
    assert result.elapsed_s > 0
