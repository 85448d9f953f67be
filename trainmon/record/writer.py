"""Recorder: an Ingest sink that appends everything to a recording file, flushed every ≤ 0.5 s."""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from array import array
from typing import Any

from trainmon import __version__
from trainmon.record.format import FILE_HEADER, RecordEncoder, encode_chunk

FLUSH_S = 0.5


class RecorderError(Exception):
    pass


class Recorder:
    """Thread-safe; a write failure (full disk) stops recording and is kept in ``error``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.error: str | None = None
        self.bytes_written = 0
        self._buf = bytearray()
        self._lock = threading.Lock()  # guards _buf and error
        self._io_lock = threading.Lock()  # one chunk written at a time
        self._stop = threading.Event()
        try:
            self._fh = open(path, "wb", buffering=0)  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise RecorderError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            self._write_all(FILE_HEADER)
        except OSError as exc:
            self._fh.close()
            raise RecorderError(f"cannot write {path}: {exc.strerror or exc}") from None
        self.bytes_written = len(FILE_HEADER)
        self.meta(
            time.monotonic(),
            {
                "trainmon": __version__,
                "host": socket.gethostname(),
                "wall": time.time(),
                "monotonic": time.monotonic(),
                "pid": os.getpid(),
            },
        )
        self._thread = threading.Thread(target=self._flusher, name="trainmon-recorder", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ Ingest

    def _add(self, data: bytes) -> None:
        with self._lock:
            if self.error is None:
                self._buf += data

    def meta(self, t: float, meta: dict[str, Any]) -> None:
        self._add(RecordEncoder.meta(t, meta))

    def hello(self, run_id: int, t: float, hello: dict[str, Any]) -> None:
        self._add(RecordEncoder.hello(run_id, t, hello))

    def events(self, run_id: int, t: float, records: array) -> None:
        self._add(RecordEncoder.events(run_id, t, records))

    def info(self, run_id: int, t: float, info: dict[str, Any]) -> None:
        self._add(RecordEncoder.info(run_id, t, info))

    def closed(self, run_id: int, t: float, reason: str) -> None:
        self._add(RecordEncoder.closed(run_id, t, reason))

    def sample(self, t: float, values: dict[str, float]) -> None:
        self._add(RecordEncoder.sample(t, values))

    # ------------------------------------------------------------ I/O

    def flush(self) -> None:
        # Compression and the write happen outside ``_lock``: a slow disk never stalls ingestion.
        with self._io_lock:
            with self._lock:
                if not self._buf or self.error is not None:
                    return
                raw, self._buf = bytes(self._buf), bytearray()
            chunk = encode_chunk(raw)
            try:
                self._write_all(chunk)
                self.bytes_written += len(chunk)
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        with self._lock:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                self.error = f"the disk holding {self.path} is full; recording stopped"
            else:
                self.error = f"cannot write {self.path}: {exc.strerror or exc}; recording stopped"
            self._buf = bytearray()
        # Drop the partial chunk so the file stays readable up to the last full one.
        try:
            self._fh.truncate(self.bytes_written)
        except OSError:
            pass

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._fh.write(view)
            if not n:
                raise OSError(errno.EIO, "short write")
            view = view[n:]

    def _flusher(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.flush()
        try:
            self._fh.close()
        except OSError as exc:
            if self.error is None:
                self.error = f"cannot close {self.path}: {exc.strerror or exc}"
