"""Samples and tokens read off the batches (agent/_batch.py): what a batch holds, and that the measuring ``__next__``
is swapped in only for a round of a few batches, then the plain timing wrapper is back."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data import dataloader as dl

from trainmon import protocol as P
from trainmon.agent import _batch, _hot
from trainmon.agent._batch import MAX_MEASURED, BatchStats, measure
from trainmon.agent._torch_hooks import Registry, TorchHooks
from trainmon.store.batches import batch_size, tokens_per_sample
from trainmon.store.store import Store


def test_a_tensor_batch_counts_its_leading_dimension():
    assert measure(torch.zeros(8, 3, 32, 32)) == (8, -1)
    assert measure(torch.zeros(5)) == (5, -1)
    assert measure(torch.tensor(3.0)) == (0, -1)  # a scalar is no batch
    assert measure(3) == (0, -1) and measure("text") == (0, -1) and measure(None) == (0, -1)


def test_token_ids_count_as_tokens_and_floats_do_not():
    assert measure(torch.zeros(4, 16, dtype=torch.long)) == (4, 64)
    assert measure(torch.zeros(4, 16, dtype=torch.int32)) == (4, 64)
    assert measure(torch.zeros(4, 16)) == (4, -1)  # float features, not token ids
    assert measure(torch.zeros(4, 16, dtype=torch.bool)) == (4, -1)
    assert measure(np.zeros((3, 10), dtype=np.int64)) == (3, 30)
    assert measure(np.zeros((3, 10), dtype=np.float32)) == (3, -1)


def test_tuples_lists_and_mappings():
    x, y = torch.zeros(6, 10), torch.zeros(6, dtype=torch.long)
    assert measure((x, y)) == (6, -1)
    assert measure([torch.zeros(2, 7, dtype=torch.long), y]) == (2, 14)  # (input_ids, labels) as nanoGPT makes them
    assert measure({"image": x, "label": y}) == (6, -1)
    assert measure(("not a tensor", x)) == (6, -1)
    assert measure([{"input_ids": torch.zeros(3, 5, dtype=torch.long)}, "meta"]) == (3, 15)


def test_padding_is_not_counted_where_there_is_an_attention_mask():
    ids = torch.tensor([[5, 6, 7, 0], [5, 0, 0, 0]])
    mask = (ids != 0).long()
    assert measure({"labels": torch.tensor([1, 0]), "input_ids": ids, "attention_mask": mask}) == (2, 4)
    assert measure({"input_ids": ids}) == (2, 8)  # no mask: every position counts
    assert measure({"input_ids": ids, "attention_mask": mask[:, :2]}) == (2, 8)  # a mask of another shape is not one


def test_a_batch_encoding_is_a_mapping():
    transformers = pytest.importorskip("transformers")
    enc = transformers.BatchEncoding(
        {"input_ids": torch.tensor([[1, 2, 3], [1, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}
    )
    assert measure(enc) == (2, 5)


def test_stats_keep_a_mean_that_follows_changes():
    s = BatchStats()
    for _ in range(MAX_MEASURED):
        s.add(8, 100)
    assert s.changed()
    fields = s.fields()
    assert fields["measured_samples"] / fields["measured_batches"] == 8
    for _ in range(4 * MAX_MEASURED):
        s.add(4, -1)  # the loader now makes batches of 4 without token ids
    fields = s.fields()
    assert s.batches <= MAX_MEASURED and 4 <= fields["measured_samples"] / fields["measured_batches"] < 4.2
    assert fields["measured_token_batches"] < MAX_MEASURED / 8  # the old token batches fade with them
    s2 = BatchStats()
    s2.add(8, -1)
    assert "measured_tokens" not in s2.fields()
    assert s2.changed() and not s2.changed()  # sent once; the same mean is not sent again


class _Texts(Dataset):
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> dict:
        n = 3 + i % 5
        return {"input_ids": torch.arange(1, n + 1)}


def _pad(items: list[dict]) -> dict:
    longest = max(len(x["input_ids"]) for x in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    for k, x in enumerate(items):
        ids[k, : len(x["input_ids"])] = x["input_ids"]
    return {"input_ids": ids, "attention_mask": (ids != 0).long()}


class _Batches(Sampler):
    """A custom batch sampler: the DataLoader's batch_size is None."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n // self.size

    def __iter__(self) -> Iterator[list[int]]:
        return iter([list(range(i, i + self.size)) for i in range(0, self.n, self.size)])


@contextmanager
def _hooks() -> Iterator[tuple[TorchHooks, list[dict]]]:
    sent: list[dict] = []
    h = TorchHooks(Registry(sent.append))
    h.install()
    _hot.reset_buffer()
    try:
        yield h, sent
    finally:
        h.uninstall()
        _hot.reset_buffer()


def _measured(sent: list[dict], lid: int) -> dict:
    return [m["loader"] for m in sent if "loader" in m and m["loader"]["id"] == lid][-1]


def test_the_first_batches_of_each_iterator_are_read_then_the_plain_wrapper_is_back():
    loader = DataLoader(_Texts(), batch_sampler=_Batches(80, 8), collate_fn=_pad)
    assert loader.batch_size is None
    with _hooks() as (h, sent):
        plain = dl._BaseDataLoaderIter.__dict__["__next__"]
        for _ in range(2):
            for k, _ in enumerate(loader):
                if k == 5:
                    assert dl._BaseDataLoaderIter.__dict__["__next__"] is plain  # the round is over
        cfg = _measured(sent, 1)
        assert cfg["batch_size"] is None and cfg["num_workers"] == 0  # the loader's own config is kept
        assert h.batches.stats[1].batches == 2 * _batch.FIRST_BATCHES  # the first three of each epoch, no more
        assert batch_size(cfg) == 8
        real = sum(3 + i % 5 for i in range(8 * _batch.FIRST_BATCHES))  # the first batches' tokens, padding not
        # The means are sent again only once they move by more than 1 %.
        assert tokens_per_sample(cfg) == pytest.approx(real / (8 * _batch.FIRST_BATCHES), rel=0.011)
        assert len(_hot.swap_buffer()) // 4 >= 20  # the waits were all timed, measured or not


def test_a_periodic_round_reads_a_few_batches_of_whichever_loader_runs():
    loader = DataLoader(_Texts(), batch_size=4, collate_fn=_pad)
    with _hooks() as (h, sent):
        it = iter(loader)
        for _ in range(10):
            next(it)
        first = _measured(sent, 1)["measured_batches"]
        assert first == _batch.FIRST_BATCHES
        h.batches.next_round = 0.0
        h.batches.tick()  # the sender thread's once-a-second round
        assert h.batches.wrapper is not None
        for _ in range(10):
            next(it)
        assert h.batches.wrapper is None
        assert h.batches.stats[1].batches == first + _batch.ROUND_BATCHES
        h.batches.tick()  # not a second yet: no new round
        assert h.batches.wrapper is None


def test_a_wrapper_swapped_in_meanwhile_is_kept_and_uninstall_restores_torchs_own():
    original = dl._BaseDataLoaderIter.__next__
    loader = DataLoader(_Texts(), batch_size=4, collate_fn=_pad)
    with _hooks() as (h, _sent):
        h.batches.arm(50)
        measuring = dl._BaseDataLoaderIter.__dict__["__next__"]
        assert measuring is h.batches.wrapper
        other = _hot.wrap_next(h._orig_next)
        with h.lock:  # as poll_cuda installs the CUDA wrapper
            dl._BaseDataLoaderIter.__next__ = other
        next(iter(loader))
        h.batches.disarm()
        assert dl._BaseDataLoaderIter.__dict__["__next__"] is other  # not put back over the CUDA one
        h.batches.arm(2)  # a later round measures around the wrapper in place now
        assert h.batches.base is other
        h.uninstall()
        assert dl._BaseDataLoaderIter.__next__ is original
        h.batches.arm(2)  # uninstalled: nothing is patched again
        assert dl._BaseDataLoaderIter.__next__ is original


def test_the_store_counts_measured_samples_and_the_loaders_own_batch_size_first():
    store = Store()
    store.hello(1, 0.0, {"pid": 5})
    store.info(1, 0.0, {"loader": {"id": 1, "batch_size": None, "measured_batches": 4, "measured_samples": 31}})
    recs = []
    for i in range(20):
        t = i * 10_000_000
        recs += [P.K_WAIT | 1 << 8, t, t + 1_000_000, 0, P.K_OPT, t + 9_000_000, t + 9_000_000, 0]
    store.events(1, 1.0, array("q", recs))
    run = store.runs[1]
    assert run.train_loader().batch_size == 8  # 31 / 4 rounded
    assert set(run.steps.samples[2:]) == {8}
    cfg = {"batch_size": 16, "measured_batches": 4, "measured_samples": 31}
    assert batch_size(cfg) == 16  # the loader's own setting wins
    assert batch_size({"batch_size": None}) is None and batch_size({"measured_batches": 0}) is None
    assert math.isnan(tokens_per_sample({"measured_batches": 2, "measured_samples": 16}))  # no token batches
    assert tokens_per_sample(
        {"measured_batches": 4, "measured_samples": 32, "measured_token_batches": 2, "measured_tokens": 160}
    ) == pytest.approx(80 / 8)  # half the batches held token ids: 80 tokens a batch of 8
