"""Fixtures shared by every test folder: short socket paths, a running Monitor, ProcSource factories.

Fixtures only: helper functions live in the testsupport package, which tests and benchmarks both import.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from trainmon.monitor import Monitor
from trainmon.sources.host.procs import ProcSource

# Monitors started by the tests (in-process and in subprocesses) do not look for other trainings on the host: a
# test is about the processes it starts, whatever else this machine runs. The discovery tests turn it back on.
os.environ["TRAINMON_DISCOVER"] = "0"


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


@pytest.fixture
def monitor(addr: str) -> Iterator[Monitor]:
    """A real headless Monitor listening on ``addr`` (ticking every 0.2 s), stopped afterwards."""
    m = Monitor(addr, interval=0.2)
    m.start()
    yield m
    m.stop()


@pytest.fixture
def source_for():
    """Makes ProcSources over a fixed pid → role map; every one is closed afterwards."""
    sources: list[ProcSource] = []

    def make(pids: dict[int, str], **kw) -> ProcSource:
        src = ProcSource(lambda: pids, **kw)
        sources.append(src)
        return src

    yield make
    for src in sources:
        src.close()


@pytest.fixture
def cuda_rig(monkeypatch):
    """A manual clock shared by the agent's hot path and a fake GPU, a fake ``torch.cuda``, a clean buffer."""
    from testsupport.fake_cuda import FakeCuda, FakeGpu, ManualClock, install
    from trainmon.agent import _hot

    clock = ManualClock()
    monkeypatch.setattr(_hot, "_pc", clock)
    cuda = install(monkeypatch, FakeCuda(FakeGpu(clock)))
    _hot.reset_buffer()
    yield clock, cuda
    _hot.reset_buffer()
