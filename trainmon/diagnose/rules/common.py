"""What every finding about one run carries."""

from __future__ import annotations

from typing import Any

from trainmon.diagnose.findings import Finding, code_advice
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.numbers import is_nan


def base_evidence(w: RunWindow) -> dict[str, Any]:
    """The run, its window and its raw data-wait share; on CUDA, where the agent measured it, the share of
    step time the waits left the GPU idle beside it (``exposed_wait_fraction``, over ``exposed_steps``)."""
    evidence = {
        "run": w.run.label,
        "steps": w.steps,
        "window_s": round(w.span_s, 2),
        # None where nothing measured it: a loop with no loader whose model the agent did not time
        "data_wait_fraction": round(w.wait_fraction, 4) if w.run.wait_measured else None,
        "step_time_ms_p50": round(w.step_p50_s * 1e3, 2),
        "step_time_ms_p95": round(w.step_p95_s * 1e3, 2),
        "num_workers": w.loader.get("num_workers"),
        "batch_size": w.loader.get("batch_size"),
    }
    exposed = w.exposed_fraction
    if not is_nan(exposed):
        evidence["exposed_wait_fraction"] = round(exposed, 4)
        evidence["exposed_steps"] = w.exposed_steps
    return evidence


@rule(Stage.WARMUP_GATE, "insufficient_data")
def insufficient(ctx: RuleContext) -> Finding | None:
    w, th = ctx.w, ctx.th
    if w.steps >= th.min_steps:
        return None
    return Finding(
        "insufficient_data",
        "ok",
        f"{w.steps} steady-state steps so far ({w.warm_steps} warm-up); need {th.min_steps} to judge",
        [],
        {"run": w.run.label, "steps": w.steps, "warmup_steps": w.warm_steps, "min_steps": th.min_steps},
        advice_items=code_advice("keep training; trainmon judges once warm-up is over"),
    )


# ---------------------------------------------------------------- input pipeline
