"""``--json``: one JSON object per monitor tick on stdout, newline-delimited, for scripts and ``jq``.

Each line is a whole object (``"trainmon_tick": SCHEMA_VERSION``), written and flushed after the tick that made it:
the runs with their current figures and verdicts, the headline verdict and every finding that holds, the GPUs, the
host and its disks. Figures that are not measured are ``null``, never 0 or NaN (the output is strict JSON). The
schema is ``tick_schema.json`` beside this module; a version bump means a key changed meaning or went away, new keys
may appear within a version.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from trainmon.diagnose.findings import Finding
from trainmon.labels import run_label
from trainmon.metrics import CPU_CORE, DISK, GPU, HOST, SELF, Family

if TYPE_CHECKING:
    from trainmon.monitor import RunStatus, Snapshot

SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).with_name("tick_schema.json")


def number(value: Any, digits: int = 4) -> float | None:
    """A finite float rounded to ``digits``, else None (JSON has no NaN)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return round(x, digits) if math.isfinite(x) else None


def _plain(value: Any) -> Any:
    """Evidence as strict JSON: NaN and infinities become null, tuples lists, anything else its str."""
    if isinstance(value, float):
        return number(value, 6)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def finding(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code,
        "severity": f.severity,
        "summary": f.summary,
        "advice": list(f.advice),
        "advice_items": [_plain(item.to_dict()) for item in f.advice_items],
        "evidence": _plain(f.evidence),
    }


def run(r: RunStatus, verdict: Finding | None) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "pid": r.pid,
        "rank": r.rank,
        "name": r.name,
        "measured_by": r.measured_by,
        "connected": r.connected,
        "ended": r.ended,
        "steps": r.steps if r.measured_by == "agent" else None,
        "steps_per_s": number(r.steps_per_s, 3),
        "step_time_ms_p50": number(r.step_p50_ms, 3),
        "data_wait_fraction": number(r.wait_fraction),
        "samples_per_s": number(r.samples_per_s, 2),
        "dropped_records": r.dropped_records,
        "agent_step_us": number(r.agent_step_ns / 1e3, 3),
        "step_parts": _plain(r.step_parts) if r.step_parts is not None else None,
        "gpus": list(r.gpus),
        "verdict": {"code": verdict.code, "severity": verdict.severity, "summary": verdict.summary}
        if verdict is not None
        else None,
    }


def _family(values: Mapping[str, float], family: Family) -> dict[str, dict[str, float | None]]:
    """id → {field: value} for the series of ``family`` sampled this tick (fields of its schema table only)."""
    out: dict[str, dict[str, float | None]] = {}
    for key, value in values.items():
        parsed = family.parse(key)
        if parsed is not None and parsed[1] in family.fields:
            out.setdefault(parsed[0], {})[parsed[1]] = number(value, 3)
    return out


def _run_finding(findings: list[Finding], r: RunStatus) -> Finding | None:
    """The worst finding about this run (the findings come best-ranked first; the evidence names the run)."""
    label = run_label(r.rank, r.pid)
    return next((f for f in findings if f.evidence.get("run") == label), None)


def tick(snap: Snapshot) -> dict[str, Any]:
    """The JSON object of one tick."""
    values = snap.host
    host = {name: number(values[name], 3) for name in HOST if name in values}
    cores = _family(values, CPU_CORE)
    gpus = [{"index": int(i), **fields} for i, fields in sorted(_family(values, GPU).items(), key=lambda x: int(x[0]))]
    disks = [{"device": d, **fields} for d, fields in sorted(_family(values, DISK).items())]
    agent = [r.agent_step_ns for r in snap.runs if r.connected and not math.isnan(r.agent_step_ns)]
    return {
        "trainmon_tick": SCHEMA_VERSION,
        "t": round(snap.t, 3),
        "wall": round(time.time(), 3),
        "verdict": finding(snap.verdict) if snap.verdict is not None else None,
        "findings": [finding(f) for f in snap.findings],
        "runs": [run(r, _run_finding(snap.findings, r)) for r in snap.runs],
        "gpus": gpus,
        "host": host | {"cores_busy_pct": [cores[c].get("busy") for c in sorted(cores, key=int)]},
        "disks": disks,
        "self": {name.removeprefix("self."): number(values.get(name), 3) for name in SELF}
        | {"agent_step_us": number(max(agent) / 1e3, 3) if agent else None},
    }


class JsonLines:
    """A Monitor listener that writes one line per tick to ``out`` (stdout). A closed pipe ends the stream and calls
    ``on_closed`` (the command then exits, as a Unix filter does when its reader leaves: ``trainmon --json | head``)."""

    def __init__(self, out: IO[str] | None = None, on_closed: Callable[[], None] | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.on_closed = on_closed
        self.closed = False

    def __call__(self, snap: Snapshot) -> None:
        if self.closed:
            return
        try:
            self.out.write(json.dumps(tick(snap), separators=(",", ":"), allow_nan=False) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self.closed = True  # `trainmon --json | head -3`: the reader left
            _quiet_stdout()
            if self.on_closed is not None:
                self.on_closed()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's flush at exit does not report the broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return loaded
