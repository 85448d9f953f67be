"""Each pane's series and its values at the cursor, read out of the store: training runs, agentless processes,
GPUs, CPU, disks and the process table. Call under the store's lock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainmon.analyses.energy_per_step import live_energy
from trainmon.diagnose.evidence import run_gpus
from trainmon.diagnose.thresholds import Thresholds
from trainmon.labels import loader_summary
from trainmon.metrics import CPU_CORE, DISK, GPM_METRIC_IDS, GPU, MIG_MODE_NOTE, MIG_NOTE, PROC, PYSPY, limiting_reasons
from trainmon.numbers import NAN, is_nan, known
from trainmon.store.run import Run
from trainmon.store.series import Series
from trainmon.store.store import Store
from trainmon.view.budget import budget_shares
from trainmon.view.frames import NS_NOTE, AgentlessView, CpuView, DiskView, EnergyView, GpuView, ProcRow, RunView
from trainmon.view.nvml_procs import nvml_figures
from trainmon.view.resample import (
    Grid,
    StepBucketCache,
    bucket_series,
    run_marks,
    run_values,
    step_buckets,
    value_at,
)

ROLE_ORDER = {"main": 0, "rank": 0, "child": 1, "worker": 2}


def visible_runs(store: Store, t0: float, t1: float) -> list[Run]:
    """The runs with an agent that reported within [t0, t1] (sampled ones are shown as agentless processes)."""
    runs = [
        r for r in store.runs.values() if r.first_seen <= t1 and r.last_seen >= t0 - 5.0 and r.measured_by == "agent"
    ]
    return sorted(runs, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid, r.id))


def run_view(
    run: Run,
    edges: Sequence[float],
    col_edges: Sequence[float],
    cols: int,
    instant: float,
    th: Thresholds | None = None,
    cache: StepBucketCache | None = None,
    g: Grid | None = None,
) -> RunView:
    wait_ms, compute_ms, rate, wait_pct = step_buckets(run, edges, cache, g)
    if run.connected and not run.ended:
        state = "running"
    else:
        state = f"ended: {run.ended or 'closed'}"
    if not run.connected and run.last_seen > instant:
        state = "running"  # replay: at the instant shown it had not ended yet
    return RunView(
        run.id,
        run.label,
        run.name,
        run.pid,
        state,
        loader_summary(dict(info.config, batch_size=info.batch_size)) if (info := run.train_loader()) else "",
        wait_ms,
        compute_ms,
        rate,
        wait_pct,
        run_marks(run, col_edges, cols),
        run_values(run, instant),
        budget_shares(run, instant, th or Thresholds()),
    )


def agentless_views(store: Store, edges: Sequence[float], t: float, hold: float) -> list[AgentlessView]:
    out = []
    sampled = {r.pid: r for r in store.runs.values() if r.measured_by == "sampling" and r.first_seen <= t}
    for ident in sorted(store.index().ids(PYSPY, "data_wait_share")):
        pid = int(ident)
        wait = store.series.get(PYSPY.key(pid, "data_wait_share"))
        ckpt = store.series.get(PYSPY.key(pid, "checkpoint_share"))
        run = sampled.get(pid)
        if run is not None and not run.connected and run.last_seen < t - 3 * hold:
            continue  # ended (exited, or an agent took over) before the instant shown
        out.append(
            AgentlessView(
                pid,
                [x * 100 for x in bucket_series(wait, edges, hold)],
                [x * 100 for x in bucket_series(ckpt, edges, hold)],
                {"wait_pct": value_at(wait, t, 3 * hold) * 100, "checkpoint_pct": value_at(ckpt, t, 3 * hold) * 100},
                run.name if run is not None else "",
            )
        )
    return out


def gpu_views(store: Store, edges: Sequence[float], t: float, hold: float) -> list[GpuView]:
    names, migs, mig_mode = {}, {}, set()
    for d in store.metadata.get("gpus") or []:
        if isinstance(d, dict) and isinstance(d.get("index"), int):
            names[d["index"]] = str(d.get("name") or "")
            if isinstance(mig := d.get("mig"), dict) and isinstance(mig.get("parent"), int):
                migs[d["index"]] = (mig["parent"], mig.get("slot"))
            if d.get("mig_mode"):
                mig_mode.add(d["index"])
    out = []
    energy = energy_views(store, t)
    for idx in store.index().int_ids(GPU, "util"):

        def s(field: str, idx: int = idx) -> Series | None:
            return store.series.get(GPU.key(idx, field))

        util = bucket_series(s("util"), edges, hold)
        util_max = bucket_series(s("util_max"), edges, hold, "max")
        used = bucket_series(s("mem_used_mb"), edges, hold)
        total = value_at(s("mem_total_mb"), edges[-1], 1e9)
        mem_pct = [u / total * 100 if total and not is_nan(total) else NAN for u in used]
        values = {
            k: value_at(s(k), t, hold)
            for k in (
                "util",
                "util_min",
                "util_max",
                "mem_used_mb",
                "mem_total_mb",
                "power_w",
                "power_limit_w",
                "temp_c",
                "sm_clock_mhz",
                "sm_clock_max_mhz",
                "pcie_rx_mb_s",
                "pcie_tx_mb_s",
                "mem_util",
            )
        }
        bits = value_at(s("throttle"), t, hold)
        throttle = [] if is_nan(bits) else [r.short for r in limiting_reasons(int(bits))]
        gpm = {k.removeprefix("gpm."): v for k in GPM_METRIC_IDS if not is_nan(v := value_at(s(k), t, hold))}
        view = GpuView(idx, names.get(idx, ""), util, util_max, mem_pct, values, throttle, gpm, f"GPU{idx}")
        if idx in migs:
            view.mig_of, slot = migs[idx]
            view.label = f"MIG{view.mig_of}.{slot}"
            view.mig_profile = view.name.rpartition(" MIG ")[2] if " MIG " in view.name else ""
        view.energy = [e for e in energy if idx in e.gpus]
        no_util = not known(util) and is_nan(values["util"])
        if no_util and (idx in migs or idx in mig_mode):
            view.util_note = MIG_NOTE if idx in migs else MIG_MODE_NOTE
        out.append(view)
    return out


def energy_views(store: Store, t: float) -> list[EnergyView]:
    """Each agent run's GPU energy over the live window before ``t``, on its own GPUs, where measured."""
    gpus = store.index().int_ids(GPU, "util")
    out = []
    for run in sorted(store.runs.values(), key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid)):
        if run.measured_by != "agent" or run.first_seen > t:
            continue
        own = run_gpus(store, run, gpus)
        e = live_energy(store, run, t, gpus=own) if own else None
        if e is not None:
            shared = bool(e.shared_with)
            out.append(EnergyView(run.label, e.joules_per_step, e.joules_per_sample, e.method, e.gpus, shared))
    return out


def cpu_view(store: Store, edges: Sequence[float], t: float, hold: float) -> CpuView:
    def s(key: str) -> Series | None:
        return store.series.get(key)

    busy = bucket_series(s("cpu.busy"), edges, hold)
    iowait = bucket_series(s("cpu.iowait"), edges, hold)
    mem_pct = bucket_series(s("mem.used_pct"), edges, hold)
    cores = store.index().int_ids(CPU_CORE, "busy")
    per_core = [value_at(s(CPU_CORE.key(i, "busy")), t, hold) for i in cores]
    values = {
        k: value_at(s(k), t, hold)
        for k in (
            "cpu.busy",
            "cpu.iowait",
            "cpu.user",
            "cpu.system",
            "cpu.steal",
            "load.1",
            "mem.used_pct",
            "mem.used_mb",
            "mem.total_mb",
            "swap.used_mb",
            "swap.total_mb",
        )
    }
    values["cores"] = float(len(cores)) if cores else value_at(s("cpu.cores"), t, 1e9)
    return CpuView(busy, iowait, mem_pct, per_core, values)


def disk_views(store: Store, edges: Sequence[float], t: float, hold: float) -> list[DiskView]:
    out = []
    for name in store.index().ids(DISK, "read_mb_s"):
        keys = DISK.keys(name)
        read = bucket_series(store.series.get(keys["read_mb_s"]), edges, hold)
        write = bucket_series(store.series.get(keys["write_mb_s"]), edges, hold)
        util = bucket_series(store.series.get(keys["util_pct"]), edges, hold)
        values = {
            k: value_at(store.series.get(keys[k]), t, hold)
            for k in ("read_mb_s", "write_mb_s", "util_pct", "r_await_ms", "w_await_ms", "r_s", "w_s")
        }
        activity = sum(known(read)) + sum(known(write)) + sum(known(util)) / 100
        out.append(DiskView(name, read, write, util, values, activity))
    return sorted(out, key=lambda d: (-d.activity, d.name))


def _roles(store: Store, extra: Mapping[int, str | tuple[str, str]], t: float) -> dict[int, tuple[str, str]]:
    """pid → (role, name) of the training process tree as it was at ``t`` (pids of the monitor's namespace:
    a run in a pid namespace the monitor could not map names none); ``extra``: pid → role, or (role, name)."""
    out: dict[int, tuple[str, str]] = {}
    for pid, role in extra.items():
        out[pid] = role if isinstance(role, tuple) else (role, "")
    for run in store.runs.values():
        if run.first_seen > t or run.proc_pid is None:
            continue
        name = _run_name(run)
        out[run.proc_pid] = (run.role, name)
        loaders = [(lid, info) for lid, info in sorted(run.loaders.items()) if info.worker_pids]
        own = run.pid_namespace == "own"
        for lid, info in loaders:
            pids = info.worker_pids if own else (info.proc_pids or [])
            for k, pid in enumerate(pids):
                if not pid:
                    continue
                which = f"worker {k} of loader {lid}" if len(loaders) > 1 else f"worker {k}"
                out[pid] = ("worker", f"{which} · {run.name}")  # what tells workers apart first: names get cut
    return out


def _run_name(run: Run) -> str:
    return f"{run.name} (rank {run.rank})" if run.rank is not None else run.name


def _unmapped_rows(store: Store, t: float, fresh_s: float) -> list[ProcRow]:
    """Rows for the processes of runs in another pid namespace that could not be mapped: their pids (the
    agent's) name other processes here, so no figures, never a stack dump."""
    rows = []
    for run in store.runs.values():
        if run.pid_namespace == "own" or run.first_seen > t:
            continue
        if not (run.connected and not run.ended) and run.last_seen + fresh_s < t:
            continue  # gone at t
        pids = ([] if run.proc_pid is not None else [(run.agent_pid, run.role, _run_name(run))]) + [
            (pid, "worker", f"worker · {run.name}") for pid in run.unmapped_worker_pids()
        ]
        for pid, role, name in pids:
            rows.append(ProcRow(pid, role, name, NAN, NAN, NAN, NAN, NAN, NAN, NAN, note=NS_NOTE, run_id=run.id))
    return rows


def _nvml_gpu_figures(store: Store, rows: list[ProcRow], t: float, fresh_s: float) -> None:
    """Where NVML's pids are the host's, each main's GPU memory as `trainmon.view.nvml_procs` attributes it,
    with the pid namespace it came from (or why there is none) in the row."""
    mains = {r.proc_pid: r for r in store.runs.values() if r.first_seen <= t and r.proc_pid is not None}
    figures = nvml_figures(store, list(mains.values()), t, fresh_s)
    for row in rows:
        run = mains.get(row.pid)
        if run is not None and (fig := figures.get(run.id)) is not None:
            row.gpu_mb, row.gpu_source = fig.mem_mb, fig.source
            row.name = f"{row.name} · GPU mem {fig.source}" if row.name else f"GPU mem {fig.source}"


def proc_rows(store: Store, extra: Mapping[int, str | tuple[str, str]], t: float, fresh_s: float) -> list[ProcRow]:
    roles = _roles(store, extra, t)
    rows = []
    for pid in store.index().int_ids(PROC, "rss_mb"):

        def v(field: str, pid: int = pid) -> float:
            return value_at(store.series.get(PROC.key(pid, field)), t, fresh_s)

        rss = v("rss_mb")
        if is_nan(rss):
            continue  # not alive at t
        role, name = roles.get(pid, ("proc", ""))
        r, s, d = v("state_main_R"), v("state_main_S"), v("state_main_D")
        if is_nan(r):
            r, s, d = v("state_R"), v("state_S"), v("state_D")
        rows.append(ProcRow(pid, role, name, v("cpu_pct"), r, s, d, rss, v("read_mb_s"), v("gpu_mem_mb")))
    _nvml_gpu_figures(store, rows, t, fresh_s)
    rows.extend(_unmapped_rows(store, t, fresh_s))
    return sorted(rows, key=lambda r: (ROLE_ORDER.get(r.role, 3), bool(r.note), r.pid))
