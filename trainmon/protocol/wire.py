"""The wire format between the in-process agent and the monitor (standard library only).

A connection starts with a preamble (magic + version), then carries frames:
``type:u8 | length:u32 little-endian | payload``. JSON payloads are UTF-8 objects;
event payloads are packed little-endian int64 records of ``RECORD_FIELDS`` fields each,
so neither side builds a Python object per record. See docs/protocol.md.

Both sides use this module: the agent frames and encodes (its argv cut to size by `bounded_argv`), the monitor
reads the frames back (`FrameReader`) and decodes them. What the monitor keeps of each JSON message is
`trainmon.protocol.clean`.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from typing import Any

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
K_OUTSIDE = 12  # a step fed by no loader: t0..t1 = since the last optimizer step, value = ns outside the model
K_COMPILE = 13  # a torch.compile compilation: id = frame + 1, t0..t1 = the compilation, value = attempt << 8 | trigger
K_MEMORY = 14  # CUDA caching allocator, read each sender tick: id = MEMORY_FIELDS index, t0..t1 = since the last read
K_COST = 15  # the agent's own cost over t0..t1: id = COST_PARTS index, value = ns
K_FEED = 16  # DataLoader __next__ called by another thread than the training thread (a prefetcher): id = loader id
K_FEED_END = 17  # that __next__ raised StopIteration: id = loader id
K_HANDOVER = 18  # the training thread waited for a batch another thread makes: id = HANDOVER_KINDS index, t0..t1
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
    K_OUTSIDE: "outside",
    K_COMPILE: "compile",
    K_MEMORY: "memory",
    K_COST: "cost",
    K_FEED: "feed",
    K_FEED_END: "feed_end",
    K_HANDOVER: "handover",
}
# The id of a handover record: what the training thread blocked in, inside the batch iterator's ``__next__``.
HANDOVER_KINDS = ("other", "queue", "future", "mp_queue", "iterator")  # iterator: its whole __next__
# The id of a memory record: what its value holds (bytes, on the run's CUDA device).
MEMORY_FIELDS = (
    "peak_allocated",  # torch.cuda.max_memory_allocated: the peak since the allocator's peak was last reset
    "peak_reserved",  # torch.cuda.max_memory_reserved
    "allocated",  # torch.cuda.memory_allocated at the read
    "reserved",  # torch.cuda.memory_reserved at the read
)
# The id of a cost record: where the agent's own time went.
COST_PARTS = (
    "hooks",  # the training thread's hook work (calls counted in the records, each at its calibrated cost)
    "sender",  # the sender thread's CPU time
)
# How a compilation was started (torch._dynamo.callback.CallbackTrigger), the low byte of a compile record's value.
COMPILE_TRIGGERS = ("other", "dynamo", "lazy_backward", "triton_autotuning", "cudagraph_recording")
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
    return frame_header(kind, len(payload)) + payload


def frame_header(kind: int, length: int) -> bytes:
    """The header of a frame whose payload of ``length`` bytes is written after it as it is (no copy)."""
    return FRAME_HEADER.pack(kind, length)


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


# ---------------------------------------------------------------- sizes the agent keeps to

MAX_ARGV = 64
MAX_ARG_CHARS = 1000
MAX_ARGV_CHARS = 16 * 1024


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


def script_name(argv: list[str], fallback: str) -> str:
    """How a training is named: ``train.py`` for ``python train.py --lr 0.1``, the module for ``python -m pkg``,
    ``python -c`` for a command; ``fallback`` when the arguments name none (an interactive interpreter). The agent
    names its own process so, and the monitor a process it found running without one (from /proc/PID/cmdline)."""
    args = argv[1:]
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in ("-W", "-X"):
            skip = True  # options that take a value
            continue
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if arg == "-c":
            return "python -c"
        if not arg.startswith("-"):
            return arg.rsplit("/", 1)[-1]
    return fallback
