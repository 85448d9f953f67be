"""The headless Monitor: owns the sources and the store, ticks, diagnoses, hands out snapshots.

The TUI, the recorder, the status line and the tests all drive this one object.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainmon.autodump import AutoDumper
from trainmon.diagnose.engine import VerdictTracker, evaluate
from trainmon.diagnose.evidence import run_gpus
from trainmon.diagnose.findings import Finding
from trainmon.diagnose.live.change import Change
from trainmon.diagnose.live.memo import WindowMemo
from trainmon.diagnose.live.window import run_window
from trainmon.diagnose.rules import Thresholds
from trainmon.diagnose.rules.sampled import sampled_share
from trainmon.diagnose.step_parts import window_parts
from trainmon.diagnose.verdicts import verdict as verdict_of
from trainmon.ingest.agent_server import AgentServer
from trainmon.labels import run_label, status_run_part, status_sampled_part, status_text
from trainmon.metrics import GPU, PROC, gpu_mask
from trainmon.numbers import is_nan
from trainmon.sources.base import Source
from trainmon.sources.discovery.unattached import UnattachedRuns
from trainmon.sources.gpu.gpu_source import GpuSource
from trainmon.sources.host.disk import DiskSource
from trainmon.sources.host.host_source import HostSource
from trainmon.sources.host.procs import ProcSource
from trainmon.sources.host.self_cost import SelfCostSource
from trainmon.sources.pyspy.timed_stacks import TimedAttribution
from trainmon.store.agent_cost import live_per_step, per_step_text
from trainmon.store.store import Ingest, Store

log = logging.getLogger("trainmon.monitor")


class Fanout:
    """One Ingest that forwards to several (the store, a recorder); a failing sink is isolated."""

    def __init__(self, sinks: list[Ingest]) -> None:
        self.sinks = sinks

    def _each(self, method: str, *args: Any) -> None:
        for sink in self.sinks:
            try:
                getattr(sink, method)(*args)
            except Exception:
                log.exception("sink %s failed in %s", type(sink).__name__, method)

    def hello(self, run_id: int, t: float, hello: dict[str, Any]) -> None:
        self._each("hello", run_id, t, hello)

    def events(self, run_id: int, t: float, records: array) -> None:
        self._each("events", run_id, t, records)

    def info(self, run_id: int, t: float, info: dict[str, Any]) -> None:
        self._each("info", run_id, t, info)

    def closed(self, run_id: int, t: float, reason: str) -> None:
        self._each("closed", run_id, t, reason)

    def sample(self, t: float, values: dict[str, float]) -> None:
        self._each("sample", t, values)

    def meta(self, t: float, meta: dict[str, Any]) -> None:
        self._each("meta", t, meta)


@dataclass
class RunStatus:
    run_id: int
    pid: int
    rank: int | None
    name: str
    connected: bool
    ended: str | None
    steps: int
    steps_per_s: float
    wait_fraction: float
    samples_per_s: float
    step_p50_ms: float
    dropped_records: int
    gpus: list[int] = field(default_factory=list)  # the run's own GPUs (NVML indices), where known
    measured_by: str = "agent"  # or "sampling": found running without an agent (wait_fraction: the estimate)
    agent_step_ns: float = math.nan  # what the agent itself costs the training per step (last 5 s; nan: not measured)
    # The live window's step split (diagnose/step_parts.py): data wait, model, comm, own code; None: model not timed
    step_parts: dict[str, Any] | None = None


@dataclass
class Snapshot:
    t: float
    runs: list[RunStatus]
    verdict: Finding | None
    findings: list[Finding]
    host: dict[str, float] = field(default_factory=dict)


class Monitor:
    def __init__(
        self,
        address: str | None = None,
        *,
        interval: float = 1.0,
        token: str | None = None,
        thresholds: Thresholds | None = None,
        sinks: list[Ingest] | None = None,
        listen: bool = True,
        sources: list[Source] | None = None,
        nvml_module: Any = None,
        dump_on_critical: bool = True,
        discover: bool | None = None,
        timed_stacks: bool = True,
    ) -> None:
        self.interval = interval
        self.thresholds = thresholds or Thresholds()
        self.store = Store()
        self.ingest = Fanout([self.store, *(sinks or [])])
        self.agents = AgentServer(self.ingest, address, token=token) if listen else None
        self.extra_pids: dict[int, str] = {}
        self.gpu: GpuSource | None = None
        self.procs: ProcSource | None = None
        # Trainings running without an agent: found on the host, sampled, judged
        # (trainmon.sources.discovery.unattached).
        self.unattached: UnattachedRuns | None = None
        if sources is None:
            self.gpu = GpuSource(nvml_module)
            self.procs = ProcSource(self.tracked_pids)
            if discover is None:
                discover = os.environ.get("TRAINMON_DISCOVER", "1").strip().lower() not in ("0", "false", "no", "off")
            self.unattached = UnattachedRuns(self.ingest, self.agent_pids) if discover else None
            found = [self.unattached] if self.unattached is not None else []
            sources = [*found, HostSource(), DiskSource(), self.procs, self.gpu, SelfCostSource()]
        self.sources = sources
        self.tracker = VerdictTracker(hold_s=self.thresholds.hold_s, change_hold_s=self.thresholds.change_hold_s)
        # Each run's latest window: the engine takes it each tick and run_statuses reads the same one back.
        self.window_memo = WindowMemo()
        # py-spy stacks of a run's processes when a critical verdict first fires for it: evidence, via the Ingest.
        self.autodump = (
            AutoDumper(self.ingest.info, workers_for=lambda code: verdict_of(code).dump_workers)
            if dump_on_critical
            else None
        )
        # py-spy samples of an attached run's training thread where its steps spend time outside the model or in its
        # own code: the functions named by time, not by the GIL (sources/pyspy/timed_stacks.py). Only with the host's
        # own sources: a monitor fed by given sources (tests, replays) samples nothing it was not given.
        self.timed_stacks = TimedAttribution(self.ingest.info) if self.procs is not None and timed_stacks else None
        self.findings: list[Finding] = []
        self.last_snapshot: Snapshot | None = None
        self.listeners: list[Callable[[Snapshot], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def source_cost_s(self) -> dict[str, float]:
        """Source name → seconds its last sample took (sources sampled at least once)."""
        return {s.name: s.cost_s for s in self.sources if not math.isnan(s.cost_s)}

    @property
    def address(self) -> str | None:
        return self.agents.address if self.agents is not None else None

    def tracked_pids(self) -> dict[int, str]:
        """The training process tree: mains/ranks from agent hellos, their workers, launched children.

        Pids of the monitor's namespace only: a run in another pid namespace counts with its mapped pids,
        one that could not be mapped with none (its pids would name other processes here)."""
        pids = dict(self.extra_pids)
        if self.unattached is not None:
            pids.update((pid, role) for pid, (role, _) in self.unattached.roles().items())
        with self.store.lock:
            for run in self.store.runs.values():
                if not run.connected and run.ended:
                    continue
                main = run.proc_pid
                if main is not None:
                    pids[main] = run.role
                for pid in run.worker_pids():
                    pids[pid] = "worker"
        return pids

    def agent_pids(self) -> set[int]:
        """Main processes an agent reports from (connected): they are never sampled."""
        with self.store.lock:
            return {
                pid
                for run in self.store.runs.values()
                if run.connected and run.measured_by == "agent" and (pid := run.proc_pid) is not None
            }

    def track(self, pid: int, role: str = "child") -> None:
        self.extra_pids[pid] = role

    def watch_pid(self, pid: int) -> str | None:
        """Agentless: follow ``pid`` by py-spy sampling. Returns why not, or None."""
        from trainmon.sources.pyspy.py_spy import PySpySampler, dump, process_gone

        if process_gone(pid):
            return f"no such process: {pid}"
        probe = dump(pid)
        if probe.error:
            return probe.error
        self.track(pid, "main")
        if self.unattached is not None:
            self.unattached.watch(pid)  # a sampled run like any discovered training
        else:
            self.sources.append(_PySpySource(PySpySampler(pid)))
        return None

    def found_roles(self) -> dict[int, tuple[str, str]]:
        """pid → (role, name) of the trainings found running on the host (mains, ranks, workers), agent or not."""
        return self.unattached.roles() if self.unattached is not None else {}

    def attach(self, pid: int, timeout: float = 15.0) -> tuple[bool, str]:
        """Inject the agent into the running process ``pid`` so that it reports to this monitor (``trainmon
        attach``): whether it reports now (or already did), and one line saying so or why not."""
        if self.address is None:
            return False, "this monitor does not listen for agents: nothing to attach to"
        from trainmon.attach import attach_process

        token = self.agents.token if self.agents is not None else None
        result = attach_process(pid, self.address, timeout=timeout, token=token)
        return result.status in ("attached", "already"), result.message

    @staticmethod
    def dump_stacks(pid: int) -> list[str]:
        """Readable Python stacks of every thread of ``pid``, by py-spy without pausing it (or why not)."""
        from trainmon.sources.pyspy.py_spy import dump

        return dump(pid).summary(max_frames=30)

    def start(self) -> None:
        if self.agents is not None:
            self.agents.start()
        meta: dict[str, Any] = {"interval": self.interval}
        if self.gpu is not None:
            meta["gpu_error"] = self.gpu.error
            meta["gpus"] = self.gpu.devices() if self.gpu.error is None else []
        self.ingest.meta(time.monotonic(), meta)
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="trainmon-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self.autodump is not None:
            self.autodump.close()
        if self.timed_stacks is not None:
            self.timed_stacks.close()
        if self.agents is not None:
            self.agents.stop()
        for source in self.sources:
            try:
                source.close()
            except Exception:
                log.exception("closing source %s failed", source.name)

    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            try:
                self.tick()
            except Exception:
                log.exception("monitor tick failed")
            # The next tick is scheduled after this one finished: a slow tick never piles up.
            next_t = max(next_t + self.interval, time.monotonic() + self.interval / 4)

    def tick(self, now: float | None = None) -> Snapshot:
        """Sample, diagnose and publish once, at ``now`` (monotonic s; default: the clock)."""
        t = time.monotonic() if now is None else now
        values = self.sample_sources(t)
        self.ingest.sample(t, values)
        changes: list[Change] = []  # runs whose live window was cut at a change: the verdict may follow fast
        self.findings = evaluate(self.store, t, self.thresholds, changes=changes, window_memo=self.window_memo)
        verdict = self.tracker.update(t, self.findings, changes)
        if self.procs is not None:
            self.procs.set_fast(states_matter(self.findings, verdict))
        if self.autodump is not None:
            self.autodump.consider(self.store, t, self.findings)
        if self.timed_stacks is not None:
            self.timed_stacks.consider(self.store, t)
        snap = Snapshot(t, self.run_statuses(t), verdict, self.findings, values)
        self.last_snapshot = snap
        for listener in list(self.listeners):
            try:
                listener(snap)
            except Exception:
                log.exception("snapshot listener failed")
        return snap

    def sample_sources(self, t: float) -> dict[str, float]:
        values: dict[str, float] = {}
        for source in self.sources:
            values.update(source.timed_sample(t))  # never raises; keeps the source's cost_s
        if self.gpu is not None and self.gpu.error is None:
            tracked = self.tracked_pids()
            try:
                for pid, usage in self.gpu.process_usage().items():
                    if pid in tracked:
                        values[PROC.key(pid, "gpu_mem_mb")] = float(usage.get("mem_mb", math.nan))
                        values[PROC.key(pid, "gpu_sm_pct")] = float(usage.get("sm_pct", math.nan))
                        values[PROC.key(pid, "gpu_mask")] = gpu_mask(usage.get("gpus") or [usage.get("gpu", -1)])
            except Exception:
                log.debug("GPU process usage failed", exc_info=True)
        return values

    def run_statuses(self, t: float, rate_window_s: float = 5.0) -> list[RunStatus]:
        out = []
        with self.store.lock:
            gpus = self.store.index().int_ids(GPU, "util")
            for run in self.store.runs.values():
                w = run_window(
                    run,
                    t - self.thresholds.window_s,
                    t,
                    min_steps=self.thresholds.window_steps,
                    window_memo=self.window_memo,
                )
                wait = w.wait_fraction if run.wait_measured else math.nan  # no loader, model not timed: unknown
                if run.measured_by == "sampling":
                    wait = sampled_share(self.store, run.pid, t - self.thresholds.window_s, t)[0]
                i, j = run.steps.index_range(t - rate_window_s, t)
                span = min(rate_window_s, max(1e-9, t - run.first_seen))
                out.append(
                    RunStatus(
                        run.id,
                        run.pid,
                        run.rank,
                        run.name,
                        run.connected,
                        run.ended,
                        run.steps.total,
                        (j - i) / span,
                        wait,
                        w.samples_per_s,
                        math.nan if is_nan(w.step_p50_s) else w.step_p50_s * 1e3,
                        run.dropped_records,
                        run_gpus(self.store, run, gpus),
                        run.measured_by,
                        cost["total"] if (cost := live_per_step(run, t)) is not None else math.nan,
                        window_parts(w) if run.measured_by == "agent" else None,
                    )
                )
        return out


def states_matter(findings: list[Finding], verdict: Finding | None) -> bool:
    """Whether the thread-state sampler should look fast: a finding whose rule reads the states (the registry's
    ``reads_states``), or any verdict that is not plainly fine (a cause may be about to be named). Otherwise one
    look per tick serves the process table."""
    if verdict is not None and verdict.severity != "ok" and verdict.code != "insufficient_data":
        return True
    return any(verdict_of(f.code).reads_states for f in findings)


class _PySpySource(Source):
    """Adapts a PySpySampler to the Source interface."""

    name = "pyspy"
    logger = logging.getLogger("trainmon.pyspy")

    def __init__(self, sampler) -> None:
        super().__init__()
        self.sampler = sampler

    def sample(self, now: float) -> dict[str, float]:
        return self.sampler.sample(now)

    def close(self) -> None:
        self.sampler.close()


def status_line(snap: Snapshot) -> str:
    """One line for terminals without the TUI: steps/s, data-wait %, verdict."""
    live = [r for r in snap.runs if r.connected] or snap.runs[-1:]
    parts = [
        status_run_part(run_label(r.rank, r.pid), r.steps_per_s, r.wait_fraction, r.steps)
        if r.measured_by == "agent"
        else status_sampled_part(run_label(r.rank, r.pid), r.name, r.wait_fraction)
        for r in live[:4]
    ]
    v = snap.verdict
    text = status_text(
        parts, (v.code, v.summary) if v is not None else None, "waiting for a training process to attach"
    )
    return f"{time.strftime('%H:%M:%S')}  {text}{self_cost_part(snap.host)}{agent_cost_part(snap.runs)}"


def self_cost_part(values: dict[str, float]) -> str:
    """ "  · trainmon 0.8% CPU, 48 MB" from this tick's own-cost series; empty where they are not sampled."""
    cpu, rss = values.get("self.cpu_pct", math.nan), values.get("self.rss_mb", math.nan)
    if is_nan(cpu) or is_nan(rss):
        return ""
    helpers = values.get("self.helpers_cpu_pct", math.nan)
    if not is_nan(helpers) and helpers >= 0.05:
        cpu += helpers
    return f"  · trainmon {cpu:.1f}% CPU, {rss:.0f} MB"


SHARE_FROM_NS = 10_000  # from 10 µs a step on, the status line gives the agent's share of the step too


def agent_cost_part(runs: list[RunStatus]) -> str:
    """ "  · agent 0.9µs/step": the most any connected run's agent costs its training per step (its hooks on the
    training thread and its sender thread, measured by the agent itself); empty where none is measured."""
    measured = [r for r in runs if r.connected and not is_nan(r.agent_step_ns)]
    if not measured:
        return ""
    top = max(measured, key=lambda r: r.agent_step_ns)
    text = f"  · agent {per_step_text(top.agent_step_ns)}/step"
    if top.agent_step_ns >= SHARE_FROM_NS and top.step_p50_ms > 0:
        # A slow loop: the agent's costs per second fall on few steps, so a per-step figure reads high; its share of
        # the step says what it costs.
        share = top.agent_step_ns / (top.step_p50_ms * 1e6) * 100
        text += f" ({share:.1f}% of a step)" if share >= 0.1 else " (<0.1% of a step)"
    return text
