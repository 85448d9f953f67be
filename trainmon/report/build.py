"""Build the report (``trainmon.report.schema.Report``) from a store: runs, verdict, system, series."""

from __future__ import annotations

from trainmon.diagnose.evidence import run_gpus
from trainmon.diagnose.rules import Thresholds
from trainmon.metrics import GPU
from trainmon.numbers import is_nan
from trainmon.report.binned import series_section
from trainmon.report.budget import budget_row
from trainmon.report.runs import measurement, run_summary, sampled_wait
from trainmon.report.schema import IdleProcess, Report, RunRow
from trainmon.report.stacks import stack_dumps
from trainmon.report.system import (
    agentless_section,
    process_figures,
    process_figures_pid,
    pyspy_wait_share,
    system_section,
)
from trainmon.report.verdict import judge
from trainmon.store.run import Run
from trainmon.store.store import Store


def sampled_trained(store: Store, run: Run, th: Thresholds) -> bool:
    """Whether a training found running without an agent did anything while it was watched: its main process used
    a material share of a core, or its main thread was seen waiting on a DataLoader."""
    cpu = process_figures_pid(store, run.pid).get("cpu_pct")
    share = sampled_wait(store, run)[0]
    return (cpu is not None and cpu >= th.sampled_idle_cpu_pct) or (not is_nan(share) and share > th.wait_warning)


def build_report(store: Store, th: Thresholds | None = None) -> Report:
    th = th or Thresholds()
    with store.lock:
        first = store.first_t if store.first_t is not None else 0.0
        last = store.last_t if store.last_t is not None else first
        everything = sorted(
            store.runs.values(), key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.first_seen)
        )
        # Processes that attached but never trained (a launcher, a helper script) are not runs; a training sampled
        # until an agent took over is listed once, as the agent's run (with attached_at).
        # A torch process found running that never did anything while watched (an idle notebook kernel) is no run
        # either.
        sampled = [r for r in everything if r.measured_by == "sampling" and r.ended != "attached"]
        agents = [r for r in everything if r.measured_by == "agent"]
        trained = [r for r in sampled if sampled_trained(store, r, th)]
        runs = [r for r in agents if r.steps.total or r.loaders] + trained
        idle: list[IdleProcess] = [
            {"pid": r.pid, "name": r.name}
            for r in everything
            if (r in agents and not (r.steps.total or r.loaders)) or (r in sampled and r not in trained)
        ]
        step_ends = [r.steps.end[-1] for r in runs if len(r.steps)]
        end = max([last, *step_ends]) if step_ends else last
        run_rows: list[RunRow] = [
            {
                **run_summary(r, store),
                **measurement(store, r, first),
                "processes": process_figures(store, r),
                "pyspy_data_wait_share": pyspy_wait_share(store, r.pid),
                "gpus": run_gpus(store, r, store.index().int_ids(GPU, "util")),
                "stack_dumps": stack_dumps(r, first),
                "time_budget": budget_row(r, first, end, th) if r.measured_by == "agent" else None,
            }
            for r in runs
        ]
        agentless = agentless_section(store)
        system = system_section(store)
    judgement = judge(store, first, end, th)
    return {
        "trainmon_report": 1,
        "duration_s": round(max(0.0, end - first), 2),
        "runs": run_rows,
        "verdict": judgement.verdict,
        "findings": judgement.findings,
        "timeline": judgement.timeline,
        "system": system,
        "agentless": agentless,
        "idle_processes": idle,
        "series": series_section(store),
        "thresholds": vars(th),
        "recording": dict(store.metadata),
    }
