"""Input starvation with DataLoader workers that compute or wait: how many workers the host can run, and what the
train loader's own workers show over the spans the loop consumed it (CPU-bound, waiting, or ahead of the loop)."""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.evidence import Evidence
from trainmon.diagnose.findings import AdviceItem, Finding, code_advice
from trainmon.diagnose.live.host_window import HostWindow
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.input_advice import FEWER_TENSORS, LATENCY_ADVICE, STAY_AHEAD
from trainmon.diagnose.thresholds import Thresholds
from trainmon.numbers import is_nan, rounded


def workers_ahead(ev: Evidence, th: Thresholds) -> float:
    """The share of looks that found the train loader's workers waiting on their index queue, where that makes them
    ahead of the loop (at least ``workers_ahead_share``); nan otherwise. A worker there has handed over every batch
    asked of it: a wait of the loop's beside it is the main process taking batches in, not the workers' latency."""
    ahead = ev.workers_mean("queue_wait") if ev.known_workers else math.nan
    return ahead if not is_nan(ahead) and ahead >= th.workers_ahead_share else math.nan


def worker_cap(cpu_bound: bool, cores: int, th: Thresholds) -> tuple[int, str]:
    """The most DataLoader workers worth advising on ``cores`` usable cores, and which bound that is: one per
    core for workers that compute ("usable_cores"); a stated multiple of the cores for workers that mostly wait
    ("latency_per_core": past it, more processes add memory, start-up and context switches, not throughput)."""
    cores = max(1, cores)
    if cpu_bound:
        return cores, "usable_cores"
    return max(1, int(th.latency_workers_per_core * cores)), "latency_per_core"


def advise_workers(
    evidence: dict[str, Any],
    wanted: int,
    cpu_bound: bool,
    cores: int,
    th: Thresholds,
    reason: str = "the workers compute",
) -> int:
    """``wanted`` workers within the bound (at least 1); the evidence says which bound applied and why
    (``reason``: why one per core, for workers not seen waiting)."""
    cap, bound = worker_cap(cpu_bound, cores, th)
    evidence["num_workers_cap"] = cap
    evidence["num_workers_bound"] = bound
    evidence["num_workers_bound_why"] = (
        f"{cap} = one per usable core ({cores}), {reason}"
        if bound == "usable_cores"
        else f"{cap} = {th.latency_workers_per_core:g} per usable core ({cores}), the workers mostly wait"
    )
    suggested = max(1, min(wanted, cap))
    evidence["suggested_num_workers"] = suggested
    return suggested


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
        [],
        evidence,
        advice_items=code_advice(
            "make each sample cheaper: crop/resize before converting, vectorise or batch the transforms",
            "cache decoded/augmented samples, or decode and augment on the GPU (DALI, nvJPEG, torchvision v2)",
            f"more workers will not help: the cores are already full (at most {evidence['num_workers_bound_why']})",
        ),
    )


def cpu_finding(
    w: RunWindow,
    host: HostWindow,
    ev: Evidence,
    th: Thresholds,
    severity: str,
    evidence: dict[str, Any],
    pct: str,
    workers: int | None,
) -> Finding:
    """The train loader's own workers over the spans the loop consumed it (see Evidence.workers_mean): CPU-bound
    on a saturated host, CPU-bound with room, seen waiting (latency: their main threads blocked), or ahead of the
    loop (the loop's own thread ran through its waits). An advised count never exceeds what the host can run: the
    usable cores, or a stated multiple of them for workers seen waiting."""
    n = workers or 1
    cpu = ev.workers_mean("cpu_pct")
    runq = ev.workers_mean("runq_ms_s")
    blocked = ev.workers_mean("blocked")
    ahead = ev.workers_mean("queue_wait")  # blocked on the index queue: waiting to be asked, not on a slow sample
    # Busy is running or runnable: a worker waiting for a core on a contended host computes as much as it is let.
    cpu_bound = (not is_nan(cpu) and cpu >= th.worker_busy_pct) or (
        not is_nan(cpu) and not is_nan(runq) and cpu + runq / 10 >= th.worker_busy_pct
    )
    if not cpu_bound and not is_nan(cpu) and not is_nan(blocked) and cpu >= th.worker_busy_pct / 2:
        cpu_bound = (1 - blocked) * 100 >= th.worker_busy_pct  # its threads seldom found blocked: on a core or in line
    saturated = (not is_nan(host.cpu_busy) and host.cpu_busy >= th.cpu_saturated_pct) or (
        not is_nan(runq) and runq >= th.runq_starved_ms_s * 2
    )
    if is_nan(cpu):  # no per-process figures: judge by the host alone
        cpu_bound = True
    # Waiting is seen, never inferred from a low CPU figure: the workers' threads found blocked.
    slow = blocked - ahead if not is_nan(blocked) and not is_nan(ahead) else blocked
    waits = not cpu_bound and not is_nan(slow) and slow >= 1 - th.worker_busy_pct / 100
    evidence["workers_blocked"] = rounded(blocked, 3)
    evidence["workers_ahead"] = rounded(ahead, 3)
    evidence["idle_s_left_out"] = round(ev.idle_s, 2)
    evidence["sub_cause"] = "cpu" if cpu_bound else "latency" if waits else "unknown"
    if not cpu_bound and not is_nan(ahead) and ahead >= th.workers_ahead_share:
        return _receive(w, severity, evidence, pct, n, cpu, blocked, ev.loop.state_r, ahead)
    if waits and (running := _loop_ran_through(w, ev)) is not None:
        return _receive(w, severity, evidence, pct, n, cpu, blocked, running)
    idle_cores = host.idle_cores  # this run's share of the idle usable cores
    needed = math.ceil(n / max(th.advice_min_compute_share, 1 - w.wait_fraction))
    if cpu_bound and not is_nan(idle_cores):
        needed = min(needed, n + max(1, int(idle_cores + 0.5)))
    reason = "the workers compute" if cpu_bound else "nothing shows the workers waiting"
    suggested = advise_workers(evidence, max(needed, n + 1), not waits, host.cores, th, reason)
    full = cpu_bound and suggested <= n  # as many CPU-bound workers as usable cores already
    if cpu_bound and (saturated or full):
        return _workers_cpu(host, severity, evidence, pct, n, cpu, runq, full and not saturated)
    if not cpu_bound and suggested <= n:
        return _at_bound(severity, evidence, pct, n, cpu, waits)
    summary, why = _too_few_words(pct, n, cpu, blocked, idle_cores, host.cores, cpu_bound, waits)
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
            *STAY_AHEAD,
        ],
    )


def _too_few_words(
    pct: str, n: int, cpu: float, blocked: float, idle_cores: float, cores: int, cpu_bound: bool, waits: bool
) -> tuple[str, str]:
    """The summary of an advice to raise num_workers, and why (workers busy, seen waiting, or neither)."""
    if cpu_bound:
        summary = (
            f"{pct}; {n} worker(s) busy {cpu:.0f}% of a core while {idle_cores:.1f} of {cores} cores are idle"
            if not is_nan(cpu)
            else f"{pct} with {n} workers and idle cores"
        )
        why = f"the workers are busy all the time and {idle_cores:.1f} cores are idle" if not is_nan(idle_cores) else ""
        return summary, why
    if waits:
        return (
            f"{pct}; {n} worker(s) use only {cpu:.0f}% of a core and are blocked {blocked:.0%} of the time: they "
            "wait on something slow per sample (latency), so more of them in parallel would hide it",
            "each worker spends most of its time waiting, not computing",
        )
    seen = "what they do the rest of the time was not seen" if is_nan(blocked) else f"blocked {blocked:.0%}"
    return (
        f"{pct}; {n} worker(s) use only {cpu:.0f}% of a core and are not seen waiting ({seen}): more of them help "
        "as far as the cores go",
        "the workers do not keep up",
    )


def _at_bound(severity: str, evidence: dict[str, Any], pct: str, n: int, cpu: float, waits: bool) -> Finding:
    """Workers that do not compute, already as many as the bound allows."""
    what = "they wait on something slow per sample (latency)" if waits else "what they wait on was not seen"
    return Finding(
        "input.too_few_workers",
        severity,
        f"{pct}; {n} worker(s) use only {cpu:.0f}% of a core: {what}, and num_workers is already at its bound "
        f"({evidence['num_workers_bound_why']})",
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


def _loop_ran_through(w: RunWindow, ev: Evidence) -> float | None:
    """The share of looks that found the loop's thread running, where it ran through most of its data waits
    (at least 1 − half the wait share): the wait was its own work on each batch, not a wait on the workers.
    None otherwise, or where its states were not seen."""
    running = ev.loop.state_r
    f = w.wait_fraction
    if is_nan(running) or is_nan(f) or running < 1 - f / 2:
        return None
    return running


def _receive(
    w: RunWindow,
    severity: str,
    evidence: dict[str, Any],
    pct: str,
    n: int,
    cpu: float,
    blocked: float,
    running: float,
    ahead: float = math.nan,
) -> Finding:
    """Workers that keep ahead of the loop: seen waiting on their index queue (they handed over what was asked of
    them), or blocked while the loop's thread ran through its waits. The wait is the main process taking each batch
    from the workers. More workers cannot shorten it."""
    evidence["sub_cause"] = "receive"
    evidence["main_thread_running"] = rounded(running, 3)
    per_batch = w.wait_s / w.steps * 1e3 if w.steps else math.nan
    each = f", {per_batch:.1f} ms a step" if not is_nan(per_batch) else ""
    if not is_nan(ahead):
        seen = f"waiting on their index queue {ahead:.0%} of the time: they have their batches ready"
    else:
        seen = (
            f"blocked {blocked:.0%} of the time) while the training thread runs through its waits "
            f"({running:.0%} of looks running"
        )
    return Finding(
        "input.main_process",
        severity,
        f"{pct}, yet the {n} worker(s) keep ahead ({cpu:.0f}% of a core, {seen}): the wait is the main "
        f"process taking each batch from the workers{each}",
        [],
        evidence,
        [
            AdviceItem(
                f"keep num_workers at {n}: the workers are ahead of the loop, more would wait longer",
                names=("num_workers",),
            ),
            FEWER_TENSORS,
        ],
    )
