"""The agent's record buffer: a flat list the training thread adds to and the sender takes from, concurrently."""

from __future__ import annotations

import itertools
import threading

from trainmon.agent import _hot
from trainmon.protocol import K_STEP


def test_records_taken_while_a_thread_floods_the_buffer_arrive_once_each_and_in_order(monkeypatch):
    """A tight loop of step() (the buffer outgrows its cap, so the thread sheds its older half packed) while
    another thread takes records as the sender does: every record arrives once, oldest first."""
    _hot.reset_buffer()
    monkeypatch.setattr(_hot, "CAP_FIELDS", 4 * 1024)  # step() reads it each call: sheds on any host's pace
    n = 200_000
    taken: list[int] = []
    done = threading.Event()

    def take() -> None:
        while not done.wait(0.01):  # seldom enough that the flooding thread sheds between takes
            taken.extend(_hot.swap_buffer())
        taken.extend(_hot.swap_buffer())

    shed = [0]
    original_shed = _hot.shed

    def counted_shed() -> None:
        original_shed()
        shed[0] += len(_hot._buf) <= _hot.CAP_FIELDS  # it shed (it skips while the taker holds the lock)

    monkeypatch.setattr(_hot, "shed", counted_shed)  # step() looks shed up in the module each time
    taker = threading.Thread(target=take)
    taker.start()
    try:
        for _ in range(n):
            _hot.step()
    finally:
        done.set()
        taker.join()
    assert len(taken) == 4 * n
    tags, times = taken[0::4], taken[1::4]
    assert set(tags) == {K_STEP}
    assert all(a <= b for a, b in itertools.pairwise(times)), "records out of order"
    assert _hot.pending_records() == 0
    assert shed[0] > 0, "the buffer never outgrew its cap: the test did not exercise shedding"


def test_a_record_with_a_field_that_is_not_an_int64_is_left_out_and_the_rest_kept():
    _hot.reset_buffer()
    _hot.span(K_STEP, 1, 10, 20, 5)
    _hot.span(K_STEP, 1, 30, 40, 1 << 70)  # beyond int64: this record only is lost
    _hot.span(K_STEP, 1, 50, 60, 7)
    got = _hot.swap_buffer()
    assert got.tolist() == [K_STEP | 1 << 8, 10, 20, 5, K_STEP | 1 << 8, 50, 60, 7]


def test_a_shed_while_the_records_are_being_taken_waits_for_nothing(monkeypatch):
    """A record made while the lock is held (the sender taking, or a finaliser or signal handler inside a shed) must
    not hang the training thread on its own lock: the shed is left to a later record."""
    _hot.reset_buffer()
    monkeypatch.setattr(_hot, "CAP_FIELDS", 4 * 8)
    with _hot._take_lock:
        for _ in range(20):
            _hot.step()
        assert _hot.pending_records() == 20 and not _hot._packed
    _hot.step()  # the lock is free again: this one sheds
    assert _hot._packed and _hot.pending_records() == 21
    assert len(_hot.swap_buffer()) == 4 * 21
