"""Host CPU, memory, swap and load through psutil, and the cores this process may really use (CPU affinity,
cgroup quota: see ``cgroup.py``). Never raises: a failing metric becomes nan, its reason in ``na_reasons``."""

from __future__ import annotations

import logging
import math
import os

import psutil

from trainmon.metrics import CPU_CORE
from trainmon.sources.base import Source
from trainmon.sources.host.cgroup import CpuBudget

log = logging.getLogger("trainmon.host")


class HostSource(Source):
    name = "host"
    logger = log

    def __init__(self, root: str = "") -> None:
        super().__init__()
        self.cores = psutil.cpu_count(logical=True) or os.cpu_count() or 1  # the host's logical CPUs
        self._budget = CpuBudget(root)
        try:
            psutil.cpu_times_percent(interval=None, percpu=True)  # prime the deltas
        except Exception as exc:
            self._fail("cpu", exc)

    def _fail(self, what: str, exc: BaseException, nan: str | None = None) -> None:
        """``what`` could not be read: logged once; ``nan``, the series written as NaN for it, says why."""
        self.log_once(what, "host metric %s unavailable: %s", what, exc)
        if nan is not None:
            self.na(nan, f"{what} unavailable: {exc}")

    def sample(self, now: float = 0.0) -> dict[str, float]:
        out: dict[str, float] = {"cpu.cores": float(self.cores)}
        try:
            per_core = psutil.cpu_times_percent(interval=None, percpu=True)
            busy_total = iowait_total = user_total = system_total = steal_total = 0.0
            for i, core in enumerate(per_core):
                idle = getattr(core, "idle", 0.0)
                iowait = getattr(core, "iowait", 0.0)
                busy = max(0.0, 100.0 - idle - iowait)
                out[CPU_CORE.key(i, "busy")] = busy
                out[CPU_CORE.key(i, "iowait")] = iowait
                busy_total += busy
                iowait_total += iowait
                user_total += getattr(core, "user", 0.0) + getattr(core, "nice", 0.0)
                system_total += getattr(core, "system", 0.0) + getattr(core, "irq", 0.0) + getattr(core, "softirq", 0.0)
                steal_total += getattr(core, "steal", 0.0)
            n = max(1, len(per_core))
            out["cpu.busy"] = busy_total / n
            out["cpu.iowait"] = iowait_total / n
            out["cpu.user"] = user_total / n
            out["cpu.system"] = system_total / n
            out["cpu.steal"] = steal_total / n
            self.clear_na("cpu.busy")
        except Exception as exc:
            self._fail("cpu", exc, "cpu.busy")
            out["cpu.busy"] = math.nan
        try:
            for name, value in self._budget.sample([None]).get(None, {}).items():
                if name != "budget_id":
                    out[f"cpu.{name}"] = value
        except Exception as exc:
            self._fail("usable cores", exc)
        try:
            vm = psutil.virtual_memory()
            out["mem.used_pct"] = vm.percent
            out["mem.used_mb"] = (vm.total - vm.available) / 2**20
            out["mem.total_mb"] = vm.total / 2**20
            self.clear_na("mem.used_pct")
        except Exception as exc:
            self._fail("memory", exc, "mem.used_pct")
            out["mem.used_pct"] = math.nan
        try:
            sw = psutil.swap_memory()
            out["swap.used_mb"] = sw.used / 2**20
            out["swap.total_mb"] = sw.total / 2**20
        except Exception as exc:
            self._fail("swap", exc)
        try:
            load1, load5, _ = os.getloadavg()
            out["load.1"] = load1
            out["load.5"] = load5
        except OSError as exc:
            self._fail("load", exc)
        return out
