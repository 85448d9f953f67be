"""The cores a process may really use, and how busy they are: CPU affinity and the cgroup CPU quota.

psutil.cpu_count() and /proc/stat count the host's CPUs. A container limited to 4 CPUs on a 64-core node, or a
rank pinned with taskset/numactl, can use far fewer. Usable cores = min(CPUs in the affinity mask, the tightest
CPU quota along the process's cgroup path):

- affinity: ``Cpus_allowed_list`` of ``/proc/<pid>/status`` (what sched_getaffinity returns; a cpuset limits it too);
- cgroup v2: ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") of the process's cgroup and each ancestor;
- cgroup v1: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` likewise (-1: no quota).

The cgroup comes from ``/proc/<pid>/cgroup``, its directory from the cgroup mounts in ``/proc/self/mountinfo``.
Every path is read under ``root`` (default: the real one), so tests point the reader at a fake tree.

How busy that budget is: the busy time of the allowed CPUs (``/proc/stat`` per CPU) and, under a quota, the
cgroup's own CPU use (``cpu.stat`` usage_usec on v2, ``cpuacct.usage`` on v1) against the quota; the idle budget is
the smaller of the two. Standard library only; never raises (what cannot be read is left out).
"""

from __future__ import annotations

import math
import os
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

REFRESH_S = 10.0  # affinity and quotas are re-read this often (they change rarely: taskset, docker update)


@dataclass(frozen=True)
class CpuLimit:
    host_cores: int  # online logical CPUs of the host
    affinity: tuple[int, ...] = ()  # CPUs the process may run on (empty: not known)
    quota: float | None = None  # cores: the tightest cgroup CPU quota along the path (None: no quota found)
    quota_version: int = 0  # 2: cpu.max, 1: cpu.cfs_quota_us, 0: none
    quota_file: str | None = None
    usage_file: str | None = None  # the cgroup's CPU usage counter (the quota's cgroup, or the process's own)
    usage_scale: float = 1e-6  # counter unit in seconds (usage_usec on v2, ns on v1)
    cgroup: str = ""

    @property
    def affinity_cores(self) -> int:
        return len(self.affinity) or self.host_cores

    @property
    def usable(self) -> float:
        """Cores the process may use (a quota may give a fraction: 2.5)."""
        return min(float(self.affinity_cores), self.quota) if self.quota is not None else float(self.affinity_cores)

    @property
    def source(self) -> str:
        """What sets ``usable``: "cgroup v2 cpu.max", "cgroup v1 cpu.cfs_quota_us", "affinity" or "host"."""
        if self.quota is not None and self.quota < self.affinity_cores:
            return "cgroup v2 cpu.max" if self.quota_version == 2 else "cgroup v1 cpu.cfs_quota_us"
        if self.affinity_cores < self.host_cores:
            return "affinity"
        return "host"

    @property
    def budget_id(self) -> float:
        """The same number for processes that draw on the same cores (same CPUs, same quota-holding cgroup)."""
        key = ",".join(map(str, self.affinity)) + "|" + (self.quota_file or "")
        return float(zlib.crc32(key.encode()))


# ---------------------------------------------------------------- reading the limits


def _text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """ "0-3,8,10-11" → (0, 1, 2, 3, 8, 10, 11); malformed parts are skipped."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            if dash:
                cpus.update(range(int(lo), int(hi) + 1))
            elif lo:
                cpus.add(int(lo))
        except ValueError:
            continue
    return tuple(sorted(cpus))


def _proc_dir(root: str, pid: int | None) -> str:
    return f"{root}/proc/{'self' if pid is None else pid}"


def read_affinity(pid: int | None = None, root: str = "") -> tuple[int, ...]:
    status = _text(f"{_proc_dir(root, pid)}/status") or ""
    for line in status.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    if not root:
        try:
            return tuple(sorted(os.sched_getaffinity(pid or 0)))
        except (AttributeError, OSError):
            pass
    return ()


def host_cpus(root: str = "") -> int:
    """Online logical CPUs: the per-CPU lines of /proc/stat."""
    stat = _text(f"{root}/proc/stat") or ""
    n = sum(1 for line in stat.splitlines() if line.startswith("cpu") and line[3:4].isdigit())
    if n:
        return n
    return 1 if root else os.cpu_count() or 1


@dataclass
class _Mount:
    point: str  # where it is mounted
    root: str  # which cgroup is its root
    version: int
    controllers: frozenset[str] = field(default_factory=frozenset)


def _cgroup_mounts(root: str) -> list[_Mount]:
    """cgroup mounts of this process's mount namespace.

    mountinfo lines: "id parent dev ROOT POINT opts… - TYPE source SUPEROPTS"."""
    mounts = []
    for line in (_text(f"{root}/proc/self/mountinfo") or "").splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        fstype = rest[0]
        if fstype == "cgroup2":
            mounts.append(_Mount(fields[4], fields[3], 2))
        elif fstype == "cgroup" and len(rest) >= 3:
            mounts.append(_Mount(fields[4], fields[3], 1, frozenset(rest[2].split(","))))
    return mounts


def _cgroup_paths(root: str, pid: int | None) -> dict[str, str]:
    """Controller → cgroup path from /proc/<pid>/cgroup; "" is the cgroup v2 (unified) path."""
    out: dict[str, str] = {}
    for line in (_text(f"{_proc_dir(root, pid)}/cgroup") or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out[""] = path
        for name in controllers.split(","):
            if name:
                out[name] = path
    return out


def _cgroup_dirs(root: str, mount: _Mount, path: str) -> list[str]:
    """The directories of ``path`` and its ancestors under ``mount`` (innermost first) that exist here."""
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root.rstrip("/") + "/")):
        path = path[len(mount.root.rstrip("/")) :]
    elif mount.root != "/" and path.startswith("/"):
        # The mount shows another part of the hierarchy (a container's own cgroup): only its root is ours.
        path = "/"
    parts = [p for p in path.split("/") if p and p != ".."]
    dirs = []
    for depth in range(len(parts), -1, -1):
        d = root + mount.point.rstrip("/") + ("/" + "/".join(parts[:depth]) if depth else "")
        if os.path.isdir(d):
            dirs.append(d)
    return dirs


def _v2_quota(directory: str) -> float | None:
    text = _text(f"{directory}/cpu.max")
    if text is None:
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _v1_quota(directory: str) -> float | None:
    quota, period = _text(f"{directory}/cpu.cfs_quota_us"), _text(f"{directory}/cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def read_limit(pid: int | None = None, root: str = "") -> CpuLimit:
    """The CPU limits of ``pid`` (None: this process) as files under ``root`` say them."""
    host = host_cpus(root)
    affinity = read_affinity(pid, root)
    paths = _cgroup_paths(root, pid)
    mounts = _cgroup_mounts(root)
    best: tuple[float, int, str] | None = None
    usage: tuple[str, float] | None = None
    cgroup = ""
    for mount in mounts:
        if mount.version == 2:
            path = paths.get("")
            if path is None or (paths.keys() - {""} and "cpu" in paths):
                continue  # hybrid hierarchy: the cpu controller is on v1
            cgroup = path
            dirs = _cgroup_dirs(root, mount, path)
            quota_file, reader, usage_name, scale = "cpu.max", _v2_quota, "cpu.stat", 1e-6
        elif "cpu" in mount.controllers and "cpu" in paths:
            cgroup = paths["cpu"]
            dirs = _cgroup_dirs(root, mount, paths["cpu"])
            quota_file, reader, usage_name, scale = "cpu.cfs_quota_us", _v1_quota, "cpuacct.usage", 1e-9
        else:
            continue
        for d in dirs:
            quota = reader(d)
            if quota is not None and (best is None or quota < best[0]):
                best = (quota, mount.version, f"{d}/{quota_file}")
        if dirs:
            usage_dir = os.path.dirname(best[2]) if best is not None and best[1] == mount.version else dirs[0]
            if mount.version == 1 and "cpuacct" not in mount.controllers:
                usage_dir = _v1_cpuacct_dir(root, mounts, paths) or ""
            if usage_dir and os.path.exists(f"{usage_dir}/{usage_name}"):
                usage = (f"{usage_dir}/{usage_name}", scale)
    return CpuLimit(
        host_cores=host,
        affinity=affinity,
        quota=best[0] if best else None,
        quota_version=best[1] if best else 0,
        quota_file=best[2] if best else None,
        usage_file=usage[0] if usage else None,
        usage_scale=usage[1] if usage else 1e-6,
        cgroup=cgroup,
    )


def _v1_cpuacct_dir(root: str, mounts: list[_Mount], paths: dict[str, str]) -> str | None:
    for mount in mounts:
        if mount.version == 1 and "cpuacct" in mount.controllers and "cpuacct" in paths:
            dirs = _cgroup_dirs(root, mount, paths["cpuacct"])
            return dirs[0] if dirs else None
    return None


def read_usage_s(limit: CpuLimit) -> float | None:
    """CPU seconds the limit's cgroup has used so far (None where not readable)."""
    if limit.usage_file is None:
        return None
    text = _text(limit.usage_file)
    if text is None:
        return None
    try:
        if limit.usage_file.endswith("cpu.stat"):
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * limit.usage_scale
            return None
        return int(text.split()[0]) * limit.usage_scale
    except (ValueError, IndexError):
        return None


def read_cpu_times(root: str = "") -> dict[int, tuple[float, float]]:
    """CPU index → (busy, total) jiffies from /proc/stat (busy: not idle, not iowait)."""
    out: dict[int, tuple[float, float]] = {}
    for line in (_text(f"{root}/proc/stat") or "").splitlines():
        if not (line.startswith("cpu") and line[3:4].isdigit()):
            continue
        parts = line.split()
        try:
            cpu = int(parts[0][3:])
            ticks = [float(v) for v in parts[1:9]]  # user nice system idle iowait irq softirq steal
        except (ValueError, IndexError):
            continue
        if len(ticks) < 5:
            continue
        total = sum(ticks)
        out[cpu] = (total - ticks[3] - ticks[4], total)
    return out


# ---------------------------------------------------------------- busy share of the budget, sample by sample


@dataclass
class _Prev:
    limit: CpuLimit
    read_at: float
    usage_s: float | None = None
    usage_t: float = 0.0


class CpuBudget:
    """Usable cores and how busy they are, per process, one /proc/stat read per call.

    ``sample(pids)`` gives, for each pid (None: this process), the figures named in ``FIELDS``; the busy share
    appears from the second call on (it is a rate)."""

    FIELDS = ("usable", "affinity", "quota_v2", "quota_v1", "usable_busy", "budget_id")

    def __init__(
        self, root: str = "", refresh_s: float = REFRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = root
        self.refresh_s = refresh_s
        self.clock = clock
        self._prev: dict[int | None, _Prev] = {}
        self._cpu_prev: dict[int, tuple[float, float]] = {}

    def limit(self, pid: int | None = None) -> CpuLimit | None:
        prev = self._prev.get(pid)
        return prev.limit if prev is not None else None

    def sample(self, pids: Iterable[int | None]) -> dict[int | None, dict[str, float]]:
        now = self.clock()
        cpu_now = read_cpu_times(self.root)
        busy_by_cpu = {
            cpu: (b - self._cpu_prev[cpu][0]) / (t - self._cpu_prev[cpu][1])
            for cpu, (b, t) in cpu_now.items()
            if cpu in self._cpu_prev and t > self._cpu_prev[cpu][1]
        }
        self._cpu_prev = cpu_now
        out: dict[int | None, dict[str, float]] = {}
        wanted = list(pids)
        for pid in wanted:
            figures = self._sample_pid(pid, now, busy_by_cpu)
            if figures is not None:
                out[pid] = figures
        for pid in [p for p in self._prev if p not in wanted]:
            del self._prev[pid]
        return out

    def _sample_pid(self, pid: int | None, now: float, busy_by_cpu: dict[int, float]) -> dict[str, float] | None:
        prev = self._prev.get(pid)
        if prev is None or now - prev.read_at >= self.refresh_s:
            if pid is not None and not os.path.exists(f"{self.root}/proc/{pid}"):
                self._prev.pop(pid, None)
                return None
            limit = read_limit(pid, self.root)
            if prev is not None and prev.limit.usage_file != limit.usage_file:
                prev.usage_s = None
            prev = self._prev[pid] = _Prev(limit, now, prev.usage_s if prev else None, prev.usage_t if prev else 0.0)
        limit = prev.limit
        usable = limit.usable
        out = {"usable": usable, "affinity": float(limit.affinity_cores), "budget_id": limit.budget_id}
        if limit.quota is not None:
            out[f"quota_v{limit.quota_version}"] = limit.quota
        cpus = limit.affinity or tuple(range(limit.host_cores))
        busy = [busy_by_cpu[c] for c in cpus if c in busy_by_cpu]
        idle = len(cpus) - sum(busy) if len(busy) == len(cpus) and busy else math.nan
        usage = read_usage_s(limit) if limit.quota is not None else None
        if usage is not None and prev.usage_s is not None and now > prev.usage_t:
            used = max(0.0, usage - prev.usage_s) / (now - prev.usage_t)
            left = max(0.0, limit.quota - used) if limit.quota is not None else math.nan
            idle = left if math.isnan(idle) else min(idle, left)
        prev.usage_s, prev.usage_t = usage, now
        if not math.isnan(idle) and usable > 0:
            out["usable_busy"] = 100.0 * min(1.0, max(0.0, 1.0 - idle / usable))
        return out
