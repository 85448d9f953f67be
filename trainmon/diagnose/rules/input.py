"""Input starvation: loading in the main process, too few workers, CPU-bound workers, storage, host→device copies."""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import AdviceItem, Finding
from trainmon.diagnose.live.host_window import HostWindow
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.batch_source import batch_source
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.gpu import gpu_is_the_limit
from trainmon.diagnose.rules.input_advice import DISK_ADVICE, NET_ADVICE, RCHAR_ADVICE
from trainmon.diagnose.rules.input_workers import advise_workers, cpu_finding, worker_cap, workers_ahead
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan, rounded


@rule(Stage.PER_RUN, "input.main_process", "input.io", "input.workers_cpu", "input.too_few_workers", "host.overhead")
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
    if (io := _io_finding(w, host, ev, th, severity, evidence, pct)) is not None:
        return io
    if not is_nan(workers_ahead(ev, th)) and f < th.wait_critical and gpu_is_the_limit(ev, th):
        return None  # a healthy loader, its workers ahead: the compute is the limit (rules/gpu.py compute_bound)
    return cpu_finding(w, host, ev, th, severity, evidence, pct, workers)


def _main_process(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict[str, Any], idle: str
) -> Finding:
    """num_workers=0: loading f of the step in one process takes f / (1 − f) workers to hide behind compute;
    loading that keeps the main thread busy is CPU work (bounded by the cores), one that leaves it idle waits."""
    f = w.wait_fraction
    main_cpu = ev.main.cpu_pct
    cpu_bound = is_nan(main_cpu) or main_cpu >= th.worker_busy_pct
    evidence["sub_cause"] = "cpu" if cpu_bound else "latency"
    suggested = advise_workers(
        evidence, max(2, math.ceil(f / max(th.advice_min_compute_share, 1 - f))), cpu_bound, host.cores, th
    )
    where = f" by its thread {evidence['fed_by']}" if evidence.get("fed_by") else ""
    return Finding(
        "input.main_process",
        severity,
        f"{f:.0%} of each step waits on data loaded in the main process{where} (num_workers=0){idle}"
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
                "add persistent_workers=True so the workers survive epochs",
                {"persistent_workers": True},
                "workers survive epochs",
            ),
            *_pin_memory(w),
        ],
    )


def _pin_memory(w: RunWindow) -> list[AdviceItem]:
    """pin_memory=True where batches go to a GPU (a CPU run gains nothing from pinned memory)."""
    device = str(w.run.device or "")
    if device.startswith("cpu"):
        return []
    where = "" if device.startswith("cuda") else " on a GPU"
    return [
        AdviceItem(
            f"add pin_memory=True{where} so batches are copied to the device from pinned memory",
            {"pin_memory": True},
            "copies from pinned memory",
        )
    ]


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
    # Workers that wait on reads may be more than the cores (advice.fit_to_window stops "more" at this bound).
    evidence["num_workers_cap"], evidence["num_workers_bound"] = worker_cap(False, host.cores, th)
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


# ---------------------------------------------------------------- stalls


@rule(Stage.PER_RUN, "input.host_to_device")
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
