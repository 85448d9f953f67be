"""Prometheus exporter: ``/metrics`` built at scrape time from the headless Monitor.

Metric names follow Prometheus conventions: ``trainmon_`` prefix, base units (seconds, bytes,
ratios 0..1 or explicit ``_percent``), ``_total`` for counters; labels ``host``, ``gpu``,
``device``, ``rank``, ``pid``.
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
)

from trainmon.diagnose.findings import CODES
from trainmon.protocol import parse_tcp

MB = 1024 * 1024
GPU_METRICS = {  # series suffix → (metric, help, scale)
    "util": ("trainmon_gpu_utilization_percent", "GPU utilisation (NVML)", 1.0),
    "util_min": ("trainmon_gpu_utilization_min_percent", "lowest GPU utilisation sample in the last tick", 1.0),
    "mem_used_mb": ("trainmon_gpu_memory_used_bytes", "GPU memory used", MB),
    "mem_total_mb": ("trainmon_gpu_memory_total_bytes", "GPU memory total", MB),
    "power_w": ("trainmon_gpu_power_watts", "GPU power draw", 1.0),
    "power_limit_w": ("trainmon_gpu_power_limit_watts", "GPU enforced power limit", 1.0),
    "temp_c": ("trainmon_gpu_temperature_celsius", "GPU temperature", 1.0),
    "sm_clock_mhz": ("trainmon_gpu_sm_clock_hertz", "GPU SM clock", 1e6),
    "pcie_rx_mb_s": ("trainmon_gpu_pcie_rx_bytes_per_second", "PCIe host→device throughput", MB),
    "pcie_tx_mb_s": ("trainmon_gpu_pcie_tx_bytes_per_second", "PCIe device→host throughput", MB),
    "throttle": ("trainmon_gpu_clock_event_reasons", "NVML clock-event (throttle) reasons bitmask", 1.0),
    "gpm.sm_active": ("trainmon_gpu_sm_active_percent", "GPM SM activity", 1.0),
    "gpm.tensor_active": ("trainmon_gpu_tensor_active_percent", "GPM tensor pipe activity", 1.0),
}
DISK_METRICS = {
    "read_mb_s": ("trainmon_disk_read_bytes_per_second", "disk read throughput", MB),
    "write_mb_s": ("trainmon_disk_write_bytes_per_second", "disk write throughput", MB),
    "util_pct": ("trainmon_disk_utilization_percent", "disk busy time (iostat %util)", 1.0),
    "r_await_ms": ("trainmon_disk_read_await_seconds", "average read latency (iostat r_await)", 1e-3),
    "w_await_ms": ("trainmon_disk_write_await_seconds", "average write latency (iostat w_await)", 1e-3),
}
HOST_METRICS = {
    "cpu.busy": ("trainmon_cpu_busy_percent", "host CPU busy (all cores)", 1.0),
    "cpu.iowait": ("trainmon_cpu_iowait_percent", "host CPU iowait", 1.0),
    "mem.used_pct": ("trainmon_memory_used_percent", "host memory used", 1.0),
    "swap.used_mb": ("trainmon_swap_used_bytes", "swap used", MB),
    "load.1": ("trainmon_load1", "1-minute load average", 1.0),
}


def _ok(v: float | None) -> bool:
    return v is not None and not math.isnan(v)


class MonitorCollector:
    """A prometheus_client collector reading the monitor's store and latest snapshot."""

    def __init__(self, monitor: Any, host: str | None = None) -> None:
        self.monitor = monitor
        self.host = host or socket.gethostname()

    def collect(self) -> Iterator[Any]:
        store = self.monitor.store
        with store.lock:
            latest = {name: s.values[-1] for name, s in store.series.items() if len(s)}
        yield from self._host(latest)
        yield from self._gpus(latest)
        yield from self._disks(latest)
        yield from self._runs()
        yield from self._verdict()

    def _host(self, latest: dict[str, float]) -> Iterator[Any]:
        for key, (name, doc, scale) in HOST_METRICS.items():
            if _ok(latest.get(key)):
                g = GaugeMetricFamily(name, doc, labels=["host"])
                g.add_metric([self.host], latest[key] * scale)
                yield g

    def _gpus(self, latest: dict[str, float]) -> Iterator[Any]:
        families: dict[str, GaugeMetricFamily] = {}
        for key, value in latest.items():
            m = re.match(r"gpu\.(\d+)\.(.+)$", key)
            if m is None or m.group(2) not in GPU_METRICS or not _ok(value):
                continue
            name, doc, scale = GPU_METRICS[m.group(2)]
            fam = families.get(name) or families.setdefault(name, GaugeMetricFamily(name, doc, labels=["host", "gpu"]))
            fam.add_metric([self.host, m.group(1)], value * scale)
        yield from families.values()

    def _disks(self, latest: dict[str, float]) -> Iterator[Any]:
        families: dict[str, GaugeMetricFamily] = {}
        for key, value in latest.items():
            m = re.match(r"disk\.([^.]+)\.(.+)$", key)
            if m is None or m.group(2) not in DISK_METRICS or not _ok(value):
                continue
            name, doc, scale = DISK_METRICS[m.group(2)]
            fam = families.get(name) or families.setdefault(
                name, GaugeMetricFamily(name, doc, labels=["host", "device"])
            )
            fam.add_metric([self.host, m.group(1)], value * scale)
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
        yield from (step, wait, sps, rate, steps, drops, up)

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


def serve(monitor: Any, address: str) -> tuple[str, int]:
    """Serve ``/metrics`` on ``HOST:PORT`` in a daemon thread; returns the bound address."""
    tcp = parse_tcp(address)
    if tcp is None:
        raise ValueError(f"--prometheus needs HOST:PORT, got {address!r}")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorCollector(monitor))
    server, _thread = start_http_server(tcp[1], addr=tcp[0], registry=registry)
    host, port = server.server_address[:2]
    return str(host), int(port)
