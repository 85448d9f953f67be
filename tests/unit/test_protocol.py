from __future__ import annotations

import json
import struct
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmon import protocol as P


def _stream(*frames: bytes) -> bytes:
    return P.PREAMBLE + b"".join(frames)


def test_roundtrip_in_one_and_in_many_pieces():
    records = array("q", [P.K_WAIT | 3 << 8, 10, 20, 0, P.K_OPT, 30, 30, 0])
    data = _stream(P.json_frame(P.F_HELLO, {"pid": 1}), P.frame(P.F_EVENTS, P.events_payload(records)))
    whole = P.FrameReader().feed(data)
    assert [k for k, _ in whole] == [P.F_HELLO, P.F_EVENTS]
    assert P.decode_json(whole[0][1]) == {"pid": 1}
    assert P.decode_events(whole[1][1]) == records
    reader = P.FrameReader()
    pieces = [f for i in range(len(data)) for f in reader.feed(data[i : i + 1])]
    assert [(k, bytes(p)) for k, p in pieces] == [(k, bytes(p)) for k, p in whole]
    assert reader.buffered == 0


@pytest.mark.parametrize(
    "data, message",
    [
        (b"GET / HTTP/1.1\r\n", "bad magic"),
        (P.MAGIC + struct.pack("<H", 99), "unsupported protocol version 99"),
        (P.PREAMBLE + struct.pack("<BI", 77, 0), "unknown frame type 77"),
        (P.PREAMBLE + struct.pack("<BI", P.F_EVENTS, P.MAX_FRAME + 1), "exceeds"),
    ],
)
def test_bad_input_raises_protocol_error(data, message):
    with pytest.raises(P.ProtocolError, match=message):
        P.FrameReader().feed(data)


@pytest.mark.parametrize("payload", [b"\xff\xfe", b"[1, 2]", b"{not json", json.dumps("x").encode()])
def test_malformed_json_is_a_protocol_error(payload):
    with pytest.raises(P.ProtocolError):
        P.decode_json(payload)


def test_event_payload_must_be_whole_records():
    with pytest.raises(P.ProtocolError, match="multiple of 32"):
        P.decode_events(b"\x00" * 33)


def test_addresses():
    assert P.parse_tcp("127.0.0.1:7000") == ("127.0.0.1", 7000)
    assert P.parse_tcp("[::1]:7000") == ("::1", 7000)
    assert P.parse_tcp(":7000") == ("127.0.0.1", 7000)
    assert P.parse_tcp("/tmp/x.sock") is None
    assert P.parse_tcp("relative.sock") is None
    assert P.resolve_address("/a") == "/a"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_fuzz_reader_never_crashes_and_stays_bounded(chunks):
    reader = P.FrameReader(max_frame=1024)
    try:
        for chunk in [P.PREAMBLE, *chunks]:
            for kind, payload in reader.feed(chunk):
                assert kind in P.FRAME_TYPES
                assert len(payload) <= 1024
            assert reader.buffered <= 1024 + P.FRAME_HEADER.size + 64
    except P.ProtocolError:
        pass
