"""A run's steady step split into its parts for reports, ``--json`` and Prometheus: data wait, the model, the time in
collectives and the loop's own code, with the functions that hold the own code."""

from __future__ import annotations

from typing import Any

from trainmon.diagnose.rules.loop_code import MIN_SAMPLES, own_code_functions, own_code_measured
from trainmon.store.run import Run


def step_parts(run: Run, total: float, wait: float, comm: float, own: float) -> dict[str, Any] | None:
    """A run's steady step split into its parts, as shares of the steady step time: data wait, the model, the time
    in collectives, the loop's own code (with the functions that hold it). None where the model was never timed."""
    d = run.deriver
    if total <= 0 or not (d.own_steps or d.outside_steps):
        return None
    w = min(1.0, wait / total) if run.wait_measured else 0.0
    c = min(1.0 - w, comm / total)
    measured = own_code_measured(run)
    o = min(1.0 - w - c, own / total) if measured else None
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
