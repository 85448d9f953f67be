"""The loop's own code: per-step work of the training thread that is neither the model nor waiting for data.

Metric code in Python (predictions to lists, confusion matrices, F1 in loops), logging and log serialisation, progress
bars, ``.item()`` and ``print(tensor)``: on a GPU host each of them is time the GPU has nothing queued (and an
``.item()`` drains it); on a CPU host it is still time the step does not train. The share is measured (the model
timed in bursts beside the exact data wait: ``RunWindow.own_fraction``); the functions come from stack samples of
the training thread, named only where the samples are weighted by time (py-spy's, from outside the process). The
agent's own in-process samples need the interpreter lock and under-count pure-Python code by construction: they are
given as evidence, never as the verdict's function.
"""

from __future__ import annotations

from typing import Any

from trainmon.diagnose.findings import AdviceItem, Finding
from trainmon.diagnose.rules.batch_source import TIME_WEIGHTED, attribution, outside_samples, samples_source
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.numbers import is_nan, rounded
from trainmon.store.run import Run

MIN_SAMPLES = 10  # own-code samples before a function is named


def own_code_measured(run: Run) -> bool:
    """Whether the run's own code was measured: some step had its model timed and its data wait known."""
    return run.deriver.own_steps > 0


def own_code_functions(run: Run, limit: int = 5) -> tuple[list[dict[str, Any]], int, str | None]:
    """(the functions holding the loop's own time, each with its share of it, the samples they rest on, the
    samples' source: "py-spy", "in-process" or None)."""
    outside = outside_samples(run)
    rows, _, _ = attribution(outside)
    source = samples_source(outside)
    total = int((outside or {}).get("samples") or 0)
    own = [r for r in rows if r["kind"] != "data"]
    data_share = sum(r["share"] for r in rows if r["kind"] == "data")
    own_total = total * max(0.0, 1.0 - data_share)
    if own_total <= 0:
        return [], 0, source
    out = [
        {
            "function": r["function"],
            "where": r["where"],
            "innermost": r["innermost"],
            "kind": r["kind"],
            "share": round(min(1.0, r["share"] / (1.0 - data_share)), 3),
        }
        for r in own[:limit]
    ]
    return out, round(own_total), source


@rule(Stage.PER_RUN, "host.loop_code")
def loop_code(ctx: RuleContext) -> Finding | None:
    w, th = ctx.w, ctx.th
    if is_nan(w.step_p50_s):
        return None
    f = w.own_fraction(w.step_p50_s * th.long_step_factor)  # per-step work: long steps are stalls, judged as such
    if is_nan(f) or f < th.loop_code_share:
        return None
    functions, samples, source = own_code_functions(w.run)
    named = functions[0] if functions and source in TIME_WEIGHTED and samples >= MIN_SAMPLES else None
    evidence = base_evidence(w) | {
        "own_code_fraction": round(f, 4),
        "own_code_functions": functions,
        "own_code_samples": samples,
        "samples_source": source,
        "loop_function": named["function"] if named else None,
    }
    gpu = ctx.evidence.gpu_util if ctx.evidence is not None else float("nan")
    if not is_nan(gpu):
        evidence["gpu_util_pct"] = rounded(gpu, 1)
    if named is not None:
        where = f", mostly in {named['function']} ({named['where']}, {named['share']:.0%} of it)"
    elif functions:
        where = f"; its functions are not named: only in-process stack samples ({source}), biased by the GIL"
    else:
        where = ""
    idle = f" while the GPU is {gpu:.0f}% busy" if not is_nan(gpu) else ""
    step = "" if is_nan(w.step_p50_s) else f"; step p50 {w.step_p50_s * 1e3:.0f} ms"
    return Finding(
        "host.loop_code",
        "critical" if f >= th.loop_code_critical_share else "warning",
        f"{f:.0%} of each step is the loop's own code, outside the model and the data wait{where}{idle}{step}",
        [],
        evidence,
        advice_for(named),
    )


def advice_for(named: dict[str, object] | None) -> list[AdviceItem]:
    """Advice that fits what the named function does (its kind, its name, its file); generic where none is named."""
    kind = str(named.get("kind")) if named else ""
    text = f"{named.get('function')} {named.get('where')} {named.get('innermost')}".lower() if named else ""
    fn = str(named["function"]) if named else "the per-step code"
    items: list[AdviceItem] = []
    if "tqdm" in text:
        items.append(
            AdviceItem(
                "tqdm: keep the default mininterval=0.1 or raise it (mininterval=1, or miniters=N), and update the "
                "postfix every N steps with set_postfix(..., refresh=False), not with an .item() every step"
            )
        )
    elif kind == "metrics":
        items.append(
            AdviceItem(
                f"compute {fn} every N steps, or on the device: keep predictions as tensors (no .tolist()), update a "
                "confusion matrix with torch.bincount, or use torchmetrics (update() each step, compute() every N)"
            )
        )
    elif kind == "logging":
        items.append(
            AdviceItem(
                f"log every N steps, not every step, and off the training thread ({fn}): a "
                "logging.handlers.QueueHandler or the logger's own async mode; no print(tensor)"
            )
        )
    elif named is not None:
        items.append(AdviceItem(f"make {fn} cheaper or run it every N steps, not every step"))
    items.append(
        AdviceItem(
            "drop the per-step .item() / .cpu() / print(tensor): accumulate on the device and read back every N "
            "steps (on a GPU each of them drains the queue)"
        )
    )
    if named is None:
        items.append(AdviceItem("press d on the main process to see where its time goes (py-spy)"))
    return items
