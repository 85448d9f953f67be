"""A run's torch.compile compilations: their spans (the agent's ``compile`` records) and what torch recorded of each
(``INFO {"compile": ...}``): the function, the guard that failed, and the compilations refused at the recompile limit
(that function runs eagerly from then on)."""

from __future__ import annotations

import itertools
import re
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from trainmon.protocol import COMPILE_TRIGGERS

NS = 1e-9
MAX_FUNCTIONS = 4096
MAX_GUARDS = 8  # distinct failed guards kept per function
_ID_PREFIX = re.compile(r"^\s*!?[\d/]+:\s*")  # "0/6: " — which cache entry's guard failed


def guard_of(reason: str) -> str:
    """The failed guard of a recompile reason, without the cache entry it names and the values seen:
    "0/6: tensor 'ids' size mismatch at index 1. expected 56, actual 64" → "tensor 'ids' size mismatch at index 1"."""
    text = _ID_PREFIX.sub("", reason.strip().splitlines()[0] if reason.strip() else "")
    return text.split(". expected", 1)[0].strip()[:300]


@dataclass
class Function:
    """One compiled function (a frame Dynamo compiled: the compiled function, or the code after a graph break)."""

    frame: int
    name: str | None = None
    file: str | None = None
    line: int = 0
    compiles: int = 0  # forward compilations torch recorded (the first, then the recompilations)
    seconds: float = 0.0  # torch's own seconds for them, backward compilations included
    guards: dict[str, int] = field(default_factory=dict)  # failed guard -> recompilations it caused
    last_reason: str | None = None  # the latest recompile reason, with its values
    limit_t: float | None = None  # when a compilation was refused at the recompile limit (monotonic s)
    limit_type: str | None = None  # torch._dynamo.config's setting that was hit
    limit_value: int | None = None
    graph_breaks: int = 0  # in its latest compilation

    @property
    def where(self) -> str:
        """ "forward (model.py:13)" — or "frame 3" where torch's records named none."""
        name = self.name or f"frame {self.frame}"
        if self.file:
            return f"{name} ({self.file.rsplit('/', 1)[-1]}:{self.line})"
        return name

    @property
    def top_guard(self) -> str | None:
        return max(self.guards, key=lambda g: self.guards[g]) if self.guards else None

    def as_json(self) -> dict[str, Any]:
        return {
            "function": self.name,
            "file": self.file,
            "line": self.line,
            "compilations": self.compiles,
            "recompilations": max(0, self.compiles - 1),
            "compile_s": round(self.seconds, 3),
            "failed_guard": self.top_guard,
            "last_reason": self.last_reason,
            "eager_fallback": self.limit_t is not None,
            "limit": f"{self.limit_type} = {self.limit_value}" if self.limit_type else None,
        }


class Compiles:
    """Spans in time order (columns), per-function summaries, and graph breaks; bounded by ``cap``."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.start = array("d")
        self.end = array("d")
        self.frame = array("l")  # -1: not known
        self.attempt = array("l")  # 0: the function's first compilation; 1 and more: recompilations
        self.trigger = array("b")  # index into protocol.COMPILE_TRIGGERS
        self.total = 0
        self.functions: dict[int, Function] = {}
        self.graph_breaks: dict[str, Any] | None = None  # {"total", "reasons": [{"reason", "count"}]}
        self._seen: set[tuple[Any, ...]] = set()  # compilations torch's records told (re-sent after a reconnect)

    def __len__(self) -> int:
        return len(self.end)

    # ------------------------------------------------------------ ingestion

    def add_records(self, records: array[int]) -> None:
        """The agent's ``compile`` records (flat int64: tag, t0 ns, t1 ns, attempt << 8 | trigger)."""
        rows = []
        for k in range(0, len(records), 4):
            tag, t0, t1, value = records[k], records[k + 1], records[k + 2], records[k + 3]
            if t1 >= t0 >= 0 and value >= 0:
                trigger = value & 0xFF if value & 0xFF < len(COMPILE_TRIGGERS) else 0
                rows.append((t0 * NS, t1 * NS, (tag >> 8) - 1, value >> 8, trigger))
        if not rows:
            return
        self.total += len(rows)
        if (self.end and rows[0][0] < self.start[-1]) or any(a[0] > b[0] for a, b in itertools.pairwise(rows)):
            # Out of order (a batch re-sent after a reconnect, or compilations in two threads): sorted by start.
            rows = sorted([*zip(self.start, self.end, self.frame, self.attempt, self.trigger, strict=True), *rows])
            for col in self._cols():
                del col[:]
        for s, e, f, a, g in rows:
            self.start.append(s)
            self.end.append(e)
            self.frame.append(f)
            self.attempt.append(a)
            self.trigger.append(g)
        if self.cap is not None and len(self.end) > self.cap:
            drop = len(self.end) - self.cap + self.cap // 4
            for col in self._cols():
                del col[:drop]

    def _cols(self) -> tuple[array[Any], ...]:
        return self.start, self.end, self.frame, self.attempt, self.trigger

    def add_info(self, info: dict[str, Any]) -> None:
        """One compilation as torch recorded it (``protocol.clean_compile``)."""
        frame = info.get("frame")
        if not isinstance(frame, int):
            return
        key = (frame, info.get("attempt"), info.get("forward"), info.get("limit"))
        if key in self._seen:
            return  # told again on a new connection
        if len(self._seen) < 64 * MAX_FUNCTIONS:
            self._seen.add(key)
        fn = self.functions.get(frame)
        if fn is None:
            if len(self.functions) >= MAX_FUNCTIONS:
                return
            fn = self.functions[frame] = Function(frame)
        if info.get("name"):
            fn.name, fn.file, fn.line = info["name"], info.get("file"), int(info.get("line") or 0)
        if info.get("limit"):
            t_ns = info.get("t_ns")
            fn.limit_t = t_ns * NS if isinstance(t_ns, int) else fn.limit_t if fn.limit_t is not None else 0.0
            fn.limit_type, fn.limit_value = info.get("limit_type"), info.get("limit_value")
        elif info.get("forward", True) and not info.get("fail"):
            fn.compiles += 1
            fn.graph_breaks = int(info.get("graph_breaks") or 0)
        if isinstance(seconds := info.get("seconds"), (int, float)) and not info.get("limit"):
            fn.seconds += float(seconds)
        reason = info.get("reason")
        if isinstance(reason, str) and reason and not info.get("limit") and info.get("forward", True):
            fn.last_reason = reason
            guard = guard_of(reason)
            if guard in fn.guards or len(fn.guards) < MAX_GUARDS:
                fn.guards[guard] = fn.guards.get(guard, 0) + 1

    # ------------------------------------------------------------ queries

    def spans(self) -> list[tuple[float, float]]:
        return list(zip(self.start, self.end, strict=True))

    def between(self, t0: float, t1: float, recompiles: bool = False) -> list[tuple[float, float, int, int]]:
        """(start, end, frame, attempt) of the compilations that overlap ``[t0, t1]``, clipped to it;
        ``recompiles``: only those of a function compiled before (attempt 1 and later)."""
        i = bisect_left(self.end, t0)
        j = bisect_right(self.start, t1)
        out = []
        for k in range(i, max(i, j)):
            if recompiles and self.attempt[k] < 1:
                continue
            s, e = max(t0, self.start[k]), min(t1, self.end[k])
            if e > s:
                out.append((s, e, self.frame[k], self.attempt[k]))
        return out

    def limits_between(self, t0: float, t1: float) -> list[Function]:
        """Functions refused at the recompile limit within ``[t0, t1]``."""
        return [f for f in self.functions.values() if f.limit_t is not None and t0 <= f.limit_t <= t1]

    def fallen_back(self) -> list[Function]:
        """Functions that run eagerly since they hit the recompile limit."""
        return [f for f in self.functions.values() if f.limit_t is not None]
