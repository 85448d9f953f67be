"""The protocol between the in-process agent and the monitor (standard library only: it runs in the user's job).

Every name is importable from here, as both sides do (``from trainmon import protocol as P``):

- `trainmon.protocol.wire`: the wire format: preamble, frames, record kinds, encoding and decoding, the frame
  reader with its limits, and the sizes the agent keeps its HELLO to. Both sides.
- `trainmon.protocol.clean`: what the monitor keeps of each JSON message it receives (or reads back from a
  recording): known fields, typed and bounded. Monitor side.
- `trainmon.protocol.job`: the one identity of a job, from a rank's environment. Both sides.
- this module: where the monitor listens, and how the agent finds it (the addresses below).

See docs/protocol.md.
"""

from __future__ import annotations

import os
import tempfile

from trainmon.protocol.clean import (
    FRAMEWORKS,
    LOADER_KINDS,
    MAX_LIST,
    MAX_LOADER_ID,
    MAX_NAMES,
    PID_NAMESPACES,
    clean_compile,
    clean_counts,
    clean_graph_breaks,
    clean_hello,
    clean_info,
    clean_outside,
)
from trainmon.protocol.job import TRAINMON_JOB, job_identity
from trainmon.protocol.wire import (
    COMM_OPS,
    COMPILE_TRIGGERS,
    COST_PARTS,
    F_AUTH,
    F_EVENTS,
    F_HELLO,
    F_INFO,
    FRAME_HEADER,
    FRAME_TYPES,
    HANDOVER_KINDS,
    JSON_FRAME_TYPES,
    K_CKPT,
    K_COMM,
    K_COMPILE,
    K_COST,
    K_EXPOSED,
    K_FEED,
    K_FEED_END,
    K_GC,
    K_HANDOVER,
    K_ITER_END,
    K_ITER_START,
    K_MARK,
    K_MEMORY,
    K_OPT,
    K_OUTSIDE,
    K_PHASE,
    K_STEP,
    K_WAIT,
    KIND_NAMES,
    MAGIC,
    MAX_ARG_CHARS,
    MAX_ARGV,
    MAX_ARGV_CHARS,
    MAX_FRAME,
    MAX_HELLO_FRAME,
    MAX_JSON_FRAME,
    MEMORY_FIELDS,
    PREAMBLE,
    PREAMBLE_SIZE,
    RECORD_BYTES,
    RECORD_FIELDS,
    VERSION,
    FrameReader,
    ProtocolError,
    bounded_argv,
    decode_events,
    decode_json,
    events_payload,
    frame,
    frame_header,
    json_frame,
    script_name,
    step_marks,
)

__all__ = [
    "COMM_OPS",
    "COMPILE_TRIGGERS",
    "COST_PARTS",
    "FRAMEWORKS",
    "FRAME_HEADER",
    "FRAME_TYPES",
    "F_AUTH",
    "F_EVENTS",
    "F_HELLO",
    "F_INFO",
    "HANDOVER_KINDS",
    "JSON_FRAME_TYPES",
    "KIND_NAMES",
    "K_CKPT",
    "K_COMM",
    "K_COMPILE",
    "K_COST",
    "K_EXPOSED",
    "K_FEED",
    "K_FEED_END",
    "K_GC",
    "K_HANDOVER",
    "K_ITER_END",
    "K_ITER_START",
    "K_MARK",
    "K_MEMORY",
    "K_OPT",
    "K_OUTSIDE",
    "K_PHASE",
    "K_STEP",
    "K_WAIT",
    "LOADER_KINDS",
    "MAGIC",
    "MAX_ARGV",
    "MAX_ARGV_CHARS",
    "MAX_ARG_CHARS",
    "MAX_FRAME",
    "MAX_HELLO_FRAME",
    "MAX_JSON_FRAME",
    "MAX_LIST",
    "MAX_LOADER_ID",
    "MAX_NAMES",
    "MEMORY_FIELDS",
    "PID_NAMESPACES",
    "PREAMBLE",
    "PREAMBLE_SIZE",
    "RECORD_BYTES",
    "RECORD_FIELDS",
    "TRAINMON_JOB",
    "VERSION",
    "FrameReader",
    "ProtocolError",
    "bounded_argv",
    "clean_compile",
    "clean_counts",
    "clean_graph_breaks",
    "clean_hello",
    "clean_info",
    "clean_outside",
    "decode_events",
    "decode_json",
    "default_address",
    "default_socket_dir",
    "events_payload",
    "frame",
    "frame_header",
    "job_identity",
    "json_frame",
    "parse_tcp",
    "resolve_address",
    "script_name",
    "step_marks",
]

# ---------------------------------------------------------------- addresses
# Defined here, not in a submodule: `resolve_address` calls `default_socket_dir` of this module, the one callers
# (and tests, with monkeypatch) see as ``protocol.default_socket_dir``.


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
