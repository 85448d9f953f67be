"""torch.compile recompiling: the seconds recompilations take, and a function sent back to eager at the recompile limit.

Judged on the run's own compilations (``Run.compiles``: the agent's spans, torch's records of each), not on its steady
steps: a recompile storm is made of warm-up-like steps, and a run in one may have few steady steps yet. A function's
first compilation is not counted (it is the price of compiling at all, and lies in warm-up); every later one is a
recompilation: a guard failed (torch names it: a tensor's size, a Python value, a module attribute).
"""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.findings import Finding, code_advice
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.store.compiles import Compiles, Function

SIZE_GUARD = "size mismatch"  # a tensor's dimension: the recompilation a varying sequence length makes


@rule(Stage.BEFORE_WARMUP, "stall.recompile")
def recompile_stall(ctx: RuleContext) -> Finding | None:
    run, th = ctx.r, ctx.th
    compiles = run.compiles
    if not compiles.total and not compiles.functions:
        return None
    t1 = ctx.t
    t0 = ctx.since if ctx.since is not None else max(t1 - th.window_s, run.first_seen)
    if t1 <= t0:
        return None
    spans = compiles.between(t0, t1, recompiles=True)
    seconds = sum(e - s for s, e, _, _ in spans)
    share = seconds / (t1 - t0)
    fallen = [f for f in compiles.fallen_back() if f.limit_t is not None and f.limit_t <= t1]
    if share < th.compile_share and not fallen:
        return None
    fn = _culprit(compiles, spans, fallen)
    severity = "critical" if share >= th.compile_critical_share else "warning"
    whole = compiles.between(-math.inf, t1, recompiles=True)  # the run's up to t1 (a report's phase sees a part)
    summary = _summary(fn, spans, share, t1 - t0, whole, fallen)
    evidence = _evidence(ctx, seconds, share, spans, fn, fallen)
    evidence["recompilations_in_run"] = len({(f, a) for _, _, f, a in whole})
    evidence["recompile_s_in_run"] = round(sum(e - s for s, e, _, _ in whole), 3)
    return Finding(
        "stall.recompile", severity, summary, [], evidence, advice_items=code_advice(*_advice(fn, _guard(fn)))
    )


def _guard(fn: Function | None) -> str | None:
    return fn.top_guard if fn is not None else None


def _summary(
    fn: Function | None,
    spans: list[tuple[float, float, int, int]],
    share: float,
    span_s: float,
    whole: list[tuple[float, float, int, int]],
    fallen: list[Function],
) -> str:
    what = fn.where if fn is not None else "a compiled function"
    parts = []
    if spans:
        recompiles = len({(f, a) for _, _, f, a in spans})
        text = f"recompiling {what} took {share:.0%} of the last {span_s:.0f} s ({recompiles} recompilations"
        if len(whole) > len(spans):
            text += f"; {len({(f, a) for _, _, f, a in whole})} in the run, {sum(e - s for s, e, _, _ in whole):.1f} s"
        parts.append(text + ")")
    if fallen:
        hit = fallen[0]
        known = hit.limit_type and hit.limit_value is not None
        limit = f"{hit.limit_type} = {hit.limit_value}" if known else "its recompile limit"
        parts.append(f"{hit.where} hit {limit} and runs eagerly since")
    guard = _guard(fn)
    return "; ".join(parts) + (f"; failed guard: {guard}" if guard else "")


def _culprit(compiles: Compiles, spans: list[tuple[float, float, int, int]], fallen: list[Function]) -> Function | None:
    """The function whose recompilations took the most of the window, else the first one sent back to eager."""
    by_frame: dict[int, float] = {}
    for s, e, frame, _ in spans:
        by_frame[frame] = by_frame.get(frame, 0.0) + e - s
    if by_frame:
        frame = max(by_frame, key=lambda f: by_frame[f])
        if frame in compiles.functions:
            return compiles.functions[frame]
    return fallen[0] if fallen else None


def _advice(fn: Function | None, guard: str | None) -> list[str]:
    limit = f"{fn.limit_type} (now {fn.limit_value})" if fn is not None and fn.limit_type else "recompile_limit"
    raise_limit = (
        f"raise torch._dynamo.config.{limit} only with a reason: the shapes are few and known (a fixed set of "
        "buckets), since every new one costs a compilation"
    )
    if guard is not None and SIZE_GUARD in guard:
        tensor = guard.split("'")[1] if guard.count("'") >= 2 else "the input"
        return [
            f"mark the varying dimension dynamic: torch._dynamo.mark_dynamic({tensor}, <dim>) before the call, or "
            "torch.compile(..., dynamic=True), or leave dynamic at its default (None) rather than False",
            "pad batches to a few length buckets (pad_to_multiple_of=64, or a fixed set of max lengths): each bucket "
            "compiles once",
            raise_limit,
        ]
    return [
        "make the guarded value constant across calls, or pass it as a tensor instead of a Python number or "
        "attribute (TORCH_LOGS=recompiles prints every failed guard)",
        "mark varying tensor dimensions dynamic: torch._dynamo.mark_dynamic(tensor, dim), or "
        "torch.compile(..., dynamic=True)",
        raise_limit,
    ]


def _evidence(
    ctx: RuleContext,
    seconds: float,
    share: float,
    spans: list[tuple[float, float, int, int]],
    fn: Function | None,
    fallen: list[Function],
) -> dict[str, Any]:
    run = ctx.r
    ev: dict[str, Any] = {
        "run": run.label,
        "recompile_s": round(seconds, 3),
        "recompile_share": round(share, 4),
        "recompilations": len({(f, a) for _, _, f, a in spans}),
        "compilations_total": run.compiles.total,
        "eager_fallback": [f.where for f in fallen],
    }
    if fn is not None:
        ev |= {"function": fn.where, "failed_guard": fn.top_guard, "last_reason": fn.last_reason}
        ev["limit"] = f"{fn.limit_type} = {fn.limit_value}" if fn.limit_type else None
    breaks = run.compiles.graph_breaks
    if breaks and breaks.get("total"):
        ev["graph_breaks"] = breaks["total"]
        ev["graph_break_reasons"] = [r["reason"] for r in breaks.get("reasons", [])[:3]]
    return ev
