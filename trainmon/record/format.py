"""Recording file format: an append-only sequence of independently compressed, checksummed chunks.

    header  b"TRAINMON-REC\\0" + version:u16
    chunk   b"TMCK" + raw_len:u32 + comp_len:u32 + crc32(comp):u32 + zlib(records)
    record  type:u8 + len:u32 + body

A chunk is written at least once a second, so ``kill -9`` loses at most the last second and a
reader stops cleanly at the first damaged chunk. See docs/recording.md.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from array import array
from collections.abc import Iterator
from typing import Any

from trainmon import protocol as P
from trainmon.store.stacks import clean_stacks
from trainmon.store.store import Ingest

HEADER = b"TRAINMON-REC\x00"
VERSION = 1
FILE_HEADER = HEADER + struct.pack("<H", VERSION)
CHUNK_MAGIC = b"TMCK"
CHUNK_HEAD = struct.Struct("<4sIII")
RECORD_HEAD = struct.Struct("<BI")
RUN_T = struct.Struct("<Id")
T_ONLY = struct.Struct("<d")
MAX_CHUNK = 64 * 1024 * 1024

R_META = 1
R_HELLO = 2
R_EVENTS = 3
R_INFO = 4
R_CLOSED = 5
R_SAMPLE = 6


class RecordingError(Exception):
    """The file cannot be read at all (missing, empty, not a recording, unknown version)."""


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str, allow_nan=True).encode()


def encode_record(kind: int, body: bytes) -> bytes:
    return RECORD_HEAD.pack(kind, len(body)) + body


FAST_CHUNK = 256 * 1024  # raw bytes per chunk above which compression trades size for speed


def encode_chunk(raw: bytes) -> bytes:
    # A chunk is half a second of data: a big one means a busy host, where level 1 costs a third of level 6's CPU.
    comp = zlib.compress(raw, 1 if len(raw) > FAST_CHUNK else 6)
    return CHUNK_HEAD.pack(CHUNK_MAGIC, len(raw), len(comp), zlib.crc32(comp)) + comp


class RecordEncoder:
    """Turns Ingest calls into record bytes (the writer adds chunking and I/O)."""

    @staticmethod
    def meta(t: float, meta: dict[str, Any]) -> bytes:
        return encode_record(R_META, T_ONLY.pack(t) + _json(meta))

    @staticmethod
    def hello(run_id: int, t: float, hello: dict[str, Any]) -> bytes:
        return encode_record(R_HELLO, RUN_T.pack(run_id, t) + _json(hello))

    @staticmethod
    def events(run_id: int, t: float, records: array) -> bytes:
        return encode_record(R_EVENTS, RUN_T.pack(run_id, t) + P.events_payload(records))

    @staticmethod
    def info(run_id: int, t: float, info: dict[str, Any]) -> bytes:
        return encode_record(R_INFO, RUN_T.pack(run_id, t) + _json(info))

    @staticmethod
    def closed(run_id: int, t: float, reason: str) -> bytes:
        return encode_record(R_CLOSED, RUN_T.pack(run_id, t) + reason.encode("utf-8", "replace"))

    @staticmethod
    def sample(t: float, values: dict[str, float]) -> bytes:
        return encode_record(R_SAMPLE, T_ONLY.pack(t) + _json(values))


def iter_chunks(data: bytes, warnings: list[str]) -> Iterator[bytes]:
    """Decompressed chunk bodies, stopping with a warning at the first damage."""
    pos = len(FILE_HEADER)
    index = 0
    while pos < len(data):
        if len(data) - pos < CHUNK_HEAD.size:
            warnings.append(f"recording truncated in chunk {index} header; read up to the damage")
            return
        magic, raw_len, comp_len, crc = CHUNK_HEAD.unpack_from(data, pos)
        if magic != CHUNK_MAGIC or raw_len > MAX_CHUNK or comp_len > MAX_CHUNK:
            warnings.append(f"recording corrupt at byte {pos} (chunk {index}); read up to the damage")
            return
        start = pos + CHUNK_HEAD.size
        comp = data[start : start + comp_len]
        if len(comp) < comp_len:
            warnings.append(f"recording truncated in chunk {index}; read up to the damage")
            return
        if zlib.crc32(comp) != crc:
            warnings.append(f"recording corrupt in chunk {index} (checksum); read up to the damage")
            return
        try:
            # Never inflate past the declared length: a crafted chunk cannot become a memory bomb.
            inflater = zlib.decompressobj()
            raw = inflater.decompress(comp, raw_len + 1)
        except zlib.error:
            warnings.append(f"recording corrupt in chunk {index} (compression); read up to the damage")
            return
        if len(raw) != raw_len or not inflater.eof:
            warnings.append(f"recording corrupt in chunk {index} (length); read up to the damage")
            return
        yield raw
        pos = start + comp_len
        index += 1


def replay_into(data: bytes, sink: Ingest, warnings: list[str]) -> int:
    """Feed every readable record to ``sink``; returns the number of records read."""
    if not data:
        raise RecordingError("the file is empty (nothing was recorded)")
    if not data.startswith(HEADER):
        if HEADER.startswith(data[: len(HEADER)]) and len(data) < len(FILE_HEADER):
            raise RecordingError("the file is truncated before its header ends")
        raise RecordingError("not a trainmon recording (bad header)")
    if len(data) < len(FILE_HEADER):
        raise RecordingError("the file is truncated before its header ends")
    (version,) = struct.unpack_from("<H", data, len(HEADER))
    if version != VERSION:
        raise RecordingError(f"recording format version {version} is not supported (this trainmon reads {VERSION})")
    count = 0
    for raw in iter_chunks(data, warnings):
        pos = 0
        while pos < len(raw):
            if len(raw) - pos < RECORD_HEAD.size:
                warnings.append("a chunk ends inside a record header; skipped the rest of it")
                break
            kind, length = RECORD_HEAD.unpack_from(raw, pos)
            body = raw[pos + RECORD_HEAD.size : pos + RECORD_HEAD.size + length]
            pos += RECORD_HEAD.size + length
            if len(body) < length:
                warnings.append("a chunk ends inside a record; skipped the rest of it")
                break
            try:
                _dispatch(kind, body, sink)
            except (ValueError, struct.error, P.ProtocolError, ArithmeticError, RecursionError) as exc:
                if len(warnings) < 20:
                    warnings.append(f"skipped a damaged record (type {kind}): {exc}")
                continue
            count += 1
    return count


def _load(body: bytes) -> Any:
    obj = json.loads(body.decode("utf-8"))  # UnicodeDecodeError and JSONDecodeError are ValueErrors
    if not isinstance(obj, dict):
        raise ValueError("record body is not an object")
    return obj


def _clean_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The monitor's own facts (version, host, clocks, interval, GPUs): JSON scalars, and a list of GPUs."""
    clean: dict[str, Any] = {}
    for key, value in list(meta.items())[:64]:
        if key == "gpus":
            if isinstance(value, list):
                clean[key] = [g for g in value[:64] if isinstance(g, dict)]
        elif value is None or isinstance(value, (str, int, float, bool)):
            clean[str(key)[:64]] = value[:1000] if isinstance(value, str) else value
    return clean


def _run_t(body: bytes) -> tuple[int, float]:
    run_id, t = RUN_T.unpack_from(body)
    return run_id, _finite(t)


def _t(body: bytes) -> float:
    return _finite(T_ONLY.unpack_from(body)[0])


def _finite(t: float) -> float:
    if not math.isfinite(t):
        raise ValueError("a timestamp that is not a finite number")
    return t


def _sample_value(value: float) -> float:
    return value if math.isfinite(value) else math.nan  # nan: "not available", as the sources write it


def _dispatch(kind: int, body: bytes, sink: Ingest) -> None:
    # Everything is cleaned as the live server cleans it: a damaged or crafted file gets no further
    # into the monitor than the wire would.
    if kind == R_EVENTS:
        run_id, t = _run_t(body)
        sink.events(run_id, t, P.decode_events(body[RUN_T.size :]))
    elif kind == R_SAMPLE:
        t = _t(body)
        values = _load(body[T_ONLY.size :])
        sink.sample(
            t, {str(k)[:200]: _sample_value(float(v)) for k, v in values.items() if isinstance(v, (int, float))}
        )
    elif kind == R_HELLO:
        run_id, t = _run_t(body)
        sink.hello(run_id, t, P.clean_hello(_load(body[RUN_T.size :]), monitor=True))
    elif kind == R_INFO:
        run_id, t = _run_t(body)
        raw = _load(body[RUN_T.size :])
        info = P.clean_info(raw, monitor=True)
        if (stacks := clean_stacks(raw.get("stacks"))) is not None:
            info["stacks"] = stacks  # the monitor's own evidence (never taken from the wire)
        sink.info(run_id, t, info)
    elif kind == R_CLOSED:
        run_id, t = _run_t(body)
        sink.closed(run_id, t, body[RUN_T.size :].decode("utf-8", "replace")[:200])
    elif kind == R_META:
        sink.meta(_t(body), _clean_meta(_load(body[T_ONLY.size :])))
    else:
        raise ValueError(f"unknown record type {kind}")
