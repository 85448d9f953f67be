"""Background sender: batches the hot-path buffer, connects, reconnects, never blocks training."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from trainmon import protocol as P
from trainmon.agent import _hot

TICK_S = 0.1
SWAP_GRACE_S = 0.002  # lets a hot-path thread that loaded the old buffer finish its append
MAX_PENDING_BYTES = 8 * 1024 * 1024
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 5.0
EXIT_FLUSH_S = 1.0
_RECORDS_PER_FRAME = P.MAX_FRAME // P.RECORD_BYTES


def debug(msg: str) -> None:
    if os.environ.get("TRAINMON_DEBUG"):
        try:
            sys.stderr.write(f"trainmon agent [{os.getpid()}]: {msg}\n")
        except Exception:
            pass


class Sender:
    """Owns the connection. Only this thread (or the exit flush, after it stopped) touches it."""

    def __init__(self, address: str, hello: dict, token: str | None = None,
                 hello_extra: Callable[[], dict] | None = None) -> None:
        self.address = address
        self.hello = hello
        self.hello_extra = hello_extra
        self.token = token
        self.dropped_records = 0
        self.sent_records = 0
        self.connections = 0
        self._reported_drops = 0
        self._pending: deque[tuple[bytes, int]] = deque()  # (framed events, record count)
        self._pending_bytes = 0
        self._control: list[dict] = []  # every control message, re-sent on each new connection
        self._control_sent = 0
        self._sock: socket.socket | None = None
        self._out = bytearray()
        self._out_records = 0
        self._next_attempt = 0.0
        self._backoff = BACKOFF_MIN_S
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._tick_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainmon-sender", daemon=True)
        self._thread.start()

    def stop(self, flush_s: float = EXIT_FLUSH_S, reason: str = "exit") -> None:
        """Stop the thread, then push what is left for at most ``flush_s`` seconds."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=flush_s)
        with self._tick_lock:
            self.add_control({"bye": reason})
            deadline = time.monotonic() + flush_s
            self._collect()
            if self._sock is None:
                self._connect()
            while self._sock is not None and (self._out or self._pending or self._control_pending()):
                if not self._write() and time.monotonic() >= deadline:
                    break
                if time.monotonic() >= deadline:
                    break
                if self._out or self._pending:
                    time.sleep(0.005)
            self._close()

    def add_control(self, msg: dict) -> None:
        self._control.append(msg)
        self._wake.set()

    def _control_pending(self) -> bool:
        return self._control_sent < len(self._control)

    # ------------------------------------------------------------ loop

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                with self._tick_lock:
                    self._tick()
            except Exception as exc:  # never let the thread die: training must not notice
                debug(f"sender tick failed: {exc!r}")
                self._close()

    def _tick(self) -> None:
        self._collect()
        if self._sock is None and time.monotonic() >= self._next_attempt:
            self._connect()
        if self._sock is not None:
            self._write()
        if self.dropped_records != self._reported_drops and self._sock is not None:
            self._reported_drops = self.dropped_records
            self.add_control({"drops": self.dropped_records})

    def _collect(self) -> None:
        if not _hot.pending_records():
            return
        records = _hot.swap_buffer()
        time.sleep(SWAP_GRACE_S)
        usable = len(records) - len(records) % P.RECORD_FIELDS
        for start in range(0, usable, _RECORDS_PER_FRAME * P.RECORD_FIELDS):
            chunk = records[start : min(usable, start + _RECORDS_PER_FRAME * P.RECORD_FIELDS)]
            data = P.frame(P.F_EVENTS, P.events_payload(chunk))
            self._pending.append((data, len(chunk) // P.RECORD_FIELDS))
            self._pending_bytes += len(data)
        while self._pending_bytes > MAX_PENDING_BYTES and len(self._pending) > 1:
            data, n = self._pending.popleft()
            self._pending_bytes -= len(data)
            self.dropped_records += n

    # ------------------------------------------------------------ connection

    def _connect(self) -> None:
        tcp = P.parse_tcp(self.address)
        try:
            if tcp is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(0.5)
                sock.connect(self.address)
            else:
                sock = socket.create_connection(tcp, timeout=1.0)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        except OSError as exc:
            self._next_attempt = time.monotonic() + self._backoff
            self._backoff = min(BACKOFF_MAX_S, self._backoff * 2)
            if self.connections == 0:
                debug(f"no monitor at {self.address} ({exc.strerror or exc}); retrying in background")
            return
        self._sock = sock
        self._backoff = BACKOFF_MIN_S
        self.connections += 1
        hello = dict(self.hello, connection=self.connections, sent_records=self.sent_records,
                     dropped_records=self.dropped_records)
        if self.hello_extra is not None:
            try:
                hello.update(self.hello_extra())
            except Exception:
                pass
        out = bytearray(P.PREAMBLE)
        if self.token:
            out += P.json_frame(P.F_AUTH, {"token": self.token})
        out += P.json_frame(P.F_HELLO, hello)
        self._out = out
        self._out_records = 0
        self._control_sent = 0
        debug(f"connected to {self.address}")

    def _close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        if self._out_records:
            self.dropped_records += self._out_records
        self._out = bytearray()
        self._out_records = 0

    def _fill(self) -> None:
        while self._control_pending():
            self._out += P.json_frame(P.F_INFO, self._control[self._control_sent])
            self._control_sent += 1
        if not self._out and self._pending:
            data, n = self._pending.popleft()
            self._pending_bytes -= len(data)
            self._out += data
            self._out_records = n

    def _write(self) -> bool:
        """Send what the socket takes without blocking; False when it took nothing."""
        progressed = False
        while self._sock is not None:
            if not self._out:
                self.sent_records += self._out_records
                self._out_records = 0
                self._fill()
                if not self._out:
                    return True
            try:
                n = self._sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return progressed
            except OSError as exc:
                debug(f"connection lost: {exc!r}")
                self._close()
                self._next_attempt = time.monotonic() + BACKOFF_MIN_S
                return progressed
            if n <= 0:
                return progressed
            del self._out[:n]
            progressed = True
        return progressed
