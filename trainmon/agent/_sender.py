"""Background sender: batches the hot-path buffer, connects, reconnects, never blocks training."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trainmon import protocol as P
from trainmon.agent import _hot

TICK_S = 0.1
# A slow loop's records wait a little to share a frame: below HOLD_RECORDS pending, a tick collects only when
# HOLD_S has passed since the last collection (a loop of 10 steps a second sends 4 frames a second, not 10: each
# frame costs the monitor a wake-up's worth of work whatever it holds). A fast loop fills HOLD_RECORDS within a
# tick and sends every tick, as before; a step still reaches the monitor well within its 1 s tick.
HOLD_S = 0.25
HOLD_RECORDS = 128
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


class Counts:
    """Cumulative counts of step-defining records (see docs/protocol.md, "Step continuity")."""

    __slots__ = ("groups", "last", "opt", "step", "wait")

    def __init__(
        self, step: int = 0, opt: int = 0, groups: int = 0, last: int = 0, wait: dict[int, int] | None = None
    ) -> None:
        self.step = step
        self.opt = opt
        self.groups = groups
        self.last = last
        self.wait = wait if wait is not None else {}

    @classmethod
    def of(cls, payload: bytes, last: int = 0) -> Counts:
        """Counts of one encoded batch (see ``protocol.step_marks``); ``last`` is the previous batch's."""
        step, opt, groups, last, waits = P.step_marks(payload, last)
        return cls(step, opt, groups, last, waits)

    def add(self, other: Counts) -> None:
        self.step += other.step
        self.opt += other.opt
        self.groups += other.groups
        self.last = other.last or self.last
        for lid, n in other.wait.items():
            self.wait[lid] = self.wait.get(lid, 0) + n

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "opt": self.opt,
            "groups": self.groups,
            "last": self.last,
            "wait": {str(k): v for k, v in self.wait.items()},
        }


def _control_key(msg: dict[str, Any]) -> tuple[Any, ...]:
    """Control messages are re-sent on each connection, only the latest per key (bounded)."""
    for key, field in (
        ("loader", "id"),
        ("workers", "loader"),
        ("feed", "loader"),
        ("handover", "iterator"),
        ("name", "id"),
        ("compile", "frame"),
    ):
        if isinstance(body := msg.get(key), dict):
            return key, body.get(field)
    return tuple(msg)


class Sender:
    """Owns the connection. Only this thread (or the exit flush, after it stopped) touches it."""

    def __init__(
        self,
        address: str,
        hello: dict[str, Any],
        token: str | None = None,
        hello_extra: Callable[[], dict[str, Any]] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.address = address
        self.on_tick = on_tick  # called first each tick (the agent: has the job initialised CUDA yet?)
        self.on_batch: Callable[[Counts], None] | None = None  # told each collected batch's counts (agent/_outside.py)
        self.on_stop: Callable[[], None] | None = None  # called once before the final flush (the agent's last reads)
        self.hello = hello
        self.hello_extra = hello_extra
        self.token = token
        self.dropped_records = 0
        self.sent_records = 0
        self.connections = 0
        self.refused = ""  # why the last monitor was refused (another user's socket), for debugging
        self._reported_drops = 0
        # (frame header, events payload, records, their counts): the payload is never copied into a frame, here or
        # on its way to the socket (a copy of a megabyte-sized frame cost the sender 30 ns a record in page faults)
        self._pending: deque[tuple[bytes, bytes, int, Counts]] = deque()
        self._pending_bytes = 0
        self._handed = Counts()  # records that left the queue: sent, or dropped for good
        self._collected_last = 0  # kind of the last wait/opt record collected (groups span batches)
        # The latest control message per key, re-sent on reconnect.
        self._control: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._outbox: list[dict[str, Any]] = []  # control messages not yet written on this connection
        self._control_lock = threading.Lock()  # held for list/dict operations only
        self._sock: socket.socket | None = None
        self._out = bytearray()  # what to write first: the preamble, control frames, an events frame's header ...
        self._out_payload = memoryview(b"")  # ... then the rest of that frame's payload
        self._out_batch: tuple[int, Counts] | None = None  # the events frame being written
        self._next_attempt = 0.0
        self._collected_at = 0.0  # monotonic time of the last tick that collected the hot-path buffer
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
            if self.on_stop is not None:
                try:
                    self.on_stop()
                except Exception as exc:
                    debug(f"stop hook failed: {exc!r}")
            self.add_control({"bye": reason})
            deadline = time.monotonic() + flush_s
            self._collect()
            if self._sock is None:
                self._connect()
            while self._sock is not None and (self._unsent() or self._pending or self._control_pending()):
                if not self._write() and time.monotonic() >= deadline:
                    break
                if time.monotonic() >= deadline:
                    break
                if self._unsent() or self._pending:
                    time.sleep(0.005)
            self._close()

    def add_control(self, msg: dict[str, Any]) -> None:
        with self._control_lock:
            self._control[_control_key(msg)] = msg
            if self._sock is not None:
                self._outbox.append(msg)
        self._wake.set()

    def latest(self, key: str) -> Any:
        """The body of the latest control message of ``key`` kept for re-sending (e.g. "cuda_device"), else None."""
        with self._control_lock:
            msg = self._control.get((key,))
        return msg.get(key) if msg is not None else None

    def _control_pending(self) -> bool:
        return bool(self._outbox) or self.dropped_records != self._reported_drops

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
        if self.on_tick is not None:
            try:
                self.on_tick()
            except Exception as exc:
                debug(f"tick hook failed: {exc!r}")
        now = time.monotonic()
        if now - self._collected_at >= HOLD_S or _hot.pending_records() >= HOLD_RECORDS:
            self._collected_at = now
            self._collect()
        if self._sock is None and now >= self._next_attempt:
            self._connect()
        if self._sock is not None:
            self._write()

    def _collect(self) -> None:
        if not _hot.pending_records():
            return
        packed, taken = _hot.take_all()
        for chunk in packed:  # what a flood had the training thread pack: older than the buffer
            self._enqueue(chunk)
        records = _hot.flat(taken)
        del taken
        self._enqueue(records)  # it drops the oldest beyond MAX_PENDING_BYTES as it queues

    def _enqueue(self, records: Any) -> None:
        """Records (flat int64s) framed and queued for the socket, their step marks counted."""
        usable = len(records) - len(records) % P.RECORD_FIELDS
        for start in range(0, usable, _RECORDS_PER_FRAME * P.RECORD_FIELDS):
            chunk = records[start : min(usable, start + _RECORDS_PER_FRAME * P.RECORD_FIELDS)]
            payload = P.events_payload(chunk)
            header = P.frame_header(P.F_EVENTS, len(payload))
            counts = Counts.of(payload, self._collected_last)
            self._collected_last = counts.last
            if self.on_batch is not None:
                try:
                    self.on_batch(counts)
                except Exception as exc:
                    debug(f"batch hook failed: {exc!r}")
            self._pending.append((header, payload, len(chunk) // P.RECORD_FIELDS, counts))
            self._pending_bytes += len(header) + len(payload)
            while self._pending_bytes > MAX_PENDING_BYTES and len(self._pending) > 1:
                old_header, old, n, dropped = self._pending.popleft()
                self._pending_bytes -= len(old_header) + len(old)
                self._hand_off(n, dropped, sent=False)

    def _hand_off(self, n: int, counts: Counts, sent: bool) -> None:
        if sent:
            self.sent_records += n
        else:
            self.dropped_records += n
        self._handed.add(counts)

    # ------------------------------------------------------------ connection

    def _connect(self) -> None:
        sock = self._open()
        if sock is None:
            self._next_attempt = time.monotonic() + self._backoff
            self._backoff = min(BACKOFF_MAX_S, self._backoff * 2)
            return
        self._backoff = BACKOFF_MIN_S
        self.connections += 1
        hello = dict(
            self.hello,
            connection=self.connections,
            sent_records=self.sent_records,
            dropped_records=self.dropped_records,
            counts=self._handed.as_json(),
        )
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
        self._out_payload = memoryview(b"")
        self._out_batch = None
        self._reported_drops = self.dropped_records  # the hello carries them
        with self._control_lock:
            self._sock = sock
            self._outbox = list(self._control.values())
        debug(f"connected to {self.address}")

    def _open(self) -> socket.socket | None:
        tcp = P.parse_tcp(self.address)
        sock = None
        try:
            if tcp is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(0.5)
                sock.connect(self.address)
                if not self._trusted_server(sock):
                    sock.close()
                    return None
            else:
                sock = socket.create_connection(tcp, timeout=1.0)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            return sock
        except OSError as exc:
            if sock is not None:
                sock.close()
            if self.connections == 0:
                debug(f"no monitor at {self.address} ({exc.strerror or exc}); retrying in background")
            return None

    def _trusted_server(self, sock: socket.socket) -> bool:
        """The listening process must be this user (or root): never report to another user's socket."""
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
        except (OSError, AttributeError):
            return True  # no SO_PEERCRED on this platform: the 0700 directory is the protection
        if uid in (os.getuid(), 0):
            return True
        self.refused = f"the socket {self.address} belongs to a monitor of uid {uid}"
        debug(f"not reporting: {self.refused}")
        return False

    def _close(self) -> None:
        with self._control_lock:
            sock, self._sock = self._sock, None
            self._outbox = []
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        if self._out_batch is not None:  # fully written (nothing left unsent), or cut short and lost
            self._hand_off(*self._out_batch, sent=not self._unsent())
        self._out = bytearray()
        self._out_payload = memoryview(b"")
        self._out_batch = None

    def _unsent(self) -> bool:
        return bool(self._out) or bool(self._out_payload)

    def _fill(self) -> None:
        with self._control_lock:
            outbox, self._outbox = self._outbox, []
        for msg in outbox:
            self._out += P.json_frame(P.F_INFO, msg)
        if self.dropped_records != self._reported_drops:
            self._reported_drops = self.dropped_records
            self._out += P.json_frame(P.F_INFO, {"drops": self.dropped_records})
        if not self._out and self._pending:
            header, payload, n, counts = self._pending.popleft()
            self._pending_bytes -= len(header) + len(payload)
            self._out += header
            self._out_payload = memoryview(payload)
            self._out_batch = (n, counts)

    def _write(self) -> bool:
        """Send what the socket takes without blocking; False when it took nothing."""
        progressed = False
        while self._sock is not None:
            if not self._unsent():
                if self._out_batch is not None:
                    self._hand_off(*self._out_batch, sent=True)
                    self._out_batch = None
                self._fill()
                if not self._unsent():
                    return True
            first = bool(self._out)
            try:
                n = self._sock.send(self._out if first else self._out_payload)
            except (BlockingIOError, InterruptedError):
                return progressed
            except OSError as exc:
                debug(f"connection lost: {exc!r}")
                self._close()
                self._next_attempt = time.monotonic() + BACKOFF_MIN_S
                return progressed
            if n <= 0:
                return progressed
            if first:
                del self._out[:n]
            else:
                self._out_payload = self._out_payload[n:]
            progressed = True
        return progressed
