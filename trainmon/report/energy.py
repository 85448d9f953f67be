"""The report's energy figures: ``runs[].energy`` (steady state, the run's own GPUs) and the line each format
prints under its runs table."""

from __future__ import annotations

from trainmon.analyses.energy_per_step import COUNTER, POWER, steady_energy
from trainmon.labels import run_label
from trainmon.numbers import rounded
from trainmon.report.schema import Report, RunEnergyPart, RunEnergyRow
from trainmon.store.run import Run
from trainmon.store.store import Store

ENERGY_TITLE = "GPU energy (steady state, each run's own GPUs)"
METHOD_WORDS = {COUNTER: "NVML energy counter", POWER: "power × time"}


def energy_part(store: Store | None, run: Run) -> RunEnergyPart:
    """``{"energy": …}`` for a run whose GPUs recorded energy over its steady state, else nothing."""
    if store is None or run.measured_by != "agent":
        return {}
    e = steady_energy(store, run)
    if e is None:
        return {}
    row: RunEnergyRow = {
        "joules_per_step": rounded(e.joules_per_step, 3),
        "joules_per_sample": rounded(e.joules_per_sample, 4),
        "joules_per_token": rounded(e.joules_per_token, 6),
        "method": e.method,
        "joules": rounded(e.joules, 1),
        "steps": e.steps,
        "unmeasured_steps": e.unmeasured_steps,
        "gpus": e.gpus,
        "shared_with": e.shared_with,
    }
    return {"energy": row}


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return ""
    digits = 0 if x >= 100 else 1 if x >= 10 else 2 if x >= 0.1 else 4
    return f"{x:.{digits}f} {unit}"


def energy_lines(report: Report) -> list[str]:
    """One sentence per run with energy figures: J/step, J/sample, J/token, how measured, on which GPUs."""
    out = []
    for r in report["runs"]:
        e = r.get("energy")
        if e is None:
            continue
        figures = [_num(e["joules_per_step"], "J/step"), _num(e["joules_per_sample"], "J/sample")]
        figures.append(_num(e["joules_per_token"], "J/token"))
        gpus = ", ".join(str(g) for g in e["gpus"])
        how = f"{METHOD_WORDS.get(e['method'], 'NVML energy counter and power × time')}; GPU {gpus}"
        if e["shared_with"]:
            how += f"; shared with {', '.join(e['shared_with'])}: whole-GPU energy, not split"
        label = f"{run_label(r['rank'], r['pid'])} {r['name']}".strip()
        out.append(f"{label}: {', '.join(f for f in figures if f)} ({how})")
    return out
