"""Usable cores from fake cgroup trees (real files under tmp_path, the reader pointed at them): cgroup v2 cpu.max
along the path, cgroup v1 CFS quotas, mounts that show only a container's own cgroup, affinity lists, malformed
files; and the busy share of that budget from /proc/stat and the cgroup's usage counter."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmon.sources.host.cgroup import CpuBudget, parse_cpu_list, read_limit, read_usage_s

V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "33 31 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def stat_lines(busy: list[int], idle: list[int]) -> str:
    """/proc/stat with one line per CPU: user=busy, idle=idle, the rest 0."""
    total = f"cpu  {sum(busy)} 0 0 {sum(idle)} 0 0 0 0 0 0\n"
    return total + "".join(f"cpu{i} {b} 0 0 {d} 0 0 0 0 0 0\n" for i, (b, d) in enumerate(zip(busy, idle, strict=True)))


def fake_host(
    root: Path, cpus: int, *, allowed: str | None = None, cgroup: str = "0::/\n", mounts: str = V2_MOUNT, pid="self"
) -> None:
    write(root / "proc" / "stat", stat_lines([0] * cpus, [0] * cpus))
    write(root / "proc" / "self" / "mountinfo", mounts)
    write(root / "proc" / str(pid) / "status", f"Name:\tpython\nCpus_allowed_list:\t{allowed or f'0-{cpus - 1}'}\n")
    write(root / "proc" / str(pid) / "cgroup", cgroup)


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("5") == (5,)
    assert parse_cpu_list("x,2,3-a") == (2,)
    assert parse_cpu_list("") == ()


def test_v2_quota_on_an_ancestor_limits_a_container_on_a_big_host(tmp_path: Path) -> None:
    fake_host(tmp_path, 64, cgroup="0::/kubepods/pod1/ctr\n")
    cg = tmp_path / "sys" / "fs" / "cgroup"
    write(cg / "kubepods" / "cpu.max", "max 100000\n")
    write(cg / "kubepods" / "pod1" / "cpu.max", "400000 100000\n")  # the pod: 4 cores
    write(cg / "kubepods" / "pod1" / "ctr" / "cpu.max", "800000 100000\n")  # looser below it
    write(cg / "kubepods" / "pod1" / "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n")
    limit = read_limit(root=str(tmp_path))
    assert limit.host_cores == 64 and limit.affinity_cores == 64
    assert limit.quota == 4.0 and limit.usable == 4.0
    assert limit.source == "cgroup v2 cpu.max"
    assert limit.quota_file == str(cg / "kubepods" / "pod1" / "cpu.max")
    assert read_usage_s(limit) == pytest.approx(2.5)  # the quota-holding cgroup's own counter


def test_v2_without_quota_and_a_narrow_affinity(tmp_path: Path) -> None:
    fake_host(tmp_path, 16, allowed="2-3,9", cgroup="0::/user.slice\n")
    write(tmp_path / "sys" / "fs" / "cgroup" / "user.slice" / "cpu.max", "max 100000\n")
    limit = read_limit(root=str(tmp_path))
    assert limit.quota is None and limit.affinity == (2, 3, 9)
    assert limit.usable == 3.0 and limit.source == "affinity"


def test_affinity_below_the_quota_is_what_limits(tmp_path: Path) -> None:
    fake_host(tmp_path, 32, allowed="0-1", cgroup="0::/job\n")
    write(tmp_path / "sys" / "fs" / "cgroup" / "job" / "cpu.max", "600000 100000\n")
    limit = read_limit(root=str(tmp_path))
    assert limit.quota == 6.0 and limit.usable == 2.0 and limit.source == "affinity"


def test_v1_cfs_quota_in_a_hybrid_hierarchy(tmp_path: Path) -> None:
    cgroup = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/docker/abc\n"
    fake_host(tmp_path, 8, cgroup=cgroup, mounts=V1_MOUNTS)
    cpu = tmp_path / "sys" / "fs" / "cgroup" / "cpu,cpuacct"
    write(cpu / "cpu.cfs_quota_us", "-1\n")
    write(cpu / "cpu.cfs_period_us", "100000\n")
    write(cpu / "docker" / "abc" / "cpu.cfs_quota_us", "150000\n")
    write(cpu / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    write(cpu / "docker" / "abc" / "cpuacct.usage", "7000000000\n")
    # The unified hierarchy has a cpu.max too, but the cpu controller is on v1 here: not read.
    write(tmp_path / "sys" / "fs" / "cgroup" / "unified" / "docker" / "abc" / "cpu.max", "100000 100000\n")
    limit = read_limit(root=str(tmp_path))
    assert limit.quota == 1.5 and limit.quota_version == 1
    assert limit.source == "cgroup v1 cpu.cfs_quota_us" and limit.usable == 1.5
    assert read_usage_s(limit) == pytest.approx(7.0)


def test_v1_mount_showing_only_the_containers_own_cgroup(tmp_path: Path) -> None:
    mounts = "50 40 0:29 /docker/abc /sys/fs/cgroup/cpu ro,relatime - cgroup cgroup rw,cpu\n"
    fake_host(tmp_path, 8, cgroup="5:cpu:/docker/abc\n", mounts=mounts)
    cpu = tmp_path / "sys" / "fs" / "cgroup" / "cpu"
    write(cpu / "cpu.cfs_quota_us", "200000\n")
    write(cpu / "cpu.cfs_period_us", "100000\n")
    limit = read_limit(root=str(tmp_path))
    assert limit.quota == 2.0 and limit.quota_file == str(cpu / "cpu.cfs_quota_us")


def test_a_monitored_pid_is_read_from_its_own_files(tmp_path: Path) -> None:
    fake_host(tmp_path, 8, cgroup="0::/\n")
    fake_host(tmp_path, 8, allowed="4", cgroup="0::/train\n", pid=4242)
    write(tmp_path / "sys" / "fs" / "cgroup" / "train" / "cpu.max", "50000 100000\n")
    assert read_limit(root=str(tmp_path)).source == "host"
    limit = read_limit(4242, root=str(tmp_path))
    assert limit.affinity == (4,) and limit.quota == 0.5 and limit.usable == 0.5


@pytest.mark.parametrize("text", ["max 100000\n", "garbage\n", "-5 100000\n", "100000 0\n", ""])
def test_malformed_or_unlimited_cpu_max_is_no_quota(tmp_path: Path, text: str) -> None:
    fake_host(tmp_path, 4, cgroup="0::/a\n")
    write(tmp_path / "sys" / "fs" / "cgroup" / "a" / "cpu.max", text)
    limit = read_limit(root=str(tmp_path))
    assert limit.quota is None and limit.usable == 4.0 and limit.source == "host"


def test_missing_files_give_the_host(tmp_path: Path) -> None:
    write(tmp_path / "proc" / "stat", stat_lines([0] * 6, [0] * 6))
    limit = read_limit(root=str(tmp_path))
    assert limit.host_cores == 6 and limit.affinity == () and limit.usable == 6.0 and limit.source == "host"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_budget_busy_share_is_the_quota_used_not_the_idle_host(tmp_path: Path) -> None:
    """64 cores 10 % busy, a 4-core quota whose cgroup used 3 cores: the budget is 75 % busy, not 10 %."""
    fake_host(tmp_path, 64, cgroup="0::/pod\n")
    cg = tmp_path / "sys" / "fs" / "cgroup" / "pod"
    write(cg / "cpu.max", "400000 100000\n")
    write(cg / "cpu.stat", "usage_usec 0\n")
    clock = Clock()
    budget = CpuBudget(str(tmp_path), clock=clock)
    first = budget.sample([None])[None]
    assert first["usable"] == 4.0 and first["quota_v2"] == 4.0 and "usable_busy" not in first
    clock.t += 2.0
    write(tmp_path / "proc" / "stat", stat_lines([20] * 64, [180] * 64))  # every CPU 10 % busy
    write(cg / "cpu.stat", "usage_usec 6000000\n")  # 6 CPU-seconds in 2 s: 3 cores
    figures = budget.sample([None])[None]
    assert figures["usable_busy"] == pytest.approx(75.0)
    assert figures["affinity"] == 64.0 and "quota_v1" not in figures


def test_budget_busy_share_of_the_allowed_cpus_only(tmp_path: Path) -> None:
    fake_host(tmp_path, 4, allowed="2-3")
    clock = Clock()
    budget = CpuBudget(str(tmp_path), clock=clock)
    budget.sample([None])
    clock.t += 1.0
    # CPUs 0-1 idle, CPU 2 fully busy, CPU 3 half busy: of the two allowed, 1.5 busy.
    write(tmp_path / "proc" / "stat", stat_lines([0, 0, 100, 50], [100, 100, 0, 50]))
    figures = budget.sample([None])[None]
    assert figures["usable"] == 2.0 and figures["usable_busy"] == pytest.approx(75.0)


def test_budget_ids_tell_shared_cores_apart(tmp_path: Path) -> None:
    fake_host(tmp_path, 8, allowed="0-3", pid=1)
    fake_host(tmp_path, 8, allowed="0-3", pid=2)
    fake_host(tmp_path, 8, allowed="4-7", pid=3)
    figures = CpuBudget(str(tmp_path)).sample([1, 2, 3, 99])
    assert 99 not in figures  # no such process
    assert figures[1]["budget_id"] == figures[2]["budget_id"] != figures[3]["budget_id"]
