"""The agent tells which worker processes serve which loader, from when, and how long making an iterator took."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.data import DataLoader

from trainmon import protocol as P
from trainmon.agent import _hot
from trainmon.agent._torch_hooks import Registry, TorchHooks, start_method
from trainmon.store.store import Store


class _Items(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> int:
        return i


@contextmanager
def _hooks() -> Iterator[list[dict]]:
    """torch patched as attach() patches it; yields the control messages the agent would send."""
    sent: list[dict] = []
    h = TorchHooks(Registry(sent.append))
    h.install()
    _hot.reset_buffer()
    try:
        yield sent
    finally:
        h.uninstall()
        _hot.reset_buffer()


def _records() -> list[tuple[int, int, int, int]]:
    flat = _hot.swap_buffer()
    return [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]  # type: ignore[misc]


def test_each_epochs_workers_are_reported_per_loader_with_their_start():
    train = DataLoader(_Items(), batch_size=2, num_workers=2, multiprocessing_context="fork")
    val = DataLoader(_Items(), batch_size=4, num_workers=1, persistent_workers=True)
    with _hooks() as sent:
        for _ in range(2):
            assert [b.tolist() for b in train] == [[0, 1], [2, 3], [4, 5], [6, 7]]
            assert len(list(val)) == 2
        records = _records()
    loaders = {m["loader"]["id"]: m["loader"] for m in sent if "loader" in m}
    assert loaders[1]["start_method"] == "fork"
    assert loaders[2]["start_method"] == (
        multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    )
    workers = [m["workers"] for m in sent if "workers" in m]
    train_sets = [w for w in workers if w["loader"] == 1]
    assert len(train_sets) == 2 and not set(train_sets[0]["pids"]) & set(train_sets[1]["pids"])  # new each epoch
    assert len([w for w in workers if w["loader"] == 2]) == 1  # persistent: one set for both epochs
    starts = [r for r in records if r[0] & 0xFF == P.K_ITER_START]
    assert [(r[0] >> 8, r[3]) for r in starts] == [(1, 2), (2, 1), (1, 2), (2, 1)]
    assert all(r[1] < r[2] for r in starts)  # from before the workers started to the iterator's return
    assert [w["t_ns"] for w in train_sets] == [starts[0][1], starts[2][1]]
    assert all(P.clean_info({"workers": w})["workers"]["t_ns"] == w["t_ns"] for w in workers)


def test_the_store_keeps_each_set_of_workers_with_its_span():
    store = Store()
    store.hello(1, 0.0, {"pid": 10})
    for t, pids in ((1.0, [101, 102]), (5.0, [103, 104]), (5.0, [103, 104]), (9.0, [105, 106])):
        store.info(1, t, P.clean_info({"workers": {"loader": 1, "pids": pids, "t_ns": int(t * 1e9)}}))
    info = store.runs[1].loaders[1]
    assert len(info.generations) == 3  # the repeated message (a reconnection) is not a new set
    assert info.workers_between(4.0, 6.0) == [(101, 4.0, 5.0), (102, 4.0, 5.0), (103, 5.0, 6.0), (104, 5.0, 6.0)]
    assert [p for p, _, _ in info.workers_between(9.5, 20.0)] == [105, 106]
    assert store.runs[1].worker_pids() == [105, 106]


def test_start_method_is_read_without_fixing_the_default():
    assert start_method(multiprocessing.get_context("spawn")) == "spawn"
    before = multiprocessing.get_start_method(allow_none=True)
    start_method(None)
    assert multiprocessing.get_start_method(allow_none=True) == before  # a later set_start_method still works
