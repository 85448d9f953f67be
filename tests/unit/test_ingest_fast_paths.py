"""Regular stretches between irregular records are folded in columns (Stretches.fold_prefix), and give bit for bit what
ingesting them record by record gives (steps, loader totals, state), also with garbage collections and a bounded
step table."""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest

from trainmon import protocol as P
from trainmon.store.run import Run
from trainmon.store.stretches import Stretches


def _trace(seed: int, steps: int, mode: str, extras: float, gc: float) -> list[list[int]]:
    """A 1000 steps/s loop with jitter: mostly [wait, boundary] (mode "explicit": step(), "opt": an optimizer step,
    "next": none, each batch starts a step), now and then an eval batch, a checkpoint, a mark, an epoch end, or a
    collection inside a wait."""
    rnd = random.Random(seed)
    end = {"explicit": P.K_STEP, "opt": P.K_OPT, "next": 0}[mode]
    t = 10**12
    recs: list[list[int]] = []
    for _ in range(steps):
        t += rnd.randint(500_000, 1_500_000)
        w0 = t - rnd.randint(1_000, 400_000)
        if rnd.random() < gc:
            recs.append([P.K_GC, w0 + 100, w0 + 600, rnd.randint(0, 2)])
        recs.append([1 << 8 | P.K_WAIT, w0, t - 500, 0])
        if rnd.random() < extras:
            recs.append(
                rnd.choice(
                    [
                        [2 << 8 | P.K_WAIT, t - 400, t - 300, 0],
                        [P.K_CKPT, t - 200, t - 100, 0],
                        [3 << 8 | P.K_MARK, t - 50, t - 50, 0],
                        [1 << 8 | P.K_ITER_END, t - 40, t - 30, 0],
                    ]
                )
            )
        if end:
            recs.append([end, t, t, 0])
    return recs


def _ingest(recs: list[list[int]], cut: int, cap: int | None) -> Run:
    run = Run(1, {"pid": 1}, 0.0, cap=cap)
    run.apply_info({"loader": {"id": 1, "batch_size": 32}})
    run.apply_info({"loader": {"id": 2, "batch_size": 8}})
    for k in range(0, len(recs), cut):
        run.apply_events(array("q", [x for rec in recs[k : k + cut] for x in rec]))
    return run


def _state(run: Run) -> Any:
    def norm(v: Any) -> Any:
        if isinstance(v, array):
            return (v.typecode, v.tobytes())
        if isinstance(v, float):
            return v.hex()
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [norm(x) for x in v]
        return v

    steps = {name: norm(getattr(run.steps, name)) for name in ("start", "end", "dur", "wait", "samples", "warm")}
    loaders = {lid: (info.batches, info.wait_s.hex()) for lid, info in run.loaders.items()}
    state = [*vars(run).items(), *vars(run.deriver).items()]  # the step state machine is the run's deriver
    kept = ("mode", "train", "_train", "eval_wait_s", "last_end", "warm_until", "seen_any_wait", "last_wait_loader")
    own = {
        k: norm(v) for k, v in state if k.startswith(("_cur", "cur_")) or k in (*kept, "pending_wait", "train_ended")
    }
    return steps, run.steps.total, loaders, own, run.checkpoints, run.marks


def _spy(monkeypatch, name: str, folded: list[int]) -> None:
    original = getattr(Stretches, name)

    def spy(self: Stretches, *args: Any) -> int:
        n = original(self, *args)
        folded.append(n)
        return n

    monkeypatch.setattr(Stretches, name, spy)


@pytest.mark.parametrize("mode", ["explicit", "opt", "next"])
@pytest.mark.parametrize(("gc", "cap"), [(0.0, None), (0.02, None), (0.0, 700)])
def test_stretches_fold_and_equal_record_by_record(monkeypatch, mode, gc, cap):
    recs = _trace(7, 3000, mode, extras=0.01, gc=gc)
    folded: list[int] = []
    _spy(monkeypatch, "fold_prefix", folded)
    _spy(monkeypatch, "fold_next", folded)
    fast = _ingest(recs, 250, cap)
    # As before stretches (and loader-driven steps) were folded: whole regular batches only.
    monkeypatch.setattr(Stretches, "fold_prefix", lambda self, *args: 0)
    monkeypatch.setattr(Stretches, "fold_next", lambda self, *args: 0)
    slow = _ingest(recs, 250, cap)
    assert _state(fast) == _state(slow)
    assert fast.mode == mode and fast.steps.total > 2900
    # Batches with an irregular record went through in stretches, not record by record.
    assert sum(folded) > len(recs) // 4


def test_a_collection_partly_inside_a_wait(monkeypatch):
    """Record by record takes a collection's overlap out of a wait, also one that only partly overlaps it (which
    the whole-batch fold would not see): the stretch around it is not folded."""
    recs = _trace(3, 400, "explicit", extras=0.0, gc=0.0)
    recs.insert(201, [2 << 8 | P.K_WAIT, recs[200][2], recs[200][2] + 10, 0])  # breaks the whole-batch fold
    w = recs[205]
    recs.insert(205, [P.K_GC, w[1] + 10, w[2] + 1_000, 0])  # overlaps the wait's end: partly inside it
    fast = _ingest(recs, len(recs), None)
    monkeypatch.setattr(Stretches, "fold_prefix", lambda self, *args: 0)
    slow = _ingest(recs, len(recs), None)
    assert _state(fast) == _state(slow)
    assert fast.loaders[1].wait_s < sum((r[2] - r[1]) * 1e-9 for r in recs if r[0] == 1 << 8 | P.K_WAIT)
