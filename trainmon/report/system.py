"""The report's ``system`` section and per-run process figures, from sampled series."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from trainmon.diagnose.stats import quantile
from trainmon.metrics import DISK, GPU, MIG_MODE_NOTE, MIG_NOTE, PROC, PYSPY, limiting_reasons
from trainmon.numbers import is_nan, known, rounded
from trainmon.report.schema import (
    AgentCostFigures,
    AgentlessProcess,
    CpuFigures,
    DiskFigures,
    FigureStats,
    GpuFigures,
    MemoryFigures,
    ProcessFigures,
    ProcFigures,
    SystemSection,
)
from trainmon.store.run import Run
from trainmon.store.store import Store

# Each family's fields that the report summarises, in the report's order: series field → report key.
DISK_FIGURES = {field: f.report for field, f in DISK.fields.items() if f.report is not None}
GPU_FIGURES = {field: f.report for field, f in GPU.fields.items() if f.report is not None}


def stats(store: Store, name: str, t0: float | None = None, t1: float | None = None) -> FigureStats:
    """Median, 95th percentile and maximum of a series (NaN samples skipped), over ``[t0, t1]`` if given."""
    series = store.series.get(name)
    if series is None:
        return {"p50": None, "p95": None, "max": None}
    values = list(series.values if t0 is None else series.between(t0, t1 or math.inf)[1])
    values = known(values)
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {"p50": rounded(quantile(values, 0.5)), "p95": rounded(quantile(values, 0.95)), "max": rounded(max(values))}


def _flat(prefix: str, s: FigureStats) -> dict[str, float | None]:
    return {f"{prefix}_p50": s["p50"], f"{prefix}_p95": s["p95"], f"{prefix}_max": s["max"]}


def throttle_reasons(mask_values: Iterable[float]) -> list[str]:
    """Names of the limiting throttle reasons set in any of the sampled bit masks."""
    seen = 0
    for v in mask_values:
        if not is_nan(v):
            seen |= int(v)
    return [r.report for r in limiting_reasons(seen)]


def system_section(store: Store) -> SystemSection:
    cores = store.latest("cpu.cores")
    cpu: CpuFigures = {"cores": int(cores) if cores and not is_nan(cores) else None}
    cpu.update(_flat("busy_percent", stats(store, "cpu.busy")))
    cpu.update(_flat("iowait_percent", stats(store, "cpu.iowait")))
    memory: MemoryFigures = {
        "used_percent_max": stats(store, "mem.used_pct")["max"],
        "swap_used_mb_max": stats(store, "swap.used_mb")["max"],
    }
    disks: dict[str, DiskFigures] = {}
    index = store.index()
    for dev in sorted(index.ids(DISK)):
        entry: DiskFigures = {}
        for field, key in DISK_FIGURES.items():
            entry.update(_flat(key, stats(store, DISK.key(dev, field))))
        disks[dev] = entry
    gpus: list[GpuFigures] = []
    for idx in index.int_ids(GPU):
        g: GpuFigures = {"index": idx}
        for field, key in GPU_FIGURES.items():
            if GPU.key(idx, field) in store.series:
                g.update(_flat(key, stats(store, GPU.key(idx, field))))
        g["mem_total_mb"] = store.latest(GPU.key(idx, "mem_total_mb"))
        g["power_limit_w"] = store.latest(GPU.key(idx, "power_limit_w"))
        throttle = store.series.get(GPU.key(idx, "throttle"))
        g["throttle_reasons"] = throttle_reasons(throttle.values) if throttle is not None else []
        gpus.append(g)
    listed = [i for i in store.metadata.get("gpus") or [] if isinstance(i, dict)]
    if all(isinstance(i.get("index"), int) for i in listed):
        infos = {i["index"]: i for i in listed}  # MIG devices' ids follow the GPUs': matched by id
    else:  # metadata without ids: in the order of the GPUs
        infos = {g["index"]: i for g, i in zip(gpus, listed, strict=False)}
    for g in gpus:
        if (info := infos.get(g["index"])) is not None:
            g["name"] = info.get("name")
            g["uuid"] = info.get("uuid")
            _mig_figures(g, info)
    out: SystemSection = {"cpu": cpu, "memory": memory, "disks": disks, "gpus": gpus}
    agents = agent_costs(store.runs.values())
    if "self.cpu_pct" in store.series or agents:
        own = stats(store, "self.cpu_pct")
        out["monitor_cost"] = {
            "cpu_percent_p50": own["p50"],
            "cpu_percent_p95": own["p95"],
            "helpers_cpu_percent_p50": stats(store, "self.helpers_cpu_pct")["p50"],
            "rss_mb_max": stats(store, "self.rss_mb")["max"],
            "agents": agents,
        }
    if not gpus:
        out["gpu_error"] = store.metadata.get("gpu_error") or "no GPU data was recorded"
    return out


def _mig_figures(g: GpuFigures, info: dict[str, Any]) -> None:
    """A MIG device names its GPU and instances; where NVML gave it (or its GPU in MIG mode) no utilisation, the
    report says why beside the empty figures ("n/a on MIG"), never 0 %."""
    note = ""
    if isinstance(mig := info.get("mig"), dict):
        g["mig"] = {k: mig.get(k) for k in ("parent", "slot", "gi", "ci")}
        note = MIG_NOTE
    elif info.get("mig_mode"):
        g["mig_mode"] = True
        note = MIG_MODE_NOTE
    if note and g.get("util_percent_p50") is None:
        g["util_note"] = note


def process_figures(store: Store, run: Run) -> ProcessFigures:
    """Main process and workers: CPU % of a core, thread-state shares, read MB/s (p50 over the run)."""
    # A run in a pid namespace the monitor could not map: no figures (its own pid names another process here).
    main: ProcFigures = process_figures_pid(store, run.proc_pid) if run.proc_pid is not None else {"pid": run.pid}
    workers = [process_figures_pid(store, pid) for pid in run.worker_pids()]
    cpu = [c for w in workers if (c := w.get("cpu_pct")) is not None]
    return {
        "main": main,
        "workers": workers,
        "workers_cpu_pct_total": rounded(sum(cpu)) if cpu else None,
        "workers_cpu_pct_mean": rounded(sum(cpu) / len(cpu)) if cpu else None,
    }


def pyspy_wait_share(store: Store, pid: int) -> float | None:
    """Agentless estimate: share of py-spy samples of the main thread inside DataLoader ``__next__``."""
    shares = store.series.get(PYSPY.key(pid, "data_wait_share"))
    counts = store.series.get(PYSPY.key(pid, "samples"))
    if shares is None or counts is None:
        return None
    weighted = total = 0.0
    for (_, share), (_, n) in zip(shares, counts, strict=False):
        if not is_nan(share) and not is_nan(n) and n > 0:
            weighted += share * n
            total += n
    return round(weighted / total, 4) if total else None


def agentless_section(store: Store) -> list[AgentlessProcess]:
    """Processes watched by py-spy only (``--pid``) that never attached the agent."""
    attached = {run.pid for run in store.runs.values()}
    pids = store.index().int_ids(PYSPY, "samples")
    out: list[AgentlessProcess] = []
    for pid in pids:
        if pid in attached:
            continue
        samples = store.series[PYSPY.key(pid, "samples")]
        out.append(
            {
                "pid": pid,
                "data_wait_share": pyspy_wait_share(store, pid),
                "samples": int(sum(v for _, v in samples if not is_nan(v))),
                "process": process_figures_pid(store, pid),
            }
        )
    return out


def process_figures_pid(store: Store, pid: int) -> ProcFigures:
    """One process's figures: the median of each sampled figure (RSS: its maximum)."""
    fig: ProcFigures = {"pid": pid}
    for key in (
        "cpu_pct",
        "state_R",
        "state_S",
        "state_D",
        "read_mb_s",
        "rchar_mb_s",
        "rss_mb",
        "runq_wait_ms_s",
        "gpu_mem_mb",
    ):
        s = stats(store, PROC.key(pid, key))
        if s["p50"] is not None:
            fig[key] = s["p50"] if key != "rss_mb" else s["max"]
    return fig


def agent_costs(runs: Iterable[Run]) -> list[AgentCostFigures]:
    """Each agent run's own cost per step over the whole run, where its agent measured it."""
    out: list[AgentCostFigures] = []
    for run in runs:
        figures = run.agent_cost.per_step(run.steps, -math.inf, math.inf) if run.measured_by == "agent" else None
        if figures is None:
            continue
        time_s = run.agent_cost.steps_time(run.steps)
        share = rounded(figures["total"] * figures["steps"] / 1e9 / time_s, 6) if time_s > 0 else None
        out.append(
            {
                "run": run.label,
                "per_step_us": round(figures["total"] / 1e3, 3),
                "hooks_us": round(figures["hooks"] / 1e3, 3),
                "sender_us": round(figures["sender"] / 1e3, 3),
                "share_of_step_time": share,
            }
        )
    return out
