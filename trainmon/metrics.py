"""The metric schema: every sampled series family, defined once.

A series is a float per tick under a flat name. Host-wide series have fixed names (``cpu.busy``); the others
belong to a family and are named ``<prefix><id>.<field>`` (``gpu.0.util``, ``disk.nvme0n1.util_pct``,
``proc.4242.cpu_pct``). Sources build names with :meth:`Family.key`/:meth:`Family.keys`; the view, the
diagnosis, the report and the Prometheus exporter find ids with :class:`SeriesIndex` (the store keeps one per
change of its series set) and take names apart with :meth:`Family.parse`. Nothing else writes or parses
these names.

Adding a metric is one line in a family's table (plus the line in its source that measures it); the exporter
publishes it when the line gives a Prometheus name. See docs/architecture.md, "Where a change goes".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

MIB: Final = 1024.0 * 1024.0


@dataclass(frozen=True)
class Field:
    """One series of a family: its unit as stored, what it means, and its Prometheus export (if any).

    ``scale`` turns the stored unit into the Prometheus base unit (MiB → bytes, ms → seconds, MHz → Hz).
    ``report`` names the field's p50/p95/max figures in the report's ``system`` section (GPU and disk families).
    """

    unit: str
    help: str
    prom: str | None = None
    scale: float = 1.0
    report: str | None = None


class Family:
    """Series named ``<prefix><id>.<field>``: one per device, disk, process or core."""

    def __init__(self, name: str, prefix: str, id_label: str, numeric_ids: bool, fields: Mapping[str, Field]) -> None:
        self.name = name
        self.prefix = prefix
        self.id_label = id_label  # the Prometheus label that carries the id
        self.numeric_ids = numeric_ids
        self.fields: Mapping[str, Field] = fields

    def key(self, ident: object, field: str) -> str:
        return f"{self.prefix}{ident}.{field}"

    def id_prefix(self, ident: object) -> str:
        """``<prefix><id>.``: the start of every series name of one id (for sources that append many fields)."""
        return f"{self.prefix}{ident}."

    def keys(self, ident: object, fields: Iterable[str] | None = None) -> dict[str, str]:
        """field → series name for one id (sources build these once per device or process)."""
        return {f: f"{self.prefix}{ident}.{f}" for f in (self.fields if fields is None else fields)}

    def parse(self, name: str) -> tuple[str, str] | None:
        """(id, field) of a series of this family, or None. Ids never contain a dot; numeric ids are digits."""
        if not name.startswith(self.prefix):
            return None
        ident, dot, field = name[len(self.prefix) :].partition(".")
        if not dot or not ident or not field or (self.numeric_ids and not ident.isdigit()):
            return None
        return ident, field

    def __repr__(self) -> str:
        return f"Family({self.name!r})"


def _pct(help_: str, prom: str | None = None, report: str | None = None) -> Field:
    return Field("%", help_, prom, report=report)


# ---------------------------------------------------------------- host-wide series (fixed names)

HOST: Final[Mapping[str, Field]] = {
    "cpu.cores": Field("count", "logical CPUs"),
    "cpu.busy": _pct("host CPU busy (all cores)", "trainmon_cpu_busy_percent"),
    "cpu.iowait": _pct("host CPU iowait", "trainmon_cpu_iowait_percent"),
    "cpu.user": _pct("host CPU in user mode (with nice)"),
    "cpu.system": _pct("host CPU in the kernel (with irq and softirq)"),
    "cpu.steal": _pct("host CPU stolen by the hypervisor"),
    "cpu.usable": Field("cores", "cores the monitor may use: min(CPU affinity, cgroup CPU quota)"),
    "cpu.affinity": Field("cores", "CPUs in the monitor's affinity mask (taskset, cpuset)"),
    "cpu.quota_v2": Field("cores", "the monitor's cgroup v2 CPU quota (cpu.max; tightest along its path)"),
    "cpu.quota_v1": Field("cores", "the monitor's cgroup v1 CPU quota (cpu.cfs_quota_us / cpu.cfs_period_us)"),
    "cpu.usable_busy": _pct("share of the usable cores busy (allowed CPUs' busy time, the cgroup's use of its quota)"),
    "mem.used_pct": _pct("host memory used", "trainmon_memory_used_percent"),
    "mem.used_mb": Field("MiB", "host memory used (total - available)"),
    "mem.total_mb": Field("MiB", "host memory total"),
    "swap.used_mb": Field("MiB", "swap used", "trainmon_swap_used_bytes", MIB),
    "swap.total_mb": Field("MiB", "swap total"),
    "load.1": Field("tasks", "1-minute load average", "trainmon_load1"),
    "load.5": Field("tasks", "5-minute load average"),
}

# ---------------------------------------------------------------- what watching costs (the monitor's own process)

SELF: Final[Mapping[str, Field]] = {
    "self.cpu_pct": Field("% of a core", "the monitor's own CPU (all its threads)", "trainmon_self_cpu_ratio", 0.01),
    "self.helpers_cpu_pct": Field(
        "% of a core", "CPU of the monitor's helper processes (py-spy)", "trainmon_self_helpers_cpu_ratio", 0.01
    ),
    "self.rss_mb": Field("MiB", "the monitor's resident memory", "trainmon_self_rss_bytes", MIB),
}

CPU_CORE = Family(
    "cpu_core",
    "cpu.core.",
    "core",
    True,
    {
        "busy": _pct("core busy (not idle, not iowait)"),
        "iowait": _pct("core iowait"),
    },
)

# ---------------------------------------------------------------- GPUs (NVML; GPM on Hopper and newer)

GPU = Family(
    "gpu",
    "gpu.",
    "gpu",
    True,
    {
        "util": _pct("GPU utilisation (NVML)", "trainmon_gpu_utilization_percent", "util_percent"),
        "util_min": _pct(
            "lowest GPU utilisation sample in the last tick", "trainmon_gpu_utilization_min_percent", "util_min_percent"
        ),
        "util_max": _pct("highest GPU utilisation sample in the last tick"),
        "mem_util": _pct("memory controller busy (NVML)"),
        "mem_used_mb": Field("MiB", "GPU memory used", "trainmon_gpu_memory_used_bytes", MIB, "mem_used_mb"),
        "mem_total_mb": Field("MiB", "GPU memory total", "trainmon_gpu_memory_total_bytes", MIB),
        "power_w": Field("W", "GPU power draw", "trainmon_gpu_power_watts", report="power_w"),
        "power_limit_w": Field("W", "GPU enforced power limit", "trainmon_gpu_power_limit_watts"),
        # A counter (trainmon.sources.gpu.energy_counter): the exporter writes a Prometheus name ending in _total
        # as one.
        "energy_j": Field(
            "J",
            "GPU energy since the monitor began watching it (NVML's total energy counter; power × time where the GPU "
            "has none or the counter went back)",
            "trainmon_gpu_energy_joules_total",
        ),
        "energy_counter": Field(
            "1/0", "how the energy since the previous sample was measured: 1 NVML's energy counter, 0 power × time"
        ),
        "temp_c": Field("°C", "GPU temperature", "trainmon_gpu_temperature_celsius", report="temp_c"),
        "sm_clock_mhz": Field("MHz", "GPU SM clock", "trainmon_gpu_sm_clock_hertz", 1e6, "sm_clock_mhz"),
        "mem_clock_mhz": Field("MHz", "GPU memory clock"),
        "sm_clock_max_mhz": Field("MHz", "GPU SM clock maximum"),
        "throttle": Field("bitmask", "NVML clock-event (throttle) reasons bitmask", "trainmon_gpu_clock_event_reasons"),
        "pcie_rx_mb_s": Field(
            "MiB/s", "PCIe host→device throughput", "trainmon_gpu_pcie_rx_bytes_per_second", MIB, "pcie_rx_mb_s"
        ),
        "pcie_tx_mb_s": Field(
            "MiB/s", "PCIe device→host throughput", "trainmon_gpu_pcie_tx_bytes_per_second", MIB, "pcie_tx_mb_s"
        ),
        "gpm.sm_active": _pct("GPM SM activity", "trainmon_gpu_sm_active_percent", "sm_active_percent"),
        "gpm.sm_occupancy": _pct("GPM SM occupancy"),
        "gpm.tensor_active": _pct(
            "GPM tensor pipe activity", "trainmon_gpu_tensor_active_percent", "tensor_active_percent"
        ),
        "gpm.dram_bw": _pct("GPM DRAM bandwidth used"),
    },
)
# The GPM fields → NVML_GPM_METRIC_* ids (SM_UTIL, SM_OCCUPANCY, ANY_TENSOR_UTIL, DRAM_BW_UTIL).
GPM_METRIC_IDS: Final[Mapping[str, int]] = {
    "gpm.sm_active": 2,
    "gpm.sm_occupancy": 3,
    "gpm.tensor_active": 5,
    "gpm.dram_bw": 10,
}
# The NVML fields, in the order a GPU source writes them.
GPU_NVML_FIELDS: Final = tuple(f for f in GPU.fields if f not in GPM_METRIC_IDS)
# MIG devices are GPUs of their own (ids after the NVML indices); NVML gives them no utilisation, and a GPU in
# MIG mode none of its own: what every reader says instead of a value.
MIG_NOTE: Final = "n/a on MIG"
MIG_MODE_NOTE: Final = "n/a in MIG mode"


@dataclass(frozen=True)
class ThrottleReason:
    bit: int
    report: str  # the report's name for it
    short: str  # the TUI's
    long: str  # the diagnosis's
    limiting: bool  # holds the GPU back (idle and application clocks do not)


# NVML clock-event reasons (nvmlClocksEventReason*), one table for every reader.
THROTTLE_REASONS: Final = (
    ThrottleReason(0x1, "gpu_idle", "idle", "idle", False),
    ThrottleReason(0x2, "applications_clocks", "app clocks", "application clocks", False),
    ThrottleReason(0x4, "sw_power_cap", "power cap", "power cap", True),
    ThrottleReason(0x8, "hw_slowdown", "hw slowdown", "hardware slowdown", True),
    ThrottleReason(0x10, "sync_boost", "sync boost", "sync boost", False),
    ThrottleReason(0x20, "sw_thermal", "sw thermal", "software thermal", True),
    ThrottleReason(0x40, "hw_thermal", "hw thermal", "hardware thermal", True),
    ThrottleReason(0x80, "hw_power_brake", "power brake", "power brake", True),
    ThrottleReason(0x100, "display_clocks", "display clocks", "display clocks", False),
)
LIMITING_THROTTLE: Final = sum(r.bit for r in THROTTLE_REASONS if r.limiting)
# An A100/H100 at full load sits at its power limit as a matter of course: the power-cap bit alone means "running
# at the limit". It holds the GPU back only when the SM clock is clearly below its maximum.
SW_POWER_CAP: Final = 0x4


def limiting_reasons(mask: int) -> list[ThrottleReason]:
    """The reasons in ``mask`` that hold the GPU back, in bit order."""
    return [r for r in THROTTLE_REASONS if r.limiting and mask & r.bit]


def gpu_mask(indices: Iterable[int]) -> float:
    """GPU indices as the float bitmask a series holds (exact for indices below 53)."""
    return float(sum(1 << i for i in set(indices) if 0 <= i < 53))


def mask_indices(mask: float) -> list[int]:
    """The GPU indices in a bitmask series value."""
    bits = int(mask) if mask == mask and mask >= 0 else 0
    return [i for i in range(bits.bit_length()) if bits >> i & 1]


# ---------------------------------------------------------------- disks (iostat -x from /proc/diskstats)

DISK = Family(
    "disk",
    "disk.",
    "device",
    False,
    {
        "read_mb_s": Field("MiB/s", "disk read throughput", "trainmon_disk_read_bytes_per_second", MIB, "read_mb_s"),
        "write_mb_s": Field(
            "MiB/s", "disk write throughput", "trainmon_disk_write_bytes_per_second", MIB, "write_mb_s"
        ),
        "util_pct": _pct("disk busy time (iostat %util)", "trainmon_disk_utilization_percent", "util_percent"),
        "r_await_ms": Field(
            "ms", "average read latency (iostat r_await)", "trainmon_disk_read_await_seconds", 1e-3, "r_await_ms"
        ),
        "w_await_ms": Field(
            "ms", "average write latency (iostat w_await)", "trainmon_disk_write_await_seconds", 1e-3, "w_await_ms"
        ),
        "r_s": Field("1/s", "reads completed per second", report="r_s"),
        "w_s": Field("1/s", "writes completed per second"),
        "aqu_sz": Field("requests", "average queue length (iostat aqu-sz)"),
    },
)

# ---------------------------------------------------------------- processes of the training tree (/proc, NVML)

PROC = Family(
    "proc",
    "proc.",
    "pid",
    True,
    {
        "cpu_pct": Field("% of a core", "CPU time of all threads"),
        "rss_mb": Field("MiB", "resident memory"),
        "threads": Field("count", "threads"),
        "state_R": Field("share", "threads seen running"),
        "state_S": Field("share", "threads seen sleeping"),
        "state_D": Field("share", "threads seen in uninterruptible (I/O) wait"),
        "state_main_R": Field("share", "main thread seen running"),
        "state_main_S": Field("share", "main thread seen sleeping"),
        "state_main_D": Field("share", "main thread seen in uninterruptible (I/O) wait"),
        "read_mb_s": Field("MiB/s", "bytes read from the block layer (/proc/<pid>/io read_bytes)"),
        "write_mb_s": Field("MiB/s", "bytes written to the block layer"),
        "rchar_mb_s": Field("MiB/s", "bytes returned by read(): page cache, sockets, pipes, FUSE/NFS"),
        "wchar_mb_s": Field("MiB/s", "bytes passed to write()"),
        "runq_wait_ms_s": Field("ms/s", "time runnable but waiting for a core"),
        "net_wait": Field("share", "worker seen waiting on the network (socket, network filesystem), not running"),
        "queue_wait": Field("share", "worker seen waiting on its index queue (ahead of the loop), not running"),
        "wait_unresolved": Field("share", "worker seen blocked where the kernel did not tell on what (poll, epoll)"),
        "net_sockets": Field("count", "network (not unix) sockets open in the worker, inherited ones included"),
        "cpu_usable": Field("cores", "cores a main process may use: min(CPU affinity, cgroup CPU quota)"),
        "cpu_affinity": Field("cores", "CPUs in a main process's affinity mask (taskset, cpuset)"),
        "cpu_quota_v2": Field("cores", "its cgroup v2 CPU quota (cpu.max; tightest along the cgroup path)"),
        "cpu_quota_v1": Field("cores", "its cgroup v1 CPU quota (cpu.cfs_quota_us / cpu.cfs_period_us)"),
        "cpu_usable_busy": _pct("share of its usable cores busy (allowed CPUs' busy time, its cgroup's use of quota)"),
        "cpu_budget_id": Field("id", "the same for processes drawing on the same cores (CPUs, quota-holding cgroup)"),
        "gpu_mem_mb": Field("MiB", "GPU memory held (NVML, summed over GPUs)"),
        "gpu_sm_pct": _pct("SM share of the process's GPU (NVML)"),
        "gpu_mask": Field("bitmask", "the GPUs the process holds memory on (bit i: GPU id i, MIG devices included)"),
    },
)
# /proc/<pid>/io counters → the PROC fields their rates go to.
PROC_IO_FIELDS: Final[Mapping[bytes, str]] = {
    b"read_bytes": "read_mb_s",
    b"write_bytes": "write_mb_s",
    b"rchar": "rchar_mb_s",
    b"wchar": "wchar_mb_s",
}

# ---------------------------------------------------------------- py-spy sampling of a main thread

PYSPY = Family(
    "pyspy",
    "pyspy.",
    "pid",
    True,
    {
        "data_wait_share": Field("share", "main-thread samples inside a DataLoader's __next__"),
        "checkpoint_share": Field("share", "main-thread samples inside a checkpoint save"),
        "samples": Field("count", "main-thread samples taken since the previous tick"),
        "data_wait_se": Field("share", "binomial standard error of data_wait_share: sqrt(p(1-p)/samples)"),
    },
)

# ---------------------------------------------------------------- GPU processes under pids of NVML's namespace

# Written only where NVML's pids are not the monitor's (it runs in a container; NVML gives host pids): such a pid
# names another process here, so its figures are kept apart from PROC and matched to a run by its GPU.
NVML_PROC = Family(
    "nvml_proc",
    "nvml.",
    "nvml_pid",
    True,
    {
        "gpu_mem_mb": Field("MiB", "GPU memory NVML lists for a pid of its own namespace (summed over GPUs)"),
        "gpu_sm_pct": _pct("SM share of that process's GPU (NVML)"),
        "gpu_mask": Field("bitmask", "the GPUs NVML lists that process on (bit i: GPU id i)"),
    },
)

FAMILIES: Final = (CPU_CORE, GPU, DISK, PROC, PYSPY, NVML_PROC)


# ---------------------------------------------------------------- metrics that are not series: runs and verdicts


@dataclass(frozen=True)
class Metric:
    """A Prometheus metric the exporter writes from the Monitor's snapshot (not from a series), and the cluster view
    reads back: its one spelling. ``exposed`` is the name a scrape shows (a counter gains ``_total``, an info
    ``_info``)."""

    name: str
    help: str
    suffix: str = ""

    @property
    def exposed(self) -> str:
        return self.name + self.suffix


STEP_TIME = Metric("trainmon_step_time_seconds", "median step time over the window")
DATA_WAIT = Metric("trainmon_data_wait_ratio", "share of step time waiting on the DataLoader")
SAMPLES_RATE = Metric("trainmon_samples_per_second", "training throughput")
TOKENS_RATE = Metric("trainmon_tokens_per_second", "training throughput in tokens (sequence batches, no padding)")
STEPS_RATE = Metric("trainmon_steps_per_second", "steps per second (last 5 s)")
STEP_PART = Metric(
    "trainmon_step_part_ratio",
    "share of step time in each part of the step over the window (part: data_wait, model, comm, own_code: the "
    "loop's own code); absent where the model was never timed",
)
STEPS = Metric("trainmon_steps", "training steps completed", "_total")
AGENT_DROPS = Metric("trainmon_agent_dropped_records", "agent records dropped (monitor slow or away)", "_total")
RUN_CONNECTED = Metric("trainmon_run_connected", "1 while the run's agent is connected")
RUN_SAMPLED = Metric(
    "trainmon_run_sampled",
    "1 for a training found running without an agent: its data-wait ratio is estimated from py-spy samples and it "
    "has no step figures (trainmon attach PID gives exact ones); 0 for a run with an agent",
)
RUN_GPU = Metric("trainmon_run_gpu", "1 for each GPU the run trains on (join on gpu with the trainmon_gpu_* metrics)")
RUN_ENERGY_STEP = Metric(
    "trainmon_run_energy_per_step_joules",
    "GPU energy per step over the live window, on the run's own GPUs (whole GPUs: see trainmon_run_energy_shared)",
)
RUN_ENERGY_SAMPLE = Metric("trainmon_run_energy_per_sample_joules", "GPU energy per sample over the live window")
RUN_ENERGY_SHARED = Metric(
    "trainmon_run_energy_shared",
    "1 where another watched run trains on one of the run's GPUs: its energy figures are the whole GPUs', not split",
)
RUN_VERDICT = Metric(
    "trainmon_run_verdict_info", "1, labelled with the code and severity of the finding that heads this run now"
)
VERDICT = Metric("trainmon_verdict", "the headline verdict (its code and severity)", "_info")
VERDICT_SEVERITY = Metric("trainmon_verdict_severity", "the headline verdict's severity: 0 ok, 1 warning, 2 critical")
VERDICT_CODE = Metric("trainmon_verdict_code", "which verdict code holds now")
GPU_THROTTLED = Metric("trainmon_gpu_throttled", "1 while the GPU's clocks are held down")
GPU_THROTTLE_REASON = Metric("trainmon_gpu_throttle_reason", "1 while this clock-event reason is set")


class SeriesIndex:
    """Which ids of each family have series, in the order the series first appeared.

    Built from a store's series names; the store rebuilds it only when its set of series changes.
    """

    def __init__(self, names: Iterable[str]) -> None:
        self._ids: dict[tuple[str, str | None], dict[str, None]] = {}
        for name in names:
            for family in FAMILIES:
                parsed = family.parse(name)
                if parsed is not None:
                    ident, field = parsed
                    self._ids.setdefault((family.name, None), {})[ident] = None
                    self._ids.setdefault((family.name, field), {})[ident] = None
                    break

    def ids(self, family: Family, field: str | None = None) -> list[str]:
        """Ids of ``family`` with any series (or with a series of ``field``), first appearance first."""
        return list(self._ids.get((family.name, field), ()))

    def int_ids(self, family: Family, field: str | None = None) -> list[int]:
        """Numeric ids (GPU indices, pids, cores), ascending."""
        return sorted(int(i) for i in self._ids.get((family.name, field), ()))
