"""Build the report dict (DESIGN.md "Report JSON") from a store."""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.engine import VerdictTracker, evaluate
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.rules import Thresholds
from trainmon.diagnose.window import quantile
from trainmon.report.series import series_section
from trainmon.report.system import agentless_section, process_figures, pyspy_wait_share, system_section
from trainmon.store.run import Run
from trainmon.store.store import Store

LOADER_KEYS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
MAX_EVALUATIONS = 900


def _num(x: float, digits: int = 3) -> float | None:
    return round(x, digits) if x == x and not math.isinf(x) else None


def run_summary(run: Run) -> dict[str, Any]:
    steps = run.steps
    durations: list[float] = []
    wait = total = 0.0
    samples = 0
    for k in range(len(steps)):
        if steps.warm[k]:
            continue
        d = steps.end[k] - steps.start[k]
        durations.append(d)
        total += d
        wait += steps.wait[k]
        samples += steps.samples[k]
    train = run.train_loader()
    config = train.config if train is not None else {}
    return {
        "pid": run.pid,
        "rank": run.rank,
        "name": run.name,
        "host": run.host,
        "steps": steps.total,
        "warmup_steps": steps.total - len(durations),
        "step_time_ms": {"p50": _num(quantile(durations, 0.5) * 1e3), "p95": _num(quantile(durations, 0.95) * 1e3)},
        "data_wait_fraction": _num(wait / total if total > 0 else math.nan, 4),
        "samples_per_s": _num(samples / total if total > 0 and samples else math.nan, 2),
        "dataloader": {k: config.get(k) for k in LOADER_KEYS} if config else None,
        "loaders": len(run.loaders),
        "worker_pids": run.worker_pids(),
        "checkpoints": len(run.checkpoints),
        "checkpoint_s": _num(sum(c1 - c0 for c0, c1 in run.checkpoints)),
        "device": run.device,
        "ended": run.ended,
        "dropped_records": run.dropped_records,
        "argv": run.hello.get("argv"),
    }


def build_report(store: Store, th: Thresholds | None = None) -> dict[str, Any]:
    th = th or Thresholds()
    with store.lock:
        first = store.first_t if store.first_t is not None else 0.0
        last = store.last_t if store.last_t is not None else first
        everything = sorted(
            store.runs.values(), key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.first_seen)
        )
        # Processes that attached but never trained (a launcher, a helper script) are not runs.
        runs = [r for r in everything if r.steps.total or r.loaders]
        idle = [{"pid": r.pid, "name": r.name} for r in everything if not (r.steps.total or r.loaders)]
        run_rows = [
            run_summary(r)
            | {"processes": process_figures(store, r), "pyspy_data_wait_share": pyspy_wait_share(store, r.pid)}
            for r in runs
        ]
        agentless = agentless_section(store)
        system = system_section(store)
        step_ends = [r.steps.end[-1] for r in runs if len(r.steps)]
    end = max([last, *step_ends]) if step_ends else last

    tracker = VerdictTracker(hold_s=th.hold_s)
    held: dict[str, float] = {}
    latest: dict[str, Finding] = {}
    duration = max(0.0, end - first)
    dt = max(1.0, duration / MAX_EVALUATIONS)
    t = first + dt
    prev_t, prev_code = None, None
    while t <= end + 1e-9 or prev_t is None:
        findings = evaluate(store, min(t, end), th)
        for f in findings:
            latest[f.code] = f
        shown = tracker.update(t, findings)
        if shown is not None:
            if prev_t is not None and prev_code is not None:
                held[prev_code] = held.get(prev_code, 0.0) + (t - prev_t)
            prev_t, prev_code = t, shown.code
        if t >= end:
            break
        t = min(t + dt, end)
    judged = {c: s for c, s in held.items() if c != "insufficient_data"}
    if judged:
        code = max(judged, key=lambda c: judged[c])
    elif tracker.current is not None:
        code = tracker.current.code
    else:
        code = "insufficient_data"
    verdict = _finding_for(code, tracker, latest)
    secondary = [
        f.to_dict() | {"held_s": round(held.get(c, 0.0), 1)}
        for c, f in sorted(latest.items(), key=lambda kv: kv[1].rank)
        if c not in (code, "insufficient_data", "ok.compute_bound")
    ]
    return {
        "trainmon_report": 1,
        "duration_s": round(duration, 2),
        "runs": run_rows,
        "verdict": verdict.to_dict(),
        "findings": secondary,
        "timeline": [{"t": round(tc - first, 2), "code": c} for tc, c in tracker.changes],
        "system": system,
        "agentless": agentless,
        "idle_processes": idle,
        "series": series_section(store),
        "thresholds": vars(th),
        "recording": dict(store.metadata),
    }


def _finding_for(code: str, tracker: VerdictTracker, latest: dict[str, Finding]) -> Finding:
    if tracker.current is not None and tracker.current.code == code:
        return tracker.current
    if code in latest:
        return latest[code]
    return Finding(
        "insufficient_data",
        "ok",
        "no training steps were recorded",
        ["attach the agent: trainmon.agent.attach(), or trainmon run -- python train.py"],
        {},
    )
