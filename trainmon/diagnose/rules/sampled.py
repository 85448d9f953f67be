"""Trainings without an agent, judged from py-spy samples of their main thread and what /proc shows of them.

The data-wait share is the share of main-thread samples inside a DataLoader's ``__next__``; the input rules then
read the workers, the host and the disks exactly as for a run with an agent. Everything such a finding says is
marked as sampled, with the samples it rests on, the share's standard error, and how to get exact figures.
"""

from __future__ import annotations

import math
from dataclasses import replace

from trainmon.diagnose.evidence import gather
from trainmon.diagnose.findings import AdviceItem, Finding, code_advice
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.input import input_bound
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.metrics import PROC, PYSPY
from trainmon.numbers import is_nan, known, rounded
from trainmon.store.run import Run
from trainmon.store.store import Store

SAMPLED_LOADER = 1  # the one loader a sampled run's workers are told as


def sampled_share(store: Store, pid: int, t0: float, t1: float) -> tuple[float, int]:
    """The share of main-thread samples in data waits over [t0, t1], and how many samples it rests on."""
    shares = store.values_between(PYSPY.key(pid, "data_wait_share"), t0, t1)
    counts = store.values_between(PYSPY.key(pid, "samples"), t0, t1)
    weighted = total = 0.0
    for share, n in zip(shares, counts, strict=False):
        if not is_nan(share) and not is_nan(n) and n > 0:
            weighted += share * n
            total += n
    return (weighted / total if total else math.nan), int(total)


def attach_advice(run: Run) -> str:
    return (
        f"for exact step and data-wait figures, attach the agent without a restart: trainmon attach {run.pid} "
        "(or select it in the process table and press a)"
    )


@rule(
    Stage.SAMPLED,
    "input.main_process",
    "input.io",
    "input.workers_cpu",
    "input.too_few_workers",
    "ok.compute_bound",
    "insufficient_data",
)
def sampled_verdict(ctx: RuleContext) -> Finding:
    """The verdict of a training measured by sampling, over the span of its host window (``ctx.host``: from
    ``ctx.since`` to ``ctx.t``)."""
    store, run, th, t1 = ctx.store, ctx.r, ctx.th, ctx.t
    t0 = t1 - th.window_s if ctx.since is None else ctx.since
    share, n = sampled_share(store, run.pid, t0, t1)
    se = math.sqrt(share * (1 - share) / n) if n and not is_nan(share) else math.nan
    cpu = known(store.values_between(PROC.key(run.pid, "cpu_pct"), t0, t1))
    main_cpu = sum(cpu) / len(cpu) if cpu else math.nan
    evidence = {
        "run": run.label,
        "measured_by": "sampling",
        "steps": None,
        "samples": n,
        "data_wait_fraction": rounded(share, 4),
        "data_wait_se": rounded(se, 4),
        "window_s": round(t1 - t0, 2),
        "main_cpu_pct": rounded(main_cpu, 1),
    }
    who = f"{run.name} (pid {run.pid})"
    if n < th.sampled_min_samples:
        return Finding(
            "insufficient_data",
            "ok",
            f"sampled {who}: {n} samples of its main thread so far; need {th.sampled_min_samples} to judge",
            [],
            evidence,
            advice_items=code_advice(attach_advice(run)),
        )
    if share <= th.wait_warning and (is_nan(main_cpu) or main_cpu < th.sampled_idle_cpu_pct):
        return Finding(
            "insufficient_data",
            "ok",
            f"sampled {who}: idle (main process {main_cpu:.0f}% of a core, {share:.0%} of samples in data waits)",
            [],
            evidence,
            advice_items=code_advice(attach_advice(run)),
        )
    w = RunWindow(run, t0, t1, step_time_s=1.0, wait_s=share, loader_id=SAMPLED_LOADER)
    ev = gather(store, run, t0, t1, th.throttle_power_cap_clock, SAMPLED_LOADER)
    found = input_bound(replace(ctx, window=w, evidence=ev))
    tag = f"sampled {who}, {n} samples (±{se:.0%})"
    if found is None:
        return Finding(
            "ok.compute_bound",
            "ok",
            f"{tag}: {share:.0%} of the main thread's samples wait on data; no input starvation seen",
            [],
            evidence,
            advice_items=code_advice(attach_advice(run)),
        )
    for key in ("step_time_ms_p50", "step_time_ms_p95"):
        found.evidence.pop(key, None)  # a sampled run has no steps
    found.evidence.update(evidence)
    found.summary = f"{tag}: {found.summary}"
    found.add_advice(AdviceItem(attach_advice(run)))
    return found
