"""Prometheus exporter: ``/metrics`` built at scrape time from the headless Monitor.

Metric names follow Prometheus conventions: ``trainmon_`` prefix, base units (seconds, bytes,
ratios 0..1 or explicit ``_percent``), ``_total`` for counters. Labels hold identities and codes only, never
a number or a sentence, so a server keeps the same few series for months: ``host`` (this monitor's node),
``gpu``, ``device``, and per run ``node``, ``job_id``, ``rank`` (global), ``pid``, ``name``; verdicts ``code``
and ``severity``. The job is ``job_id``, not ``job``: Prometheus sets ``job`` on every series it scrapes.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
)

from trainmon import metrics as M
from trainmon.analyses.energy_per_step import LIVE_WINDOW_S, RunEnergy, live_energy
from trainmon.diagnose.findings import CODES, SEVERITIES, Finding
from trainmon.diagnose.step_parts import PARTS as STEP_PARTS
from trainmon.diagnose.thresholds import Thresholds
from trainmon.labels import run_label
from trainmon.metrics import DISK, GPU, HOST, LIMITING_THROTTLE, SELF, THROTTLE_REASONS, Family, Field
from trainmon.protocol import parse_tcp
from trainmon.store.batches import tokens_per_sample

if TYPE_CHECKING:
    from trainmon.monitor import Snapshot
    from trainmon.store.store import Store


class Export(NamedTuple):
    name: str  # the Prometheus metric
    help: str
    scale: float  # stored unit → Prometheus base unit


def _exported(fields: Mapping[str, Field]) -> dict[str, Export]:
    """The fields of a schema table that have a Prometheus name, by series field."""
    return {key: Export(f.prom, f.help, f.scale) for key, f in fields.items() if f.prom is not None}


HOST_EXPORTS = _exported({**HOST, **SELF})  # the monitor's own cost is per host too
FAMILY_EXPORTS = {family.name: _exported(family.fields) for family in (GPU, DISK)}


class MonitorState(Protocol):
    """What the exporter reads of the headless Monitor at scrape time."""

    @property
    def store(self) -> Store: ...

    @property
    def last_snapshot(self) -> Snapshot | None: ...


def _ok(v: float | None) -> bool:
    return v is not None and not math.isnan(v)


class MonitorCollector:
    """A prometheus_client collector reading the monitor's store and latest snapshot."""

    def __init__(self, monitor: MonitorState, host: str | None = None) -> None:
        self.monitor = monitor
        self.host = host or node_name()

    def collect(self) -> Iterator[Any]:
        store = self.monitor.store
        with store.lock:
            latest = {name: s.values[-1] for name, s in store.series.items() if len(s)}
        yield from self._host(latest)
        yield from self._family(GPU, latest)
        yield from self._family(DISK, latest)
        yield from self._throttled(latest)
        yield from self._runs()
        yield from self._verdict()

    def _host(self, latest: dict[str, float]) -> Iterator[Any]:
        for key, field in HOST_EXPORTS.items():
            if _ok(latest.get(key)):
                g = GaugeMetricFamily(field.name, field.help, labels=["host"])
                g.add_metric([self.host], latest[key] * field.scale)
                yield g

    def _family(self, family: Family, latest: dict[str, float]) -> Iterator[Any]:
        exported = FAMILY_EXPORTS[family.name]
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for key, value in latest.items():
            parsed = family.parse(key)
            if parsed is None or parsed[1] not in exported or not _ok(value):
                continue
            field = exported[parsed[1]]
            name = field.name
            kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily  # the schema's counters
            fam = families.get(name) or families.setdefault(
                name, kind(name, field.help, labels=["host", family.id_label])
            )
            fam.add_metric([self.host, parsed[0]], value * field.scale)
        yield from families.values()

    def _throttled(self, latest: dict[str, float]) -> Iterator[Any]:
        """Per GPU: 1 while a limiting clock-event reason holds it back, as ``gpu.throttled`` counts it (a power
        cap only with the SM clock below ``throttle_power_cap_clock`` of its maximum); and 0/1 per reason."""
        labels = ["host", "gpu"]
        held = _gauge(M.GPU_THROTTLED, labels)
        by_reason = _gauge(M.GPU_THROTTLE_REASON, [*labels, "reason"])
        th = getattr(self.monitor, "thresholds", None)
        share = (th if isinstance(th, Thresholds) else Thresholds()).throttle_power_cap_clock
        for key, mask in latest.items():
            parsed = GPU.parse(key)
            if parsed is None or parsed[1] != "throttle" or not _ok(mask):
                continue
            gpu = parsed[0]
            bits = int(mask) & LIMITING_THROTTLE
            clock = latest.get(GPU.key(gpu, "sm_clock_mhz"), math.nan)
            clock_max = latest.get(GPU.key(gpu, "sm_clock_max_mhz"), math.nan)
            if bits & SW_POWER_CAP and not clock < share * clock_max:  # no clock to compare: the cap does not count
                bits &= ~SW_POWER_CAP
            held.add_metric([self.host, gpu], 1.0 if bits else 0.0)
            for reason in LIMITING_REASONS:
                by_reason.add_metric([self.host, gpu, reason.report], 1.0 if int(mask) & reason.bit else 0.0)
        yield held
        yield by_reason

    def _runs(self) -> Iterator[Any]:
        snap = self.monitor.last_snapshot
        if snap is None:
            return
        labels = RUN_LABELS
        step = _gauge(M.STEP_TIME, labels)
        wait = _gauge(M.DATA_WAIT, labels)
        sps = _gauge(M.SAMPLES_RATE, labels)
        tps = _gauge(M.TOKENS_RATE, labels)
        rate = _gauge(M.STEPS_RATE, labels)
        steps = CounterMetricFamily(M.STEPS.name, M.STEPS.help, labels=labels)
        drops = CounterMetricFamily(M.AGENT_DROPS.name, M.AGENT_DROPS.help, labels=labels)
        up = _gauge(M.RUN_CONNECTED, labels)
        sampled = _gauge(M.RUN_SAMPLED, labels)
        on_gpu = _gauge(M.RUN_GPU, [*labels, "gpu"])
        verdict = _gauge(M.RUN_VERDICT, [*labels, "code", "severity"])
        energy = (_gauge(M.RUN_ENERGY_STEP, labels), _gauge(M.RUN_ENERGY_SAMPLE, labels))
        shared = _gauge(M.RUN_ENERGY_SHARED, labels)
        overhead = _gauge(AGENT_STEP_OVERHEAD, labels)
        part = _gauge(M.STEP_PART, [*labels, "part"])
        idents = self._identities()
        per_sample = self._tokens_per_sample()
        joules = self._energy(snap)
        for r in snap.runs:
            job_id, node = idents.get(r.run_id, ("", self.host))
            lv = [self.host, node, job_id, "" if r.rank is None else str(r.rank), str(r.pid), r.name]
            if _ok(r.step_p50_ms):
                step.add_metric(lv, r.step_p50_ms / 1e3)
            if _ok(r.wait_fraction):
                wait.add_metric(lv, r.wait_fraction)
            sampled.add_metric(lv, 1.0 if r.measured_by == "sampling" else 0.0)
            if r.measured_by == "sampling":
                up.add_metric(lv, 1.0 if r.connected else 0.0)
                top = run_finding(snap.findings, run_label(r.rank, r.pid))
                if top is not None:
                    verdict.add_metric([*lv, top.code, top.severity], 1.0)
                continue  # no steps: no step figures
            if _ok(r.samples_per_s):
                sps.add_metric(lv, r.samples_per_s)
                if _ok(tokens := r.samples_per_s * per_sample.get(r.run_id, math.nan)):
                    tps.add_metric(lv, tokens)
            rate.add_metric(lv, r.steps_per_s)
            steps.add_metric(lv, r.steps)
            if _ok(r.agent_step_ns):
                overhead.add_metric(lv, r.agent_step_ns / 1e9)
            for name in STEP_PARTS:
                if (share := (r.step_parts or {}).get(name)) is not None:
                    part.add_metric([*lv, name], share)
            drops.add_metric(lv, r.dropped_records)
            up.add_metric(lv, 1.0 if r.connected else 0.0)
            for g in r.gpus:
                on_gpu.add_metric([*lv, str(g)], 1.0)
            if (e := joules.get(r.run_id)) is not None:
                for gauge, value in zip(energy, (e.joules_per_step, e.joules_per_sample), strict=True):
                    if _ok(value):
                        gauge.add_metric(lv, value)
                shared.add_metric(lv, 1.0 if e.shared_with else 0.0)
            top = run_finding(snap.findings, run_label(r.rank, r.pid))
            if top is not None:
                verdict.add_metric([*lv, top.code, top.severity], 1.0)
        yield from (step, wait, sps, tps, rate, steps, drops, up, sampled, on_gpu, verdict, *energy, shared)
        yield from (overhead, part)

    def _energy(self, snap: Snapshot) -> dict[int, RunEnergy]:
        """Each agent run's GPU energy over the live window (its own GPUs), by run id, where it was measured."""
        store = self.monitor.store
        th = getattr(self.monitor, "thresholds", None)
        window = th.window_s if isinstance(th, Thresholds) else LIVE_WINDOW_S
        out: dict[int, RunEnergy] = {}
        t = getattr(snap, "t", None)
        if not isinstance(t, (int, float)):  # a snapshot without its instant: no live window
            return out
        with store.lock:
            for r in snap.runs:
                run = store.runs.get(r.run_id)
                if run is not None and r.gpus and r.measured_by == "agent":
                    e = live_energy(store, run, t, window, list(r.gpus))
                    if e is not None:
                        out[r.run_id] = e
        return out

    def _identities(self) -> dict[int, tuple[str, str]]:
        """(job id, node) of each run of the store, by run id."""
        store = self.monitor.store
        with store.lock:
            return {run_id: (run.job_id, run.node) for run_id, run in store.runs.items()}

    def _tokens_per_sample(self) -> dict[int, float]:
        """Tokens per sample of each run's train loader (sequence batches; NaN for others), by run id."""
        store = self.monitor.store
        with store.lock:
            return {
                run_id: tokens_per_sample(train.config) if (train := run.train_loader()) else math.nan
                for run_id, run in store.runs.items()
            }

    def _verdict(self) -> Iterator[Any]:
        snap = self.monitor.last_snapshot
        v = snap.verdict if snap is not None else None
        info = InfoMetricFamily(M.VERDICT.name, M.VERDICT.help, labels=["host"])
        severity = _gauge(M.VERDICT_SEVERITY, ["host"])
        state = StateSetMetricFamily(M.VERDICT_CODE.name, M.VERDICT_CODE.help, labels=["host"])
        if v is not None:
            info.add_metric([self.host], {"code": v.code, "severity": v.severity})
            severity.add_metric([self.host], float(SEVERITIES.index(v.severity)))
            state.add_metric([self.host], {code: code == v.code for code in CODES})
        yield info
        yield severity
        yield state


RUN_LABELS = ["host", "node", "job_id", "rank", "pid", "name"]
AGENT_STEP_OVERHEAD = M.Metric(
    "trainmon_agent_step_overhead_seconds",
    "what the run's agent costs its training per step (its hooks on the training thread and its sender thread's "
    "CPU, measured by the agent itself over the last 5 s)",
)


def _gauge(metric: M.Metric, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, labels=labels)


LIMITING_REASONS = [r for r in THROTTLE_REASONS if r.limiting]
SW_POWER_CAP = next(r.bit for r in THROTTLE_REASONS if r.report == "sw_power_cap")


def node_name() -> str:
    """This node's name in every series: ``TRAINMON_NODE``, else the host name."""
    return os.environ.get("TRAINMON_NODE") or socket.gethostname()


def run_finding(findings: list[Finding], label: str) -> Finding | None:
    """The best-ranked finding about the run named ``label`` (the findings come best-ranked first)."""
    return next((f for f in findings if f.evidence.get("run") == label), None)


def serve(monitor: MonitorState, address: str) -> tuple[str, int]:
    """Serve ``/metrics`` on ``HOST:PORT`` in a daemon thread; returns the bound address."""
    tcp = parse_tcp(address)
    if tcp is None:
        raise ValueError(f"--prometheus needs HOST:PORT, got {address!r}")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(monitor))
    server, _thread = start_http_server(tcp[1], addr=tcp[0], registry=registry)
    host, port = server.server_address[:2]
    return str(host), int(port)
