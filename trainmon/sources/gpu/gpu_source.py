"""GPU source: NVML (and GPM on Hopper and newer) through nvidia-ml-py, wrapped so that nothing ever raises.

Every failure is local: a call that fails makes only its own series NaN and records why in `na_reasons`
(logged once per series and reason). A lost GPU turns only that device's series NaN. Without a driver or a
GPU the whole source is unavailable, `error` says why in one line, and `sample()` returns {}.

This module is the source the Monitor sees: each tick it reads every device's series, and it answers for
processes, devices and visibility, all under one lock. The device list (GPUs and their MIG devices, opened, lost
and opened again) is `trainmon.sources.gpu.device_list`; GPM sample pairs `trainmon.sources.gpu.gpm`; process lists
`trainmon.sources.gpu.gpu_processes`; the device records, process merging, CUDA_VISIBLE_DEVICES parsing and whose pids
NVML gives `trainmon.sources.gpu.devices`; the binding, its return codes and how failures become n/a reasons
`trainmon.sources.gpu.nvml`; the series names `trainmon.metrics`.

Units: memory in MiB (as nvidia-smi prints it), PCIe in MiB/s, power in W, clocks in MHz, percentages 0-100.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainmon.metrics import MIB, NVML_PROC, gpu_mask
from trainmon.numbers import NAN, is_nan
from trainmon.sources.base import Source
from trainmon.sources.gpu.device_list import DeviceList
from trainmon.sources.gpu.devices import Device, parse_visible, proc_exists
from trainmon.sources.gpu.energy_counter import EnergyMeter, counter_value
from trainmon.sources.gpu.gpm import GpmReader
from trainmon.sources.gpu.gpu_processes import ProcessLister
from trainmon.sources.gpu.nvml import FAIL, FUNCTIONS, DeviceLost, NvmlBinding, error_text, newer_samples, value_field

log = logging.getLogger("trainmon.gpu")


@dataclass(frozen=True)
class ScalarRead:
    """A GPU field (``trainmon.metrics.GPU``) read by one NVML call on the device handle, times ``scale``."""

    field: str
    entry_points: tuple[str, ...]  # newest first: an older driver falls back to the next
    scale: float = 1.0
    arg: str | None = None  # the NvmlBinding constant passed after the handle


# Adding a GPU metric that one NVML call reads: its line in trainmon.metrics.GPU and one line here.
SCALAR_READS = (
    ScalarRead("power_w", ("nvmlDeviceGetPowerUsage",), 1e-3),
    ScalarRead("power_limit_w", ("nvmlDeviceGetEnforcedPowerLimit",), 1e-3),
    ScalarRead("temp_c", ("nvmlDeviceGetTemperature",), arg="temp_gpu"),
    ScalarRead("sm_clock_mhz", ("nvmlDeviceGetClockInfo",), arg="clock_sm"),
    ScalarRead("mem_clock_mhz", ("nvmlDeviceGetClockInfo",), arg="clock_mem"),
    ScalarRead("throttle", ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")),
    ScalarRead("pcie_rx_mb_s", ("nvmlDeviceGetPcieThroughput",), 1 / 1024, "pcie_rx"),
    ScalarRead("pcie_tx_mb_s", ("nvmlDeviceGetPcieThroughput",), 1 / 1024, "pcie_tx"),
)
ENERGY_FUNCTIONS = {"energy": ("nvmlDeviceGetTotalEnergyConsumption",)}  # millijoules since the driver loaded


class GpuSource(Source):
    """Samples every GPU NVML sees. Construct once, call `sample(now)` each tick, `close()` at the end."""

    name = "gpu"
    logger = log

    def __init__(self, nvml_module: Any = None, *, pid_exists: Callable[[int], bool] = proc_exists) -> None:
        """``pid_exists`` tells whether a pid names a process in the monitor's pid namespace (tests give theirs)."""
        super().__init__()
        self.error: str | None = None
        # The binding records n/a reasons (into this source's) as its calls fail; sampling clears them as values
        # come back. It logs through this source's log_once.
        self._binding = NvmlBinding(
            {**FUNCTIONS, **ENERGY_FUNCTIONS, **{r.field: r.entry_points for r in SCALAR_READS}},
            reasons=self._na,
            log_once=self.log_once,
        )
        self._call = self._binding.call
        self._now = 0.0
        self.unresolved_visible: list[str] = []
        self._initialized = False
        self._lock = threading.Lock()
        self._gpm = GpmReader(self._binding, self)
        self._list = DeviceList(self._binding, self, self._gpm)
        self._procs = ProcessLister(self._binding, self, self._list, pid_exists)
        self._visible: set[int] | None = None
        self._usage: dict[int, dict[str, Any]] | None = None  # the last sample's process lists, not yet handed out
        self._energy: dict[int, EnergyMeter] = {}  # by device id: kept while a device is lost and opened again
        self._init(nvml_module)

    # ------------------------------------------------------------------ setup

    @property
    def available(self) -> bool:
        return self._initialized

    @property
    def nvml_pids(self) -> str:
        """Whose pids NVML gives: "own" while they name processes here, "other" once most do not."""
        return self._procs.nvml_pids

    @property
    def _devices(self) -> list[Device]:
        """The device list: the GPUs (id = NVML index), then their MIG devices."""
        return self._list.devices

    def _init(self, nvml_module: Any) -> None:
        self.error = self._binding.load(nvml_module)
        if self.error is not None:
            log.info("GPU source unavailable: %s", self.error)
            return
        self._initialized = True
        try:
            self._binding.resolve()
            count = self._binding.device_count()
            self._enumerate(0 if count is None else count, 0.0)
        except Exception as e:  # a bug here must not take the monitor down
            log.exception("GPU source setup failed")
            self.error = f"GPU source setup failed: {type(e).__name__}: {error_text(e)}"

    def _enumerate(self, count: int, now: float) -> None:
        """(Re)build the device list (see `DeviceList.enumerate`); with no GPU, `error` says so."""
        self._list.enumerate(count, now)
        if count == 0:
            self.error = "NVML sees no GPU"
        elif self.error == "NVML sees no GPU":
            self.error = None

    # ------------------------------------------------------------------ sampling

    def sample(self, now: float) -> dict[str, float]:
        """Flat series for every device; NaN where a value is n/a (see `na_reasons`).

        `now` is the caller's monotonic clock in seconds: it spaces GPM sample pairs and retries of lost GPUs.
        """
        out: dict[str, float] = {}
        with self._lock:
            if not self._initialized:
                return out
            self._now = now
            try:
                count = self._binding.device_count()
                if count is not None and count != self._list.gpu_count:
                    log.info("GPU count changed: %d → %d, re-enumerating", self._list.gpu_count, count)
                    self._enumerate(count, now)
                for pos, d in enumerate(self._devices):
                    if d.lost is not None:
                        d = self._list.retry_lost(pos, d, now)
                    self._sample_one(d, now, out)
                self._usage = self._list_processes()
                if self.nvml_pids == "other":
                    self._put_nvml_processes(self._usage, out)
            except Exception:  # a bug here must not take the monitor down
                self._log_exception("sample")
            return out

    def _put_nvml_processes(self, usage: dict[int, dict[str, Any]], out: dict[str, float]) -> None:
        """NVML's processes under pids of its own namespace, apart from the monitor's processes (NVML_PROC)."""
        for pid, u in usage.items():
            keys = NVML_PROC.keys(pid)
            out[keys["gpu_mem_mb"]] = float(u["mem_mb"])
            out[keys["gpu_sm_pct"]] = float(u["sm_pct"])
            out[keys["gpu_mask"]] = gpu_mask(u["gpus"])

    def _log_exception(self, where: str) -> None:
        self.log_once(("exception", where), "GPU source %s failed", where, level=logging.ERROR, exc_info=True)

    def _sample_one(self, d: Device, now: float, out: dict[str, float]) -> None:
        names = d.series
        for s in names:
            out[s] = NAN
        if d.lost is not None:
            self._energy_meter(d).restart()
            return
        try:
            self._read_device(d, now, out)
        except DeviceLost as e:
            for s in names:
                out[s] = NAN
            self._energy_meter(d).restart()
            self._list.lose(d, e.reason, now)

    def _put(self, out: dict[str, float], key: str, value: float) -> None:
        out[key] = value
        self.clear_na(key)

    def _read_device(self, d: Device, now: float, out: dict[str, float]) -> None:
        k, h, put, nvml = d.keys, d.handle, self._put, self._binding
        util = NAN
        u = self._call(d, "util", (k["util"], k["mem_util"]), h)
        if u is not FAIL:
            util = float(u.gpu)
            put(out, k["util"], util)
            put(out, k["mem_util"], float(u.memory))
        self._read_util_range(d, util, out)
        mem = self._call(d, "memory", (k["mem_used_mb"], k["mem_total_mb"]), h)
        if mem is not FAIL:
            d.mem_total_mb = mem.total / MIB
            put(out, k["mem_used_mb"], mem.used / MIB)
            put(out, k["mem_total_mb"], d.mem_total_mb)
        for read in SCALAR_READS:
            series = k[read.field]
            v = self._call(d, read.field, (series,), h, *(() if read.arg is None else (getattr(nvml, read.arg),)))
            if v is not FAIL:
                put(out, series, float(v) * read.scale)
        if is_nan(d.sm_clock_max):  # the max clock never changes: ask until it answers once
            v = self._call(d, "sm_clock_max", (k["sm_clock_max_mhz"],), h, nvml.clock_sm)
            if v is not FAIL:
                d.sm_clock_max = float(v)
        if not is_nan(d.sm_clock_max):
            put(out, k["sm_clock_max_mhz"], d.sm_clock_max)
        self._read_energy(d, now, out)
        if d.gpm is not None:
            self._gpm.read(d, d.gpm, now, out)

    def _energy_meter(self, d: Device) -> EnergyMeter:
        meter = self._energy.get(d.index)
        if meter is None:
            meter = self._energy[d.index] = EnergyMeter()
        return meter

    def _read_energy(self, d: Device, now: float, out: dict[str, float]) -> None:
        """The energy since the previous sample (`trainmon.sources.gpu.energy_counter`): NVML's counter where the GPU
        has one (asked no more once it says Not Supported), else the power just read, integrated."""
        k = d.keys
        raw = self._call(d, "energy", (), d.handle)
        counter = None if raw is FAIL else counter_value(raw)
        meter = self._energy_meter(d)
        resets = meter.resets
        total, method = meter.update(now, counter, out.get(k["power_w"], NAN))
        if meter.resets > resets:
            self.log_once(
                ("energy-reset", d.index),
                "gpu.%d energy counter went back or jumped (driver reloaded?): that interval is power × time",
                d.index,
                level=logging.INFO,
            )
        if is_nan(total):
            self.na(k["energy_j"], self.na_reason(k["power_w"]) or "neither energy counter nor power")
            return
        self._put(out, k["energy_j"], total)
        if not is_nan(method):
            self._put(out, k["energy_counter"], method)

    def _read_util_range(self, d: Device, util: float, out: dict[str, float]) -> None:
        k = d.keys
        lo_key, hi_key = k["util_min"], k["util_max"]
        kind = self._binding.util_samples
        res = self._call(d, "samples", (lo_key, hi_key), d.handle, kind, d.util_ts, not_found=(1, []))
        if res is FAIL:
            return
        value_type, samples = res
        fresh, d.util_ts = newer_samples(samples, d.util_ts)
        field = value_field(value_type)
        values = [float(getattr(s.sampleValue, field)) for s in fresh]
        if values:
            self._put(out, lo_key, min(values))
            self._put(out, hi_key, max(values))
        elif not is_nan(util):
            # The driver's buffer runs dry while the GPU idles: the snapshot is then the whole story.
            self._put(out, lo_key, util)
            self._put(out, hi_key, util)
        else:
            reason = self.na_reason(k["util"]) or "no utilisation samples"
            self.na(lo_key, reason)
            self.na(hi_key, reason)

    # ------------------------------------------------------------------ processes

    def process_usage(self) -> dict[int, dict[str, Any]]:
        """pid → {"gpu": i, "mem_mb": MiB, "sm_pct": % or NaN, "gpus": [i, ...]} for compute processes.

        A process on several GPUs is reported on the one where it holds the most memory ("gpu", "sm_pct")
        with its memory summed over all of them. sm_pct is 0 for a process NVML lists without utilisation
        samples (it launched nothing since the last call) and NaN where per-process utilisation is n/a (MIG,
        older GPUs). A GPU in MIG mode lists nothing itself: each of its MIG devices lists its own processes.

        PIDs are NVML's, which are the monitor's only outside a container: where most of NVML's pids name no
        process here (``nvml_pids == "other"``), there are none (such a pid would name another process here);
        `sample` then writes them apart (``trainmon.metrics.NVML_PROC``). The lists are read once per tick:
        after `sample`, its own; else afresh.
        """
        with self._lock:
            if not self._initialized:
                return {}
            usage, self._usage = self._usage, None
            if usage is None:
                usage = self._list_processes()
            return usage if self.nvml_pids == "own" else {}

    def _list_processes(self) -> dict[int, dict[str, Any]]:
        """Every device's process list, merged per pid; judges whose pid namespace NVML speaks in."""
        try:
            usage = self._procs.read(self._now)
        except Exception:
            self._log_exception("process_usage")
            return {}
        self._procs.judge(usage)
        return usage

    # ------------------------------------------------------------------ devices and visibility

    def devices(self) -> list[dict[str, Any]]:
        """index, name, uuid, mem_total_mb, visible (to the job, per the last `resolve_visible`), lost; for a MIG
        device "mig" (its GPU's index, MIG index, GPU and compute instance ids), for a GPU in MIG mode "mig_mode"."""
        with self._lock:
            out = []
            for d in self._devices:
                entry: dict[str, Any] = {
                    "index": d.index,
                    "name": d.name,
                    "uuid": d.uuid,
                    "mem_total_mb": d.mem_total_mb,
                    "visible": self._visible is None or d.index in self._visible,
                    "lost": d.lost,
                }
                if d.mig is not None:
                    entry["mig"] = d.mig.as_json()
                if d.mig_mode:
                    entry["mig_mode"] = True
                out.append(entry)
            return out

    def gpm_status(self) -> dict[int, str]:
        """Device index → "ok" or why GPM metrics are absent."""
        with self._lock:
            return {d.index: d.gpm_status for d in self._devices}

    def resolve_visible(self, cuda_visible_devices: str | None) -> list[int]:
        """Device ids named by a CUDA_VISIBLE_DEVICES value, in CUDA's order. NVML only, no CUDA.

        Follows CUDA's parsing: unset means all, "" means none, the list ends at the first entry that names no
        device ("0,-1,1" is just [0]). Entries are indices or GPU UUIDs ("GPU-…", any unique prefix), or MIG
        devices ("MIG-<uuid>" or "MIG-GPU-<uuid>/<gi>/<ci>"); a MIG entry that names no MIG device present is
        left out and listed in `unresolved_visible`. Indices are taken as PCI-bus order, which is CUDA's order
        only with CUDA_DEVICE_ORDER=PCI_BUS_ID or identical GPUs. The result is remembered as the job's devices
        for `devices()`.
        """
        with self._lock:
            self.unresolved_visible = []
            present = list(self._devices)
            if cuda_visible_devices is None:
                result = [d.index for d in present]
            else:
                try:
                    result, self.unresolved_visible = parse_visible(str(cuda_visible_devices), present)
                except Exception:
                    self._log_exception("resolve_visible")
                    result = []
            self._visible = set(result) if cuda_visible_devices is not None else None
            return result

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        with self._lock:
            if not self._initialized:
                return
            self._initialized = False
            try:
                self._list.free_all()
            except Exception:
                self._log_exception("close")
            self._list.devices = []
            self._binding.shutdown()
