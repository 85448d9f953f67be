"""The whole-column ingest of regular steps gives exactly the steps that record-by-record ingest gives."""

from __future__ import annotations

import itertools
import math
from array import array

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmon import protocol as P
from trainmon.store import stretches as stretches_mod
from trainmon.store.run import Run
from trainmon.store.stretches import Stretches

LOADERS = {1: {"batch_size": 32}, 2: {"batch_size": 8}}


def _new_run() -> Run:
    run = Run(1, {"pid": 1}, 0.0, cap=None)
    for lid, cfg in LOADERS.items():
        run.apply_info({"loader": {"id": lid, **cfg}})
    return run


@st.composite
def traces(draw):
    """A step loop's records: mostly regular steps, with the irregular things real loops do between them."""
    explicit = draw(st.booleans())
    with_opt = draw(st.booleans())
    t = 1_000_000
    recs: list[tuple[int, int, int, int]] = []
    irregular_pct = draw(st.sampled_from([0, 1, 5, 30]))
    for _ in range(draw(st.integers(0, 400))):
        t += draw(st.integers(1, 5_000_000))
        event = "step"
        if draw(st.integers(0, 99)) < irregular_pct:
            event = draw(st.sampled_from(["eval", "ckpt", "mark", "restart", "two_opt", "exposed"]))
        if event == "eval":
            recs.append((2 << 8 | P.K_WAIT, t, t + 1000, 0))
            continue
        if event == "ckpt":
            recs.append((P.K_CKPT, t, t + 50_000, 0))
            continue
        if event == "mark":
            recs.append((3 << 8 | P.K_MARK, t, t, 0))
            continue
        if event == "restart":
            recs.append((1 << 8 | P.K_ITER_START, t, t, 2))
            continue
        wait = draw(st.integers(0, 3_000_000))
        recs.append((1 << 8 | P.K_WAIT, t, t + wait, 0))
        t += wait + draw(st.integers(1, 2_000_000))
        if event == "exposed":
            recs.append((P.K_EXPOSED, t, t, 1234))
        if with_opt or not explicit:
            recs.append((P.K_OPT, t, t, 0))
            if event == "two_opt":
                recs.append((1 << 8 | P.K_OPT, t + 1, t + 1, 0))
        if explicit:
            recs.append((P.K_STEP, t + 2, t + 2, 0))
    cuts = sorted(draw(st.lists(st.integers(0, len(recs)), max_size=12)))
    return recs, cuts


def _batches(recs, cuts):
    bounds = [0, *cuts, len(recs)]
    for a, b in itertools.pairwise(bounds):
        yield array("q", [x for rec in recs[a:b] for x in rec])


def _ingest(monkeypatch, recs, cuts, fold: bool) -> Run:
    monkeypatch.setattr(stretches_mod, "FAST_MIN_STEPS", 2 if fold else 10**9)
    run = _new_run()
    for batch in _batches(recs, cuts):
        run.apply_events(batch)
    return run


def _same(a: array, b: array) -> bool:
    return len(a) == len(b) and all(
        x == y or (x != x and y != y) or math.isclose(x, y, rel_tol=1e-12) for x, y in zip(a, b, strict=True)
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces())
def test_column_fold_matches_record_by_record(monkeypatch, trace):
    recs, cuts = trace
    slow = _ingest(monkeypatch, recs, cuts, fold=False)
    fast = _ingest(monkeypatch, recs, cuts, fold=True)
    assert fast.steps.total == slow.steps.total
    for col in ("start", "end", "dur", "wait", "exposed", "samples", "warm", "loader"):
        assert _same(getattr(fast.steps, col), getattr(slow.steps, col)), col
    for lid, info in slow.loaders.items():
        assert fast.loaders[lid].batches == info.batches
        assert math.isclose(fast.loaders[lid].wait_s, info.wait_s, rel_tol=1e-9, abs_tol=1e-12)
    assert (fast.mode, fast._train, fast.records) == (slow.mode, slow._train, slow.records)
    assert fast.checkpoints == slow.checkpoints and fast.marks == slow.marks


def test_a_regular_batch_is_folded_in_columns(monkeypatch):
    """The fold is taken on the steady pattern (not only equivalent when it happens to run)."""
    calls = []
    original = Stretches.fold_regular

    def spy(self, *args):
        folded = original(self, *args)
        calls.append(folded)
        return folded

    monkeypatch.setattr(Stretches, "fold_regular", spy)
    run = _new_run()
    t = 10**9
    for _ in range(3):
        recs = []
        for _ in range(100):
            recs += [1 << 8 | P.K_WAIT, t, t + 2_000, 0, P.K_STEP, t + 5_000, t + 5_000, 0]
            t += 10_000
        run.apply_events(array("q", recs))
    assert run.steps.total == 300
    assert max(calls) >= 190  # most of each later batch went through in columns
    assert run.steps.samples[-1] == 32 and run.steps.warm[-1] == 0
    assert math.isclose(run.steps.wait[-1], 2e-6) and math.isclose(run.steps.dur[-1], 1e-5)
