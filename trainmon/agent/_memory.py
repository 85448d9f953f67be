"""CUDA memory per interval, read by the sender thread: the caching allocator's peaks and current figures.

Each sender tick (about 10 a second), once the job itself has initialised CUDA, one
``torch.cuda.memory_stats_as_nested_dict(device)`` call gives the allocator's figures for the run's device: its peak
allocated and reserved bytes and its allocated and reserved bytes now, sent as four ``K_MEMORY`` records spanning the
time since the previous read. It reads the allocator's host-side counters: no CUDA call, no synchronisation, nothing
on the training thread, and CUDA is never initialised here (``is_initialized()`` first).

The peaks are never reset here: ``torch.cuda.reset_peak_memory_stats()`` would change what the training's own
``max_memory_allocated()`` returns (its logs, a trainer's memory metrics). So a peak is the highest since the job (or
the job's own reset) last reset it, and the monitor reads growth from the peaks and the current figures together.

Which device: the one the training thread reported (``cuda_device``), else the one whose allocator holds memory
(``LOCAL_RANK``'s first where several do); scanned again every ``RESCAN_S`` until one does. The sender thread's own
current device is 0 whatever the training thread chose, so it is never asked. Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from trainmon.agent import _hot
from trainmon.agent._cuda import cuda_module
from trainmon.agent._sender import debug
from trainmon.protocol import K_MEMORY

RESCAN_S = 10.0
_pc = time.perf_counter_ns


def _stat(stats: dict[str, Any], name: str, which: str) -> int:
    value = stats.get(name, {}).get("all", {}).get(which, 0)
    return value if isinstance(value, int) and value >= 0 else 0


class MemoryProbe:
    """Reads the allocator each sender tick; ``device`` is the one read (None: not chosen yet)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.device: int | None = None
        self.preferred: int | None = None  # the training thread's device, once it told it
        self.reads = 0
        self.failed = False
        self._last_ns = 0
        self._next_scan = 0.0

    def poll(self) -> None:
        if self.failed:
            return
        cuda = cuda_module()
        try:
            if cuda is None or not cuda.is_initialized():
                return
            device = self._device(cuda)
            if device is None:
                return
            stats = cuda.memory_stats_as_nested_dict(device)
        except Exception as exc:
            self.failed = True  # for the rest of the process: a broken read is not retried ten times a second
            debug(f"CUDA memory n/a: {exc!r}")
            return
        t1 = _pc()
        t0, self._last_ns = self._last_ns or t1, t1
        values = (
            _stat(stats, "allocated_bytes", "peak"),
            _stat(stats, "reserved_bytes", "peak"),
            _stat(stats, "allocated_bytes", "current"),
            _stat(stats, "reserved_bytes", "current"),
        )
        for field, value in enumerate(values):
            _hot.span(K_MEMORY, field, t0, t1, value)
        self.reads += 1

    def _device(self, cuda: Any) -> int | None:
        if self.preferred is not None and self.device != self.preferred:
            self._choose(cuda, self.preferred)
        if self.device is not None:
            return self.device
        now = time.monotonic()
        if now < self._next_scan:
            return None
        self._next_scan = now + RESCAN_S
        count = int(cuda.device_count())
        used = [d for d in range(count) if _stat(cuda.memory_stats_as_nested_dict(d), "reserved_bytes", "current")]
        if not used:
            return None
        local = _local_rank()
        self._choose(cuda, local if local in used else used[0])
        return self.device

    def _choose(self, cuda: Any, device: int) -> None:
        self.device = device
        self._last_ns = 0
        total = 0
        try:
            total = int(cuda.get_device_properties(device).total_memory)
        except Exception:
            pass
        self.emit({"cuda_memory": {"index": device, "total": total}})


def _local_rank() -> int | None:
    try:
        return int(os.environ["LOCAL_RANK"])
    except (KeyError, ValueError):
        return None
