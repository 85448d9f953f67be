"""stall.periodic names garbage collection when the agent's gen-2 pauses sit inside the long steps."""

from __future__ import annotations

from array import array

import pytest

from testsupport.stores import uniform_store
from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.diagnose.findings import Finding
from trainmon.store.store import Store

NS = 1_000_000_000


def periodic(store: Store, th: Thresholds | None = None) -> Finding | None:
    return next((f for f in evaluate(store, store.last_t, th) if f.code == "stall.periodic"), None)


def long_steps(store: Store) -> list[tuple[float, float]]:
    steps = store.runs[1].steps
    return [(s, e) for s, e in zip(steps.start, steps.end, strict=True) if e - s > 0.3]


def add_gc(store: Store, pauses: list[tuple[float, float, int]]) -> None:
    """The agent's gc records: (start s, length s, generation) each."""
    recs: list[int] = []
    for t0, length, gen in pauses:
        recs += [P.K_GC, int(t0 * NS), int((t0 + length) * NS), gen]
    store.events(1, store.last_t, array("q", recs))


def young(store: Store) -> list[tuple[float, float, int]]:
    """Young collections between steps, a few a second, as any Python loop has."""
    return [(k * 0.25 + 0.01, 0.0002, k % 2) for k in range(int(store.last_t * 4))]


def test_gen2_pauses_inside_the_long_steps_are_named_with_their_length():
    store = uniform_store(wait_ms=1, long_every=20, long_ms=600)
    spans = long_steps(store)
    add_gc(store, young(store) + [(s + 0.045, 0.55, 2) for s, _ in spans])
    f = periodic(store)
    assert f is not None
    assert "gen-2 garbage collection, 550 ms each, explains" in f.summary
    n = f.evidence["long_steps"]
    assert f.summary.endswith(f"explains {n} of {n} long steps") and f.evidence["gc_explained_long_steps"] == n
    assert f.advice[0].startswith("call gc.freeze()") and "gc.set_threshold" in f.advice[2]
    gc = f.evidence["gc"]
    assert gc["gen2"]["count"] == n and gc["gen2"]["total_ms"] == pytest.approx(550.0 * n, rel=1e-6)
    assert gc["gen2"]["max_ms"] == pytest.approx(550.0)
    assert gc["gen0"]["count"] > 10 and gc["gen1"]["count"] > 10
    assert gc["gen0"]["total_ms"] == pytest.approx(0.2 * gc["gen0"]["count"], abs=0.1)


def test_gen2_pauses_elsewhere_do_not_explain_the_long_steps():
    store = uniform_store(wait_ms=1, long_every=20, long_ms=600)
    spans = long_steps(store)
    add_gc(store, young(store) + [(e + 0.2, 0.02, 2) for _, e in spans])  # short, and between the long steps
    f = periodic(store)
    assert f is not None and "garbage collection" not in f.summary
    assert f.evidence["gc_explained_long_steps"] == 0
    assert f.evidence["gc"]["gen2"]["count"] >= len(spans) - 1  # the last may fall after the window's end
    assert not f.advice[0].startswith("call gc.freeze()")


def test_without_the_agents_gc_records_the_evidence_has_no_gc():
    f = periodic(uniform_store(wait_ms=1, long_every=20, long_ms=600))
    assert f is not None and "gc" not in f.evidence and "garbage collection" not in f.summary


def test_irregular_long_steps_that_gen2_collections_explain_are_still_a_periodic_stall():
    # Full collections come further apart as the heap grows: the gaps are irregular, the cause is not.
    store = uniform_store(wait_ms=1, steps=0)
    recs: list[int] = []
    t, gaps, pauses = 0.0, iter([5, 7, 12, 18, 27, 40, 60, 90]), []
    next_long = next(gaps)
    for i in range(300):
        d = 0.05 + (0.6 if i == next_long else 0.0)
        recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + 0.001) * NS), 0]
        if i == next_long:
            pauses.append((t + 0.02, 0.6, 2))
            next_long += next(gaps, 1000)
        t += d
        recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
    store.events(1, t, array("q", recs))
    for k in range(int(t) + 1):
        store.sample(float(k), {"cpu.busy": 40.0, "cpu.cores": 8.0, "mem.used_pct": 30.0})
    th = Thresholds(window_s=60.0)
    assert periodic(store, th) is None  # irregular, and nothing names a cause: noise
    add_gc(store, pauses)
    f = periodic(store, th)
    assert f is not None and "gen-2 garbage collection, 600 ms each" in f.summary


def test_a_collection_set_off_inside_the_dataloaders_next_is_not_data_wait():
    store = uniform_store(wait_ms=1, long_every=20, long_ms=600)
    run = store.runs[1]
    spans = long_steps(store)
    for k, (s, e) in enumerate(zip(run.steps.start, run.steps.end, strict=True)):
        if e - s > 0.3:
            run.steps.wait[k] = 0.56  # the long steps' time went by inside __next__ ...
    assert periodic(store) is None  # ... which, alone, reads as waiting on data
    add_gc(store, [(s + 0.0005, 0.55, 2) for s, _ in spans])  # ... where a gen-2 collection ran
    f = periodic(store)
    assert f is not None and "gen-2 garbage collection" in f.summary


def _loop_with_collections(fast: bool) -> tuple[Store, int]:
    """40 steps (optimizer mode) of 100 ms, each waiting 30 ms on data; a 20 ms collection inside every 4th
    wait. Sent in two batches, the second folded by the columnar fast path, or record by record (the slow
    path). Returns the store and how many records the fast path folded."""
    store = uniform_store(wait_ms=1, steps=0)
    run = store.runs[1]
    fold, folded = run.stretches.fold_regular, [0]

    def spy(*args):
        n = fold(*args)
        folded[0] += n
        return n

    run.stretches.fold_regular = spy  # type: ignore[method-assign]
    recs: list[int] = []
    t = 1.0
    for i in range(40):
        if i % 4 == 0:  # the collection ends, and is recorded, before the __next__ it ran in returns
            recs += [P.K_GC, int((t + 0.005) * NS), int((t + 0.025) * NS), 0]
        recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + 0.03) * NS), 0]
        t += 0.1
        recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
    cut = 4 * 24  # ten steps and their collections, then the rest
    batches = [recs[:cut], recs[cut:]] if fast else [recs[k : k + 4] for k in range(0, len(recs), 4)]
    for batch in batches:
        store.events(1, t, array("q", batch))
    return store, folded[0]


@pytest.mark.parametrize("fast", [True, False])
def test_a_collection_inside_a_wait_is_taken_out_of_the_data_wait(fast):
    store, folded = _loop_with_collections(fast)
    assert (folded > 40) == fast
    steps = store.runs[1].steps
    waits = [round(w, 6) for w in steps.wait]
    assert len(waits) == 40
    assert waits[0::4] == [0.01] * 10 and [w for k, w in enumerate(waits) if k % 4] == [0.03] * 30
    assert steps.dur[5] == pytest.approx(0.1)  # the step keeps its length: the pause is the step's, not data's
