"""The pynvml (nvidia-ml-py) binding as the GPU source talks to it: entry points, return codes and n/a reasons.

Nothing here knows what a GPU metric means. `NvmlBinding.call` runs the NVML function behind a short key (newest
entry point first, older ones when the driver lacks it) for a call site (a device), and turns every failure into a
reason recorded for the series that call feeds. Failures that will not go away are remembered on the call site so
the call is not made again; a GPU that fell off the bus raises `DeviceLost`. The GPU model on top lives in
`trainmon.sources.gpu.gpu_source`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from trainmon.numbers import NAN
from trainmon.sources.base import LogOnce

# The GPU source logs under one name whichever of its modules speaks: users filter on it.
log = logging.getLogger("trainmon.gpu")

# NVML return codes: part of the C ABI, identical in every binding version.
SUCCESS = 0
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25
DEPRECATED = 26

# Failures that will not go away by asking again: the call is not repeated for that device.
PERMANENT = frozenset({NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH, DEPRECATED})
LOST = {GPU_IS_LOST: "GPU lost", RESET_REQUIRED: "GPU requires reset"}

# Constants of the NVML API, used when a binding lacks the name.
_GPU_UTILIZATION_SAMPLES = 1
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_CLOCK_MEM = 2
_PCIE_UTIL_TX_BYTES = 0
_PCIE_UTIL_RX_BYTES = 1
_GPM_METRICS_GET_VERSION = 1

# Entry points, newest first: a FunctionNotFound from an older driver moves on to the next one.
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "count": ("nvmlDeviceGetCount",),
    "handle": ("nvmlDeviceGetHandleByIndex",),
    "name": ("nvmlDeviceGetName",),
    "uuid": ("nvmlDeviceGetUUID",),
    "util": ("nvmlDeviceGetUtilizationRates",),
    "samples": ("nvmlDeviceGetSamples",),
    "memory": ("nvmlDeviceGetMemoryInfo",),
    "sm_clock_max": ("nvmlDeviceGetMaxClockInfo",),
    "procs": (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
    ),
    "proc_util": ("nvmlDeviceGetProcessUtilization",),
    "gpm_support": ("nvmlGpmQueryDeviceSupport",),
    "gpm_alloc": ("nvmlGpmSampleAlloc",),
    "gpm_sample": ("nvmlGpmSampleGet",),
    "gpm_metrics": ("nvmlGpmMetricsGet",),
    "gpm_free": ("nvmlGpmSampleFree",),
    "mig_mode": ("nvmlDeviceGetMigMode",),
    "mig_count": ("nvmlDeviceGetMaxMigDeviceCount",),
    "mig_handle": ("nvmlDeviceGetMigDeviceHandleByIndex",),
    "gpu_instance": ("nvmlDeviceGetGpuInstanceId",),
    "compute_instance": ("nvmlDeviceGetComputeInstanceId",),
}

# On the first read the driver hands back its whole sample buffer; only the newest second describes "now".
FIRST_WINDOW_US = 1_000_000

# nvmlValueType_t → field of the nvmlValue_t union.
_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

FAIL: Any = object()  # sentinel: the call failed and the reason is recorded


class _Never(Exception):
    """Stands in for an exception class the binding does not define, so `except` clauses stay valid."""


class DeviceLost(Exception):
    """NVML says the GPU fell off the bus or needs a reset; `reason` is the n/a reason for its series."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CallSite(Protocol):
    """What a call is made for (a device): the prefix of its series and the calls it no longer makes."""

    prefix: str
    skip: dict[str, str]  # function key → reason, for permanent failures

    @property
    def unsupported_note(self) -> str:
        """What "Not Supported" means here ("n/a on MIG"), or "" where it needs no explaining."""
        ...


class NvmlBinding:
    """One loaded pynvml module: its entry points and constants, plus the n/a reasons its failures left behind."""

    def __init__(
        self,
        functions: Mapping[str, tuple[str, ...]] = FUNCTIONS,
        *,
        reasons: dict[str, str] | None = None,
        log_once: LogOnce | None = None,
    ) -> None:
        """``functions``: call key → entry-point names, newest first (FUNCTIONS plus the caller's own). ``reasons``
        and ``log_once``: the GPU source's, where the binding records why series are n/a and logs it."""
        self.functions = functions
        self.module: Any = None
        # series (or "gpu.{i}.<what>") → why it is n/a
        self.reasons: dict[str, str] = reasons if reasons is not None else {}
        self.fns: dict[str, list[tuple[str, Callable[..., Any]]]] = {}  # key → entry points left, newest first
        self._log_once = log_once if log_once is not None else LogOnce(log)
        self._error_cls: type[BaseException] = _Never
        self._mismatch_cls: type[BaseException] = _Never
        self.util_samples = _GPU_UTILIZATION_SAMPLES
        self.temp_gpu = _TEMPERATURE_GPU
        self.clock_sm = _CLOCK_SM
        self.clock_mem = _CLOCK_MEM
        self.pcie_rx = _PCIE_UTIL_RX_BYTES
        self.pcie_tx = _PCIE_UTIL_TX_BYTES

    def load(self, nvml_module: Any = None) -> str | None:
        """Import pynvml (unless a module is given) and initialise NVML: None, or why there is no GPU source."""
        try:
            if nvml_module is None:
                import pynvml

                nvml_module = pynvml
        except Exception as e:  # ImportError, or a binding that fails at import time
            return f"nvidia-ml-py (pynvml) not importable: {e}"
        self.module = nvml_module
        self._error_cls = getattr(nvml_module, "NVMLError", None) or _Never
        self._mismatch_cls = getattr(nvml_module, "NVMLLibraryMismatchError", None) or _Never
        try:
            nvml_module.nvmlInit()
        except Exception as e:
            return describe_init_error(e)
        return None

    def resolve(self) -> None:
        """Look up the constants and the entry points this binding has."""
        m = self.module
        self.util_samples = getattr(m, "NVML_GPU_UTILIZATION_SAMPLES", _GPU_UTILIZATION_SAMPLES)
        self.temp_gpu = getattr(m, "NVML_TEMPERATURE_GPU", _TEMPERATURE_GPU)
        self.clock_sm = getattr(m, "NVML_CLOCK_SM", _CLOCK_SM)
        self.clock_mem = getattr(m, "NVML_CLOCK_MEM", _CLOCK_MEM)
        self.pcie_rx = getattr(m, "NVML_PCIE_UTIL_RX_BYTES", _PCIE_UTIL_RX_BYTES)
        self.pcie_tx = getattr(m, "NVML_PCIE_UTIL_TX_BYTES", _PCIE_UTIL_TX_BYTES)
        self.fns = {
            key: [(n, getattr(m, n)) for n in names if callable(getattr(m, n, None))]
            for key, names in self.functions.items()
        }

    def shutdown(self) -> None:
        try:
            self.module.nvmlShutdown()
        except Exception as e:
            log.debug("nvmlShutdown failed: %s", error_text(e))

    def device_count(self) -> int | None:
        """How many GPUs NVML sees, or None (logged once) when it cannot say."""
        fns = self.fns.get("count") or []
        if not fns:
            self.log_once("gpu.count", "nvmlDeviceGetCount not in this pynvml binding")
            return None
        try:
            return int(fns[0][1]())
        except Exception as e:
            self.log_once("gpu.count", f"device count failed: {error_text(e)}")
            return None

    # ------------------------------------------------------------------ calls and failures

    def call(
        self,
        site: CallSite,
        key: str,
        series: Sequence[str],
        *args: Any,
        not_found: Any = FAIL,
        log_level: int = logging.INFO,
    ) -> Any:
        """fn(*args) for the function behind `key`, or FAIL after recording why `series` are n/a.

        Raises DeviceLost when NVML says the GPU fell off the bus.
        """
        reason = site.skip.get(key)
        if reason is not None:
            for s in series:
                self.reasons[s] = reason
            return FAIL
        fns = self.fns.get(key, [])
        while fns:
            fn_name, fn = fns[0]
            try:
                return fn(*args)
            except self._error_cls as e:
                code = getattr(e, "value", None)
                if code == FUNCTION_NOT_FOUND and len(fns) > 1:
                    self._drop_entry_point(key, fn_name, error_text(e))
                    continue
                if not_found is not FAIL and code in (NOT_FOUND, SUCCESS):
                    return not_found  # "no samples newer than the timestamp": not a failure
                if code in LOST:
                    raise DeviceLost(LOST[code]) from None
                reason = f"{error_text(e)} ({fn_name})"
                note = site.unsupported_note if code == NOT_SUPPORTED else ""
                if note:  # expected on MIG: said once, quietly, with what it means
                    reason, log_level = f"{note}: {reason}", logging.DEBUG
                self._fail(site, key, series, reason, code in PERMANENT, log_level)
                return FAIL
            except self._mismatch_cls as e:  # pynvml's unversioned wrapper over a missing symbol
                if len(fns) > 1:
                    self._drop_entry_point(key, fn_name, error_text(e))
                    continue
                self._fail(site, key, series, f"Function Not Found ({fn_name})", True, log_level)
                return FAIL
            except AttributeError as e:  # a binding whose struct or helper lacks something
                self._fail(site, key, series, f"{error_text(e)} ({fn_name})", True, log_level)
                return FAIL
            except Exception as e:
                self._fail(site, key, series, f"{type(e).__name__}: {error_text(e)} ({fn_name})", False, log_level)
                return FAIL
        names = " / ".join(self.functions.get(key, (key,)))
        self._fail(site, key, series, f"not in this pynvml binding or driver ({names})", True, log_level)
        return FAIL

    def _drop_entry_point(self, key: str, fn_name: str, why: str) -> None:
        fns = self.fns[key]
        if fns and fns[0][0] == fn_name:
            fns.pop(0)
            self.log_once(f"gpu.fn.{fn_name}", f"{fn_name}: {why}; falling back to {fns[0][0]}", logging.DEBUG)

    def _fail(
        self, site: CallSite, key: str, series: Sequence[str], reason: str, permanent: bool, log_level: int
    ) -> None:
        if permanent:
            site.skip[key] = reason
        names = series or (site.prefix + key,)
        for s in names:
            self.reasons[s] = reason
        self.log_once(names[0], reason, log_level if permanent else max(log_level, logging.WARNING))

    def log_once(self, metric: str, reason: str, level: int = logging.WARNING) -> None:
        """Logs "<metric> n/a: <reason>", once per metric and reason."""
        self._log_once(("n/a", metric, reason), "%s n/a: %s", metric, reason, level=level)

    # ------------------------------------------------------------------ structures

    def gpm_query(self, metric_ids: Sequence[int]) -> Any:
        """A reusable nvmlGpmMetricsGet_t asking for `metric_ids`, or None when the binding has no such struct."""
        query_cls = getattr(self.module, "c_nvmlGpmMetricsGet_t", None)
        if query_cls is None:
            return None
        query = query_cls()
        query.version = getattr(self.module, "NVML_GPM_METRICS_GET_VERSION", _GPM_METRICS_GET_VERSION)
        query.numMetrics = len(metric_ids)
        for j, metric_id in enumerate(metric_ids):
            query.metrics[j].metricId = metric_id
        return query

    def gpm_result(self, query: Any, j: int) -> tuple[float, str | None]:
        """Metric `j` of a query nvmlGpmMetricsGet filled in: (value, None), or (NaN, why NVML gave none)."""
        m = query.metrics[j]
        ret = int(m.nvmlReturn)
        if ret == SUCCESS:
            return float(m.value), None
        return NAN, f"{code_text(self.module, ret)} (nvmlGpmMetricsGet)"


def value_field(value_type: int) -> str:
    """The field of the nvmlValue_t union that holds a sample of nvmlValueType_t `value_type`."""
    return _VALUE_FIELDS.get(value_type, "uiVal")


def newer_samples(samples: list[Any], last_ts: int) -> tuple[list[Any], int]:
    """The samples of a driver buffer taken after `last_ts` (NVML's clock, µs; 0 before the first read), and the
    newest timestamp seen so far."""
    if not samples:
        return [], last_ts
    newest = max(s.timeStamp for s in samples)
    cutoff = last_ts if last_ts else newest - FIRST_WINDOW_US
    return [s for s in samples if s.timeStamp > cutoff], max(last_ts, newest)


# ---------------------------------------------------------------------- error text


def error_text(e: BaseException) -> str:
    try:
        s = str(e)
    except Exception:  # NVMLError.__str__ may itself call into NVML
        s = ""
    return s or f"NVML error {getattr(e, 'value', type(e).__name__)}"


def code_text(nvml: Any, code: int) -> str:
    try:
        return str(nvml.NVMLError(code))
    except Exception:
        return f"NVML error {code}"


def as_str(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def gpm_reason(reason: str) -> str:
    """Why GPM is absent, from the reason its support query failed with."""
    if reason.startswith(("Not Supported", "Function Not Found", "not in this pynvml")):
        return f"not supported by this GPU or driver (GPM needs Hopper or newer and driver R520+): {reason}"
    return f"GPM support query failed: {reason}"


def describe_init_error(e: BaseException) -> str:
    """One line on why nvmlInit failed, naming the likely cause."""
    code = getattr(e, "value", None)
    text = error_text(e)
    if code in (LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED):
        return f"no NVIDIA driver: {text}"
    if code == LIB_RM_VERSION_MISMATCH:
        return f"NVIDIA driver and library versions differ (reload the driver or reboot): {text}"
    if code == NO_PERMISSION:
        return f"no permission to use NVML: {text}"
    if code == FUNCTION_NOT_FOUND:
        return f"NVIDIA driver too old for this nvidia-ml-py: {text}"
    if isinstance(e, OSError):
        return f"no NVIDIA driver: {type(e).__name__}: {text}"
    return f"NVML init failed: {text}"
