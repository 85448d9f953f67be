"""A hang: the training stopped stepping long ago while its process lives (deadlock, stuck worker, SIGSTOP).

Judged on the run's own record rather than a window of steps (a hung run has none): the time since it last did
anything the agent reports (a step, a batch of any loader, a save, a mark; never a garbage collection, which
another thread's allocations can trigger while the loop is stuck), against max(``hang_min_s``,
``hang_step_factor`` × its recent p95 step). The stacks the monitor dumps when it fires are read back from the
run (``Run.stack_dumps``) into the evidence.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from typing import Any

from trainmon.diagnose.findings import Finding
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.stats import mean, quantile
from trainmon.diagnose.thresholds import Thresholds
from trainmon.metrics import PROC
from trainmon.numbers import rounded
from trainmon.store.run import Run
from trainmon.store.stacks import innermost

RECENT_STEPS = 200  # the p95 step is taken over the last this many steps before the silence


def alive(run: Run, t: float) -> bool:
    """The run's process was still connected at ``t`` (a replayed run that closed later counts until its close)."""
    if run.connected:
        return run.ended is None  # a goodbye means the process is exiting
    return t < run.last_seen  # closed: last_seen is the close


def recent_p95(run: Run, t: float) -> float:
    """The p95 duration of the last RECENT_STEPS steps ended by ``t`` (steady ones where there are any)."""
    steps = run.steps
    j = bisect_right(steps.end, t)
    i = max(0, j - RECENT_STEPS)
    durations = steps.dur[i:j]
    steady = [d for d, warm in zip(durations, steps.warm[i:j], strict=True) if not warm]
    return quantile(steady or list(durations), 0.95)


def hang(ctx: RuleContext) -> Finding | None:
    store, run, t, th = ctx.store, ctx.r, ctx.t, ctx.th
    if not alive(run, t) or not run.steps.total:
        return None
    last = run.last_activity(t)
    p95 = recent_p95(run, t)
    if last is None or math.isnan(p95):
        return None
    limit = max(th.hang_min_s, th.hang_step_factor * p95)
    silent = t - last
    if silent <= limit:
        return None
    ev: dict[str, Any] = {
        "run": run.label,
        "silent_s": round(silent, 1),
        "limit_s": round(limit, 1),
        "step_time_ms_p95": round(p95 * 1e3, 2),
        "steps": run.steps.total,
        "last_activity_t": round(last, 3),
    }
    pid = run.proc_pid
    if pid is not None:
        ev["main_cpu_pct"] = rounded(mean(store.values_between(PROC.key(pid, "cpu_pct"), last, t)), 1)
        ev["main_thread_running"] = rounded(mean(store.values_between(PROC.key(pid, "state_main_R"), last, t)), 2)
    dumps = [d for d in run.stack_dumps if d["reason"] == "stall.hang" and last <= d["t"] <= t]
    where = innermost(dumps[-1]) if dumps else None
    ev["stack_dumps"] = len(dumps)
    if where is not None:
        ev["main_thread_in"] = where
    elif pid is None:
        ev["stacks"] = "n/a (other pid namespace)"
    summary = f"no step for {silent:.0f} s (limit {limit:.0f} s: p95 step {p95 * 1e3:.0f} ms) while {run.label} lives"
    if where is not None:
        summary += f"; main thread in {where}"
    return Finding(
        "stall.hang",
        "critical",
        summary,
        [
            "read the stacks (e on the screen, the report's stack dumps): the innermost frames name what each "
            "thread waits for",
            "blocked in a collective (all_reduce, barrier): another rank died or took another path; give "
            "init_process_group a timeout (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1) so the job fails instead of hanging",
            "blocked in the DataLoader with a worker stuck in a read: pass DataLoader(timeout=...) and give the "
            "reads a timeout",
            "blocked acquiring a lock: two threads take the same locks in different orders; take them in one order",
        ],
        ev,
    )


def hang_episodes(run: Run, t0: float, t1: float, th: Thresholds) -> list[tuple[float, float]]:
    """The spans within [t0, t1] in which ``hang`` held for the run: from the limit after its last activity to its
    next activity, its close, or ``t1`` (a report's phases are cut from steps, which a hung run has none of)."""
    if not run.steps.total:
        return []
    close = t1 if run.connected and run.ended is None else min(t1, run.last_seen)
    out: list[tuple[float, float]] = []
    for a, b in itertools.pairwise([*run.beats, close]):
        if b - a <= th.hang_min_s:
            continue
        p95 = recent_p95(run, a)
        start = a + max(th.hang_min_s, th.hang_step_factor * p95) if not math.isnan(p95) else math.inf
        if start < b and b > t0 and start < t1:
            out.append((max(start, t0), min(b, t1)))
    return out
