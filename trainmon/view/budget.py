"""A run's time budget for the live screen: the parts of its wall time so far (``trainmon.analyses.time_budget``), as
short names and shares, largest first. The budget walks the run's whole step table and its shares move slowly, so
it is taken again only after ``REFRESH_S`` of the instant shown, or longer where that walk is dear: all runs'
budgets together take at most ``CPU_SHARE`` of a core (16 runs of 1000 steps/s: about every 50 s each)."""

from __future__ import annotations

import time
import weakref

from trainmon.analyses.time_budget import time_budget
from trainmon.diagnose.thresholds import Thresholds
from trainmon.store.run import Run

REFRESH_S = 5.0
CPU_SHARE = 0.003  # of one core, for the budgets of every run shown
MIN_SHARE = 0.005  # parts under half a percent are not named
SHORT = {
    "unobserved_before": "setup",  # before the first step: imports, the model, the workers starting
    "warmup": "warm-up",
    "data_wait": "wait",
    "communication": "comm",
    "compute": "compute",
    "model": "model",  # compute split where the model was timed: forward, backward, optimizer
    "own_code": "own",  # and the loop's own code (metrics, logging, progress bars)
    "evaluation": "eval",
    "checkpoints": "ckpt",
    "epoch_restarts": "restarts",
    "gc": "gc",
    "compilation": "compile",
    "long_steps": "long",
    "frozen": "frozen",
    "unobserved_gaps": "gaps",
    "unobserved_after": "since",  # after the last step: the step in progress, or the run's end
}

# run → (the instant it was taken at, the step table's clears then, the shares, seconds the walk took)
_CACHE: weakref.WeakKeyDictionary[Run, tuple[float, int, list[tuple[str, float]], float]] = weakref.WeakKeyDictionary()


def budget_shares(run: Run, instant: float, th: Thresholds) -> list[tuple[str, float]]:
    """(short name, share of the run's wall time up to ``instant``) of its budget's parts, largest first; empty for
    a run with no step yet."""
    cached = _CACHE.get(run)
    if cached is not None and cached[1] == run.steps.clears:
        taken, _, kept, cost = cached
        if abs(instant - taken) < max(REFRESH_S, len(_CACHE) * cost / CPU_SHARE):
            return kept
    started = time.perf_counter()
    budget = time_budget(run, instant, th)
    shares: list[tuple[str, float]] = []
    if budget is not None and budget.wall_s > 0:
        split = dict(budget.parts)
        if budget.compute.get("own_code", 0.0) > 0:  # the model timed: compute told as the model and the own code
            split.pop("compute", None)
            split.update(model=budget.compute.get("model", 0.0), own_code=budget.compute["own_code"])
        parts = sorted(split.items(), key=lambda kv: -kv[1])
        shares = [(SHORT.get(k, k), v / budget.wall_s) for k, v in parts if v / budget.wall_s >= MIN_SHARE]
    _CACHE[run] = (instant, run.steps.clears, shares, time.perf_counter() - started)
    return shares
