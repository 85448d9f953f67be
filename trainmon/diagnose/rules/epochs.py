"""Epoch restarts: DataLoader workers started again by every new iterator (no ``persistent_workers``)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from trainmon.diagnose.findings import AdviceItem, Finding
from trainmon.diagnose.live.window import RunWindow
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.numbers import is_nan, rounded

# Start methods whose workers begin as a fresh interpreter: each one imports torch and the dataset's modules
# and unpickles the dataset before its first sample.
FRESH_INTERPRETER = ("spawn", "forkserver")


@rule(Stage.BEFORE_WARMUP, "input.epoch_restart")
def epoch_restart(ctx: RuleContext) -> Finding | None:
    """Worker restarts' cost (start-up and first batches beyond a normal wait, see ``store.restarts``) as a share
    of wall time: over the live window (a report's phase: [since, t]) when it holds two restarts or more, else
    over the run so far, so a restart every few seconds shows at once and one every ten minutes is weighed
    against the whole run."""
    w, th, t, since = ctx.w, ctx.th, ctx.t, ctx.since
    run = w.run
    restarts = run.restarts
    count_run, cost_run = restarts.until(t)
    if not count_run:
        return None
    start = restarts.first_t if not is_nan(restarts.first_t) else run.first_seen
    t0 = t - th.window_s if since is None else since
    window = min(t - t0, t - start)
    count, cost = restarts.between(t0, t)
    if count >= 2 and window > 0:
        over, span = "window", window
    else:
        over, span, count, cost = "run", t - start, count_run, cost_run
    if span <= 0:
        return None
    share = cost / span
    if share < th.epoch_restart_share:
        return None
    loaders = _restarted_loaders(w, t - span, t)
    methods = sorted({m for _, cfg in loaders if (m := cfg.get("start_method") or cfg.get("multiprocessing_context"))})
    train = run.train_loader()
    names = sorted({"train" if train is not None and lid == train.id else "validation/other" for lid, _ in loaders})
    which = " and ".join(f"the {name}" for name in names) or "the"
    mean_ms = cost / count * 1e3
    advice = [
        AdviceItem(
            f"set persistent_workers=True on {which} DataLoader{'s' if len(names) > 1 else ''}: the workers then "
            "outlive each epoch and its first batch comes as fast as any other",
            {"persistent_workers": True},
            "workers outlive each epoch",
            loaders=tuple(lid for lid, _ in loaders),  # the loaders that restarted, not (only) the judged one
        )
    ]
    fresh = [m for m in methods if m in FRESH_INTERPRETER]
    if fresh:
        advice.append(
            AdviceItem(
                f"the {'/'.join(fresh)} start method makes each restart worse: every new worker is a fresh "
                "interpreter that re-imports torch and the dataset's modules and unpickles the dataset before its "
                "first sample"
            )
        )
    advice.append(
        AdviceItem(
            "keep the dataset's per-worker set-up (opening files, building indexes) small, or do it once in the "
            "main process before the workers start"
        )
    )
    evidence: dict[str, Any] = {
        "run": run.label,
        "judged_over": over,
        "span_s": round(span, 2),
        "restarts": count,
        "restarts_in_run": count_run,
        "restart_cost_ms_mean": round(mean_ms, 1),
        "restart_cost_s": round(cost, 3),
        "restart_share": round(share, 4),
        "loaders": [lid for lid, _ in loaders],
        "num_workers": sorted({cfg.get("num_workers") for _, cfg in loaders if cfg.get("num_workers") is not None}),
        "persistent_workers": any(bool(cfg.get("persistent_workers")) for _, cfg in loaders),
        "start_method": methods[0] if len(methods) == 1 else (methods or None),
        "run_restart_share": rounded(cost_run / (t - start), 4) if t > start else None,
    }
    where = f"the last {span:.0f} s" if over == "window" else f"{span:.0f} s of run"
    return Finding(
        "input.epoch_restart",
        "critical" if share >= th.epoch_restart_critical_share else "warning",
        f"DataLoader workers restart at every new iterator (persistent_workers=False): {count} restarts in {where}, "
        f"{mean_ms:.0f} ms each (worker start-up and first batch) cost {share:.0%} of wall time",
        [],
        evidence,
        advice,
    )


def _restarted_loaders(w: RunWindow, t0: float, t1: float) -> list[tuple[int, dict[str, Any]]]:
    """The loaders whose restarts began in [t0, t1], with their configs."""
    restarts = w.run.restarts
    ids = set(restarts.loader[bisect_left(restarts.t, t0) : bisect_right(restarts.t, t1)])
    return [(lid, dict(info.config)) for lid in sorted(ids) if (info := w.run.loaders.get(lid)) is not None]
