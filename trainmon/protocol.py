"""Wire protocol between the in-process agent and the monitor (standard library only).

A connection starts with a preamble (magic + version), then carries frames:
``type:u8 | length:u32 little-endian | payload``. JSON payloads are UTF-8 objects;
event payloads are packed little-endian int64 records of ``RECORD_FIELDS`` fields each,
so neither side builds a Python object per record. See docs/protocol.md.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from array import array

MAGIC = b"TRMN"
VERSION = 1
PREAMBLE = MAGIC + struct.pack("<H", VERSION)
PREAMBLE_SIZE = len(PREAMBLE)

FRAME_HEADER = struct.Struct("<BI")
MAX_FRAME = 4 * 1024 * 1024
MAX_JSON_FRAME = 256 * 1024

# Frame types.
F_HELLO = 1  # JSON: who the training process is
F_EVENTS = 2  # packed int64 records
F_INFO = 3  # JSON: loader registered, names, drop counts, goodbye
F_AUTH = 4  # JSON: {"token": ...}, only on TCP listeners that require one
FRAME_TYPES = frozenset({F_HELLO, F_EVENTS, F_INFO, F_AUTH})

# Event records: (kind | id << 8, t0_ns, t1_ns, value); times are CLOCK_MONOTONIC ns.
RECORD_FIELDS = 4
RECORD_BYTES = RECORD_FIELDS * 8
K_WAIT = 1  # DataLoader __next__: id = loader id, value = 0
K_ITER_END = 2  # __next__ raised StopIteration: id = loader id
K_ITER_START = 3  # a new iterator (epoch) began: id = loader id, value = worker count
K_OPT = 4  # optimizer.step() finished
K_STEP = 5  # explicit trainmon.agent.step()
K_CKPT = 6  # torch.save / checkpoint: t0..t1
K_MARK = 7  # trainmon.agent.mark(name): id = name id
K_PHASE = 8  # with trainmon.agent.phase(name): id = name id, t0..t1
K_EXPOSED = 9  # GPU idle exposed by a data wait (CUDA events): value = exposed ns
KIND_NAMES = {
    K_WAIT: "wait",
    K_ITER_END: "iter_end",
    K_ITER_START: "iter_start",
    K_OPT: "opt",
    K_STEP: "step",
    K_CKPT: "checkpoint",
    K_MARK: "mark",
    K_PHASE: "phase",
    K_EXPOSED: "exposed",
}

_BIG_ENDIAN = sys.byteorder == "big"


class ProtocolError(Exception):
    """Input that breaks the protocol; the connection that sent it is closed."""


def frame(kind: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: int, obj: dict) -> bytes:
    return frame(kind, json.dumps(obj, separators=(",", ":"), default=str).encode())


def events_payload(records: array) -> bytes:
    """Encode an ``array('q')`` of flat records; one C call, no per-record objects."""
    if _BIG_ENDIAN:
        records = array("q", records)
        records.byteswap()
    return records.tobytes()


def decode_events(payload: bytes | memoryview) -> array:
    if len(payload) % RECORD_BYTES:
        raise ProtocolError(f"event payload of {len(payload)} bytes is not a multiple of {RECORD_BYTES}")
    records = array("q")
    records.frombytes(payload)
    if _BIG_ENDIAN:
        records.byteswap()
    return records


def decode_json(payload: bytes | memoryview) -> dict:
    if len(payload) > MAX_JSON_FRAME:
        raise ProtocolError(f"JSON frame of {len(payload)} bytes exceeds {MAX_JSON_FRAME}")
    try:
        obj = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"malformed JSON frame: {exc.__class__.__name__}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("JSON frame is not an object")
    return obj


class FrameReader:
    """Incremental parser: feed bytes, get complete ``(type, payload)`` frames.

    Buffers at most one frame (bounded by MAX_FRAME); anything malformed raises ProtocolError.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self.preamble_seen = False

    def feed(self, data: bytes) -> list[tuple[int, memoryview]]:
        self._buf += data
        out: list[tuple[int, memoryview]] = []
        if not self.preamble_seen:
            if len(self._buf) < PREAMBLE_SIZE:
                if not MAGIC.startswith(bytes(self._buf[:4])):
                    raise ProtocolError("not a trainmon client (bad magic)")
                return out
            if bytes(self._buf[:4]) != MAGIC:
                raise ProtocolError("not a trainmon client (bad magic)")
            (version,) = struct.unpack_from("<H", self._buf, 4)
            if version != VERSION:
                raise ProtocolError(f"unsupported protocol version {version} (this monitor speaks {VERSION})")
            self.preamble_seen = True
            del self._buf[:PREAMBLE_SIZE]
        view = memoryview(self._buf)
        pos = 0
        try:
            while len(view) - pos >= FRAME_HEADER.size:
                kind, length = FRAME_HEADER.unpack_from(view, pos)
                if kind not in FRAME_TYPES:
                    raise ProtocolError(f"unknown frame type {kind}")
                if length > self._max:
                    raise ProtocolError(f"frame of {length} bytes exceeds the {self._max}-byte limit")
                end = pos + FRAME_HEADER.size + length
                if end > len(view):
                    break
                out.append((kind, bytes(view[pos + FRAME_HEADER.size : end])))
                pos = end
        finally:
            view.release()
        if pos:
            del self._buf[:pos]
        return out

    @property
    def buffered(self) -> int:
        return len(self._buf)


# ---------------------------------------------------------------- addresses


def default_socket_dir() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return os.path.join(base, "trainmon")
    return os.path.join(tempfile.gettempdir(), f"trainmon-{os.getuid()}")


def default_address() -> str:
    return os.path.join(default_socket_dir(), "monitor.sock")


def resolve_address(address: str | None) -> str:
    """Explicit address, else ``TRAINMON_ADDR``, else the per-user Unix socket."""
    return address or os.environ.get("TRAINMON_ADDR") or default_address()


def parse_tcp(address: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (or ``[v6]:PORT``) → (host, port); a filesystem path → None."""
    if "/" in address or ":" not in address:
        return None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return None
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)
