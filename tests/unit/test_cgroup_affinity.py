"""Usable cores of real processes on this machine: one started under `taskset`, and (where this user may make
cgroups) one placed in a real cgroup with a CPU quota. Read by the procs source as a training's main process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainmon.sources.host.cgroup import CpuBudget, read_limit
from trainmon.sources.host.procs import ProcSource

CPUS = sorted(os.sched_getaffinity(0))
SLEEPER = "import sys, time; print('ready', flush=True); time.sleep(60)"


def start(cmd: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def pinned() -> Iterator[subprocess.Popen]:
    if len(CPUS) < 2 or shutil.which("taskset") is None:
        pytest.skip("needs taskset and at least two CPUs")
    proc = start(["taskset", "-c", str(CPUS[-1]), sys.executable, "-c", SLEEPER])
    yield proc
    proc.kill()
    proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


def test_taskset_affinity_limits_the_usable_cores(pinned: subprocess.Popen) -> None:
    limit = read_limit(pinned.pid)
    assert limit.affinity == (CPUS[-1],)
    assert limit.usable == 1.0 and limit.source == "affinity"
    assert read_limit().affinity_cores == len(CPUS)  # this process is not pinned


def test_the_procs_source_reports_a_pinned_main_process(pinned: subprocess.Popen) -> None:
    with ProcSource(lambda: {pinned.pid: "main"}, hz_states=0) as src:
        src.sample()
        time.sleep(0.3)
        out = src.sample()
    assert out[f"proc.{pinned.pid}.cpu_usable"] == 1.0
    assert out[f"proc.{pinned.pid}.cpu_affinity"] == 1.0
    assert 0.0 <= out[f"proc.{pinned.pid}.cpu_usable_busy"] <= 100.0
    assert f"proc.{pinned.pid}.cpu_quota_v1" not in out and f"proc.{pinned.pid}.cpu_quota_v2" not in out


def _cpu_cgroup_parent() -> tuple[Path, int] | None:
    """A writable cgroup directory with the cpu controller, and its version; None where there is none."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.exists() and "cpu" in v2.read_text().split():
        return Path("/sys/fs/cgroup"), 2
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, 1
    return None


@pytest.fixture
def quota_cgroup() -> Iterator[tuple[Path, int]]:
    found = _cpu_cgroup_parent()
    if found is None or not os.access(found[0], os.W_OK):
        pytest.skip("no writable cgroup with the cpu controller")
    parent, version = found
    group = parent / f"trainmon-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup here: {exc}")
    try:
        if version == 2:
            (group / "cpu.max").write_text("50000 100000\n")
        else:
            (group / "cpu.cfs_period_us").write_text("100000\n")
            (group / "cpu.cfs_quota_us").write_text("50000\n")
        yield group, version
    finally:
        for _ in range(50):  # the killed child leaves the group a moment later
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_real_cgroup_quota_limits_the_usable_cores(quota_cgroup: tuple[Path, int]) -> None:
    group, version = quota_cgroup
    proc = start([sys.executable, "-c", SLEEPER])
    try:
        try:
            (group / "cgroup.procs").write_text(f"{proc.pid}\n")
        except OSError as exc:
            pytest.skip(f"cannot move a process into {group}: {exc}")
        limit = read_limit(proc.pid)
        assert limit.quota == 0.5 and limit.quota_version == version
        assert limit.usable == 0.5
        assert limit.source == ("cgroup v2 cpu.max" if version == 2 else "cgroup v1 cpu.cfs_quota_us")
        assert limit.quota_file is not None and limit.quota_file.startswith(str(group))
        budget = CpuBudget()
        budget.sample([proc.pid])
        time.sleep(0.3)
        figures = budget.sample([proc.pid])[proc.pid]
        assert figures["usable"] == 0.5 and figures[f"quota_v{version}"] == 0.5
        assert 0.0 <= figures["usable_busy"] <= 100.0
    finally:
        proc.kill()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
