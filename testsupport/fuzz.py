"""Hypothesis strategies for the wire protocol and the recording format, and the drivers that feed
them through the monitor's real code paths (for tests/reliability/test_fuzz.py and benchmarks/fuzz.py)."""

from __future__ import annotations

import json
import socket
import struct
from array import array

from hypothesis import strategies as st

from trainmon import protocol as P
from trainmon.ingest.agent_server import AgentServer, _Conn
from trainmon.record import format as R
from trainmon.store.run import MAX_LOADERS
from trainmon.store.store import Store

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=16),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

HELLO_KEYS = (
    "host",
    "session",
    "name",
    "argv",
    "rank",
    "local_rank",
    "world_size",
    "job",
    "torch",
    "device",
    "mono_ns",
    "wall",
    "connection",
    "sent_records",
    "dropped_records",
    "protocol",
    "ppid",
)
LOADER_KEYS = (
    "batch_size",
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "drop_last",
    "dataset",
    "dataset_len",
    "sampler",
    "multiprocessing_context",
    "attached_late",
)
small_or_any = st.one_of(st.integers(0, 6), json_values)

counts = st.fixed_dictionaries(
    {},
    optional={
        "step": small_or_any,
        "opt": small_or_any,
        "wait": st.dictionaries(
            st.one_of(st.sampled_from(["0", "1", "2", "99999", "x", "²"]), st.text(max_size=4)),
            small_or_any,
            max_size=4,
        ),
    },
)
hellos = st.fixed_dictionaries(
    {"pid": st.one_of(st.integers(1, 4), json_values)},
    optional={**{k: json_values for k in HELLO_KEYS}, "counts": counts, "session": st.sampled_from(["a", "b"])},
)
infos = st.one_of(
    st.fixed_dictionaries(
        {"loader": st.fixed_dictionaries({"id": small_or_any}, optional={k: json_values for k in LOADER_KEYS})}
    ),
    st.fixed_dictionaries({"workers": st.fixed_dictionaries({"loader": small_or_any, "pids": json_values})}),
    st.fixed_dictionaries({"name": st.fixed_dictionaries({"id": small_or_any, "name": json_values})}),
    st.dictionaries(st.sampled_from(["drops", "device", "bye", "other"]), json_values, min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=8), json_values, max_size=3),
)


@st.composite
def event_records(draw) -> array:
    """Records with plausible and hostile fields: known and unknown kinds, huge ids and times."""
    n = draw(st.integers(0, 40))
    out = array("q")
    t = draw(st.integers(0, 1 << 40))
    for _ in range(n):
        kind = draw(st.one_of(st.integers(1, 9), st.integers(0, 255)))
        ident = draw(st.one_of(st.integers(0, 4), st.integers(0, (1 << 55) - 1)))
        if draw(st.booleans()):
            t += draw(st.integers(0, 10**8))
            t0, t1 = t, t + draw(st.integers(0, 10**7))
        else:
            t0, t1 = draw(INT64), draw(INT64)
        out.extend((kind | ident << 8, t0, t1, draw(INT64)))
    return out


def _json_bytes(obj: object) -> bytes:
    return json.dumps(obj, default=str).encode()


frames = st.one_of(
    hellos.map(lambda h: P.json_frame(P.F_HELLO, h)),
    infos.map(lambda i: P.json_frame(P.F_INFO, i)),
    event_records().map(lambda r: P.frame(P.F_EVENTS, P.events_payload(r))),
    st.fixed_dictionaries({"token": json_values}).map(lambda a: P.json_frame(P.F_AUTH, a)),
    st.tuples(st.sampled_from(sorted(P.FRAME_TYPES)), st.binary(max_size=80)).map(lambda f: P.frame(*f)),
    st.tuples(st.integers(0, 255), st.integers(0, 0xFFFFFFFF)).map(lambda h: struct.pack("<BI", *h)),
    st.binary(max_size=40),
)
streams = st.tuples(st.one_of(st.just(P.PREAMBLE), st.binary(max_size=8)), st.lists(frames, max_size=12)).map(
    lambda s: s[0] + b"".join(s[1])
)


class WireHarness:
    """An AgentServer that is never bound: bytes go through ``feed`` exactly as from a socket."""

    def __init__(self, token: str | None = None) -> None:
        self.store = Store(cap=1000, series_cap=100)
        self.server = AgentServer(self.store, "/nonexistent/fuzz.sock", token=token)
        self._a, self._b = socket.socketpair()

    def close(self) -> None:
        self.server.stop()
        self._a.close()
        self._b.close()

    def run(self, data: bytes, pieces: list[int]) -> str | None:
        """Feed ``data`` in pieces; returns the protocol error that would close the connection, or None."""
        conn = _Conn(self._a, "fuzz", 0.0, authed=self.server.token is None)
        pos = 0
        try:
            for size in [*pieces, len(data)]:
                if pos >= len(data):
                    break
                self.server.feed(conn, data[pos : pos + size])
                pos += size
                check_bounded(conn.reader, self.store)
        except P.ProtocolError as exc:
            return str(exc)
        return None


def check_bounded(reader: P.FrameReader, store: Store) -> None:
    limit = P.MAX_FRAME if reader.hello_seen else P.MAX_HELLO_FRAME
    assert reader.buffered <= limit + P.FRAME_HEADER.size + 64 * 1024, reader.buffered
    for run in store.runs.values():
        assert len(run.loaders) <= MAX_LOADERS + 1
        assert len(run.names) <= P.MAX_NAMES
        assert all(
            isinstance(v, (int, float, str, bool, type(None)))
            for v in run.hello.values()
            if not isinstance(v, (list, dict))
        )


# ------------------------------------------------------------------ recordings


def _record_body(kind: int, draw) -> bytes:
    run_t = R.RUN_T.pack(draw(st.integers(0, 3)), draw(st.floats(allow_nan=True)))
    if kind == R.R_EVENTS:
        return run_t + P.events_payload(draw(event_records()))
    if kind in (R.R_HELLO, R.R_INFO):
        obj = draw(hellos if kind == R.R_HELLO else infos)
        return run_t + _json_bytes(obj)
    if kind == R.R_CLOSED:
        return run_t + draw(st.binary(max_size=16))
    if kind == R.R_SAMPLE:
        values = draw(
            st.dictionaries(st.text(max_size=12), st.one_of(st.floats(), st.integers(), json_values), max_size=5)
        )
        return R.T_ONLY.pack(draw(st.floats())) + _json_bytes(values)
    if kind == R.R_META:
        return R.T_ONLY.pack(draw(st.floats())) + _json_bytes(draw(st.dictionaries(st.text(max_size=8), json_values)))
    return draw(st.binary(max_size=40))


@st.composite
def recordings(draw) -> bytes:
    """A recording of valid chunks holding plausible and hostile records, then maybe damaged."""
    chunks = []
    for _ in range(draw(st.integers(0, 3))):
        records = b""
        for _ in range(draw(st.integers(0, 6))):
            kind = draw(st.one_of(st.integers(1, 6), st.integers(0, 255)))
            body = _record_body(kind, draw)
            if draw(st.integers(0, 9)) == 0:  # a record header that lies about its length
                records += R.RECORD_HEAD.pack(kind, draw(st.integers(0, (1 << 32) - 1))) + body
            else:
                records += R.encode_record(kind, body)
        chunks.append(R.encode_chunk(records))
    data = bytearray(R.FILE_HEADER + b"".join(chunks))
    for _ in range(draw(st.integers(0, 3))):  # bit rot
        if len(data) > len(R.FILE_HEADER):
            i = draw(st.integers(len(R.FILE_HEADER), len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)
