"""Rules: pure functions from window figures and system evidence to Findings.

Thresholds come from the anchors (TB plugin: DataLoader > 5 % of the step; SageMaker: CPU > 90 %,
iowait; nvidia-resiliency-ext: straggler score < 0.75); see README "Verdicts".
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.window import HostWindow, RunWindow, quantile
from trainmon.metrics import limiting_reasons
from trainmon.numbers import is_nan, rounded


@dataclass
class Thresholds:
    window_s: float = 20.0
    window_steps: int = 20
    min_steps: int = 10  # fewer steady-state steps than this → insufficient_data
    wait_warning: float = 0.05  # DataLoader share of the step (TB plugin: > 5 %)
    wait_critical: float = 0.20
    exposed_min_share: float = 0.5  # on CUDA: the wait counts only if ≥ half of it left the GPU idle
    cpu_saturated_pct: float = 90.0  # SageMaker cpu_threshold
    worker_busy_pct: float = 70.0  # a worker using this much of a core is CPU-bound
    runq_starved_ms_s: float = 150.0  # runnable but waiting for a core this many ms per s: CPU-starved
    io_d_state: float = 0.25  # workers blocked on disk (D) this share of the time
    disk_busy_pct: float = 80.0
    disk_read_mb_s: float = 2.0  # workers' block-layer reads that, with idle CPU, mean disk-bound
    iowait_pct: float = 30.0
    remote_rchar_mb_s: float = 0.5  # workers read this much through read() with little block I/O
    checkpoint_share: float = 0.10
    checkpoint_critical_share: float = 0.30
    long_step_factor: float = 2.5  # a step this many times the median is a long step
    periodic_share: float = 0.15  # long steps take at least this share of the window
    periodic_irregularity: float = 1.0  # (p90 − p10) / median of the gaps between unexplained long steps
    host_overhead_gpu_util: float = 70.0
    h2d_pcie_rx_mb_s: float = 1000.0  # host→device traffic that matters when it is not overlapped
    host_overhead_main_cpu: float = 85.0
    gpu_mem_pct: float = 95.0
    throttle_share: float = 0.5
    host_mem_pct: float = 95.0
    swap_growth_mb: float = 64.0
    straggler_wait_gap: float = 0.10  # a rank waits this share of the step more than the others
    straggler_step_ratio: float = 1.25  # unsynchronised ranks: step time this much above the others
    hold_s: float = 3.0  # a new verdict must hold this long before the banner changes


def base_evidence(w: RunWindow) -> dict:
    return {
        "run": w.run.label,
        "steps": w.steps,
        "window_s": round(w.span_s, 2),
        "data_wait_fraction": round(w.wait_fraction, 4),
        "step_time_ms_p50": round(w.step_p50_s * 1e3, 2),
        "step_time_ms_p95": round(w.step_p95_s * 1e3, 2),
        "num_workers": w.loader.get("num_workers"),
        "batch_size": w.loader.get("batch_size"),
    }


def insufficient(w: RunWindow, th: Thresholds) -> Finding | None:
    if w.steps >= th.min_steps:
        return None
    return Finding(
        "insufficient_data",
        "ok",
        f"{w.steps} steady-state steps so far ({w.warm_steps} warm-up); need {th.min_steps} to judge",
        ["keep training; trainmon judges once warm-up is over"],
        {"run": w.run.label, "steps": w.steps, "warmup_steps": w.warm_steps, "min_steps": th.min_steps},
    )


# ---------------------------------------------------------------- input pipeline


def input_bound(w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds) -> Finding | None:
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
    pct = f"{f:.0%}"
    workers = w.loader.get("num_workers")
    if workers == 0:
        suggested = max(2, min(8, host.cores - 1))
        return Finding(
            "input.main_process",
            severity,
            f"{pct} of each step waits on data loaded in the main process (num_workers=0); "
            f"step p50 {w.step_p50_s * 1e3:.0f} ms",
            [
                f"set DataLoader(num_workers={suggested}) so batches are prepared in parallel with compute",
                "add persistent_workers=True (and pin_memory=True on a GPU) so workers survive epochs",
            ],
            evidence,
        )
    return _io_finding(w, host, ev, th, severity, evidence, pct) or _cpu_finding(
        w, host, ev, th, severity, evidence, pct, workers
    )


def _io_finding(
    w: RunWindow, host: HostWindow, ev: Evidence, th: Thresholds, severity: str, evidence: dict, pct: str
) -> Finding | None:
    d_state = ev.workers_mean("state_d")
    read = ev.workers_sum("read_mb_s")
    rchar = ev.workers_sum("rchar_mb_s")
    cpu = ev.workers_mean("cpu_pct")
    # Workers that read a lot from the block layer yet are not CPU-bound are waiting on the disk.
    block_reads = (
        not is_nan(read)
        and read >= th.disk_read_mb_s
        and (is_nan(rchar) or read >= 0.5 * rchar)
        and not is_nan(cpu)
        and cpu < th.worker_busy_pct
    )
    disk_bound = (
        block_reads
        or (not is_nan(d_state) and d_state >= th.io_d_state)
        or (not is_nan(ev.disk_util_max) and ev.disk_util_max >= th.disk_busy_pct and not is_nan(read) and read > 0.5)
        or (not is_nan(host.cpu_iowait) and host.cpu_iowait >= th.iowait_pct)
    )
    if disk_bound:
        disk = (
            f"{ev.disk_busiest} {ev.disk_util_max:.0f}% busy, r_await {ev.disk_await_max:.1f} ms"
            if ev.disk_busiest and not is_nan(ev.disk_util_max)
            else "disk busy"
        )
        blocked = f"workers blocked on disk (D) {d_state:.0%} of the time" if not is_nan(d_state) else "high iowait"
        evidence["sub_cause"] = "disk"
        return Finding(
            "input.io",
            severity,
            f"{pct} of each step waits on data; the workers wait on storage: {blocked}, {disk}",
            [
                "pack small files into large sequential shards (WebDataset, LMDB, HDF5, TFRecord) "
                "and read them in order",
                "copy the dataset to local NVMe or RAM (/dev/shm), or cache decoded samples",
                "raise num_workers and prefetch_factor to keep more reads in flight",
            ],
            evidence,
        )
    remote = (
        not is_nan(rchar)
        and rchar >= th.remote_rchar_mb_s
        and (is_nan(read) or read < 0.25 * rchar)
        and (is_nan(cpu) or cpu < th.worker_busy_pct)
    )
    if remote:
        evidence["sub_cause"] = "remote"
        return Finding(
            "input.io",
            severity,
            f"{pct} of each step waits on data; the workers read {rchar:.1f} MB/s through the network or a remote "
            f"mount with almost no local disk I/O, and are idle {1 - cpu / 100 if not is_nan(cpu) else 0:.0%} "
            "of the time: remote reads are the bottleneck",
            [
                "stage the dataset on local disk before training, or cache it after the first epoch",
                "raise num_workers (and prefetch_factor) to keep more remote requests in flight",
                "read fewer, larger objects (sharded formats) to amortise per-request latency",
            ],
            evidence,
        )
    return None


def _cpu_finding(
    w: RunWindow,
    host: HostWindow,
    ev: Evidence,
    th: Thresholds,
    severity: str,
    evidence: dict,
    pct: str,
    workers: int | None,
) -> Finding:
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
    idle_cores = host.cores * (1 - host.cpu_busy / 100) if not is_nan(host.cpu_busy) else math.nan
    if cpu_bound and saturated:
        evidence["sub_cause"] = "cpu"
        starved = f", each waiting {runq / 10:.0f}% of the time for a core" if not is_nan(runq) and runq > 50 else ""
        return Finding(
            "input.workers_cpu",
            severity,
            f"{pct} of each step waits on data; {n} workers at {cpu:.0f}% of a core{starved} and the host CPU is "
            f"{host.cpu_busy:.0f}% busy on {host.cores} cores: preprocessing is CPU-bound"
            if not is_nan(cpu)
            else f"{pct} of each step waits on data and the host CPU is {host.cpu_busy:.0f}% busy: preprocessing is "
            "CPU-bound",
            [
                "make each sample cheaper: crop/resize before converting, vectorise or batch the transforms",
                "cache decoded/augmented samples, or decode and augment on the GPU (DALI, nvJPEG, torchvision v2)",
                "more workers will not help: the cores are already full",
            ],
            evidence,
        )
    needed = math.ceil(n / max(0.05, 1 - w.wait_fraction))
    if cpu_bound and not is_nan(idle_cores):
        needed = min(needed, n + max(1, int(idle_cores + 0.5)))
    needed = max(needed, n + 1)
    evidence["sub_cause"] = "cpu" if cpu_bound else "latency"
    evidence["suggested_num_workers"] = needed
    if cpu_bound:
        summary = (
            f"{pct} of each step waits on data; {n} worker(s) busy {cpu:.0f}% of a core while "
            f"{idle_cores:.1f} of {host.cores} cores are idle"
            if not is_nan(cpu)
            else f"{pct} of each step waits on data with {n} workers and idle cores"
        )
        why = f"the workers are busy all the time and {idle_cores:.1f} cores are idle" if not is_nan(idle_cores) else ""
    else:
        summary = (
            f"{pct} of each step waits on data; {n} worker(s) use only {cpu:.0f}% of a core: they wait on "
            "something slow per sample (latency), so more of them in parallel would hide it"
        )
        why = "each worker spends most of its time waiting, not computing"
    return Finding(
        "input.too_few_workers",
        severity,
        summary,
        [
            f"raise num_workers from {n} to {needed}" + (f": {why}" if why else ""),
            "set persistent_workers=True and prefetch_factor≥2 so workers stay ahead across epochs",
        ],
        evidence,
    )


# ---------------------------------------------------------------- stalls


def checkpoint_stall(w: RunWindow, th: Thresholds) -> Finding | None:
    if w.span_s <= 0 or not w.checkpoints:
        return None
    share = w.checkpoint_s / w.span_s
    if share < th.checkpoint_share:
        return None
    ev = base_evidence(w) | {
        "checkpoint_s": round(w.checkpoint_s, 3),
        "checkpoints": w.checkpoints,
        "checkpoint_share": round(share, 4),
    }
    per = w.checkpoint_s / w.checkpoints
    return Finding(
        "stall.checkpoint",
        "critical" if share >= th.checkpoint_critical_share else "warning",
        f"checkpoint saves took {share:.0%} of the last {w.span_s:.0f} s ({w.checkpoints} saves, {per:.2f} s each)",
        [
            "save less often, or asynchronously (torch.distributed.checkpoint.async_save, a background thread)",
            "write checkpoints to fast local storage and copy them off in the background",
        ],
        ev,
    )


def periodic_stall(w: RunWindow, th: Thresholds) -> Finding | None:
    if w.steps < th.min_steps or is_nan(w.step_p50_s):
        return None
    limit = w.step_p50_s * th.long_step_factor
    longest = w.long_durations(limit)  # exact and C-level: most windows have no candidate at all
    if len(longest) < 2 or math.fsum(longest) < th.periodic_share * w.step_time_s:
        return None
    # Long steps spent mostly waiting on data are an input problem; those overlapping a save are a
    # checkpoint problem: neither is a periodic stall.
    long_steps = [
        (s, e) for s, e, wait in w.long_steps(limit) if wait < 0.5 * (e - s) and not w.overlaps_checkpoint(s, e)
    ]
    if len(long_steps) < 2:
        return None
    long_time = sum(e - s for s, e in long_steps)
    share = long_time / w.step_time_s if w.step_time_s > 0 else 0.0
    if share < th.periodic_share:
        return None
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(long_steps)]
    period = quantile(gaps, 0.5) if gaps else math.nan
    extra = long_time - len(long_steps) * w.step_p50_s
    names = sorted({p for p in w.phase_names_in(long_steps)})
    eval_ran = w.eval_in(long_steps)
    if not names and not eval_ran and len(gaps) >= 2:
        spread = (quantile(gaps, 0.9) - quantile(gaps, 0.1)) / period if period > 0 else math.inf
        if spread > th.periodic_irregularity:
            return None  # irregular hiccups (contention, noise), not a recurring stall
    what = f" during {', '.join(names)}" if names else (" (an eval loader ran)" if eval_ran else "")
    ev = base_evidence(w) | {
        "long_steps": len(long_steps),
        "long_step_share": round(share, 4),
        "period_s": rounded(period, 2),
        "long_step_ms_p50": rounded(quantile([e - s for s, e in long_steps], 0.5) * 1e3, 1),
        "phases": names,
    }
    return Finding(
        "stall.periodic",
        "critical" if share >= 0.4 else "warning",
        f"{len(long_steps)} long steps{what} every {period:.1f} s take {share:.0%} of the time "
        f"(+{extra:.1f} s over the {w.step_p50_s * 1e3:.0f} ms median)",
        [
            "run evaluation, logging and metric syncs less often, or asynchronously",
            "avoid per-step .item()/.cpu() syncs in logging; aggregate on device and log every N steps",
            "if it is Python GC: gc.freeze() after setup, or raise gc thresholds",
        ],
        ev,
    )


# ---------------------------------------------------------------- host / GPU


def host_overhead(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    f = w.wait_fraction
    if is_nan(f) or f > th.wait_warning or is_nan(ev.gpu_util) or is_nan(ev.main.cpu_pct):
        return None
    if host_to_device(w, ev, th) is not None:
        return None  # the copies explain the idle GPU better than generic host overhead
    if ev.gpu_util >= th.host_overhead_gpu_util or ev.main.cpu_pct < th.host_overhead_main_cpu:
        return None
    return Finding(
        "host.overhead",
        "critical" if ev.gpu_util < 40 else "warning",
        f"the GPU is only {ev.gpu_util:.0f}% busy while the main thread runs {ev.main.cpu_pct:.0f}% of a core outside "
        f"data waits ({f:.0%} wait): the loop is host-bound (kernel launches, syncs, Python work)",
        [
            "capture the step with CUDA Graphs or torch.compile(mode='reduce-overhead')",
            "remove per-step syncs (.item(), .cpu(), print of tensors); use a larger batch",
            "press d on the main process to see where its time goes",
        ],
        base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1), "main_cpu_pct": rounded(ev.main.cpu_pct, 1)},
    )


def host_to_device(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    """Pageable copies: the GPU idles while large host→device transfers run from unpinned memory."""
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
        [
            "set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True)",
            "move less per step: uint8 images normalised on the GPU, not float32 from the host",
        ],
        base_evidence(w)
        | {
            "gpu_util_pct": rounded(ev.gpu_util, 1),
            "pcie_rx_mb_s": rounded(ev.gpu_pcie_rx_mb_s, 1),
            "pin_memory": False,
            "main_cpu_busy": main_busy,
        },
    )


def gpu_memory(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    if is_nan(ev.gpu_mem_pct) or ev.gpu_mem_pct < th.gpu_mem_pct:
        return None
    return Finding(
        "memory.gpu_pressure",
        "warning",
        f"GPU memory {ev.gpu_mem_pct:.0f}% used: the next larger batch or a fragmentation spike will OOM",
        [
            "use activation checkpointing or AMP (bf16) to cut activation memory",
            "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
        ],
        {"run": w.run.label, "gpu_mem_pct": rounded(ev.gpu_mem_pct, 1), "gpus": ev.gpus},
    )


def gpu_throttled(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    if is_nan(ev.gpu_throttle_share) or ev.gpu_throttle_share < th.throttle_share:
        return None
    reasons = [r.long for r in limiting_reasons(ev.gpu_throttle_bits)]
    return Finding(
        "gpu.throttled",
        "warning",
        f"GPU clocks held down {ev.gpu_throttle_share:.0%} of the time ({', '.join(reasons)})",
        [
            "check cooling and airflow (thermal) or the power limit (nvidia-smi -q -d PERFORMANCE,POWER)",
            "a power-capped GPU runs slower at the same utilisation: compare sm_clock with its maximum",
        ],
        {"run": w.run.label, "throttle_share": rounded(ev.gpu_throttle_share, 3), "reasons": reasons, "gpus": ev.gpus},
    )


def host_memory(host: HostWindow, th: Thresholds) -> Finding | None:
    mem, swap = host.mem_used_pct_max, host.swap_growth_mb
    if (not is_nan(mem) and mem >= th.host_mem_pct) or (not is_nan(swap) and swap >= th.swap_growth_mb):
        return Finding(
            "memory.host_pressure",
            "critical" if not is_nan(swap) and swap >= th.swap_growth_mb else "warning",
            f"host memory {mem:.0f}% used, swap grew {0 if is_nan(swap) else swap:.0f} MB in the window",
            [
                "reduce num_workers or prefetch_factor (each worker holds its own copy of Python objects)",
                "keep datasets as memory-mapped arrays or tensors instead of lists of Python objects",
            ],
            {"mem_used_pct_max": rounded(mem, 1), "swap_growth_mb": rounded(swap, 1)},
        )
    return None


def compute_bound(w: RunWindow, ev: Evidence, th: Thresholds) -> Finding | None:
    f = w.starving_fraction
    if is_nan(f) or f > th.wait_warning:
        return None
    sps = w.samples_per_s
    rate = f", {sps:.0f} samples/s" if not is_nan(sps) else ""
    gpu = f", GPU {ev.gpu_util:.0f}% busy" if not is_nan(ev.gpu_util) else ""
    return Finding(
        "ok.compute_bound",
        "ok",
        f"data wait is {f:.1%} of the step; compute is the limit (step p50 {w.step_p50_s * 1e3:.0f} ms{rate}{gpu})",
        ["nothing starves the accelerator: to go faster, speed up the model (AMP, torch.compile, a larger batch)"],
        base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1)},
    )


# ---------------------------------------------------------------- distributed


def straggler(windows: list[RunWindow], sub_causes: dict[int, Finding | None], th: Thresholds) -> Finding | None:
    """Ranks of one job: the rank whose data wait (or, unsynchronised, step time) is out of line."""
    ranked = [w for w in windows if w.steps >= th.min_steps]
    if len(ranked) < 2:
        return None
    waits = {id(w): (w.wait_s / w.steps) for w in ranked}
    steps = {id(w): w.step_p50_s for w in ranked}
    slow = max(ranked, key=lambda w: waits[id(w)])
    others = [w for w in ranked if w is not slow]
    other_wait = quantile([waits[id(w)] for w in others], 0.5)
    step = quantile(list(steps.values()), 0.5)
    gap = (waits[id(slow)] - other_wait) / step if step > 0 else 0.0
    kind = "data"
    if gap < th.straggler_wait_gap:
        slow = max(ranked, key=lambda w: steps[id(w)])
        others = [w for w in ranked if w is not slow]
        ratio = steps[id(slow)] / max(1e-9, quantile([steps[id(w)] for w in others], 0.5))
        if ratio < th.straggler_step_ratio:
            return None
        kind = "compute"
        gap = ratio - 1
    sub = sub_causes.get(id(slow))
    sub_code = sub.code if sub is not None and sub.code.startswith("input.") else None
    who = slow.run.label
    peers = ", ".join(w.run.label for w in others)
    if kind == "data":
        summary = (
            f"{who} is the straggler: it waits {slow.wait_fraction:.0%} of each step on data while "
            f"{peers} wait {quantile([w.wait_fraction for w in others], 0.5):.0%} and idle in collectives"
        )
        if sub_code:
            summary += f" ({sub_code})"
    else:
        summary = f"{who} is the straggler: its steps take {gap + 1:.2f}× those of {peers}"
    advice = [f"fix {who} first: every other rank waits for it at each synchronisation"]
    if sub is not None and sub.code.startswith("input."):
        advice += sub.advice
    else:
        advice.append(f"compare {who}'s host (CPU, disk, GPU clocks) with the others'; rebalance its data shard")
    return Finding(
        "dist.straggler",
        "critical" if gap >= 0.2 else "warning",
        summary,
        advice,
        {
            "rank": slow.run.rank,
            "run": who,
            "kind": kind,
            "gap": round(gap, 4),
            "sub_cause": sub_code,
            "ranks": {
                w.run.label: {
                    "data_wait_fraction": round(w.wait_fraction, 4),
                    "step_time_ms_p50": round(w.step_p50_s * 1e3, 2),
                }
                for w in ranked
            },
        },
    )
