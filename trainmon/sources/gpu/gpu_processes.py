"""Which processes use the GPUs, for the GPU source: each device's compute processes with their memory and SM share,
merged per pid, and whose pid namespace NVML's pids are in.

A GPU in MIG mode lists nothing itself: each of its MIG devices lists its own processes. The merging and the
namespace test are pure (`trainmon.sources.gpu.devices`); this module makes the NVML calls and keeps the verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from trainmon.metrics import MIB
from trainmon.numbers import NAN
from trainmon.sources.base import Source
from trainmon.sources.gpu.device_list import DeviceList
from trainmon.sources.gpu.devices import Device, merge_processes, nvml_pid_namespace
from trainmon.sources.gpu.nvml import FAIL, DeviceLost, NvmlBinding, newer_samples

log = logging.getLogger("trainmon.gpu")


class ProcessLister:
    """Reads the process lists of a `DeviceList`; n/a reasons go to ``source`` (the GPU source).

    ``pid_exists`` tells whether a pid names a process in the monitor's pid namespace.
    """

    def __init__(
        self, binding: NvmlBinding, source: Source, devices: DeviceList, pid_exists: Callable[[int], bool]
    ) -> None:
        self._call = binding.call
        self._source = source
        self._devices = devices
        self._pid_exists = pid_exists
        # "own" while NVML's pids name processes here; "other" once most do not (see `nvml_pid_namespace`)
        self.nvml_pids = "own"

    def read(self, now: float) -> dict[int, dict[str, Any]]:
        """Every device's process list, merged per pid (see `GpuSource.process_usage`). A device NVML says is
        lost is lost from ``now``. May raise on a bug: the caller logs it."""
        per_gpu: dict[int, dict[int, tuple[float, float]]] = {}
        for d in self._devices.devices:
            if d.lost is not None or d.handle is None:
                continue
            try:
                per_gpu[d.index] = self._device_processes(d)
            except DeviceLost as e:
                self._devices.lose(d, e.reason, now)
        return merge_processes(per_gpu)

    def judge(self, usage: dict[int, dict[str, Any]]) -> None:
        """Whose pid namespace NVML speaks in, judged afresh from ``usage``'s pids (logged when it changes)."""
        judged = nvml_pid_namespace(usage, self._pid_exists)
        if judged is not None and judged != self.nvml_pids:
            self.nvml_pids = judged
            log.info(
                "NVML's process ids %s",
                "name no process here (another pid namespace: the host's?): per-process GPU figures are kept "
                "apart and matched to runs by their GPU"
                if judged == "other"
                else "are this pid namespace's again",
            )

    def _device_processes(self, d: Device) -> dict[int, tuple[float, float]]:
        if d.mig_mode:
            return {}  # listed per MIG device (the GPU's own list is their sum, and only for the privileged)
        procs = self._call(d, "procs", (d.prefix + "proc_mem",), d.handle)
        if procs is FAIL:
            return {}
        self._source.clear_na(d.prefix + "proc_mem")
        sm = self._process_sm(d)
        out: dict[int, tuple[float, float]] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            mem = NAN if used is None else used / MIB
            out[int(p.pid)] = (mem, sm.get(int(p.pid), 0.0) if sm is not None else NAN)
        return out

    def _process_sm(self, d: Device) -> dict[int, float] | None:
        key = d.prefix + "proc_sm"
        samples = self._call(d, "proc_util", (key,), d.handle, d.proc_ts, not_found=[])
        if samples is FAIL:
            return None
        self._source.clear_na(key)
        fresh, d.proc_ts = newer_samples(samples, d.proc_ts)
        acc: dict[int, list[float]] = {}
        for s in fresh:
            # Drivers have been seen to return garbage (> 100 %) for exited processes.
            if 0 <= s.smUtil <= 100:
                acc.setdefault(int(s.pid), []).append(float(s.smUtil))
        return {pid: sum(v) / len(v) for pid, v in acc.items()}
