"""Two ways real training code stops or stutters, for the demo training (``trainmon.demo.train``).

``MetricsLog``: per-step metrics buffered in memory and appended to a log file, with a background thread that
rotates the file. The loop takes the buffer's lock, then the file's; the rotation takes the file's, then the
buffer's (to reset it): a lock-order inversion. The first rotation that meets a log call deadlocks both threads
for good, while the process and its DataLoader workers live on.

``TraceCache``: a Python tree per step (a node per sample and feature group, each pointing back at its parent:
reference cycles), the last ``keep`` trees kept for inspection, as a debugging tracer or a memo of parsed samples
would. Every tree survives the young generations, so full (gen-2) collections come regularly and scan them all.
"""

from __future__ import annotations

import collections
import os
import tempfile
import threading
import time
from typing import Any


class MetricsLog:
    def __init__(self, rotate_after_s: float) -> None:
        fd, self.path = tempfile.mkstemp(prefix="trainmon-demo-metrics-", suffix=".log")
        self.file = os.fdopen(fd, "a")
        self.buffer: list[str] = []
        self.buffer_lock = threading.Lock()
        self.file_lock = threading.Lock()
        self.rotate_after_s = rotate_after_s
        threading.Thread(target=self._rotate_later, name="metrics-rotate", daemon=True).start()

    def log(self, step: int, loss: float) -> None:
        with self.buffer_lock:
            self.buffer.append(f"{step} {loss:.5f}\n")
            with self.file_lock:
                self.file.writelines(self.buffer)
                self.file.flush()
            self.buffer.clear()

    def _rotate_later(self) -> None:
        time.sleep(self.rotate_after_s)
        with self.file_lock:
            self.file.close()
            os.replace(self.path, self.path + ".1")
            time.sleep(0.2)  # compressing the old file
            self.file = open(self.path, "a")  # noqa: SIM115 - the log's file until the next rotation
            with self.buffer_lock:
                self.buffer.clear()

    def close(self) -> None:
        for path in (self.path, self.path + ".1"):
            if os.path.exists(path):
                os.unlink(path)


class _Node:
    __slots__ = ("attrs", "children", "parent")

    def __init__(self, parent: _Node | None, attrs: dict[str, Any]) -> None:
        self.parent = parent
        self.children: list[_Node] = []
        self.attrs = attrs
        if parent is not None:
            parent.children.append(self)


class TraceCache:
    def __init__(self, nodes: int, keep: int) -> None:
        self.nodes = nodes
        self.trees: collections.deque[_Node] = collections.deque(maxlen=keep)

    def record(self, step: int, batch: int) -> None:
        root = _Node(None, {"step": step})
        group = root
        for i in range(self.nodes):
            node = _Node(group, {"sample": i % batch, "feature": i // batch})
            if i % 8 == 0:
                group = node
        self.trees.append(root)
