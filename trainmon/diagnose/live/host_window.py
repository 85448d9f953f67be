"""The host over a time window: CPU busy and iowait, memory and swap, and the cores a run may use and shares with
the host's other runs. What the input and host-memory rules read beside a run's window; pure functions of the store."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainmon.diagnose.stats import mean
from trainmon.metrics import PROC
from trainmon.numbers import is_nan, known
from trainmon.store.run import Run
from trainmon.store.store import Store


@dataclass
class HostWindow:
    cpu_busy: float = math.nan  # % of the usable cores busy (the host's busy % where nothing limits them)
    cpu_iowait: float = math.nan  # host-wide iowait, % of all logical CPUs
    cores: int = 1  # usable cores, whole (at least 1): min(CPU affinity, cgroup CPU quota)
    mem_used_pct_max: float = math.nan
    swap_used_mb_max: float = math.nan
    swap_growth_mb: float = math.nan
    host_cores: int = 0  # the host's logical CPUs (0: not recorded)
    cores_usable: float = math.nan  # usable cores as measured (a quota may give 2.5)
    cores_source: str = "host"  # what limits them: host, affinity, cgroup v2 cpu.max, cgroup v1 cpu.cfs_quota_us
    cores_of: str = "host"  # whose limits those are: the run's main process ("run"), the monitor's, or the host's
    sharing_runs: int = 1  # runs on this host drawing on the same cores in the window: they share the idle ones
    host_cpu_busy: float = math.nan  # busy % of all the host's CPUs (cpu_busy is of the usable ones)

    @property
    def iowait_cores(self) -> float:
        """Host iowait as a number of CPUs: each task blocked on I/O holds at most one idle CPU in iowait."""
        return self.cpu_iowait / 100 * (self.host_cores or self.cores)

    @property
    def idle_cores(self) -> float:
        """This run's share of the idle usable cores (ranks on one host share one budget)."""
        if is_nan(self.cpu_busy):
            return math.nan
        usable = self.cores if is_nan(self.cores_usable) else self.cores_usable
        return max(0.0, usable * (1 - self.cpu_busy / 100)) / max(1, self.sharing_runs)

    def cores_evidence(self) -> dict[str, Any]:
        """Where the usable cores come from, for a finding's evidence."""
        return {
            "cores_usable": round(self.cores_usable, 2) if not is_nan(self.cores_usable) else None,
            "cores_source": self.cores_source,
            "cores_of": self.cores_of,
            "host_cores": self.host_cores or None,
            "host_cpu_busy_all_pct": round(self.host_cpu_busy, 1) if not is_nan(self.host_cpu_busy) else None,
            "cores_shared_by_runs": self.sharing_runs,
            "idle_cores_share": round(self.idle_cores, 2) if not is_nan(self.idle_cores) else None,
        }


def host_window(store: Store, t0: float, t1: float, run: Run | None = None) -> HostWindow:
    """Host figures over [t0, t1]. With ``run``: its usable cores (its main process's CPU affinity and cgroup
    quota, else the monitor's own), the busy share of those cores, and how many runs on this host share them."""
    h = HostWindow()
    h.cpu_busy = mean(store.values_between("cpu.busy", t0, t1))
    h.cpu_iowait = mean(store.values_between("cpu.iowait", t0, t1))
    cores = store.latest("cpu.cores")
    h.host_cores = int(cores) if cores and not is_nan(cores) else 0
    h.cores = h.host_cores or 1
    h.host_cpu_busy = h.cpu_busy
    _usable_cores(h, store, t0, t1, run)
    if run is not None:
        h.sharing_runs = _sharing_runs(store, run, t0, t1)
    mem = known(store.values_between("mem.used_pct", t0, t1))
    h.mem_used_pct_max = max(mem) if mem else math.nan
    swap = known(store.values_between("swap.used_mb", t0, t1))
    if swap:
        h.swap_used_mb_max = max(swap)
        h.swap_growth_mb = swap[-1] - swap[0]
    return h


def _usable_cores(h: HostWindow, store: Store, t0: float, t1: float, run: Run | None) -> None:
    pid = run.proc_pid if run is not None else None
    names = {f: PROC.key(pid, "cpu_" + f) for f in _BUDGET} if pid is not None else {}
    if pid is None or is_nan(store.last_known(names["usable"], t0, t1)):
        names, h.cores_of = {f: "cpu." + f for f in _BUDGET}, "monitor"
    usable = store.last_known(names["usable"], t0, t1)
    if is_nan(usable):
        h.cores_of = "host"
        return
    if h.cores_of != "monitor":
        h.cores_of = "run"
    h.cores_usable = usable
    affinity = store.last_known(names["affinity"], t0, t1)
    quotas = [(q, v) for v in (2, 1) if not is_nan(q := store.last_known(names[f"quota_v{v}"], t0, t1))]
    if quotas and min(quotas)[0] < (affinity if not is_nan(affinity) else math.inf):
        h.cores_source = "cgroup v2 cpu.max" if min(quotas)[1] == 2 else "cgroup v1 cpu.cfs_quota_us"
    elif not is_nan(affinity) and h.host_cores and affinity < h.host_cores:
        h.cores_source = "affinity"
    if h.cores_source == "host":
        return  # nothing limits the run: the host's figures as they are
    h.cores = max(1, int(usable + 1e-9))
    busy = mean(store.values_between(names["usable_busy"], t0, t1))
    if not is_nan(busy):
        h.cpu_busy = busy


_BUDGET = ("usable", "affinity", "quota_v2", "quota_v1", "usable_busy", "budget_id")


def _sharing_runs(store: Store, run: Run, t0: float, t1: float) -> int:
    """Runs of this host in [t0, t1] whose main processes draw on the same cores as ``run``'s (itself included)."""

    def budget(r: Run) -> float:
        return math.nan if r.proc_pid is None else store.last_known(PROC.key(r.proc_pid, "cpu_budget_id"), t0, t1)

    mine = budget(run)
    n = 0
    for other in store.runs.values():
        if other.host != run.host or other.first_seen > t1 or other.last_seen < t0:
            continue
        theirs = budget(other)
        if other is run or is_nan(mine) or is_nan(theirs) or theirs == mine:
            n += 1
    return max(1, n)
