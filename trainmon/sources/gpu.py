"""GPU source: NVML (and GPM on Hopper and newer) through nvidia-ml-py, wrapped so that nothing ever raises.

Every failure is local: a call that fails makes only its own series NaN and records why in `na_reasons`
(logged once per series and reason). A lost GPU turns only that device's series NaN. Without a driver or a
GPU the whole source is unavailable, `error` says why in one line, and `sample()` returns {}.

This module samples: devices (GPUs and their MIG devices), series, GPM sample pairs, processes, lost GPUs. The
device records, process merging, CUDA_VISIBLE_DEVICES parsing and whose pids NVML gives are in
`trainmon.sources.gpu_devices`; the binding, its return codes and how failures become n/a reasons in
`trainmon.sources.nvml`; the series names in `trainmon.metrics`. It runs past 400 lines because every NVML read
works on one device list under one lock, inside the one `GpuSource` class.

Units: memory in MiB (as nvidia-smi prints it), PCIe in MiB/s, power in W, clocks in MHz, percentages 0-100.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainmon.metrics import GPM_METRIC_IDS, GPU, NVML_PROC, gpu_mask
from trainmon.numbers import NAN, is_nan
from trainmon.sources.base import Source
from trainmon.sources.gpu_devices import (
    Device,
    Gpm,
    Mig,
    merge_processes,
    nvml_pid_namespace,
    parse_visible,
    proc_exists,
)
from trainmon.sources.nvml import (
    FAIL,
    FUNCTIONS,
    DeviceLost,
    NvmlBinding,
    as_str,
    error_text,
    gpm_reason,
    newer_samples,
    value_field,
)

log = logging.getLogger("trainmon.gpu")

MIB = 1024.0 * 1024.0

# NVML says the two GPM samples must be some time apart; DCGM keeps them >= its update interval.
GPM_MIN_INTERVAL_S = 0.1
LOST_PROBE_INTERVAL_S = 5.0


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
            {**FUNCTIONS, **{r.field: r.entry_points for r in SCALAR_READS}}, reasons=self._na, log_once=self.log_once
        )
        self._call = self._binding.call
        self._now = 0.0
        self.unresolved_visible: list[str] = []
        self._initialized = False
        self._lock = threading.Lock()
        self._devices: list[Device] = []  # the GPUs (id = NVML index), then their MIG devices
        self._gpu_count = 0  # how many of them are GPUs
        self._visible: set[int] | None = None
        self._pid_exists = pid_exists
        # "own" while NVML's pids name processes here; "other" once most do not (see `nvml_pid_namespace`)
        self.nvml_pids = "own"
        self._usage: dict[int, dict[str, Any]] | None = None  # the last sample's process lists, not yet handed out
        self._init(nvml_module)

    # ------------------------------------------------------------------ setup

    @property
    def available(self) -> bool:
        return self._initialized

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
        """(Re)build the device list: handles are looked up here once and cached. MIG devices come after the
        GPUs, numbered on from ``count`` (see `trainmon.sources.gpu_devices`)."""
        for d in self._devices:
            self._free_gpm(d)
        self.clear_na_under(GPU.prefix)
        gpus = [self._open_device(i, now) for i in range(count)]
        migs: list[Device] = []
        for gpu in gpus:
            for slot in self._mig_slots(gpu):
                mig = self._open_mig(gpu, slot, count + len(migs), now)
                if mig is not None:
                    migs.append(mig)
        self._devices = gpus + migs
        self._gpu_count = count
        if count == 0:
            self.error = "NVML sees no GPU"
        elif self.error == "NVML sees no GPU":
            self.error = None

    def _open_device(self, index: int, now: float) -> Device:
        d = Device(index, None)
        try:
            self._open_handle(d)
        except DeviceLost as e:
            self._lose(d, e.reason, now)
        if d.handle is None and d.lost is None:
            # Without a handle nothing can be read: treated like a lost GPU, opened again every few seconds.
            self._lose(d, self.clear_na(d.prefix + "handle") or "no device handle", now)
        return d

    def _mig_slots(self, gpu: Device) -> range:
        """The MIG indices to look at on a GPU in MIG mode (none for other GPUs); marks the GPU as in MIG mode."""
        if gpu.handle is None or gpu.lost is not None:
            return range(0)
        try:
            mode = self._call(gpu, "mig_mode", (), gpu.handle, log_level=logging.DEBUG)
            if mode is FAIL or not mode or int(mode[0]) != 1:
                return range(0)
            count = self._call(gpu, "mig_count", (), gpu.handle, log_level=logging.DEBUG)
        except DeviceLost as e:
            self._lose(gpu, e.reason, self._now)
            return range(0)
        finally:  # no MIG is not a failure: no reason left behind
            self.clear_na(gpu.prefix + "mig_mode")
            self.clear_na(gpu.prefix + "mig_count")
        gpu.mig_mode = True
        return range(int(count)) if count is not FAIL else range(0)

    def _open_mig(self, gpu: Device, slot: int, index: int, now: float) -> Device | None:
        """MIG device ``slot`` of ``gpu`` as device ``index``, or None where that MIG index holds none."""
        handle = None
        if gpu.handle is not None and gpu.lost is None:
            try:
                handle = self._call(gpu, "mig_handle", (), gpu.handle, slot, not_found=None)
            except DeviceLost as e:
                self._lose(gpu, e.reason, now)
            self.clear_na(gpu.prefix + "mig_handle")
        if handle is None or handle is FAIL:
            return None
        gi = self._call(gpu, "gpu_instance", (), handle, log_level=logging.DEBUG)
        ci = self._call(gpu, "compute_instance", (), handle, log_level=logging.DEBUG)
        self.clear_na(gpu.prefix + "gpu_instance")
        self.clear_na(gpu.prefix + "compute_instance")
        d = Device(index, None, Mig(gpu.index, slot, None if gi is FAIL else int(gi), None if ci is FAIL else int(ci)))
        try:
            self._identify(d, handle)
        except DeviceLost as e:
            self._lose(d, e.reason, now)
        return d

    def _open_handle(self, d: Device) -> None:
        handle = self._call(d, "handle", (), d.index)
        if handle is FAIL:
            return
        self._identify(d, handle)

    def _identify(self, d: Device, handle: Any) -> None:
        d.handle = handle
        name = self._call(d, "name", (), handle)
        d.name = name if isinstance(name, str) else ("" if name is FAIL else as_str(name))
        uuid = self._call(d, "uuid", (), handle)
        d.uuid = uuid if isinstance(uuid, str) else ("" if uuid is FAIL else as_str(uuid))
        mem = self._call(d, "memory", (d.keys["mem_total_mb"],), handle)
        if mem is not FAIL:
            d.mem_total_mb = mem.total / MIB
        if d.mig is not None:
            d.gpm_status = "not read per MIG device (the GPU's own GPM figures cover all its MIG devices)"
        else:
            self._open_gpm(d)

    def _open_gpm(self, d: Device) -> None:
        support = self._call(d, "gpm_support", (), d.handle, log_level=logging.DEBUG)
        if support is FAIL:
            d.gpm_status = gpm_reason(self.clear_na(d.prefix + "gpm_support") or "GPM query failed")
            return
        if not getattr(support, "isSupportedDevice", 0):
            d.gpm_status = "not supported on this GPU (GPM needs Hopper or newer)"
            return
        samples: list[Any] = []
        for _ in range(2):
            s = self._call(d, "gpm_alloc", ())
            if s is FAIL:
                self._free_samples(d, samples)
                d.gpm_status = "GPM sample allocation failed: " + (self.clear_na(d.prefix + "gpm_alloc") or "?")
                return
            samples.append(s)
        query = self._binding.gpm_query(list(GPM_METRIC_IDS.values()))
        if query is None:
            self._free_samples(d, samples)
            d.gpm_status = "this pynvml binding has no c_nvmlGpmMetricsGet_t"
            return
        d.set_gpm(Gpm(samples, query))
        d.gpm_status = "ok"

    def _free_samples(self, d: Device, samples: list[Any]) -> None:
        for s in samples:
            try:
                self._call(d, "gpm_free", (), s, log_level=logging.DEBUG)
            except DeviceLost:
                pass

    def _free_gpm(self, d: Device) -> None:
        if d.gpm is not None:
            self._free_samples(d, d.gpm.samples)
            d.set_gpm(None)

    # ------------------------------------------------------------------ lost devices

    def _mark_device(self, d: Device, reason: str) -> None:
        for s in d.series:
            self.na(s, reason)

    def _lose(self, d: Device, reason: str, now: float) -> None:
        d.lost = reason
        d.lost_probe_t = now
        self._mark_device(d, reason)
        self._binding.log_once(d.prefix.rstrip("."), reason, logging.WARNING)

    def _retry_lost(self, pos: int, d: Device, now: float) -> Device:
        """A lost device is opened afresh every few seconds; a dead GPU can make each call slow. A MIG device
        is opened again through its GPU once that answers (GPUs come first in the list: retried first)."""
        if now - d.lost_probe_t < LOST_PROBE_INTERVAL_S:
            return d
        self._free_gpm(d)
        if d.mig is not None:
            gpu = self._devices[d.mig.parent]
            fresh = self._open_mig(gpu, d.mig.slot, d.index, now) if gpu.lost is None else None
            if fresh is None:
                if gpu.lost is None:  # its GPU answers, but holds no MIG device there any more (reconfigured)
                    self._lose(d, "MIG device gone: its GPU answers, this MIG index holds none", now)
                d.lost_probe_t = now
                return d
        else:
            fresh = self._open_device(d.index, now)
            fresh.mig_mode = d.mig_mode
        self._devices[pos] = fresh
        if fresh.lost is None:
            log.warning("gpu.%d answers again", d.index)
            for s in d.series:
                if self.na_reason(s) == d.lost:
                    self.clear_na(s)
        return fresh

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
                if count is not None and count != self._gpu_count:
                    log.info("GPU count changed: %d → %d, re-enumerating", self._gpu_count, count)
                    self._enumerate(count, now)
                for pos, d in enumerate(self._devices):
                    if d.lost is not None:
                        d = self._retry_lost(pos, d, now)
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
            return
        try:
            self._read_device(d, now, out)
        except DeviceLost as e:
            for s in names:
                out[s] = NAN
            self._lose(d, e.reason, now)

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
        if d.gpm is not None:
            self._read_gpm(d, d.gpm, now, out)

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

    def _read_gpm(self, d: Device, g: Gpm, now: float, out: dict[str, float]) -> None:
        keys = [d.keys[m] for m in GPM_METRIC_IDS]
        if g.have_prev and now - g.prev_t < GPM_MIN_INTERVAL_S:
            self._put_gpm(d, g, out)  # too soon for a meaningful pair: repeat the last values
            return
        cur = g.samples[g.cur]
        if self._call(d, "gpm_sample", keys, d.handle, cur) is FAIL:
            g.have_prev = False
            g.values = dict.fromkeys(GPM_METRIC_IDS, NAN)
            if "gpm_sample" in d.skip:
                d.gpm_status = f"GPM sampling failed: {d.skip['gpm_sample']}"
            return
        if g.have_prev:
            g.query.sample1 = g.samples[1 - g.cur]
            g.query.sample2 = cur
            if self._call(d, "gpm_metrics", keys, g.query) is FAIL:
                g.values = dict.fromkeys(GPM_METRIC_IDS, NAN)
            else:
                self._collect_gpm(d, g)
        else:
            for s in keys:
                self.na(s, "GPM needs two samples: first value next tick")
        g.cur = 1 - g.cur
        g.have_prev = True
        g.prev_t = now
        self._put_gpm(d, g, out)

    def _collect_gpm(self, d: Device, g: Gpm) -> None:
        for j, metric in enumerate(GPM_METRIC_IDS):
            g.values[metric], reason = self._binding.gpm_result(g.query, j)
            if reason is not None:
                self.na(d.keys[metric], reason)
                self._binding.log_once(d.keys[metric], reason)

    def _put_gpm(self, d: Device, g: Gpm, out: dict[str, float]) -> None:
        for metric, v in g.values.items():
            if not is_nan(v):
                self._put(out, d.keys[metric], v)

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
        per_gpu: dict[int, dict[int, tuple[float, float]]] = {}
        try:
            for d in self._devices:
                if d.lost is not None or d.handle is None:
                    continue
                try:
                    per_gpu[d.index] = self._device_processes(d)
                except DeviceLost as e:
                    self._lose(d, e.reason, self._now)
            usage = merge_processes(per_gpu)
        except Exception:
            self._log_exception("process_usage")
            return {}
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
        return usage

    def _device_processes(self, d: Device) -> dict[int, tuple[float, float]]:
        if d.mig_mode:
            return {}  # listed per MIG device (the GPU's own list is their sum, and only for the privileged)
        procs = self._call(d, "procs", (d.prefix + "proc_mem",), d.handle)
        if procs is FAIL:
            return {}
        self.clear_na(d.prefix + "proc_mem")
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
        self.clear_na(key)
        fresh, d.proc_ts = newer_samples(samples, d.proc_ts)
        acc: dict[int, list[float]] = {}
        for s in fresh:
            # Drivers have been seen to return garbage (> 100 %) for exited processes.
            if 0 <= s.smUtil <= 100:
                acc.setdefault(int(s.pid), []).append(float(s.smUtil))
        return {pid: sum(v) / len(v) for pid, v in acc.items()}

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
                for d in self._devices:
                    self._free_gpm(d)
            except Exception:
                self._log_exception("close")
            self._devices = []
            self._binding.shutdown()
