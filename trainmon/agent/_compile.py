"""torch.compile, watched: every compilation's span and what torch itself recorded about it.

- Spans: the compile start and end callbacks torch._dynamo offers (``torch._dynamo.callback.callback_handler``) run
  in the thread that compiles, around the outermost compilation (Dynamo tracing a frame, a backward compiled at its
  first call, a CUDA graph recorded). The end callback appends one ``K_COMPILE`` record: the frame's id and attempt
  (torch's compile id ``frame/attempt``: attempt 1 and later are recompilations) and the start and end on the
  agent's clock.
- Details: torch keeps a record of each compilation (``torch._dynamo.utils.get_compilation_metrics()``, a bounded
  deque it fills whatever the logging settings): the function (code name, file, first line), its seconds, the guard
  that failed (``recompile_reason``), its graph breaks, and a compilation refused at the recompile limit (the
  function runs eagerly from then on: no callback runs for it, only this record tells). The sender thread reads the
  records that are new each tick and sends one ``INFO {"compile": ...}`` per compilation; the count of graph
  breaks and their most frequent reasons (``torch._dynamo.utils.counters``) when it changes.

Registered once the job itself imports ``torch._dynamo`` (``torch.compile`` does, lazily). Nothing here changes
what torch compiles or when: callbacks only read the clock, the sender only reads torch's records. Every callback
swallows its own exceptions: one raising would fail the compilation. Standard library only.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any

from trainmon.agent import _hot
from trainmon.agent._import_hook import AfterImport
from trainmon.agent._sender import debug
from trainmon.protocol import K_COMPILE

MODULE = "torch._dynamo"
MAX_OPEN = 64  # compilations started and not ended (one per compiling thread in practice)
MAX_FRAMES = 4096  # functions whose names are kept (a limit record names none: its frame's earlier one does)
MAX_REASONS = 16
_ID = re.compile(r"^(?:!\d+/?)?(\d+)/(\d+)")
_LIMIT_TYPE = re.compile(r"Limit type: (\w+)")
_LIMIT_VALUE = re.compile(r"currently set to (\d+)")
_pc = time.perf_counter_ns


def parse_id(compile_id: object) -> tuple[int, int] | None:
    """(frame, attempt) of torch's compile id ("3/1", or "!0/3/1" under compiled autograd); None otherwise."""
    found = _ID.match(str(compile_id)) if compile_id is not None else None
    return (int(found[1]), int(found[2])) if found else None


def is_limit(fail_type: object, fail_reason: object) -> bool:
    """A compilation Dynamo refused because the function hit its recompile limit (it falls back to eager)."""
    return fail_type == "Unsupported" and "recompile limit" in str(fail_reason or "").lower()


class CompileWatch:
    """Installs the callbacks when ``torch._dynamo`` is imported; ``poll`` (the sender thread) reads torch's
    records of compilations and sends them through ``emit``."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.installed = False
        self.compilations = 0  # records of torch's read and sent
        self._handler: Any = None
        self._watcher: AfterImport | None = None
        self._open: dict[str, int] = {}  # compile id -> when its start callback ran
        self._last: Any = None  # the last of torch's compilation records handled
        self._names: dict[int, tuple[str, str, int]] = {}  # frame -> (name, file, line)
        self._breaks = -1  # graph breaks last sent

    # ------------------------------------------------------------ install

    def install(self) -> None:
        """Now if the job has imported ``torch._dynamo``, else when it does (``poll`` catches an import that was
        still running here)."""
        module = sys.modules.get(MODULE)
        if module is not None:
            if not _initialising(module):
                self._register(module)
        elif self._watcher is None:
            self._watcher = AfterImport((MODULE,), lambda _name: self._register(sys.modules[MODULE]), once=True)
            sys.meta_path.insert(0, self._watcher)

    def _register(self, dynamo: Any) -> None:
        if self.installed:
            return
        self.installed = True
        handler: Any = getattr(getattr(dynamo, "callback", None), "callback_handler", None)
        if handler is None:
            handler = getattr(dynamo, "callback_handler", None)
        try:
            handler.register_start_callback(self._start)
            handler.register_end_callback(self._end)
            self._handler = handler
        except Exception as exc:  # an older torch: torch's own records still name the compilations
            debug(f"torch.compile callbacks n/a: {exc!r}")

    def uninstall(self) -> None:
        if self._watcher is not None and self._watcher in sys.meta_path:
            sys.meta_path.remove(self._watcher)
        self._watcher = None
        handler, self._handler = self._handler, None
        if handler is not None:
            for remove, callback in (
                (handler.remove_start_callback, self._start),
                (handler.remove_end_callback, self._end),
            ):
                try:
                    remove(callback)
                except Exception:
                    pass
        self._open.clear()
        self.installed = False

    # ------------------------------------------------------------ callbacks (the compiling thread)

    def _start(self, args: Any) -> None:
        try:
            if len(self._open) >= MAX_OPEN:
                self._open.clear()
            self._open[str(args.compile_id)] = _pc()
        except Exception:
            pass

    def _end(self, args: Any) -> None:
        try:
            t1 = _pc()
            t0 = self._open.pop(str(args.compile_id), None)
            if t0 is None:
                return
            parsed = parse_id(args.compile_id)
            frame, attempt = parsed if parsed is not None else (-1, 0)
            trigger = getattr(args.callback_trigger, "value", 0)
            trigger = trigger if isinstance(trigger, int) and 0 <= trigger < 256 else 0
            _hot.span(K_COMPILE, frame + 1, t0, t1, attempt << 8 | trigger)
        except Exception:
            pass

    # ------------------------------------------------------------ torch's records (the sender thread)

    def poll(self) -> None:
        if not self.installed:
            module = sys.modules.get(MODULE)
            if module is None or _initialising(module):
                return
            self._register(module)
        utils = sys.modules.get(f"{MODULE}.utils")
        if utils is None:
            return
        self._read_records(utils)
        self._read_breaks(utils)

    def _read_records(self, utils: Any) -> None:
        entries = getattr(utils, "_compilation_metrics", None)  # rebound by set_compilation_metrics_limit
        if not entries or entries[-1] is self._last:
            return
        records = list(entries)
        start = 0
        for k in range(len(records) - 1, -1, -1):
            if records[k] is self._last:
                start = k + 1
                break
        self._last = records[-1]
        for record in records[start:]:
            try:
                message = self._message(record)
            except Exception as exc:
                debug(f"compilation record unreadable: {exc!r}")
                continue
            if message is not None:
                self.compilations += 1
                self.emit({"compile": message})

    def _message(self, m: Any) -> dict[str, Any] | None:
        parsed = parse_id(getattr(m, "compile_id", None))
        if parsed is None:
            return None
        frame, attempt = parsed
        name, file, line = getattr(m, "co_name", None), getattr(m, "co_filename", None), getattr(m, "co_firstlineno", 0)
        if name:
            if frame in self._names or len(self._names) < MAX_FRAMES:
                self._names[frame] = (str(name), str(file or ""), int(line or 0))
        else:
            name, file, line = self._names.get(frame, (None, None, 0))
        seconds = getattr(m, "entire_frame_compile_time_s", None)
        if seconds is None and getattr(m, "duration_us", None) is not None:
            seconds = m.duration_us / 1e6
        fail_type, fail_reason = getattr(m, "fail_type", None), getattr(m, "fail_reason", None)
        limit = is_limit(fail_type, fail_reason)
        limit_type = _limit_type(fail_reason) if limit else None
        start_us = getattr(m, "start_time_us", None)
        t_ns = None
        if isinstance(start_us, int):  # torch's wall clock, moved onto the agent's
            t_ns = max(0, _pc() - (time.time_ns() - start_us * 1000))
        return {
            "frame": frame,
            "attempt": attempt,
            "id": str(m.compile_id),
            "name": name,
            "file": file,
            "line": line,
            "seconds": float(seconds) if isinstance(seconds, (int, float)) else None,
            "t_ns": t_ns,
            "reason": getattr(m, "recompile_reason", None),
            "graph_breaks": getattr(m, "num_graph_breaks", None) or 0,
            "fail": fail_type,
            "limit": limit,
            "limit_type": limit_type,
            "limit_value": _limit_value(limit_type, fail_reason) if limit_type else None,
            "forward": getattr(m, "is_forward", True) is not False,
        }

    def _read_breaks(self, utils: Any) -> None:
        counters = getattr(utils, "counters", None)
        try:
            breaks = counters.get("graph_break") if counters is not None else None  # .get: never adds the key
            if not breaks:
                return
            reasons = dict(breaks)
        except Exception:
            return
        total = sum(v for v in reasons.values() if isinstance(v, int))
        if total == self._breaks:
            return
        self._breaks = total
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:MAX_REASONS]
        self.emit({"graph_breaks": {"total": total, "reasons": [{"reason": str(r), "count": n} for r, n in top]}})


def _limit_type(fail_reason: object) -> str:
    found = _LIMIT_TYPE.search(str(fail_reason or ""))
    return found[1] if found else "recompile_limit"


def _limit_value(limit_type: str, fail_reason: object = None) -> int | None:
    """The limit as torch stated it when it refused the compilation ("currently set to N"), else the config now (which
    may read its default once the interpreter is shutting down, when the last records are read)."""
    found = _LIMIT_VALUE.search(str(fail_reason or ""))
    if found:
        return int(found[1])
    config = sys.modules.get(f"{MODULE}.config")
    try:
        value = getattr(config, limit_type)
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _initialising(module: Any) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))
