"""Stack dumps kept as evidence: the Python stacks of a run's processes, taken when a critical verdict fired.

One dump is a plain JSON object, as the monitor records it (an INFO entry ``{"stacks": ...}``, see
docs/recording.md) and as reports list it (``runs[].stack_dumps``)::

    {"reason": "stall.hang", "t": 1234.5,
     "processes": [{"pid": 42, "role": "main", "error": null, "elapsed_ms": 31.0, "cpu_ms": 22.0,
                    "threads": [{"tid": 42, "name": "MainThread", "main": true, "idle": true, "gil": false,
                                 "frames": [["acquire", "train.py", 88], ...]}]}]}

``t`` is the monitor's monotonic time when the dumps began; frames are innermost first; ``error`` says why a
process has no stacks ("n/a (other pid namespace)", py-spy refused, the process exited).
"""

from __future__ import annotations

import math
from typing import Any

MAX_PROCESSES = 16
MAX_THREADS = 64
MAX_FRAMES = 64
MAX_TEXT = 200


def _text(value: Any) -> str:
    return str(value)[:MAX_TEXT]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62 else 0


def _ms(value: Any) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)  # an integer too large for a float raises
    except OverflowError:
        return None
    return round(number, 3) if math.isfinite(number) and number >= 0 else None


def _frame(raw: Any) -> list[Any] | None:
    if not isinstance(raw, list) or len(raw) != 3:
        return None
    return [_text(raw[0]), _text(raw[1]), _int(raw[2])]


def _thread(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    frames = raw.get("frames")
    frames = frames if isinstance(frames, list) else []
    return {
        "tid": _int(raw.get("tid")),
        "name": _text(raw.get("name") or "?"),
        "main": raw.get("main") is True,
        "idle": raw.get("idle") is True,
        "gil": raw.get("gil") is True,
        "frames": [f for f in map(_frame, frames[:MAX_FRAMES]) if f is not None],
    }


def _process(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    threads = raw.get("threads")
    threads = threads if isinstance(threads, list) else []
    error = raw.get("error")
    return {
        "pid": _int(raw.get("pid")),
        "role": _text(raw.get("role") or "?"),
        "error": _text(error) if error is not None else None,
        "elapsed_ms": _ms(raw.get("elapsed_ms")),
        "cpu_ms": _ms(raw.get("cpu_ms")),
        "threads": [t for t in map(_thread, threads[:MAX_THREADS]) if t is not None],
    }


def clean_stacks(raw: Any) -> dict[str, Any] | None:
    """A dump with its documented fields and types, bounded; None for anything that is not one."""
    if not isinstance(raw, dict):
        return None
    t = raw.get("t")
    processes = raw.get("processes")
    if _ms(t) is None or not isinstance(processes, list):
        return None
    return {
        "reason": _text(raw.get("reason") or "?")[:64],
        "t": float(t) if isinstance(t, (int, float)) else 0.0,  # _ms checked: a finite number ≥ 0
        "processes": [p for p in map(_process, processes[:MAX_PROCESSES]) if p is not None],
    }


def innermost(dump: dict[str, Any], role: str = "main") -> str | None:
    """``name (file:line)`` of the innermost frame of the main thread of the first process with ``role``."""
    for proc in dump.get("processes", []):
        if proc.get("role") != role:
            continue
        for thread in proc.get("threads", []):
            if thread.get("main") and thread.get("frames"):
                name, short, line = thread["frames"][0]
                return f"{name} ({short}:{line})"
    return None


def stack_lines(dump: dict[str, Any], max_frames: int = 12) -> list[str]:
    """Readable lines: each process, then each thread (main first) with its frames, innermost first."""
    lines: list[str] = []
    for proc in dump.get("processes", []):
        head = f"{proc.get('role', '?')} pid {proc.get('pid', '?')}"
        if proc.get("error"):
            lines.append(f"{head}: {proc['error']}")
            continue
        threads = proc.get("threads", [])
        cost = proc.get("elapsed_ms")
        lines.append(
            f"{head}: {len(threads)} Python thread{'s' if len(threads) != 1 else ''}"
            + (f" (py-spy {cost:.0f} ms)" if isinstance(cost, float) else "")
        )
        for thread in sorted(threads, key=lambda th: not th.get("main")):
            tags = (["main"] if thread.get("main") else []) + ["idle" if thread.get("idle") else "active"]
            if thread.get("gil"):
                tags.append("gil")
            lines.append(f"  thread {thread.get('tid')} {thread.get('name')!r} ({', '.join(tags)})")
            frames = thread.get("frames", [])
            lines.extend(f"      {name} ({short}:{line})" for name, short, line in frames[:max_frames])
            if len(frames) > max_frames:
                lines.append(f"      ... {len(frames) - max_frames} more")
    return lines
