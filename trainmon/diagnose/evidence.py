"""System evidence over a window for one run: its processes, the disks, the GPUs it uses."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainmon.diagnose.window import mean
from trainmon.metrics import DISK, GPU, LIMITING_THROTTLE, PROC
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

    @property
    def known(self) -> bool:
        return not is_nan(self.cpu_pct)


@dataclass
class Evidence:
    main: ProcEvidence
    workers: list[ProcEvidence] = field(default_factory=list)
    disk_util_max: float = NAN
    disk_await_max: float = NAN
    disk_busiest: str | None = None
    gpu_util: float = NAN
    gpu_util_min: float = NAN
    gpu_mem_pct: float = NAN
    gpu_throttle_share: float = NAN
    gpu_throttle_bits: int = 0
    gpu_pcie_rx_mb_s: float = NAN
    gpus: list[int] = field(default_factory=list)

    @property
    def known_workers(self) -> list[ProcEvidence]:
        return [w for w in self.workers if w.known]

    def workers_mean(self, attr: str) -> float:
        return mean(getattr(w, attr) for w in self.known_workers)

    def workers_sum(self, attr: str) -> float:
        vals = [getattr(w, attr) for w in self.known_workers if getattr(w, attr) == getattr(w, attr)]
        return sum(vals) if vals else NAN


def proc_evidence(store: Store, pid: int, t0: float, t1: float) -> ProcEvidence:
    def m(field: str) -> float:
        return mean(store.values_between(PROC.key(pid, field), t0, t1))

    def state(letter: str) -> float:
        # The main thread is the one that works (a worker's or the training loop's); helper threads
        # (interop pools, pin-memory, the agent's sender) mostly sleep and would dilute the share.
        main = m(f"state_main_{letter}")
        return m(f"state_{letter}") if is_nan(main) else main

    return ProcEvidence(
        pid,
        m("cpu_pct"),
        state("R"),
        state("S"),
        state("D"),
        m("read_mb_s"),
        m("rchar_mb_s"),
        m("runq_wait_ms_s"),
    )


def gather(store: Store, run: Run, t0: float, t1: float) -> Evidence:
    ev = Evidence(proc_evidence(store, run.pid, t0, t1))
    ev.workers = [proc_evidence(store, pid, t0, t1) for pid in run.worker_pids()]
    index = store.index()
    for disk in index.ids(DISK, "util_pct"):
        util = mean(store.values_between(DISK.key(disk, "util_pct"), t0, t1))
        if not is_nan(util) and not util <= (-1 if is_nan(ev.disk_util_max) else ev.disk_util_max):
            ev.disk_util_max = util
            ev.disk_busiest = disk
            ev.disk_await_max = mean(store.values_between(DISK.key(disk, "r_await_ms"), t0, t1))
    gpus = index.int_ids(GPU, "util")
    used = [g for g in gpus if PROC.key(run.pid, "gpu_mem_mb") in store.series] or gpus
    ev.gpus = used
    if used:

        def gpu_mean(g: int, field: str) -> float:
            return mean(store.values_between(GPU.key(g, field), t0, t1))

        ev.gpu_util = mean(gpu_mean(g, "util") for g in used)
        ev.gpu_util_min = mean(gpu_mean(g, "util_min") for g in used)
        mem = [gpu_mean(g, "mem_used_mb") / (store.latest(GPU.key(g, "mem_total_mb")) or NAN) * 100 for g in used]
        ev.gpu_mem_pct = max(known(mem), default=NAN)
        ev.gpu_pcie_rx_mb_s = sum(x for g in used if (x := gpu_mean(g, "pcie_rx_mb_s")) == x)
        masks = [v for g in used for v in known(store.values_between(GPU.key(g, "throttle"), t0, t1))]
        if masks:
            limited = [int(v) & LIMITING_THROTTLE for v in masks]
            ev.gpu_throttle_share = sum(1 for v in limited if v) / len(limited)
            for v in limited:
                ev.gpu_throttle_bits |= v
    return ev
