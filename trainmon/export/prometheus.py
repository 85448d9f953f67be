"""Prometheus exporter: ``/metrics`` built at scrape time from the headless Monitor.

Metric names follow Prometheus conventions: ``trainmon_`` prefix, base units (seconds, bytes,
ratios 0..1 or explicit ``_percent``), ``_total`` for counters; labels ``host``, ``gpu``,
``device``, ``rank``, ``pid``.
"""

from __future__ import annotations

import math
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

from trainmon.diagnose.findings import CODES
from trainmon.metrics import DISK, GPU, HOST, Family, Field
from trainmon.protocol import parse_tcp

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


HOST_EXPORTS = _exported(HOST)
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
        self.host = host or socket.gethostname()

    def collect(self) -> Iterator[Any]:
        store = self.monitor.store
        with store.lock:
            latest = {name: s.values[-1] for name, s in store.series.items() if len(s)}
        yield from self._host(latest)
        yield from self._family(GPU, latest)
        yield from self._family(DISK, latest)
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
        families: dict[str, GaugeMetricFamily] = {}
        for key, value in latest.items():
            parsed = family.parse(key)
            if parsed is None or parsed[1] not in exported or not _ok(value):
                continue
            field = exported[parsed[1]]
            name = field.name
            fam = families.get(name) or families.setdefault(
                name, GaugeMetricFamily(name, field.help, labels=["host", family.id_label])
            )
            fam.add_metric([self.host, parsed[0]], value * field.scale)
        yield from families.values()

    def _runs(self) -> Iterator[Any]:
        snap = self.monitor.last_snapshot
        if snap is None:
            return
        labels = ["host", "rank", "pid", "name"]
        step = GaugeMetricFamily("trainmon_step_time_seconds", "median step time over the window", labels=labels)
        wait = GaugeMetricFamily(
            "trainmon_data_wait_ratio", "share of step time waiting on the DataLoader", labels=labels
        )
        sps = GaugeMetricFamily("trainmon_samples_per_second", "training throughput", labels=labels)
        rate = GaugeMetricFamily("trainmon_steps_per_second", "steps per second (last 5 s)", labels=labels)
        steps = CounterMetricFamily("trainmon_steps", "training steps completed", labels=labels)
        drops = CounterMetricFamily(
            "trainmon_agent_dropped_records", "agent records dropped (monitor slow or away)", labels=labels
        )
        up = GaugeMetricFamily("trainmon_run_connected", "1 while the run's agent is connected", labels=labels)
        on_gpu = GaugeMetricFamily(
            "trainmon_run_gpu",
            "1 for each GPU the run trains on (join on gpu with the trainmon_gpu_* metrics)",
            labels=[*labels, "gpu"],
        )
        for r in snap.runs:
            lv = [self.host, "" if r.rank is None else str(r.rank), str(r.pid), r.name]
            if _ok(r.step_p50_ms):
                step.add_metric(lv, r.step_p50_ms / 1e3)
            if _ok(r.wait_fraction):
                wait.add_metric(lv, r.wait_fraction)
            if _ok(r.samples_per_s):
                sps.add_metric(lv, r.samples_per_s)
            rate.add_metric(lv, r.steps_per_s)
            steps.add_metric(lv, r.steps)
            drops.add_metric(lv, r.dropped_records)
            up.add_metric(lv, 1.0 if r.connected else 0.0)
            for g in r.gpus:
                on_gpu.add_metric([*lv, str(g)], 1.0)
        yield from (step, wait, sps, rate, steps, drops, up, on_gpu)

    def _verdict(self) -> Iterator[Any]:
        snap = self.monitor.last_snapshot
        v = snap.verdict if snap is not None else None
        info = InfoMetricFamily("trainmon_verdict", "the headline verdict", labels=["host"])
        state = StateSetMetricFamily("trainmon_verdict_code", "which verdict code holds now", labels=["host"])
        if v is not None:
            info.add_metric([self.host], {"code": v.code, "severity": v.severity, "summary": v.summary[:200]})
            state.add_metric([self.host], {code: code == v.code for code in CODES})
        yield info
        yield state


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
