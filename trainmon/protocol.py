"""Wire protocol between the in-process agent and the monitor (standard library only).

A connection starts with a preamble (magic + version), then carries frames:
``type:u8 | length:u32 little-endian | payload``. JSON payloads are UTF-8 objects;
event payloads are packed little-endian int64 records of ``RECORD_FIELDS`` fields each,
so neither side builds a Python object per record. See docs/protocol.md.

A little over 400 lines: the framing, the record kinds and the cleaning of every message the monitor accepts
stay in one module, the one contract both sides (the agent inside the job, the monitor) import.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import tempfile
from array import array
from typing import Any, TypeGuard

MAGIC = b"TRMN"
VERSION = 1
PREAMBLE = MAGIC + struct.pack("<H", VERSION)
PREAMBLE_SIZE = len(PREAMBLE)

FRAME_HEADER = struct.Struct("<BI")
MAX_FRAME = 4 * 1024 * 1024
MAX_JSON_FRAME = 256 * 1024
MAX_HELLO_FRAME = 64 * 1024  # HELLO and AUTH: all an unidentified peer may make the monitor buffer

# Frame types.
F_HELLO = 1  # JSON: who the training process is
F_EVENTS = 2  # packed int64 records
F_INFO = 3  # JSON: loader registered, names, drop counts, goodbye
F_AUTH = 4  # JSON: {"token": ...}, only on TCP listeners that require one
FRAME_TYPES = frozenset({F_HELLO, F_EVENTS, F_INFO, F_AUTH})
JSON_FRAME_TYPES = frozenset({F_HELLO, F_INFO, F_AUTH})

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
K_COMM = 10  # the training thread blocked in collective communication: id = COMM_OPS index, t0..t1, value = 0
K_GC = 11  # a garbage collection (gc.callbacks): t0..t1 = the pause, value = generation
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
    K_COMM: "comm",
    K_GC: "gc",
}
# The id of a comm record: what the thread was blocked in (index into this tuple; unknown ids read as "other").
COMM_OPS = (
    "other",
    "ddp_grad_sync",  # DistributedDataParallel's reducer, from the end of backward's compute to its return
    "wait",  # Work.wait() of an asynchronous collective
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
)

_BIG_ENDIAN = sys.byteorder == "big"


class ProtocolError(Exception):
    """Input that breaks the protocol; the connection that sent it is closed."""


def frame(kind: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(kind, len(payload)) + payload


def json_frame(kind: int, obj: dict[str, Any]) -> bytes:
    return frame(kind, json.dumps(obj, separators=(",", ":"), default=str).encode())


_NOT_WAIT_OR_OPT = bytes(k for k in range(256) if k not in (K_WAIT, K_OPT))
_WAIT_THEN_OPT = bytes((K_WAIT, K_OPT))
_WAIT_FF = bytes(0xFF if k == K_WAIT else 0 for k in range(256))


def step_marks(payload: bytes, last: int = 0) -> tuple[int, int, int, int, dict[int, int]]:
    """Counts that mark steps in an encoded batch of records, at C speed (no per-record Python).

    Returns (explicit steps, optimizer steps, optimizer-step groups, the kind of the last wait or
    optimizer record, waits per loader id); a group is a run of optimizer steps after a batch
    (several optimizers stepping for one batch are one step). ``last`` carries the previous batch's
    last kind across batches. Kinds are compared by their byte, ids in full.
    """
    kinds = payload[0::RECORD_BYTES]  # the low byte of each little-endian tag is its kind
    seq = kinds.translate(None, _NOT_WAIT_OR_OPT)
    groups = seq.count(_WAIT_THEN_OPT) + (last == K_WAIT and seq[:1] == _WAIT_THEN_OPT[1:])
    return kinds.count(K_STEP), kinds.count(K_OPT), groups, seq[-1] if seq else last, _waits(payload, kinds)


def _waits(payload: bytes, kinds: bytes) -> dict[int, int]:
    """``wait`` records per loader id. Loader ids below 256 (all but the rarest jobs) are read from
    each tag's second byte with whole-batch byte operations; ids up to 2**24 (an agent numbers its
    loaders from 1) take a slower exact path."""
    total = kinds.count(K_WAIT)
    if not total:
        return {}
    mask = int.from_bytes(kinds.translate(_WAIT_FF), "little")  # 0xFF under every wait record
    if any(mask & int.from_bytes(payload[i::RECORD_BYTES], "little") for i in (2, 3)):
        tags = decode_events(payload)[0::RECORD_FIELDS]
        return {tag >> 8: tags.count(tag) for tag in set(tags) if tag & 0xFF == K_WAIT and tag >= 0}
    ids = (mask & int.from_bytes(payload[1::RECORD_BYTES], "little")).to_bytes(len(kinds), "little")
    ids = ids.translate(None, b"\0")  # the ids of waits of loaders other than 0
    waits: dict[int, int] = {}
    while ids:  # once per distinct loader in the batch
        lid = ids[0]
        waits[lid] = ids.count(lid)
        total -= waits[lid]
        ids = ids.translate(None, bytes((lid,)))
    if total:
        waits[0] = total
    return waits


def events_payload(records: array[int]) -> bytes:
    """Encode an ``array('q')`` of flat records; one C call, no per-record objects."""
    if _BIG_ENDIAN:
        records = array("q", records)
        records.byteswap()
    return records.tobytes()


def decode_events(payload: bytes | memoryview) -> array[int]:
    if len(payload) % RECORD_BYTES:
        raise ProtocolError(f"event payload of {len(payload)} bytes is not a multiple of {RECORD_BYTES}")
    records = array("q")
    records.frombytes(payload)
    if _BIG_ENDIAN:
        records.byteswap()
    return records


def decode_json(payload: bytes | memoryview) -> dict[str, Any]:
    if len(payload) > MAX_JSON_FRAME:
        raise ProtocolError(f"JSON frame of {len(payload)} bytes exceeds {MAX_JSON_FRAME}")
    try:
        obj = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: deeply nested arrays
        raise ProtocolError(f"malformed JSON frame: {exc.__class__.__name__}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("JSON frame is not an object")
    return obj


class FrameReader:
    """Incremental parser: feed bytes, get complete ``(type, payload)`` frames.

    Checks each frame header before buffering its payload: an unknown type, a frame over its
    type's limit, or anything but AUTH/HELLO before the HELLO raises ProtocolError. So a peer that
    has not said who it is can make the monitor hold at most one MAX_HELLO_FRAME, and a known one
    at most one ``max_frame``.
    """

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        self.preamble_seen = False
        self.hello_seen = False

    def feed(self, data: bytes | memoryview) -> list[tuple[int, bytes]]:
        self._buf += data
        out: list[tuple[int, bytes]] = []
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
                self._check_header(kind, length)
                end = pos + FRAME_HEADER.size + length
                if end > len(view):
                    break
                out.append((kind, bytes(view[pos + FRAME_HEADER.size : end])))
                if kind == F_HELLO:
                    self.hello_seen = True
                pos = end
        finally:
            view.release()
        if pos:
            del self._buf[:pos]
        return out

    def _check_header(self, kind: int, length: int) -> None:
        if kind not in FRAME_TYPES:
            raise ProtocolError(f"unknown frame type {kind}")
        limit = self._max
        if kind in JSON_FRAME_TYPES:
            limit = min(limit, MAX_JSON_FRAME if self.hello_seen else MAX_HELLO_FRAME)
        if length > limit:
            raise ProtocolError(f"frame of {length} bytes exceeds the {limit}-byte limit")
        if not self.hello_seen and kind not in (F_HELLO, F_AUTH):
            raise ProtocolError("data before hello")
        if self.hello_seen and kind == F_HELLO:
            raise ProtocolError("second hello on one connection")

    @property
    def buffered(self) -> int:
        return len(self._buf)


# ---------------------------------------------------------------- validation

MAX_ARGV = 64
MAX_ARG_CHARS = 1000
MAX_ARGV_CHARS = 16 * 1024
MAX_LOADER_ID = 4096
MAX_NAMES = 4096
MAX_LIST = 1024
_HELLO_STR = ("host", "session", "name", "torch", "python", "trainmon", "device", "peer", "job_id", "node")
_HELLO_INT = (
    "ppid",
    "rank",
    "global_rank",
    "local_rank",
    "world_size",
    "connection",
    "sent_records",
    "dropped_records",
    "mono_ns",
    "protocol",
)
_LOADER_FIELDS: dict[str, type] = {
    "batch_size": int,
    "num_workers": int,
    "pin_memory": bool,
    "prefetch_factor": int,
    "persistent_workers": bool,
    "drop_last": bool,
    "dataset": str,
    "dataset_len": int,
    "sampler": str,
    "multiprocessing_context": str,
    "start_method": str,  # how its workers start: the loader's context, else the process default
    "attached_late": bool,
    # Read off the batches themselves (agent/_batch.py): how many were read, their samples, and of those holding
    # token ids how many, and their tokens (attention-mask-aware). Sums, halved past 256 batches.
    "measured_batches": int,
    "measured_samples": int,
    "measured_token_batches": int,
    "measured_tokens": int,
}
FRAMEWORKS = ("transformers", "lightning", "accelerate")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: object) -> int:
    return value if _is_int(value) and 0 <= value < 1 << 62 else 0


def bounded_argv(argv: list[str]) -> list[str]:
    """At most MAX_ARGV arguments of MAX_ARG_CHARS, MAX_ARGV_CHARS in all: a HELLO always fits its frame."""
    out: list[str] = []
    total = 0
    for arg in argv[:MAX_ARGV]:
        arg = str(arg)[:MAX_ARG_CHARS]
        total += len(arg)
        if total > MAX_ARGV_CHARS:
            out.append("...")
            break
        out.append(arg)
    return out


def clean_counts(counts: object) -> dict[str, Any]:
    """The agent's cumulative record counts (see docs/protocol.md, "Step continuity")."""
    if not isinstance(counts, dict):
        return {"step": 0, "opt": 0, "groups": 0, "last": 0, "wait": {}}
    waits: dict[str, int] = {}
    raw = counts.get("wait")
    if isinstance(raw, dict):
        for key, value in list(raw.items())[:MAX_LIST]:
            if (
                isinstance(key, str)
                and key.isascii()
                and key.isdigit()
                and len(key) < 6
                and int(key) < MAX_LOADER_ID
                and _count(value)
            ):
                waits[str(int(key))] = _count(value)
    last = counts.get("last")
    return {
        "step": _count(counts.get("step")),
        "opt": _count(counts.get("opt")),
        "groups": _count(counts.get("groups")),
        "last": last if last in (K_WAIT, K_OPT) else 0,
        "wait": waits,
    }


PID_NAMESPACES = ("own", "mapped", "unmapped")


def clean_hello(hello: dict[str, Any], *, monitor: bool = False) -> dict[str, Any]:
    """Keep a hello's fields to their expected types and sizes; raises ProtocolError without a pid.

    ``peer_pid`` and ``pid_namespace`` are the monitor's own findings about the connection (see
    docs/protocol.md): an agent-sent one is dropped; ``monitor=True`` (a recording the monitor wrote)
    keeps them, cleaned."""
    pid = hello.get("pid")
    if not _is_int(pid) or not 0 < pid < 1 << 31:
        raise ProtocolError("hello without a valid pid")
    clean: dict[str, Any] = {"pid": pid}
    for key in _HELLO_STR:
        value = hello.get(key)
        clean[key] = str(value)[:200] if value is not None else None
    clean["host"] = clean["host"] or "?"
    clean["session"] = clean["session"] or str(pid)
    for key in _HELLO_INT:
        value = hello.get(key)
        clean[key] = value if _is_int(value) and abs(value) < 1 << 63 else None
    wall = hello.get("wall")
    clean["wall"] = float(wall) if isinstance(wall, float) or (_is_int(wall) and abs(wall) < 1 << 63) else None
    argv = hello.get("argv")
    clean["argv"] = bounded_argv(argv) if isinstance(argv, list) else []
    job = hello.get("job")
    clean["job"] = {str(k)[:64]: str(v)[:200] for k, v in list(job.items())[:32]} if isinstance(job, dict) else {}
    clean["counts"] = clean_counts(hello.get("counts"))
    # An agent injected into a process that was already running (`trainmon attach`): when it started.
    clean["attached_live"] = hello.get("attached_live") is True
    attach_wall = hello.get("attach_wall")
    live_wall = isinstance(attach_wall, (int, float)) and not isinstance(attach_wall, bool)
    clean["attach_wall"] = float(attach_wall) if live_wall and 0 < float(attach_wall) < math.inf else None  # type: ignore[arg-type]
    if monitor:
        # A training the monitor found and samples without an agent (trainmon.sources.discover).
        clean["measured_by"] = "sampling" if hello.get("measured_by") == "sampling" else "agent"
        peer_pid = hello.get("peer_pid")
        clean["peer_pid"] = peer_pid if _is_int(peer_pid) and 0 < peer_pid < 1 << 31 else None
        ns = hello.get("pid_namespace")
        clean["pid_namespace"] = ns if ns in PID_NAMESPACES else None
    return clean


def _typed(value: object, kind: type) -> Any:
    """``value`` if it has the expected type (ints: non-negative, < 2**40), else None."""
    if kind is int:
        return value if _is_int(value) and 0 <= value < 1 << 40 else None
    if isinstance(value, kind):
        return value[:200] if isinstance(value, str) else value
    return None


def _loader_id(value: object) -> int | None:
    return value if _is_int(value) and 0 <= value < MAX_LOADER_ID else None


def clean_info(info: dict[str, Any], *, monitor: bool = False) -> dict[str, Any]:
    """The known INFO keys with their expected types; everything else dropped (see docs/protocol.md).

    ``workers.proc_pids`` (the workers' pids in the monitor's pid namespace) is the monitor's own: kept,
    cleaned, only with ``monitor=True`` (a recording the monitor wrote)."""
    clean: dict[str, Any] = {}
    loader = info.get("loader")
    if isinstance(loader, dict) and (lid := _loader_id(loader.get("id"))) is not None:
        cfg: dict[str, Any] = {"id": lid}
        for key, kind in _LOADER_FIELDS.items():
            if key in loader:
                cfg[key] = _typed(loader[key], kind)
        clean["loader"] = cfg
    workers = info.get("workers")
    if isinstance(workers, dict) and (lid := _loader_id(workers.get("loader"))) is not None:
        pids = workers.get("pids")
        pids = [p for p in pids[:MAX_LIST] if _is_int(p) and 0 < p < 1 << 31] if isinstance(pids, list) else []
        clean["workers"] = {"loader": lid, "pids": pids}
        if _is_int(t_ns := workers.get("t_ns")) and 0 <= t_ns < 1 << 63:
            clean["workers"]["t_ns"] = t_ns  # when their iterator began (CLOCK_MONOTONIC ns)
        proc_pids = workers.get("proc_pids")
        if monitor and isinstance(proc_pids, list) and len(proc_pids) == len(pids):
            clean["workers"]["proc_pids"] = [p if _is_int(p) and 0 <= p < 1 << 31 else 0 for p in proc_pids]
    name = info.get("name")
    if isinstance(name, dict) and _is_int(ident := name.get("id")) and 0 <= ident < MAX_NAMES:
        clean["name"] = {"id": ident, "name": str(name.get("name"))[:200]}
    if _count(drops := info.get("drops")):
        clean["drops"] = drops
    if isinstance(bye := info.get("bye"), str):
        clean["bye"] = bye[:32]
    device = info.get("cuda_device")
    if isinstance(device, dict) and _is_int(index := device.get("index")) and 0 <= index < 1024:
        clean["cuda_device"] = {
            "index": index,
            "uuid": str(device.get("uuid") or "")[:80],
            "name": str(device.get("name") or "")[:100],
        }
    framework = info.get("framework")
    if isinstance(framework, dict) and framework.get("name") in FRAMEWORKS:
        version = framework.get("version")
        clean["framework"] = {"name": framework["name"], "version": str(version)[:40] if version else None}
    ident = info.get("dist")
    if isinstance(ident, dict) and _is_int(rank := ident.get("rank")) and 0 <= rank < 1 << 31:
        world, local, job = ident.get("world_size"), ident.get("local_rank"), ident.get("job")
        clean["dist"] = {
            "rank": rank,
            "world_size": world if _is_int(world) and 0 < world < 1 << 31 else None,
            "local_rank": local if _is_int(local) and 0 <= local < 1 << 31 else None,
            "job_id": str(ident.get("job_id"))[:200] if ident.get("job_id") else None,
            "job": {str(k)[:64]: str(v)[:200] for k, v in list(job.items())[:32]} if isinstance(job, dict) else {},
        }
    return clean


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
