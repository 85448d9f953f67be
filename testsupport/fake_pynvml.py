"""A fake `pynvml` (nvidia-ml-py) for tests and benchmarks on machines without a GPU: the one boundary faked.

`FakeNvml()` is a module-like object: the subset of the binding that trainmon.sources.gpu.nvml calls (for the GPU
source,
trainmon.sources.gpu.gpu_source), under the real names, with the real return types (ctypes structures, plain ints
and strs, lists of samples) and the real error hierarchy (NVMLError(code) instantiates the NVMLError_<Name>
subclass). Tests configure it through `devices`, `add_device`, `remove_device`, `enable_mig`, `fail`, `hide`,
`push_util_samples`, `push_process_samples`, `set_power`, `reset_energy` and read `calls` to see what was asked.

Energy: each GPU's total energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver
loaded) grows at the device's draw (``draw_mw``; its reported power where that is None) by the fake's clock
(``clock``: the fake's own, which only `advance` and the sample pushes move, unless a test gives one such as
time.monotonic), brought up to date whenever it is read or the power changes (`set_power`). A GPU made with
``energy_counter=False`` has none (older than Volta): the call raises NotSupported. `reset_energy` starts the
counter again from 0, as a driver reload does. MIG device handles have none (NotSupported); their GPU has.

MIG (A100, H100): `enable_mig(i, profiles)` puts GPU i in MIG mode with one MIG device per profile. As in NVML,
MIG devices are not counted by nvmlDeviceGetCount nor reached by nvmlDeviceGetHandleByIndex: only through
nvmlDeviceGetMigDeviceHandleByIndex on their parent. A MIG handle answers identity, memory and its own process
list; every other query (utilisation, samples, per-process utilisation, power, clocks, PCIe, GPM) raises
NVMLError_NotSupported. The parent in MIG mode keeps its power, temperature, clocks, PCIe and memory totals but
has no utilisation, utilisation samples or per-process utilisation (NotSupported); its process list is the
aggregate over its instances for a privileged caller only (else NVMLError_NoPermission).

Processes are listed under whatever pids a test gives: pids of this machine (NVML and the monitor in one pid
namespace), or pids that name no process here, as NVML's host pids look to a monitor inside a container.

One module, as the binding it stands in for is one module: its constants, ctypes structures and error classes
are looked up by name on the object a test hands to the source.
"""

from __future__ import annotations

import string
from collections import Counter, deque
from collections.abc import Callable
from ctypes import (
    POINTER,
    Structure,
    Union,
    c_char_p,
    c_double,
    c_int,
    c_longlong,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    pointer,
)
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

# ---------------------------------------------------------------- constants (values as in nvml.h)

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_TOTAL_POWER_SAMPLES = 0
NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_MEMORY_UTILIZATION_SAMPLES = 2
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSwThermalSlowdown = 0x20

NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_INTEGER_UTIL = 4
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRIC_MAX = 477
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1


# ---------------------------------------------------------------- errors, generated like the binding's


class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 (the binding's name and shape)
    _errcode_to_string = {  # noqa: RUF012
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, *args: Any) -> None:
        super().__init__()

    def __str__(self) -> str:
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]  # as in the binding: __eq__ without __hash__


def _make_error_classes() -> dict[str, type[NVMLError]]:
    made = {}
    for const, code in sorted(globals().items()):
        if not const.startswith("NVML_ERROR_"):
            continue
        name = "NVMLError_" + string.capwords(const[len("NVML_ERROR_") :], "_").replace("_", "")

        def new(cls: type, *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        cls = type(name, (NVMLError,), {"__new__": new, "__module__": __name__})
        NVMLError._valClassMapping[code] = cls
        made[name] = cls
    return made


_ERROR_CLASSES = _make_error_classes()
globals().update(_ERROR_CLASSES)
NVMLError_NotSupported = _ERROR_CLASSES["NVMLError_NotSupported"]
NVMLError_FunctionNotFound = _ERROR_CLASSES["NVMLError_FunctionNotFound"]
NVMLError_GpuIsLost = _ERROR_CLASSES["NVMLError_GpuIsLost"]
NVMLError_Timeout = _ERROR_CLASSES["NVMLError_Timeout"]
NVMLError_NotFound = _ERROR_CLASSES["NVMLError_NotFound"]


# ---------------------------------------------------------------- structures (same fields as the binding)


class c_nvmlUtilization_t(Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlValue_t(Union):
    _fields_ = [
        ("dVal", c_double),
        ("uiVal", c_uint),
        ("ulVal", c_ulong),
        ("ullVal", c_ulonglong),
        ("sllVal", c_longlong),
        ("siVal", c_int),
        ("usVal", c_ushort),
    ]


class c_nvmlSample_t(Structure):
    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", c_nvmlValue_t)]


class c_nvmlProcessUtilizationSample_t(Structure):
    _fields_ = [
        ("pid", c_uint),
        ("timeStamp", c_ulonglong),
        ("smUtil", c_uint),
        ("memUtil", c_uint),
        ("encUtil", c_uint),
        ("decUtil", c_uint),
    ]


class struct_c_nvmlGpmSample_t(Structure):
    # Opaque in the binding; the fake keeps an id inside to find its bookkeeping.
    _fields_ = [("fake_id", c_uint)]


c_nvmlGpmSample_t = POINTER(struct_c_nvmlGpmSample_t)


class c_metricInfo_t(Structure):
    _fields_ = [("shortName", c_char_p), ("longName", c_char_p), ("unit", c_char_p)]


class c_nvmlGpmMetric_t(Structure):
    _fields_ = [("metricId", c_uint), ("nvmlReturn", c_uint), ("value", c_double), ("metricInfo", c_metricInfo_t)]


class c_nvmlGpmMetricsGet_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("numMetrics", c_uint),
        ("sample1", c_nvmlGpmSample_t),
        ("sample2", c_nvmlGpmSample_t),
        ("metrics", c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX),
    ]


class c_nvmlGpmSupport_t(Structure):
    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


# ---------------------------------------------------------------- the fake driver

# What a MIG device handle answers (entry points without their _v2/_v3 suffix); anything else: NotSupported.
_MIG_HANDLE_ANSWERS = frozenset(
    {
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
    }
)
# What a GPU in MIG mode no longer answers (its instances share it): NotSupported.
_MIG_MODE_UNSUPPORTED = frozenset(
    {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetSamples", "nvmlDeviceGetProcessUtilization"}
)

# Module-level names the fake serves as attributes, like the binding's module namespace.
_EXPORTED = ("NVML", "c_nvml", "struct_c_nvml", "nvmlClocksEventReason")

GIB = 1024**3


@dataclass
class FakeDevice:
    """One GPU as the fake driver sees it. Units are NVML's: bytes, mW, MHz, KB/s, percent."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    util_gpu: int = 87
    util_mem: int = 41
    mem_total: int = 80 * GIB
    mem_used: int = 30 * GIB
    power_mw: int = 412_345
    power_limit_mw: int = 700_000
    temp_c: int = 61
    sm_clock: int = 1980
    mem_clock: int = 2619
    sm_clock_max: int = 1980
    clock_reasons: int = 0
    pcie_rx_kb: int = 2048
    pcie_tx_kb: int = 512
    # The total energy counter (Volta and newer; False: NotSupported), in mJ since the driver loaded, and the draw
    # it integrates (None: power_mw; a real GPU's power reading is an average that can miss what the counter sees).
    energy_counter: bool = True
    energy_mj: float = 987_654_321.0
    draw_mw: int | None = None
    energy_t: float | None = None  # the fake clock's time up to which energy_mj is counted
    gpm_supported: bool = False
    # NVML_GPM_METRIC_* id → value; ids left out answer NOT_SUPPORTED in their metric slot.
    gpm: dict[int, float] = field(
        default_factory=lambda: {
            NVML_GPM_METRIC_SM_UTIL: 63.5,
            NVML_GPM_METRIC_SM_OCCUPANCY: 22.25,
            NVML_GPM_METRIC_ANY_TENSOR_UTIL: 41.0,
            NVML_GPM_METRIC_DRAM_BW_UTIL: 55.5,
        }
    )
    sample_value_type: int = NVML_VALUE_TYPE_UNSIGNED_INT
    # The driver keeps bounded ring buffers of recent samples.
    util_samples: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=120))  # (ts µs, value)
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes or None)
    process_samples: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=100)
    )  # (pid, ts, sm, mem)
    failures: dict[str, int] = field(default_factory=dict)  # function name → NVML error code
    lost: bool = False
    removed: bool = False
    # MIG. On a parent: mode (None: the GPU has no MIG, nvmlDeviceGetMigMode raises NotSupported), how many MIG
    # devices it can hold, its MIG devices by index (None: a free index). On a MIG device: its parent and ids.
    mig_mode: int | None = None
    mig_max: int = 7
    migs: list[FakeDevice | None] = field(default_factory=list)
    privileged: bool = False  # the caller may read the parent's aggregate process list in MIG mode
    parent: FakeDevice | None = None
    gpu_instance_id: int = 0xFFFFFFFF
    compute_instance_id: int = 0xFFFFFFFF

    @property
    def is_mig(self) -> bool:
        return self.parent is not None


class FakeHandle:
    """Stands in for c_nvmlDevice_t: opaque to the caller."""

    __slots__ = ("device",)

    def __init__(self, device: FakeDevice) -> None:
        self.device = device

    def __repr__(self) -> str:
        return f"<FakeHandle {self.device.uuid}>"


class FakeNvml:
    """Module-like fake of `pynvml`. All NVML_* constants, error classes and structures are attributes too."""

    def __init__(
        self,
        n_devices: int = 1,
        *,
        gpm: bool = False,
        init_error: int | None = None,
        clock: Callable[[], float] | None = None,
        **device_values: Any,
    ) -> None:
        self.clock_us = 1_700_000_000_000_000
        # Seconds: what the energy counters accumulate over (by default the fake's own clock, which stands still).
        self.clock: Callable[[], float] = clock if clock is not None else (lambda: self.clock_us / 1e6)
        self.devices: list[FakeDevice] = []
        self.init_error = init_error
        self.init_count = 0
        self.shutdown_count = 0
        self.failures: dict[str, int] = {}  # function name → code, for every device
        self.hidden: set[str] = set()
        self.calls: Counter[str] = Counter()
        self._gpm_samples: dict[int, tuple[FakeDevice, int] | None] = {}
        self._gpm_next = 1
        self._gpm_seq = 0
        self.gpm_freed = 0
        for _ in range(n_devices):
            self.add_device(gpm_supported=gpm, **device_values)

    # ---- module-like surface

    def __getattr__(self, name: str) -> Any:
        # Constants, error classes and structures live at module level, as in the binding.
        g = globals()
        if name.startswith(_EXPORTED) and name in g and name not in self.hidden:
            return g[name]
        raise AttributeError(f"module 'pynvml' has no attribute '{name}'")

    # ---- configuration helpers for tests

    def add_device(self, **values: Any) -> FakeDevice:
        n = len(self.devices)
        # Distinct from the first hex digit on (for up to 15 devices), like real UUIDs in practice.
        values.setdefault("uuid", f"GPU-{(0x11111111 * (n + 1)) & 0xFFFFFFFF:08x}-beef-4a5b-8c9d-0123456789{n:02x}")
        dev = FakeDevice(**values)
        dev.energy_t = self.clock()
        self.devices.append(dev)
        return dev

    def enable_mig(
        self, index: int, profiles: list[str], *, gpu_instance_ids: list[int] | None = None, **values: Any
    ) -> list[FakeDevice]:
        """Put GPU ``index`` (present order) in MIG mode with one MIG device per profile ("1g.10gb", "3g.40gb", …),
        at MIG indices 0, 1, …; memory from the profile. Returns the MIG devices."""
        parent = self._present()[index]
        parent.mig_mode = NVML_DEVICE_MIG_ENABLE
        gis = gpu_instance_ids or [k + 1 for k in range(len(profiles))]
        parent.migs = []
        for k, profile in enumerate(profiles):
            gib = int(profile.partition(".")[2].removesuffix("gb") or 10)
            n = self.devices.index(parent)
            first = (0x2468ACE0 + 0x1010101 * (16 * n + k)) & 0xFFFFFFFF
            uuid = f"MIG-{first:08x}-5ccf-b0a8-f93b-3247ae9e{n:02x}{k:02x}"
            mig = FakeDevice(
                **{
                    "name": f"{parent.name} MIG {profile}",
                    "uuid": uuid,
                    "mem_total": gib * GIB,
                    "mem_used": 0,
                    "parent": parent,
                    "gpu_instance_id": gis[k],
                    "compute_instance_id": 0,
                    **values,
                }
            )
            parent.migs.append(mig)
        return [m for m in parent.migs if m is not None]

    def remove_device(self, index: int) -> FakeDevice:
        dev = self._present()[index]
        dev.removed = True
        return dev

    def fail(self, function: str, code: int, device: int | None = None) -> None:
        """Make `function` raise NVMLError(code): on one device (by present index) or on all."""
        if device is None:
            self.failures[function] = code
        else:
            self._present()[device].failures[function] = code

    def clear_failures(self) -> None:
        self.failures.clear()
        for dev in self.devices:
            dev.failures.clear()

    def hide(self, function: str) -> None:
        """Simulate a binding that lacks `function` (AttributeError on access)."""
        self.hidden.add(function)

        def missing(_self: FakeNvml) -> Any:
            raise AttributeError(f"module 'pynvml' has no attribute '{function}'")

        # A per-instance subclass with a raising property: no cost on the names that are not hidden.
        self.__class__ = type("FakeNvml", (type(self),), {function: property(missing)})

    def advance(self, seconds: float) -> None:
        self.clock_us += int(seconds * 1e6)

    def set_power(self, index: int, power_mw: int, draw_mw: int | None = None) -> None:
        """From now on GPU ``index`` reports ``power_mw`` and its counter grows at ``draw_mw`` (None: the same)."""
        dev = self._present()[index]
        self._count_energy(dev)
        dev.power_mw, dev.draw_mw = power_mw, draw_mw

    def reset_energy(self, index: int) -> None:
        """The driver reloads: GPU ``index``'s energy counter starts again from 0."""
        dev = self._present()[index]
        self._count_energy(dev)
        dev.energy_mj = 0.0

    def energy_j(self, index: int) -> float:
        """GPU ``index``'s counter now, in joules (what a test computes by hand from)."""
        dev = self._present()[index]
        self._count_energy(dev)
        return dev.energy_mj / 1e3

    def push_util_samples(self, index: int, values: list[float], period_us: int = 166_667) -> None:
        dev = self._present()[index]
        for v in values:
            self.clock_us += period_us
            dev.util_samples.append((self.clock_us, v))

    def push_process_samples(self, index: int, samples: list[tuple[int, int]]) -> None:
        """(pid, sm %) pairs, stamped now."""
        dev = self._present()[index]
        self.clock_us += 1000
        for pid, sm in samples:
            dev.process_samples.append((pid, self.clock_us, sm, 0))

    # ---- internals

    def _present(self) -> list[FakeDevice]:
        return [d for d in self.devices if not d.removed]

    def _count_energy(self, dev: FakeDevice) -> None:
        now = self.clock()
        if dev.energy_t is not None and now > dev.energy_t:
            dev.energy_mj += (dev.power_mw if dev.draw_mw is None else dev.draw_mw) * (now - dev.energy_t)
        dev.energy_t = now

    def _enter(self, name: str, device: FakeDevice | None = None) -> None:
        self.calls[name] += 1
        if self.init_count <= self.shutdown_count:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        code = self.failures.get(name)
        if device is not None:
            if device.removed or device.lost:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            code = device.failures.get(name, code)
        if code is not None:
            raise NVMLError(code)

    def _dev(self, name: str, handle: Any) -> FakeDevice:
        if not isinstance(handle, FakeHandle):
            self.calls[name] += 1
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        dev = handle.device
        if dev.parent is not None:
            if dev.parent.removed or dev.parent.lost:  # a MIG device is lost with its GPU
                self.calls[name] += 1
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            self._enter(name, dev)
            if name.removesuffix("_v2").removesuffix("_v3") not in _MIG_HANDLE_ANSWERS:
                raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
            return dev
        self._enter(name, dev)
        if dev.mig_mode == NVML_DEVICE_MIG_ENABLE and name in _MIG_MODE_UNSUPPORTED:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return dev

    # ---- init and enumeration

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.shutdown_count += 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._present())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        present = self._present()
        if not 0 <= index < len(present):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        dev = present[index]
        code = dev.failures.get("nvmlDeviceGetHandleByIndex")
        if dev.lost:
            code = NVML_ERROR_GPU_IS_LOST
        if code is not None:
            raise NVMLError(code)
        return FakeHandle(dev)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._dev("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._dev("nvmlDeviceGetUUID", handle).uuid

    # ---- per-device values

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> c_nvmlUtilization_t:
        dev = self._dev("nvmlDeviceGetUtilizationRates", handle)
        return c_nvmlUtilization_t(dev.util_gpu, dev.util_mem)

    def nvmlDeviceGetSamples(self, device: Any, sampling_type: int, timeStamp: int) -> tuple[int, list[Any]]:
        dev = self._dev("nvmlDeviceGetSamples", device)
        if sampling_type != NVML_GPU_UTILIZATION_SAMPLES:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        newer = [(ts, v) for ts, v in dev.util_samples if ts > timeStamp]
        if not newer:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        field_name = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}[
            dev.sample_value_type
        ]
        out = []
        for ts, v in newer:
            value = c_nvmlValue_t()
            setattr(value, field_name, v if field_name == "dVal" else int(v))
            out.append(c_nvmlSample_t(ts, value))
        return dev.sample_value_type, out

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> c_nvmlMemory_t:
        dev = self._dev("nvmlDeviceGetMemoryInfo", handle)
        return c_nvmlMemory_t(dev.mem_total, dev.mem_total - dev.mem_used, dev.mem_used)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        dev = self._dev("nvmlDeviceGetTotalEnergyConsumption", handle)
        if not dev.energy_counter:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._count_energy(dev)
        return int(dev.energy_mj)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._dev("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        dev = self._dev("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return dev.temp_c

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        dev = self._dev("nvmlDeviceGetClockInfo", handle)
        return {NVML_CLOCK_SM: dev.sm_clock, NVML_CLOCK_GRAPHICS: dev.sm_clock, NVML_CLOCK_MEM: dev.mem_clock}[type]

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        dev = self._dev("nvmlDeviceGetMaxClockInfo", handle)
        if type not in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return dev.sm_clock_max

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_reasons

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        dev = self._dev("nvmlDeviceGetPcieThroughput", device)
        return {NVML_PCIE_UTIL_RX_BYTES: dev.pcie_rx_kb, NVML_PCIE_UTIL_TX_BYTES: dev.pcie_tx_kb}[counter]

    # ---- processes

    def _procs(self, name: str, handle: Any) -> list[Any]:
        dev = self._dev(name, handle)
        if dev.mig_mode == NVML_DEVICE_MIG_ENABLE:
            if not dev.privileged:
                raise NVMLError(NVML_ERROR_NO_PERMISSION)
            instances = [m for m in dev.migs if m is not None]
        else:
            instances = [dev]
        # The binding returns nvmlFriendlyObject: plain attributes, usedGpuMemory None where n/a.
        return [
            SimpleNamespace(
                pid=pid, usedGpuMemory=used, gpuInstanceId=d.gpu_instance_id, computeInstanceId=d.compute_instance_id
            )
            for d in instances
            for pid, used in d.processes
        ]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        try:
            return self._procs("nvmlDeviceGetComputeRunningProcesses", handle)
        except NVMLError_FunctionNotFound:
            # The binding's unversioned wrapper turns this into its own exception type.
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version."
            ) from None

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        dev = self._dev("nvmlDeviceGetProcessUtilization", handle)
        newer = [s for s in dev.process_samples if s[1] > timeStamp]
        if not newer:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return [c_nvmlProcessUtilizationSample_t(pid, ts, sm, mem, 0, 0) for pid, ts, sm, mem in newer]

    # ---- MIG

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        dev = self._dev("nvmlDeviceGetMigMode", device)
        if dev.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [dev.mig_mode, dev.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        dev = self._dev("nvmlDeviceGetMaxMigDeviceCount", device)
        return dev.mig_max if dev.mig_mode == NVML_DEVICE_MIG_ENABLE else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> FakeHandle:
        dev = self._dev("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if dev.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < dev.mig_max:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        mig = dev.migs[index] if dev.mig_mode == NVML_DEVICE_MIG_ENABLE and index < len(dev.migs) else None
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return FakeHandle(mig)

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> c_uint:
        return c_uint(int(self._dev("nvmlDeviceIsMigDeviceHandle", device).is_mig))

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> FakeHandle:
        dev = self._dev("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
        if dev.parent is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(dev.parent)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        dev = self._dev("nvmlDeviceGetGpuInstanceId", device)
        if dev.parent is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return dev.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        dev = self._dev("nvmlDeviceGetComputeInstanceId", device)
        if dev.parent is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return dev.compute_instance_id

    # ---- GPM

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> c_nvmlGpmSupport_t:
        dev = self._dev("nvmlGpmQueryDeviceSupport", device)
        return c_nvmlGpmSupport_t(NVML_GPM_SUPPORT_VERSION, int(dev.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        sample = struct_c_nvmlGpmSample_t(self._gpm_next)
        self._gpm_samples[self._gpm_next] = None
        self._gpm_next += 1
        return pointer(sample)

    def _gpm_id(self, sample: Any) -> int:
        if not sample:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        sid = sample.contents.fake_id
        if sid not in self._gpm_samples:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return sid

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        del self._gpm_samples[self._gpm_id(gpmSample)]
        self.gpm_freed += 1

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        dev = self._dev("nvmlGpmSampleGet", device)
        if not dev.gpm_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        self._gpm_seq += 1
        self._gpm_samples[self._gpm_id(gpmSample)] = (dev, self._gpm_seq)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self.calls["nvmlGpmMetricsGet"] += 1
        if metricsGet.version != NVML_GPM_METRICS_GET_VERSION:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._gpm_samples.get(self._gpm_id(metricsGet.sample1))
        second = self._gpm_samples.get(self._gpm_id(metricsGet.sample2))
        # Both samples must have been taken, on one device, in order.
        if first is None or second is None or first[0] is not second[0] or first[1] >= second[1]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        dev = first[0]
        self.calls["nvmlGpmMetricsGet"] -= 1  # counted once, by _enter
        self._enter("nvmlGpmMetricsGet", dev)
        for i in range(metricsGet.numMetrics):
            m = metricsGet.metrics[i]
            if m.metricId in dev.gpm:
                m.value, m.nvmlReturn = dev.gpm[m.metricId], NVML_SUCCESS
            else:
                m.value, m.nvmlReturn = 0.0, NVML_ERROR_NOT_SUPPORTED
        return metricsGet
