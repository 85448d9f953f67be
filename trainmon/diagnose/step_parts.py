"""A run's step split into its parts, as shares of the step time: data wait, the model, the time in collectives and
the loop's own code, with the functions that hold the own code. The report takes it over the run's steady steps,
``--json``, Prometheus and the screen over the live window."""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.loop_code import MIN_SAMPLES, own_code_functions, own_code_measured
from trainmon.store.run import Run

PARTS = ("data_wait", "model", "comm", "own_code")


def step_parts(run: Run, total: float, wait: float, comm: float, own: float) -> dict[str, Any] | None:
    """The split of steps that took ``total`` seconds, ``wait`` of them waiting for data, ``comm`` in collectives
    and ``own`` in the loop's own code. None where the model was never timed."""
    if total <= 0:
        return None
    return _split(run, wait / total, comm / total, own / total)


def window_parts(w: RunWindow) -> dict[str, Any] | None:
    """The split over a live window's steady steps; None where the model was never timed."""
    if w.step_time_s <= 0 or not w.steps:
        return None
    comm = w.comm_fraction
    own = w.own_fraction() if own_code_measured(w.run) else 0.0
    return _split(w.run, w.wait_fraction, 0.0 if math.isnan(comm) else comm, 0.0 if math.isnan(own) else own)


def _split(run: Run, wait: float, comm: float, own: float) -> dict[str, Any] | None:
    d = run.deriver
    if not (d.own_steps or d.outside_steps):
        return None
    w = min(1.0, max(0.0, wait)) if run.wait_measured else 0.0
    c = min(1.0 - w, max(0.0, comm))
    measured = own_code_measured(run)
    o = min(1.0 - w - c, max(0.0, own)) if measured else None
    functions, samples, source = own_code_functions(run) if measured else ([], 0, None)
    return {
        "data_wait": round(w, 4),
        "model": round(max(0.0, 1.0 - w - c - (o or 0.0)), 4),
        "comm": round(c, 4),
        "own_code": round(o, 4) if o is not None else None,
        "own_code_steps": {"measured": d.own_steps, "estimated": d.own_estimated} if measured else None,
        "own_code_functions": functions if samples >= MIN_SAMPLES else [],
        "own_code_samples": samples,
        "samples_source": source,
    }
