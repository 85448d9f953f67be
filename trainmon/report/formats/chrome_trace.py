"""Chrome / Perfetto trace JSON: steps, data waits, checkpoints, phases, marks and counters.

Open the file in ui.perfetto.dev or chrome://tracing. A step's data wait is drawn at the start of the
step (where the loop fetches its batch); the agent records its length, not its exact position.
"""

from __future__ import annotations

import json
from typing import Any

from trainmon.metrics import DISK, GPU
from trainmon.numbers import is_nan
from trainmon.report.formats.base import ReportInput
from trainmon.report.schema import Report
from trainmon.store.store import Store

HOST_COUNTERS = ("cpu.busy", "cpu.iowait", "mem.used_pct")
GPU_COUNTERS = ("util", "mem_used_mb", "power_w")
DISK_COUNTERS = ("read_mb_s", "write_mb_s", "util_pct")
HOST_PID = 0
MAX_STEPS_PER_RUN = 200_000


def _counter_names(store: Store) -> list[str]:
    """The host, GPU and disk series drawn as counter tracks, by name."""
    index = store.index()
    names = [*HOST_COUNTERS]
    names += [GPU.key(g, f) for g in index.ids(GPU) for f in GPU_COUNTERS]
    names += [DISK.key(d, f) for d in index.ids(DISK) for f in DISK_COUNTERS]
    return sorted(n for n in names if n in store.series)


def build_trace(store: Store, report: Report | None = None) -> dict[str, Any]:
    """The trace of every step, wait, checkpoint, phase and mark per run, host counters, and verdict changes."""
    events: list[dict[str, Any]] = []
    with store.lock:
        t0 = store.first_t or 0.0

        def us(t: float) -> float:
            return round((t - t0) * 1e6, 1)

        events.append({"ph": "M", "name": "process_name", "pid": HOST_PID, "args": {"name": "host"}})
        for run in store.runs.values():
            pid = run.pid
            who = f"rank {run.rank}" if run.rank is not None else run.name
            events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{who} (pid {pid})"}})
            for tid, name in ((1, "steps"), (2, "data wait"), (3, "checkpoints"), (4, "phases")):
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            st = run.steps
            for k in range(max(0, len(st) - MAX_STEPS_PER_RUN), len(st)):
                start, end, wait = st.start[k], st.end[k], st.wait[k]
                events.append(
                    {
                        "ph": "X",
                        "name": "step",
                        "pid": pid,
                        "tid": 1,
                        "ts": us(start),
                        "dur": round((end - start) * 1e6, 1),
                        "args": {"wait_ms": round(wait * 1e3, 3), "samples": st.samples[k], "warmup": bool(st.warm[k])},
                    }
                )
                if wait > 0:
                    events.append(
                        {
                            "ph": "X",
                            "name": "data wait",
                            "pid": pid,
                            "tid": 2,
                            "ts": us(start),
                            "dur": round(wait * 1e6, 1),
                        }
                    )
            for c0, c1 in run.checkpoints:
                events.append(
                    {
                        "ph": "X",
                        "name": "checkpoint",
                        "pid": pid,
                        "tid": 3,
                        "ts": us(c0),
                        "dur": round((c1 - c0) * 1e6, 1),
                    }
                )
            for p0, p1, name in run.phases:
                events.append(
                    {"ph": "X", "name": name, "pid": pid, "tid": 4, "ts": us(p0), "dur": round((p1 - p0) * 1e6, 1)}
                )
            for t, name in run.marks:
                events.append({"ph": "i", "name": name, "pid": pid, "tid": 4, "ts": us(t), "s": "p"})
        for name in _counter_names(store):
            series = store.series[name]
            for t, v in series:
                if not is_nan(v):
                    events.append({"ph": "C", "name": name, "pid": HOST_PID, "ts": us(t), "args": {"value": v}})
    for entry in report["timeline"] if report is not None else []:  # the phases, as spans on the host's track
        events.append(
            {
                "ph": "X",
                "name": f"verdict: {entry['code']}",
                "pid": HOST_PID,
                "tid": 0,
                "ts": round(entry["t"] * 1e6, 1),
                "dur": round(max(0.0, entry["end"] - entry["t"]) * 1e6, 1),
                "args": {"severity": entry["severity"], "summary": entry["summary"]},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"generator": "trainmon", "verdict": report["verdict"]["code"] if report is not None else None},
    }


def render(source: ReportInput) -> str:
    if source.store is None:
        raise ValueError("a Chrome trace needs the recording's store")
    return json.dumps(build_trace(source.store, source.report), separators=(",", ":")) + "\n"
