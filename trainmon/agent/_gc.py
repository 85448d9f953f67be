"""Python's garbage collector, timed: a ``gc.callbacks`` hook that appends one ``gc`` span per collection.

The collector calls the hook at the start and at the end of every collection, in whichever thread triggered
it, with the GIL held for the whole pause: that pause stops the training thread too. Between collections
nothing runs and nothing is recorded. Collections never nest, so one start time is all the state there is.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from trainmon.agent import _hot
from trainmon.protocol import K_GC

_pc = time.perf_counter_ns
_t0 = 0


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    global _t0
    try:
        if phase == "start":
            _t0 = _pc()
        else:
            _hot._buf.extend((K_GC, _t0, _pc(), info["generation"]))
    except Exception:
        pass  # the collector would print it to stderr; the training must never hear of trainmon


def install() -> None:
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def uninstall() -> None:
    while _on_gc in gc.callbacks:
        gc.callbacks.remove(_on_gc)


def installed() -> bool:
    return _on_gc in gc.callbacks
