"""Input starvation: loading in the main process, too few workers, CPU-bound workers, storage, host→device copies."""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import HIGHER, AdviceItem, Finding
from trainmon.diagnose.host_window import HostWindow
from trainmon.diagnose.rules.batch_source import batch_source
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.thresholds import Thresholds
from trainmon.diagnose.window import RunWindow
from trainmon.numbers import is_nan, rounded

STAGE = AdviceItem("stage the dataset on local disk before training, or cache it after the first epoch")
NET_ADVICE = (
    STAGE,
    AdviceItem(
        "keep more requests in flight: a thread pool or asyncio inside each worker (or __getitems__ for a "
        "whole batch), more workers, a higher prefetch_factor",
        {"prefetch_factor": HIGHER},
        "more remote requests in flight",
    ),
    AdviceItem("read fewer, larger objects (sharded formats) and reuse connections to amortise per-request latency"),
)
DISK_ADVICE = (
    AdviceItem(
        "pack small files into large sequential shards (WebDataset, LMDB, HDF5, TFRecord) and read them in order"
    ),
    AdviceItem("copy the dataset to local NVMe or RAM (/dev/shm), or cache decoded samples"),
    AdviceItem(
        "raise num_workers and prefetch_factor to keep more reads in flight",
        {"num_workers": HIGHER, "prefetch_factor": HIGHER},
        "more reads in flight",
    ),
)
LATENCY_ADVICE = (
    AdviceItem(
        "overlap the slow requests inside each worker: a thread pool or asyncio in the dataset, "
        "or fetch a whole batch at once (__getitems__)"
    ),
    AdviceItem(
        "raise prefetch_factor so each worker keeps more samples in flight",
        {"prefetch_factor": HIGHER},
        "more samples in flight per worker",
    ),
)
STAY_AHEAD = AdviceItem(
    "set persistent_workers=True and prefetch_factor≥2 so workers stay ahead across epochs",
    {"persistent_workers": True, "prefetch_factor": 2},
    "workers stay ahead across epochs",
    at_least=("prefetch_factor",),
)
RCHAR_ADVICE = (
    STAGE,
    AdviceItem(
        "raise num_workers (and prefetch_factor) to keep more remote requests in flight",
        {"num_workers": HIGHER, "prefetch_factor": HIGHER},
        "more remote requests in flight",
    ),
    AdviceItem("read fewer, larger objects (sharded formats) to amortise per-request latency"),
)


def input_bound(ctx: RuleContext) -> Finding | None:
    w, host, ev, th = ctx.w, ctx.h, ctx.ev, ctx.th
    f = w.wait_fraction
    if is_nan(f) or f <= th.wait_warning:
        return None
    exposed = w.exposed_fraction
    if not is_nan(exposed) and exposed < th.exposed_min_share * f and exposed <= th.wait_warning:
        return None  # the GPU stayed busy through the waits: nothing is starved
    severity = "critical" if f >= th.wait_critical else "warning"
    evidence = base_evidence(w) | {
        "host_cpu_busy_pct": rounded(host.cpu_busy, 1),
        "host_iowait_pct": rounded(host.cpu_iowait, 1),
        "cores": host.cores,
        **host.cores_evidence(),
        "workers_loader": ev.loader_id,  # the figures below are this loader's workers' only
        "workers_seen": len(ev.known_workers),
        "other_loader_workers": ev.other_loader_workers,
        "workers_cpu_pct_mean": rounded(ev.workers_mean("cpu_pct"), 1),
        "workers_state_D": rounded(ev.workers_mean("state_d"), 3),
        "workers_runq_ms_s": rounded(ev.workers_mean("runq_ms_s"), 1),
        "workers_read_mb_s": rounded(ev.workers_sum("read_mb_s"), 2),
        "workers_rchar_mb_s": rounded(ev.workers_sum("rchar_mb_s"), 2),
        "disk_busiest": ev.disk_busiest,
        "disk_util_pct": rounded(ev.disk_util_max, 1),
        "disk_r_await_ms": rounded(ev.disk_await_max, 2),
        "main_cpu_pct": rounded(ev.main.cpu_pct, 1),
        "exposed_fraction": rounded(exposed, 4),
    }
    # On CUDA the raw wait share and the share that left the GPU idle are both told (the evidence has both).
    idle = f" ({exposed:.0%} of step time with the GPU idle)" if not is_nan(exposed) else ""
    pct = f"{f:.0%} of each step waits on data{idle}"
    if (found := batch_source(w, host, ev, th, severity, evidence, idle)) is not None:
        return found  # no DataLoader feeds the loop (rules/batch_source.py)
    workers = w.loader.get("num_workers")
    if workers == 0:
        return _main_process(w, host, ev, th, severity, evidence, idle)
    return _io_finding(w, host, ev, th, severity, evidence, pct) or _cpu_finding(
        w, host, ev, th, severity, evidence, pct, workers
    )


def worker_cap(cpu_bound: bool, cores: int, th: Thresholds) -> tuple[int, str]:
    """The most DataLoader workers worth advising on ``cores`` usable cores, and which bound that is: one per
    core for workers that compute ("usable_cores"); a stated multiple of the cores for workers that mostly wait
    ("latency_per_core": past it, more processes add memory, start-up and context switches, not throughput)."""
    cores = max(1, cores)
    if cpu_bound:
        return cores, "usable_cores"
    return max(1, int(th.latency_workers_per_core * cores)), "latency_per_core"


def _advise(evidence: dict[str, Any], wanted: int, cpu_bound: bool, cores: int, th: Thresholds) -> int:
    """``wanted`` workers within the bound (at least 1); the evidence says which bound applied and why."""
    cap, bound = worker_cap(cpu_bound, cores, th)
    evidence["num_workers_cap"] = cap
    evidence["num_workers_bound"] = bound
    evidence["num_workers_bound_why"] = (
        f"{cap} = one per usable core ({cores}), the workers compute"
        if bound == "usable_cores"
        else f"{cap} = {th.latency_workers_per_core:g} per usable core ({cores}), the workers mostly wait"
    )
    suggested = max(1, min(wanted, cap))
    evidence["suggested_num_workers"] = suggested
    return suggested


def _main_process(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict[str, Any], idle: str
) -> Finding:
    """num_workers=0: loading f of the step in one process takes f / (1 − f) workers to hide behind compute;
    loading that keeps the main thread busy is CPU work (bounded by the cores), one that leaves it idle waits."""
    f = w.wait_fraction
    main_cpu = ev.main.cpu_pct
    cpu_bound = is_nan(main_cpu) or main_cpu >= th.worker_busy_pct
    evidence["sub_cause"] = "cpu" if cpu_bound else "latency"
    suggested = _advise(
        evidence, max(2, math.ceil(f / max(th.advice_min_compute_share, 1 - f))), cpu_bound, host.cores, th
    )
    return Finding(
        "input.main_process",
        severity,
        f"{f:.0%} of each step waits on data loaded in the main process (num_workers=0){idle}"
        + ("" if is_nan(w.step_p50_s) else f"; step p50 {w.step_p50_s * 1e3:.0f} ms"),
        [],
        evidence,
        [
            AdviceItem(
                f"set DataLoader(num_workers={suggested}) so batches are prepared in parallel with compute "
                f"(at most {evidence['num_workers_bound_why']})",
                {"num_workers": suggested},
                "batches prepared in parallel with compute",
            ),
            AdviceItem(
                "add persistent_workers=True (and pin_memory=True on a GPU) so workers survive epochs",
                {"persistent_workers": True, "pin_memory": True},
                "workers survive epochs",
            ),
        ],
    )


def _io_finding(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict[str, Any], pct: str
) -> Finding | None:
    """Workers that wait on reads rather than compute: on the network (sockets of any client, network
    filesystems: seen where the kernel puts each blocked worker to sleep), on the local disk (D state, block
    reads, disk busy, iowait as cores against the run's workers), or through read() on a remote mount (rchar)."""
    d_state = ev.workers_mean("state_d")
    read = ev.workers_sum("read_mb_s")
    rchar = ev.workers_sum("rchar_mb_s")
    cpu = ev.workers_mean("cpu_pct")
    net = ev.workers_mean("net_wait")
    socks = ev.workers_sum("net_sockets")
    idle_workers = is_nan(cpu) or cpu < th.worker_busy_pct
    n_workers = len(ev.known_workers) or w.loader.get("num_workers") or 1
    # iowait is host-wide: as CPUs, it must cover the run's workers blocked iowait_pct of the time, and what the
    # main process's own disk waits (a checkpoint's fsync) explain is not the workers'.
    main_d = ev.main.state_d if not is_nan(ev.main.state_d) else 0.0
    iowait_needed = th.iowait_pct / 100 * n_workers
    evidence |= {
        "workers_net_wait": rounded(net, 3),
        "workers_wait_unresolved": rounded(ev.workers_mean("wait_unresolved"), 3),
        "workers_net_sockets": rounded(socks, 1),
        "host_iowait_cores": rounded(host.iowait_cores, 2),
        "iowait_cores_for_workers": round(iowait_needed, 2),
    }
    if not is_nan(net) and net >= th.net_wait_share and idle_workers and (is_nan(d_state) or net >= d_state):
        evidence["sub_cause"] = "remote"
        busy = f" and compute {cpu:.0f}% of a core" if not is_nan(cpu) else ""
        return Finding(
            "input.io",
            severity,
            f"{pct}; the workers wait on the network {net:.0%} of the time (sockets or a network filesystem)"
            f"{busy}: remote reads are the bottleneck",
            [],
            evidence,
            list(NET_ADVICE),
        )
    if _disk_bound(host, ev, th, main_d, iowait_needed):
        disk = (
            f"{ev.disk_busiest} {ev.disk_util_max:.0f}% busy, r_await {ev.disk_await_max:.1f} ms"
            if ev.disk_busiest and not is_nan(ev.disk_util_max)
            else "disk busy"
        )
        blocked = (
            f"workers blocked on disk (D) {d_state:.0%} of the time"
            if not is_nan(d_state)
            else f"iowait holds {host.iowait_cores:.1f} CPUs for {n_workers} worker(s)"
        )
        evidence["sub_cause"] = "disk"
        return Finding(
            "input.io",
            severity,
            f"{pct}; the workers wait on storage: {blocked}, {disk}",
            [],
            evidence,
            list(DISK_ADVICE),
        )
    remote = (
        not is_nan(rchar)
        and rchar >= th.remote_rchar_mb_s
        and (is_nan(read) or read < th.io_remote_read_share * rchar)
        and idle_workers
    )
    if remote:
        evidence["sub_cause"] = "remote"
        return Finding(
            "input.io",
            severity,
            f"{pct}; the workers read {rchar:.1f} MB/s through the network or a remote "
            f"mount with almost no local disk I/O, and are idle {1 - cpu / 100 if not is_nan(cpu) else 0:.0%} "
            "of the time: remote reads are the bottleneck",
            [],
            evidence,
            list(RCHAR_ADVICE),
        )
    return None


def _disk_bound(host: HostWindow, ev: Evidence, th: Thresholds, main_d: float, iowait_needed: float) -> bool:
    """Whether the workers wait on the local disk: block reads without CPU work, their own D state, a busy disk
    they read from, or (only where their D state is unknown) host iowait covering them."""
    d_state = ev.workers_mean("state_d")
    read = ev.workers_sum("read_mb_s")
    rchar = ev.workers_sum("rchar_mb_s")
    cpu = ev.workers_mean("cpu_pct")
    # Workers that read a lot from the block layer yet are not CPU-bound are waiting on the disk.
    block_reads = (
        not is_nan(read)
        and read >= th.disk_read_mb_s
        and (is_nan(rchar) or read >= th.io_block_read_share * rchar)
        and not is_nan(cpu)
        and cpu < th.worker_busy_pct
    )
    # With the workers' own D-state measured, it decides; host iowait stands in only where it is not.
    iowait_bound = is_nan(d_state) and not is_nan(host.cpu_iowait) and host.iowait_cores - main_d >= iowait_needed
    busy_disk = (
        not is_nan(ev.disk_util_max)
        and ev.disk_util_max >= th.disk_busy_pct
        and not is_nan(read)
        and read > th.io_disk_read_mb_s
    )
    return block_reads or (not is_nan(d_state) and d_state >= th.io_d_state) or busy_disk or iowait_bound


def _workers_cpu(
    host: HostWindow,
    severity: str,
    evidence: dict[str, Any],
    pct: str,
    n: int,
    cpu: float,
    runq: float,
    full: bool,
) -> Finding:
    """CPU-bound workers that more workers cannot help: the host is saturated, or ``full`` (as many as its cores)."""
    starved = f", each waiting {runq / 10:.0f}% of the time for a core" if not is_nan(runq) and runq > 50 else ""
    if full:
        why = f"there are already {n} workers for {host.cores} usable cores"
    else:
        why = f"the host CPU is {host.cpu_busy:.0f}% busy on {host.cores} cores"
    return Finding(
        "input.workers_cpu",
        severity,
        f"{pct}; {n} workers at {cpu:.0f}% of a core{starved} and {why}: preprocessing is CPU-bound"
        if not is_nan(cpu)
        else f"{pct} and {why}: preprocessing is CPU-bound",
        [
            "make each sample cheaper: crop/resize before converting, vectorise or batch the transforms",
            "cache decoded/augmented samples, or decode and augment on the GPU (DALI, nvJPEG, torchvision v2)",
            f"more workers will not help: the cores are already full (at most {evidence['num_workers_bound_why']})",
        ],
        evidence,
    )


def _cpu_finding(
    w: RunWindow,
    host: HostWindow,
    ev: Evidence,
    th: Thresholds,
    severity: str,
    evidence: dict[str, Any],
    pct: str,
    workers: int | None,
) -> Finding:
    """The train loader's own workers (each over the span it ran: see Evidence.workers_mean): CPU-bound on a
    saturated host, CPU-bound with room, or mostly waiting (latency). An advised count never exceeds what the
    host can run: the usable cores for CPU-bound workers, a stated multiple of them for waiting ones."""
    n = workers or 1
    cpu = ev.workers_mean("cpu_pct")
    runq = ev.workers_mean("runq_ms_s")
    cpu_bound = (not is_nan(cpu) and cpu >= th.worker_busy_pct) or (
        not is_nan(runq) and runq >= th.runq_starved_ms_s and not is_nan(cpu) and cpu + runq / 10 >= th.worker_busy_pct
    )
    saturated = (not is_nan(host.cpu_busy) and host.cpu_busy >= th.cpu_saturated_pct) or (
        not is_nan(runq) and runq >= th.runq_starved_ms_s * 2
    )
    if is_nan(cpu):  # no per-process figures: judge by the host alone
        cpu_bound = True
    idle_cores = host.idle_cores  # this run's share of the idle usable cores
    evidence["sub_cause"] = "cpu" if cpu_bound else "latency"
    needed = math.ceil(n / max(th.advice_min_compute_share, 1 - w.wait_fraction))
    if cpu_bound and not is_nan(idle_cores):
        needed = min(needed, n + max(1, int(idle_cores + 0.5)))
    suggested = _advise(evidence, max(needed, n + 1), cpu_bound, host.cores, th)
    full = cpu_bound and suggested <= n  # as many CPU-bound workers as usable cores already
    if cpu_bound and (saturated or full):
        return _workers_cpu(host, severity, evidence, pct, n, cpu, runq, full and not saturated)
    if not cpu_bound and suggested <= n:
        return Finding(
            "input.too_few_workers",
            severity,
            f"{pct}; {n} worker(s) use only {cpu:.0f}% of a core: they wait on something slow per sample "
            f"(latency), and num_workers is already at its bound ({evidence['num_workers_bound_why']})",
            [],
            evidence,
            [
                AdviceItem(
                    f"do not raise num_workers beyond {n}: more processes would add memory and context switches, "
                    "not throughput",
                    names=("num_workers",),
                ),
                *LATENCY_ADVICE,
            ],
        )
    if cpu_bound:
        summary = (
            f"{pct}; {n} worker(s) busy {cpu:.0f}% of a core while {idle_cores:.1f} of {host.cores} cores are idle"
            if not is_nan(cpu)
            else f"{pct} with {n} workers and idle cores"
        )
        why = f"the workers are busy all the time and {idle_cores:.1f} cores are idle" if not is_nan(idle_cores) else ""
    else:
        summary = (
            f"{pct}; {n} worker(s) use only {cpu:.0f}% of a core: they wait on "
            "something slow per sample (latency), so more of them in parallel would hide it"
        )
        why = "each worker spends most of its time waiting, not computing"
    bound = f" (at most {evidence['num_workers_bound_why']})"
    return Finding(
        "input.too_few_workers",
        severity,
        summary,
        [],
        evidence,
        [
            AdviceItem(
                f"raise num_workers from {n} to {suggested}" + (f": {why}" if why else "") + bound,
                {"num_workers": suggested},
                why,
            ),
            STAY_AHEAD,
        ],
    )


# ---------------------------------------------------------------- stalls


def host_to_device(ctx: RuleContext) -> Finding | None:
    """Pageable copies: the GPU idles while large host→device transfers run from unpinned memory."""
    w, ev, th = ctx.w, ctx.ev, ctx.th
    if is_nan(ev.gpu_util) or is_nan(ev.gpu_pcie_rx_mb_s) or w.loader.get("pin_memory"):
        return None
    if ev.gpu_util >= th.host_overhead_gpu_util or ev.gpu_pcie_rx_mb_s < th.h2d_pcie_rx_mb_s:
        return None
    main_busy = not is_nan(ev.main.cpu_pct) and ev.main.cpu_pct >= th.host_overhead_main_cpu
    return Finding(
        "input.host_to_device",
        "critical" if ev.gpu_util < 40 else "warning",
        f"the GPU is {ev.gpu_util:.0f}% busy while {ev.gpu_pcie_rx_mb_s:.0f} MB/s cross PCIe from pageable memory "
        "(pin_memory=False): host→device copies are not overlapped with compute",
        [],
        base_evidence(w)
        | {
            "gpu_util_pct": rounded(ev.gpu_util, 1),
            "pcie_rx_mb_s": rounded(ev.gpu_pcie_rx_mb_s, 1),
            "pin_memory": False,
            "main_cpu_busy": main_busy,
        },
        [
            AdviceItem(
                "set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True)",
                {"pin_memory": True, "non_blocking": True},
                "copies from pinned memory overlap with compute",
            ),
            AdviceItem("move less per step: uint8 images normalised on the GPU, not float32 from the host"),
        ],
    )
