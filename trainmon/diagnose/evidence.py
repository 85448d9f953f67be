"""System evidence over a window for one run: its processes, the disks, the GPUs it uses."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainmon.diagnose.live.spans import Coverage, weighted_mean
from trainmon.diagnose.stats import mean
from trainmon.metrics import DISK, GPU, LIMITING_THROTTLE, PROC, SW_POWER_CAP, mask_indices
from trainmon.numbers import is_nan, known
from trainmon.store.run import Run
from trainmon.store.store import Store

NAN = math.nan


@dataclass
class ProcEvidence:
    pid: int
    cpu_pct: float = NAN  # % of one core
    state_r: float = NAN
    state_s: float = NAN
    state_d: float = NAN
    read_mb_s: float = NAN  # from the block layer
    rchar_mb_s: float = NAN  # everything read(): page cache, sockets, pipes, FUSE/NFS
    runq_ms_s: float = NAN  # time runnable but waiting for a core, per second
    # CPU samples in its span, each weighed by its share outside the idle spans: how long it ran there (a worker of
    # one epoch ran part of the window)
    samples: float = 0.0
    net_wait: float = NAN  # share of looks at a worker that found it waiting on the network (recv, NFS, FUSE)
    wait_unresolved: float = NAN  # share of looks at a worker blocked where the kernel did not say on what
    queue_wait: float = NAN  # share of looks at a worker that found it waiting on its index queue: ahead of the loop
    net_sockets: float = NAN  # network (not unix) sockets open in a worker, inherited ones included

    @property
    def known(self) -> bool:
        return not is_nan(self.cpu_pct)

    @property
    def blocked(self) -> float:
        """Share of looks at its main thread that found it neither running nor runnable: asleep, in D, waiting on
        a lock, a socket or a pipe (nan where its states were not seen)."""
        if not is_nan(self.state_r):
            return 1.0 - self.state_r
        return self.state_s + self.state_d if not is_nan(self.state_s) and not is_nan(self.state_d) else NAN


@dataclass
class Evidence:
    main: ProcEvidence
    loop: ProcEvidence = field(default_factory=lambda: ProcEvidence(0))  # the main process outside the idle spans
    # The workers of the loader judged (the one feeding the steps), each over the span it served it.
    workers: list[ProcEvidence] = field(default_factory=list)
    loader_id: int | None = None  # that loader (None: not known, then every loader's workers)
    other_loader_workers: int = 0  # workers of other loaders (validation, ...) left out
    # host CPU samples in the window, weighed as the workers' are: a worker present throughout has as many
    window_samples: float = 0.0
    idle_s: float = 0.0  # time in the window the loop was not consuming the loader (left out of the workers' figures)
    disk_util_max: float = NAN
    disk_await_max: float = NAN
    disk_busiest: str | None = None
    gpu_util: float = NAN
    gpu_util_min: float = NAN
    gpu_mem_pct: float = NAN
    gpu_throttle_share: float = NAN
    gpu_throttle_bits: int = 0
    gpu_pcie_rx_mb_s: float = NAN  # the busiest of the run's GPUs
    gpu_temp_c: float = NAN  # the hottest of the run's GPUs
    gpu_sm_clock_mhz: float = NAN
    gpu_sm_clock_max_mhz: float = NAN
    gpu_sm_active: float = NAN  # GPM (Hopper and newer): share of time the SMs had work, %
    gpu_tensor_active: float = NAN  # GPM: share of time the tensor pipes were busy, %
    gpus: list[int] = field(default_factory=list)

    @property
    def known_workers(self) -> list[ProcEvidence]:
        return [w for w in self.workers if w.known]

    def workers_mean(self, attr: str) -> float:
        """The workers' figure over their lifetimes: each weighs by how long it ran in the window, so a worker
        of the last seconds counts for those seconds, and none counts for a time it was not running."""
        pairs = [(float(getattr(w, attr)), w.samples) for w in self.known_workers if not is_nan(getattr(w, attr))]
        weight = sum(n for _, n in pairs)
        if not weight:
            return mean(v for v, _ in pairs)
        return sum(v * n for v, n in pairs) / weight

    def workers_sum(self, attr: str) -> float:
        """The workers' rates added up over the window (a worker present for half of it adds half its rate)."""
        vals = [
            getattr(w, attr) * (min(1.0, w.samples / self.window_samples) if self.window_samples else 1.0)
            for w in self.known_workers
            if not is_nan(getattr(w, attr))
        ]
        return sum(vals) if vals else NAN


def proc_evidence(store: Store, pid: int, t0: float, t1: float, holes: Coverage | None = None) -> ProcEvidence:
    """The process's figures over [t0, t1]; with ``holes``, each sample weighed by the share of its interval
    outside them (see ``trainmon.diagnose.live.spans``), so the time the loop was elsewhere does not count."""

    def weights(name: str) -> tuple[array[float], list[float] | None]:
        series = store.series.get(name)
        if series is None:
            return array("d"), None
        i, j = bisect_left(series.times, t0), bisect_right(series.times, t1)
        values = series.values[i:j]
        if not holes or i == j:
            return values, None
        times = series.times
        previous = times[i - 1] if i else times[i] - (times[i + 1] - times[i] if j > i + 1 else 1.0)
        return values, holes.weights_at(times[i:j], previous)

    def m(field: str) -> float:
        values, w = weights(PROC.key(pid, field))
        return mean(values) if w is None else weighted_mean(values, w)[0]

    cpu_values, cpu_weights = weights(PROC.key(pid, "cpu_pct"))
    if cpu_weights is None:
        cpu = known(cpu_values)
        cpu_pct, samples = (sum(cpu) / len(cpu) if cpu else NAN), float(len(cpu))
    else:
        cpu_pct, samples = weighted_mean(cpu_values, cpu_weights)

    def state(letter: str) -> float:
        # The main thread is the one that works (a worker's or the training loop's); helper threads
        # (interop pools, pin-memory, the agent's sender) mostly sleep and would dilute the share.
        main = m(f"state_main_{letter}")
        return m(f"state_{letter}") if is_nan(main) else main

    return ProcEvidence(
        pid,
        cpu_pct,
        state("R"),
        state("S"),
        state("D"),
        m("read_mb_s"),
        m("rchar_mb_s"),
        m("runq_wait_ms_s"),
        samples,
        net_wait=m("net_wait"),
        wait_unresolved=m("wait_unresolved"),
        queue_wait=m("queue_wait"),
        net_sockets=m("net_sockets"),
    )


def loader_workers(
    store: Store, run: Run, t0: float, t1: float, loader_id: int | None, holes: Coverage | None = None
) -> Evidence:
    """The workers of loader ``loader_id`` (default: the run's train loader) that ran within [t0, t1], each
    over the span its iterator served it (without ``holes``: when the loop was not consuming the loader); every
    loader's current workers when no loader is known."""
    ev = Evidence(ProcEvidence(0))
    info = run.loaders.get(loader_id) if loader_id else run.train_loader()
    if info is None:
        ev.workers = [proc_evidence(store, pid, t0, t1, holes) for pid in run.worker_pids()]
        return ev
    ev.loader_id = info.id
    # A sample covers the interval before it: one taken as a set of workers began belongs to the set before.
    ev.workers = [
        proc_evidence(store, pid, math.nextafter(a, math.inf) if a > t0 else a, b, holes)
        for pid, a, b in info.workers_between(t0, t1)
    ]
    ev.other_loader_workers = sum(
        len(other.workers_between(t0, t1)) for lid, other in run.loaders.items() if lid != info.id
    )
    return ev


def run_gpus(store: Store, run: Run, gpus: list[int]) -> list[int]:
    """The GPUs a run trains on: the CUDA device it reported (matched by UUID) and those NVML lists its main
    process on (``proc.<pid>.gpu_mask``).

    Without either: when NVML lists other processes but not this one, the run holds no GPU; when it lists none
    of ours (no per-process figures, or pids of another namespace), the host's only GPU; with several, none
    rather than all. A run in a pid namespace the monitor could not map is matched by UUID only."""
    own: set[int] = set()
    by_uuid = _gpu_by_uuid(store, run)
    if by_uuid is not None and by_uuid in gpus:
        own.add(by_uuid)  # the device torch reported: found even where NVML's pids match none of ours
    if run.proc_pid is None:
        return sorted(own)
    mask = store.latest(PROC.key(run.proc_pid, "gpu_mask"))
    if mask is not None:
        own |= set(mask_indices(mask)) & set(gpus)
    if own or store.index().ids(PROC, "gpu_mask"):
        return sorted(own)
    return gpus if len(gpus) == 1 else []


def _gpu_by_uuid(store: Store, run: Run) -> int | None:
    """The device id of the CUDA device the run reported (torch gives the UUID without NVML's "GPU-"/"MIG-")."""
    uuid = _bare_uuid((run.cuda_device or {}).get("uuid"))
    if not uuid:
        return None
    for device in store.metadata.get("gpus") or []:
        if isinstance(device, dict) and _bare_uuid(device.get("uuid")) == uuid and isinstance(device.get("index"), int):
            return int(device["index"])
    return None


def _bare_uuid(value: object) -> str:
    text = str(value or "").strip().lower()
    return text.removeprefix("gpu-").removeprefix("mig-")  # on a MIG device torch reports the MIG UUID


def _limiting_samples(store: Store, gpu: int, t0: float, t1: float, power_cap_clock: float) -> list[int]:
    """Per throttle sample of ``gpu`` in the window: the reasons that held it back (0 when none did).

    The power-cap bit counts only when the SM clock sampled at the same tick is below ``power_cap_clock`` of its
    maximum; with no clock to compare, it does not count."""
    throttle = store.series.get(GPU.key(gpu, "throttle"))
    if throttle is None:
        return []
    times, masks = throttle.between(t0, t1)
    clock_series = store.series.get(GPU.key(gpu, "sm_clock_mhz"))
    clocks = dict(zip(*clock_series.between(t0, t1), strict=True)) if clock_series is not None else {}
    clock_max = store.latest(GPU.key(gpu, "sm_clock_max_mhz"))
    out = []
    for t, m in zip(times, masks, strict=True):
        if is_nan(m):
            continue
        bits = int(m) & LIMITING_THROTTLE
        if bits & SW_POWER_CAP:
            clock = clocks.get(t, NAN)
            if clock_max is None or is_nan(clock_max) or is_nan(clock) or clock >= power_cap_clock * clock_max:
                bits &= ~SW_POWER_CAP
        out.append(bits)
    return out


def gather(
    store: Store,
    run: Run,
    t0: float,
    t1: float,
    power_cap_clock: float = 0.85,
    loader_id: int | None = None,
    idle: Sequence[tuple[float, float]] = (),
) -> Evidence:
    """Everything the rules read about ``run`` over [t0, t1]; its workers are those of ``loader_id`` (default:
    the train loader), never other loaders' (see ``loader_workers``), judged outside ``idle`` (the spans in
    which the loop was not consuming that loader: ``trainmon.diagnose.live.spans.idle_spans``), as is ``loop``, the
    main process over the same spans."""
    holes = Coverage(idle)
    ev = loader_workers(store, run, t0, t1, loader_id, holes)
    # A run in a pid namespace the monitor could not map has no process figures (its pid here is another's).
    if run.proc_pid is not None:
        ev.main = proc_evidence(store, run.proc_pid, t0, t1)
        ev.loop = proc_evidence(store, run.proc_pid, t0, t1, holes) if holes else ev.main
    host = store.series.get("cpu.busy")
    if host is not None and holes:
        i, j = bisect_left(host.times, t0), bisect_right(host.times, t1)
        previous = host.times[i - 1] if i else t0 - 1.0
        ev.window_samples = weighted_mean(host.values[i:j], holes.weights(host.times[i:j], previous))[1]
    else:
        ev.window_samples = float(len(known(store.values_between("cpu.busy", t0, t1))))
    ev.idle_s = math.fsum(min(b, t1) - max(a, t0) for a, b in idle if b > t0 and a < t1)
    index = store.index()
    for disk in index.ids(DISK, "util_pct"):
        util = mean(store.values_between(DISK.key(disk, "util_pct"), t0, t1))
        if not is_nan(util) and not util <= (-1 if is_nan(ev.disk_util_max) else ev.disk_util_max):
            ev.disk_util_max = util
            ev.disk_busiest = disk
            ev.disk_await_max = mean(store.values_between(DISK.key(disk, "r_await_ms"), t0, t1))
    used = run_gpus(store, run, index.int_ids(GPU, "util"))
    ev.gpus = used
    if used:

        def gpu_mean(g: int, field: str) -> float:
            return mean(store.values_between(GPU.key(g, field), t0, t1))

        ev.gpu_util = mean(gpu_mean(g, "util") for g in used)
        ev.gpu_util_min = mean(gpu_mean(g, "util_min") for g in used)
        mem = [gpu_mean(g, "mem_used_mb") / (store.latest(GPU.key(g, "mem_total_mb")) or NAN) * 100 for g in used]
        ev.gpu_mem_pct = max(known(mem), default=NAN)
        # Per GPU, never summed: each GPU has its own PCIe link.
        ev.gpu_pcie_rx_mb_s = max(known(gpu_mean(g, "pcie_rx_mb_s") for g in used), default=NAN)
        ev.gpu_temp_c = max(known(gpu_mean(g, "temp_c") for g in used), default=NAN)
        ev.gpu_sm_clock_mhz = mean(gpu_mean(g, "sm_clock_mhz") for g in used)
        ev.gpu_sm_clock_max_mhz = mean(store.latest(GPU.key(g, "sm_clock_max_mhz")) or NAN for g in used)
        ev.gpu_sm_active = mean(gpu_mean(g, "gpm.sm_active") for g in used)
        ev.gpu_tensor_active = mean(gpu_mean(g, "gpm.tensor_active") for g in used)
        limited = [bits for g in used for bits in _limiting_samples(store, g, t0, t1, power_cap_clock)]
        if limited:
            ev.gpu_throttle_share = sum(1 for bits in limited if bits) / len(limited)
            for bits in limited:
                ev.gpu_throttle_bits |= bits
    return ev
