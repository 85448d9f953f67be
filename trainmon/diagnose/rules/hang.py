"""A hang: the training stopped stepping long ago while its process lives (deadlock, stuck worker, SIGSTOP).

Judged on the run's own record rather than a window of steps (a hung run has none): the time since it last did
anything the agent reports (a step, a batch of any loader, a save, a mark; never a garbage collection, which
another thread's allocations can trigger while the loop is stuck), against max(``hang_min_s``,
``hang_step_factor`` × its recent p95 step). The stacks the monitor dumps when it fires are read back from the
run (``Run.stack_dumps``) into the evidence.

Offline (a report, the time budget), ``frozen_spans`` finds every silence the rule held over, from the last
activity before it to the next one (the freeze resumed: often inside one step, whose end is the first activity
after it) or to the run's close; ``freeze_finding`` judges one of them.
"""

from __future__ import annotations

import itertools
import math
import operator
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

from trainmon.diagnose.findings import Finding, code_advice
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
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


ADVICE = [
    "read the stacks (e on the screen, the report's stack dumps): the innermost frames name what each thread waits for",
    "blocked in a collective (all_reduce, barrier): another rank died or took another path; give "
    "init_process_group a timeout (and TORCH_NCCL_ASYNC_ERROR_HANDLING=1) so the job fails instead of hanging",
    "blocked in the DataLoader with a worker stuck in a read: pass DataLoader(timeout=...) and give the "
    "reads a timeout",
    "blocked acquiring a lock: two threads take the same locks in different orders; take them in one order",
]


def hang_limit(th: Thresholds, p95: float) -> float:
    """How long a run may do nothing before it counts as hung: max(``hang_min_s``, ``hang_step_factor`` × p95)."""
    return max(th.hang_min_s, th.hang_step_factor * p95)


@rule(Stage.ENDING, "stall.hang")
def hang(ctx: RuleContext) -> Finding | None:
    store, run, t, th = ctx.store, ctx.r, ctx.t, ctx.th
    if not alive(run, t) or not run.steps.total:
        return None
    last = run.last_activity(t)
    p95 = recent_p95(run, t)
    if last is None or math.isnan(p95):
        return None
    limit = hang_limit(th, p95)
    silent = t - last
    if silent <= limit:
        return None
    ev, where = _evidence(store, run, last, t, limit, p95)
    summary = f"no step for {silent:.0f} s (limit {limit:.0f} s: p95 step {p95 * 1e3:.0f} ms) while {run.label} lives"
    if where is not None:
        summary += f"; main thread in {where}"
    return Finding("stall.hang", "critical", summary, [], ev, advice_items=code_advice(*ADVICE))


def _evidence(
    store: Any, run: Run, last: float, t: float, limit: float, p95: float
) -> tuple[dict[str, Any], str | None]:
    """What a hang from ``last`` to ``t`` rests on: its length, the limit, the main process's CPU and thread state
    over it, and the stacks dumped for it (where the main thread waited)."""
    ev: dict[str, Any] = {
        "run": run.label,
        "silent_s": round(t - last, 1),
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
        ev["stack_dump_t"] = round(dumps[-1]["t"], 3)
    elif pid is None:
        ev["stacks"] = "n/a (other pid namespace)"
    return ev, where


def hang_episodes(run: Run, t0: float, t1: float, th: Thresholds) -> list[tuple[float, float]]:
    """The spans within [t0, t1] in which ``hang`` held for the run: from the limit after its last activity to its
    next activity, its close, or ``t1``."""
    out: list[tuple[float, float]] = []
    for f in frozen_spans(run, t0, t1, th):
        start = f.start + f.limit
        if start < f.end and f.end > t0 and start < t1:
            out.append((max(start, t0), min(f.end, t1)))
    return out


@dataclass(frozen=True)
class Freeze:
    """A silence the hang rule held over: from the run's last activity (``start``) to its next one, its close or
    the end of what was looked at (``end``); ``resumed``: the run did something again at ``end``."""

    start: float
    end: float
    limit: float  # the hang limit at its start (the rule held from start + limit on)
    p95: float  # the recent p95 step the limit came from, s
    resumed: bool

    @property
    def seconds(self) -> float:
        return self.end - self.start


def frozen_spans(run: Run, t0: float, t1: float, th: Thresholds) -> list[Freeze]:
    """Every silence of the run that overlaps [t0, t1] and lasted longer than the hang limit while its process
    lived, oldest first. Activity is what ``Run.last_activity`` counts (its beats and its steps' ends), so a
    freeze inside one step ends where that step does. Not clipped to [t0, t1]; the last one ends at ``t1`` at the
    latest (a run still connected) or at the run's close."""
    if not run.steps.total:
        return []
    close = t1 if run.connected and run.ended is None else min(t1, run.last_seen)
    beats = run.beats
    ends = run.steps.end
    out: list[Freeze] = []
    for a, b in _long_gaps(beats, close, th.hang_min_s):
        points = [a, *ends[bisect_right(ends, a) : bisect_left(ends, b)], b]
        for x, y in itertools.pairwise(points):
            if y - x <= th.hang_min_s or y <= t0 or x >= t1:
                continue
            p95 = recent_p95(run, x)
            if math.isnan(p95):
                continue
            limit = hang_limit(th, p95)
            if y - x > limit:
                out.append(Freeze(x, y, limit, p95, resumed=y < close))
    return out


def _long_gaps(beats: Any, close: float, least: float) -> list[tuple[float, float]]:
    """(a, b) for each pair of consecutive beats (the last with ``close``) more than ``least`` apart, found with
    C-level maps (a run beats up to twice a second for hours)."""
    points = beats[: bisect_right(beats, close)]
    if not points:
        return []
    if close > points[-1]:
        points.append(close)
    gaps = bytes(map(least.__lt__, map(operator.sub, points[1:], points[:-1])))
    out: list[tuple[float, float]] = []
    k = gaps.find(1)
    while k >= 0:
        out.append((points[k], points[k + 1]))
        k = gaps.find(1, k + 1)
    return out


def freeze_finding(store: Any, run: Run, freeze: Freeze, wall_s: float, frozen_s: float) -> Finding:
    """``stall.hang`` for one freeze as a report keeps it: its length, whether it resumed, where the main thread
    waited (the stacks the monitor dumped for it) and the share of the run's wall time (``wall_s``) its freezes
    took all together (``frozen_s``)."""
    ev, where = _evidence(store, run, freeze.start, freeze.end, freeze.limit, freeze.p95)
    ev["resumed"] = freeze.resumed
    ev["frozen_s"] = round(frozen_s, 1)
    ev["frozen_share"] = round(frozen_s / wall_s, 4) if wall_s > 0 else None
    length, limit, p95 = freeze.seconds, freeze.limit, freeze.p95
    if freeze.resumed:
        summary = (
            f"{run.label} froze for {length:.0f} s with no step (limit {limit:.0f} s: p95 step {p95 * 1e3:.0f} ms), "
            "then resumed"
        )
    else:
        summary = (
            f"no step for {length:.0f} s (limit {limit:.0f} s: p95 step {p95 * 1e3:.0f} ms) while {run.label} lives"
        )
    if where is not None:
        summary += f"; main thread in {where}"
    if wall_s > 0 and frozen_s >= 0.01 * wall_s:
        summary += f"; frozen {frozen_s / wall_s:.0%} of its {wall_s:.0f} s"
    return Finding("stall.hang", "critical", summary, [], ev, advice_items=code_advice(*ADVICE))
