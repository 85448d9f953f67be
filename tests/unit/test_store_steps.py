"""Step derivation from agent events, on constructed event streams."""

from __future__ import annotations

from array import array

import pytest

from trainmon import protocol as P
from trainmon.store.run import WARMUP_STEPS, Run

MS = 1_000_000


def _run(loaders: dict[int, dict] | None = None) -> Run:
    run = Run(1, {"pid": 10}, 0.0)
    for lid, cfg in (loaders or {1: {"batch_size": 8, "num_workers": 2}}).items():
        run.apply_info({"loader": dict(cfg, id=lid)})
    return run


def _feed(run: Run, *recs: tuple[int, int, int, int]) -> None:
    run.apply_events(array("q", [x for r in recs for x in r]))


def wait(lid: int, t0_ms: float, t1_ms: float):
    return (P.K_WAIT | lid << 8, int(t0_ms * MS), int(t1_ms * MS), 0)


def opt(t_ms: float):
    return (P.K_OPT, int(t_ms * MS), int(t_ms * MS), 0)


def test_optimizer_steps_tile_time_and_carry_their_waits():
    run = _run()
    recs = []
    for i in range(30):  # each 10 ms step: 4 ms waiting, 6 ms computing
        base = i * 10
        recs += [wait(1, base, base + 4), opt(base + 10)]
    _feed(run, *recs)
    s = run.steps
    assert run.mode == "opt" and s.total == 30
    assert s.start[1] == pytest.approx(s.end[0])
    steady = [k for k in range(len(s)) if not s.warm[k]]
    assert len(steady) == 30 - WARMUP_STEPS
    assert sum(s.wait[k] for k in steady) / sum(s.end[k] - s.start[k] for k in steady) == pytest.approx(0.4)
    assert set(s.samples) == {8}


def test_second_optimizer_in_the_same_iteration_is_not_a_new_step():
    run = _run()
    _feed(run, *[r for i in range(10) for r in (wait(1, i * 10, i * 10 + 1), opt(i * 10 + 5), opt(i * 10 + 6))])
    assert run.steps.total == 10


def test_gradient_accumulation_counts_samples_of_every_batch():
    run = _run()
    _feed(
        run,
        *[
            r
            for i in range(10)
            for r in (wait(1, i * 10, i * 10 + 1), wait(1, i * 10 + 4, i * 10 + 5), opt(i * 10 + 9))
        ],
    )
    assert run.steps.total >= 9
    assert run.steps.samples[-1] == 16 and run.steps.wait[-1] == pytest.approx(0.002)


def test_without_optimizer_consecutive_next_calls_are_steps():
    run = _run()
    _feed(run, *[wait(1, i * 10, i * 10 + 3) for i in range(20)], (P.K_ITER_END | 1 << 8, 200 * MS, 200 * MS, 0))
    assert run.mode == "next"
    assert run.steps.total == 20  # 19 between next() calls + the last one closed by StopIteration
    assert run.steps.end[0] - run.steps.start[0] == pytest.approx(0.010)
    assert run.steps.wait[0] == pytest.approx(0.003)


def test_explicit_steps_win_over_optimizer_hooks():
    run = _run()
    _feed(
        run,
        *[
            r
            for i in range(12)
            for r in (wait(1, i * 10, i * 10 + 2), opt(i * 10 + 5), (P.K_STEP, (i * 10 + 8) * MS, (i * 10 + 8) * MS, 0))
        ],
    )
    assert run.mode == "explicit"
    assert run.steps.end[-1] == pytest.approx(0.118)


def test_eval_loader_is_told_apart_and_its_time_lands_in_one_long_step():
    run = _run({1: {"batch_size": 8}, 2: {"batch_size": 64}})
    recs = [r for i in range(20) for r in (wait(1, i * 10, i * 10 + 2), opt(i * 10 + 9))]
    recs += [wait(2, 200 + j * 5, 200 + j * 5 + 4) for j in range(5)]  # evaluation: 25 ms
    recs += [wait(1, 226, 228), opt(235)]
    _feed(run, *recs)
    assert run.train_loader().id == 1
    assert run.steps.total == 21
    assert run.steps.end[-1] - run.steps.start[-1] == pytest.approx(0.036)
    assert run.eval_wait_s == pytest.approx(0.020)


def test_epoch_restart_of_non_persistent_workers_is_warm_up():
    run = _run({1: {"batch_size": 8, "num_workers": 2, "persistent_workers": False}})
    recs = [(P.K_ITER_START | 1 << 8, 0, 0, 2)]
    recs += [r for i in range(20) for r in (wait(1, i * 10, i * 10 + 2), opt(i * 10 + 9))]
    recs += [
        (P.K_ITER_START | 1 << 8, 200 * MS, 200 * MS, 2),
        wait(1, 200, 260),
        opt(270),
        wait(1, 270, 272),
        opt(280),
        wait(1, 280, 282),
        opt(290),
    ]
    _feed(run, *recs)
    warm = list(run.steps.warm)
    assert warm[:WARMUP_STEPS] == [1] * WARMUP_STEPS
    assert warm[20:22] == [1, 1] and warm[22] == 0


def test_checkpoints_marks_and_phases_are_kept():
    run = _run()
    run.apply_info({"name": {"id": 1, "name": "eval"}})
    _feed(
        run,
        (P.K_CKPT, 5 * MS, 9 * MS, 0),
        (P.K_MARK | 1 << 8, 10 * MS, 10 * MS, 0),
        (P.K_PHASE | 1 << 8, 11 * MS, 20 * MS, 0),
    )
    assert run.checkpoints == [(pytest.approx(0.005), pytest.approx(0.009))]
    assert run.marks[0][1] == "eval" and run.phases[0][2] == "eval"


def test_bad_info_is_ignored():
    run = _run()
    for info in (
        {"loader": "x"},
        {"loader": {"id": "1"}},
        {"workers": {"loader": 1, "pids": "x"}},
        {"name": {"id": None}},
        {"drops": "many"},
        {"bye": 3},
    ):
        run.apply_info(info)
    assert run.dropped_records == 0 and run.ended is None


def test_a_new_train_loader_takes_over_at_once():
    run = _run({1: {"batch_size": 8, "num_workers": 0}, 2: {"batch_size": 16, "num_workers": 2}})
    recs = [r for i in range(30) for r in (wait(1, i * 10, i * 10 + 6), opt(i * 10 + 9))]
    recs += [r for i in range(30, 60) for r in (wait(2, i * 10, i * 10 + 1), opt(i * 10 + 9))]
    _feed(run, *recs)
    s = run.steps
    assert s.total == 60
    assert list(s.loader[:30]) == [1] * 30 and list(s.loader[30:]) == [2] * 30
    assert s.wait[30] == pytest.approx(0.001) and s.samples[30] == 16  # the first batch of the new loader
    assert run.eval_wait_s == pytest.approx(0.0)


def test_saves_inside_one_checkpoint_are_merged():
    run = _run()
    # a framework's span (emitted last) around three torch.save calls, then a separate save later
    _feed(
        run,
        (P.K_CKPT, 10 * MS, 12 * MS, 0),
        (P.K_CKPT, 13 * MS, 15 * MS, 0),
        (P.K_CKPT, 16 * MS, 30 * MS, 0),
        (P.K_CKPT, 9 * MS, 31 * MS, 0),
        (P.K_CKPT, 500 * MS, 510 * MS, 0),
    )
    assert run.checkpoints == [(pytest.approx(0.009), pytest.approx(0.031)), (pytest.approx(0.5), pytest.approx(0.51))]
