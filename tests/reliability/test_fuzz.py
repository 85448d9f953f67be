"""Fuzzing the protocol decoder and the recording reader with Hypothesis: no crash, bounded memory.

Inputs go through the monitor's real paths: wire bytes through ``AgentServer.feed`` (frame reader,
JSON decoding, hello/info cleaning) into a Store; recordings through ``replay_into`` into a Store;
then the rules and the report read what got in. A longer run: ``make fuzz`` (benchmarks/fuzz.py).
"""

from __future__ import annotations

import json
import tracemalloc
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testsupport.fuzz import WireHarness, check_bounded, recordings, streams
from trainmon import protocol as P
from trainmon.diagnose.engine import evaluate
from trainmon.record import format as R
from trainmon.report import build_report, run_summary
from trainmon.store.store import Store

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def wire():
    harness = WireHarness()
    yield harness
    harness.close()


def _consumers_cope(store: Store) -> None:
    """What got into the store must not break the rules or the report of anyone."""
    t = store.last_t if store.last_t is not None else 0.0
    evaluate(store, t)
    for run in store.runs.values():
        run_summary(run)


@FUZZ
@given(data=streams, pieces=st.lists(st.integers(1, 64), max_size=8))
def test_wire_bytes_never_crash_the_monitor(wire, data, pieces):
    wire.store.runs.clear()
    wire.run(data, pieces)
    _consumers_cope(wire.store)


@FUZZ
@given(data=streams)
def test_wire_bytes_with_a_token_required(data):
    harness = WireHarness(token="s3cret")
    try:
        harness.run(data, [])
        if not data.startswith(P.PREAMBLE + P.json_frame(P.F_AUTH, {"token": "s3cret"})):
            assert harness.store.runs == {}, "data got in without the token"
    finally:
        harness.close()


def test_hostile_peer_can_make_the_monitor_buffer_at_most_one_hello_frame(wire):
    claim = P.PREAMBLE + P.FRAME_HEADER.pack(P.F_HELLO, P.MAX_HELLO_FRAME)
    assert wire.run(claim + b"{" * 1000, []) is None  # a 64 KiB hello may be legitimately on its way
    for kind, size in [(P.F_HELLO, P.MAX_HELLO_FRAME + 1), (P.F_EVENTS, 32), (P.F_INFO, 2)]:
        assert wire.run(P.PREAMBLE + P.FRAME_HEADER.pack(kind, size), []) is not None  # refused at the header


@FUZZ
@given(data=recordings())
def test_recordings_never_crash_the_reader(data):
    store = Store(cap=None, series_cap=None)
    warnings: list[str] = []
    try:
        R.replay_into(data, store, warnings)
    except R.RecordingError:
        return
    assert len(warnings) <= 25
    for run in store.runs.values():
        check_bounded(P.FrameReader(), store)
        assert isinstance(run.pid, int)
    _consumers_cope(store)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_a_valid_header(tail):
    warnings: list[str] = []
    R.replay_into(R.FILE_HEADER + tail, Store(cap=None), warnings)


def test_a_decompression_bomb_is_refused_without_inflating_it():
    bomb = zlib.compress(b"\0" * (32 << 20), 9)  # 32 MiB of zeros in ~32 KiB
    chunk = R.CHUNK_HEAD.pack(R.CHUNK_MAGIC, 100, len(bomb), zlib.crc32(bomb)) + bomb  # claims 100 bytes
    warnings: list[str] = []
    tracemalloc.start()
    try:
        R.replay_into(R.FILE_HEADER + chunk, Store(cap=None), warnings)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert warnings and "corrupt" in warnings[0]
    assert peak < 1 << 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=recordings())
def test_reports_of_damaged_or_crafted_recordings(data):
    store = Store(cap=None, series_cap=None)
    try:
        R.replay_into(data, store, [])
    except R.RecordingError:
        return
    report = build_report(store)
    json.dumps(report)  # what `trainmon report --format json` prints
