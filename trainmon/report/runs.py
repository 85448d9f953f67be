"""One run's steady-state figures for the report: steps, step time, data wait, throughput, DataLoader."""

from __future__ import annotations

import math
from typing import Any

from trainmon.diagnose.rules.sampled import sampled_share
from trainmon.diagnose.stats import quantile
from trainmon.diagnose.step_parts import step_parts
from trainmon.numbers import rounded
from trainmon.report.energy import energy_part
from trainmon.report.schema import EpochRestarts, Framework, LoaderConfig, Measurement, OutsideModelSteps, RunSummary
from trainmon.store.batches import batch_measured, batch_size, tokens_per_sample
from trainmon.store.run import Run
from trainmon.store.store import Store


def loader_config(config: dict[str, Any]) -> LoaderConfig | None:
    """The DataLoader settings the report shows, or None when the run reported none."""
    if not config:
        return None
    return {
        "batch_size": batch_size(config),
        "num_workers": config.get("num_workers"),
        "pin_memory": config.get("pin_memory"),
        "prefetch_factor": config.get("prefetch_factor"),
        "persistent_workers": config.get("persistent_workers"),
    }


def batch_size_source(config: dict[str, Any]) -> str | None:
    """Where the report's batch size comes from: the loader's own setting, or the batches the agent read (a batch
    sampler makes them, so the loader has none); None when neither told it."""
    if batch_size(config) is None:
        return None
    return "batches" if batch_measured(config) else "loader"


def exposed_wait_fraction(exposed: float, exposed_wait: float, wait: float, total: float) -> float:
    """The share of step time the GPU sat idle because of data waits (CUDA; nan where nothing was measured).

    Estimated from the measured waits only: the share of their time that left the GPU idle
    (``exposed / exposed_wait``) times the share of step time spent waiting. With every wait measured
    (``TRAINMON_EXPOSED_EVERY=1``, the default, and no skipped waits) that is exposed / step time exactly;
    with sampling or skipped waits the unmeasured waits are not counted as 0 exposed."""
    if exposed_wait <= 0 or total <= 0:
        return math.nan
    return min(1.0, exposed / exposed_wait) * wait / total


def epoch_restarts(run: Run) -> EpochRestarts:
    """Worker restarts at new iterators over the whole run (see ``store.restarts``): how many, what they cost
    and which share of the run's loading wall time (from its first iterator with workers to its last event)."""
    restarts = run.restarts
    count, cost = restarts.until(math.inf)
    wall = run.last_seen - restarts.first_t
    return {
        "epoch_restarts": count,
        "epoch_restart_s": rounded(cost, 3),
        "epoch_restart_fraction": rounded(cost / wall if count and wall > 0 else math.nan, 4),
    }


def sampled_wait(store: Store, run: Run) -> tuple[float, int]:
    """A sampled run's data-wait share over its whole span, and the samples it rests on."""
    return sampled_share(store, run.pid, run.first_seen, run.last_seen if not run.connected else math.inf)


def run_summary(run: Run, store: Store | None = None) -> RunSummary:
    """The run's figures over its steady state. A run measured by sampling has no steps (those are None); its data
    wait is the sampled estimate, read from ``store``."""
    steps = run.steps
    durations: list[float] = []
    wait = total = exposed = exposed_wait = comm = own = 0.0
    samples = 0
    for k in range(len(steps)):
        if steps.warm[k]:
            continue
        d = steps.end[k] - steps.start[k]
        durations.append(d)
        total += d
        wait += steps.wait[k]
        comm += steps.comm[k]
        own += steps.own[k]
        samples += steps.samples[k]
        if steps.exposed[k] == steps.exposed[k]:  # measured (CUDA)
            exposed += steps.exposed[k]
            exposed_wait += steps.exposed_wait[k]
    sampled = run.measured_by == "sampling"
    train = run.loaders.get(1) if sampled else run.train_loader()
    samples_per_s = samples / total if total > 0 and samples else math.nan
    per_sample = tokens_per_sample(train.config) if train is not None else math.nan
    return {
        "pid": run.pid,
        "agent_pid": run.agent_pid,
        "pid_namespace": run.pid_namespace,
        "rank": run.rank,
        "name": run.name,
        "host": run.host,
        "steps": None if sampled else steps.total,
        "warmup_steps": None if sampled else steps.total - len(durations),
        "step_time_ms": {
            "p50": rounded(quantile(durations, 0.5) * 1e3, 3),
            "p95": rounded(quantile(durations, 0.95) * 1e3, 3),
        },
        "data_wait_fraction": rounded(
            sampled_wait(store, run)[0]
            if sampled and store is not None
            else wait / total
            if total > 0 and run.wait_measured
            else math.nan,
            4,
        ),
        "exposed_wait_fraction": rounded(exposed_wait_fraction(exposed, exposed_wait, wait, total), 4),
        "comm_fraction": rounded(comm / total if total > 0 and run.comm_by_op else math.nan, 4),
        "data_wait_measured_as": "sampling" if sampled else run.wait_source,
        "outside_model_steps": outside_model_steps(run) if not sampled else None,
        "step_parts": None if sampled else step_parts(run, total, wait, comm, own),
        "samples_per_s": rounded(samples_per_s, 2),
        "tokens_per_s": rounded(samples_per_s * per_sample, 1),
        "dataloader": loader_config(train.config if train is not None else {}),
        "batch_size_source": batch_size_source(train.config if train is not None else {}),
        "loaders": len(run.loaders),
        "worker_pids": run.worker_pids(),
        "agent_worker_pids": run.agent_worker_pids(),
        "checkpoints": len(run.checkpoints),
        "checkpoint_s": rounded(sum(c1 - c0 for c0, c1 in run.checkpoints), 3),
        **epoch_restarts(run),
        "device": run.device or (f"cuda:{run.cuda_device['index']}" if run.cuda_device else None),
        "ended": run.ended,
        "dropped_records": run.dropped_records,
        "argv": run.hello.get("argv"),
        "job": {"id": run.job_id, "node": run.node, "global_rank": run.rank},
        "framework": framework(run),
        **energy_part(store, run),
    }


def framework(run: Run) -> Framework | None:
    """The trainer that drove the run's loop, as the agent saw it made (None: a plain PyTorch loop)."""
    fw = run.framework
    if not fw or not isinstance(fw.get("name"), str):
        return None
    version = fw.get("version")
    return {"name": fw["name"], "version": version if isinstance(version, str) else None}


def measurement(store: Store, run: Run, first: float) -> Measurement:
    """How the run was measured: by its agent (from the start, or injected into it ``attached_at`` seconds into
    the recording), or by sampling (its data-wait share estimated from py-spy samples, over the whole run)."""
    if run.measured_by == "sampling":
        n = sampled_wait(store, run)[1]
        return {"measured_by": "sampling", "attached_at": None, "data_wait_samples": n}
    attached_at = None
    wall = run.attach_wall
    if wall is not None:
        mono, hello_wall = run.hello.get("mono_ns"), run.hello.get("wall")
        at = run.first_seen
        if isinstance(mono, int) and isinstance(hello_wall, float):
            at = mono / 1e9 - (hello_wall - wall)  # the attach instant on the monitor's clock
        attached_at = round(max(0.0, at - first), 2)
    return {"measured_by": "agent", "attached_at": attached_at, "data_wait_samples": None}


def outside_model_steps(run: Run) -> OutsideModelSteps | None:
    """Where the agent timed the model (a loop no loader feeds): the steps it measured, in its bursts, and those between
    bursts given the measured steps' share (store/derive.py); None elsewhere."""
    d = run.deriver
    if not d.outside_steps:
        return None
    return {"measured": d.outside_steps, "estimated": d.outside_estimated}
