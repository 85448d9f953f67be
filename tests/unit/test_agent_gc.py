"""The agent's gc.callbacks hook, with the real collector: one ``gc`` record per collection, nothing between them,
installed by attach() and removed by detach() and in forked children."""

from __future__ import annotations

import gc
import os
import time

import pytest

from trainmon import protocol as P
from trainmon.agent import _gc, _hot


@pytest.fixture
def hooked():
    _hot.reset_buffer()
    _gc.install()
    try:
        yield
    finally:
        _gc.uninstall()
        _hot.reset_buffer()


def gc_records() -> list[tuple[int, int, int, int]]:
    recs = _hot.swap_buffer()
    rows = [tuple(recs[i : i + 4]) for i in range(0, len(recs), 4)]
    return [r for r in rows if r[0] & 0xFF == P.K_GC]


def test_each_collection_is_one_span_with_its_generation(hooked):
    gc_records()
    before = time.perf_counter_ns()
    gc.collect(0)
    gc.collect(1)
    gc.collect(2)
    after = time.perf_counter_ns()
    recs = gc_records()
    assert [r[3] for r in recs] == [0, 1, 2]
    for tag, t0, t1, _ in recs:
        assert tag == P.K_GC and before <= t0 <= t1 <= after
    assert P.KIND_NAMES[P.K_GC] == "gc" and P.K_GC == 11


def test_automatic_collections_of_reference_cycles_are_recorded(hooked):
    gc_records()

    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    before = [s["collections"] for s in gc.get_stats()]
    for _ in range(gc.get_threshold()[0] * 20):
        Node()
    after = [s["collections"] for s in gc.get_stats()]
    recs = gc_records()
    assert recs and all(r[2] >= r[1] for r in recs)
    # Exactly one record per collection the collector counted, generation by generation.
    assert [sum(r[3] == g for r in recs) for g in range(3)] == [a - b for a, b in zip(after, before, strict=True)]


def test_nothing_is_recorded_between_collections(hooked):
    gc_records()
    x = 0
    for i in range(100_000):  # no container allocations: the collector never runs
        x += i
    assert gc_records() == []


def test_uninstalled_it_records_nothing():
    _hot.reset_buffer()
    assert not _gc.installed()
    gc.collect()
    assert gc_records() == []


def test_attach_installs_the_hook_and_detach_removes_it(tmp_path, monkeypatch):
    import trainmon.agent as agent

    monkeypatch.delenv("TRAINMON_DISABLE", raising=False)
    assert agent.attach(str(tmp_path / "nobody-listens.sock"))
    try:
        assert _gc.installed()
    finally:
        agent.detach()
    assert not _gc.installed()


def test_a_forked_child_starts_without_the_hook(tmp_path, monkeypatch):
    import trainmon.agent as agent

    monkeypatch.delenv("TRAINMON_DISABLE", raising=False)
    assert agent.attach(str(tmp_path / "nobody-listens.sock"))
    try:
        pid = os.fork()
        if pid == 0:  # the child: a DataLoader worker would collect garbage into a buffer nobody sends
            gc.collect()
            os._exit(0 if not _gc.installed() and not _hot.pending_records() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _gc.installed()
    finally:
        agent.detach()


def test_one_record_per_collection_however_many(hooked):
    gc_records()
    n = 200
    for _ in range(n):
        gc.collect(0)
    assert len(gc_records()) == n
