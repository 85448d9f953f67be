"""Step continuity across monitor restarts, on constructed event streams (docs/protocol.md).

A restarted monitor meets a run mid-way: the agent's HELLO carries the counts of every record it
handed off before (``Counts``, computed exactly as the sender does), and the store continues the
step count from them. Whatever the split point, the new store must end at the uninterrupted total.
"""

from __future__ import annotations

from array import array

import pytest

from trainmon import protocol as P
from trainmon.agent._sender import Counts
from trainmon.store.store import Store

MS = 1_000_000
HELLO = {"pid": 42, "host": "h", "session": "s"}


def wait(lid: int, t_ms: float) -> tuple[int, ...]:
    return (P.K_WAIT | lid << 8, int(t_ms * MS), int((t_ms + 1) * MS), 0)


def opt(t_ms: float) -> tuple[int, ...]:
    return (P.K_OPT, int(t_ms * MS), int(t_ms * MS), 0)


def step(t_ms: float) -> tuple[int, ...]:
    return (P.K_STEP, int(t_ms * MS), int(t_ms * MS), 0)


def iter_start(lid: int, t_ms: float) -> tuple[int, ...]:
    return (P.K_ITER_START | lid << 8, int(t_ms * MS), int(t_ms * MS), 0)


def iter_end(lid: int, t_ms: float) -> tuple[int, ...]:
    return (P.K_ITER_END | lid << 8, int(t_ms * MS), int(t_ms * MS), 0)


def _records(recs: list[tuple[int, ...]]) -> array:
    return array("q", [x for r in recs for x in r])


def _store(recs: list[tuple[int, ...]], counts: Counts | None = None) -> Store:
    store = Store()
    hello = dict(HELLO, counts=P.clean_counts(counts.as_json()) if counts else None)
    store.hello(1, 0.0, hello)
    store.info(1, 0.0, {"loader": {"id": 1, "batch_size": 4}})
    store.info(1, 0.0, {"loader": {"id": 2, "batch_size": 4}})
    store.events(1, 0.0, _records(recs))
    return store


def _loops() -> dict[str, list[tuple[int, ...]]]:
    optimizer, two_optimizers, accumulate, both, explicit, loader_only = [], [], [], [], [], []
    for i in range(40):
        t = i * 10.0
        optimizer += [wait(1, t), opt(t + 8)]
        two_optimizers += [wait(1, t), opt(t + 7), opt(t + 8)]
        accumulate += [wait(1, t), wait(1, t + 4)] + ([opt(t + 8)] if i % 2 else [])
        both += [wait(1, t), wait(1, t + 4)] + ([opt(t + 7), opt(t + 8)] if i % 2 else [])
        explicit += [wait(1, t), step(t + 8)]
        loader_only += [wait(1, t)]
        if i % 10 == 9:  # an eval loader now and then
            for loop in (optimizer, two_optimizers, accumulate, both, explicit, loader_only):
                loop += [iter_start(2, t + 9), wait(2, t + 9.2), wait(2, t + 9.5), iter_end(2, t + 9.8)]
    loader_only = [iter_start(1, -1), *loader_only, iter_end(1, 400)]
    return {
        "optimizer": optimizer,
        "two optimizers": two_optimizers,
        "accumulation": accumulate,
        "accumulation, two optimizers": both,
        "explicit step()": explicit,
        "loader only": loader_only,
    }


@pytest.mark.parametrize("loop", list(_loops()))
def test_a_restarted_monitor_continues_the_step_count(loop):
    recs = _loops()[loop]
    whole = _store(recs).runs[1].steps.total
    assert whole == (20 if loop.startswith("accumulation") else 40)
    for cut in range(len(recs) + 1):  # the monitor dies after any record
        handed = Counts.of(P.events_payload(_records(recs[:cut])))  # what the agent sent to the monitor that died
        restarted = _store(recs[cut:], handed).runs[1]
        assert restarted.steps.total == whole, (loop, cut)


def test_records_lost_on_a_broken_connection_are_counted_when_the_agent_reconnects():
    recs = _loops()["optimizer"]
    store = _store(recs[:30])
    lost = recs[30:40]  # a frame cut short when the connection broke
    counts = Counts.of(P.events_payload(_records(recs[:40])))
    store.closed(1, 1.0, "lost")
    store.hello(1, 2.0, dict(HELLO, counts=P.clean_counts(counts.as_json()), connection=2))
    store.events(1, 2.0, _records(recs[40:]))
    run = store.runs[1]
    assert run.connections == 2 and run.ended is None
    assert run.steps.total == _store(recs).runs[1].steps.total
    assert len(lost) == 10


def test_a_first_connection_has_nothing_to_continue():
    run = _store(_loops()["optimizer"], Counts()).runs[1]
    assert run.steps.total == 40


def test_hostile_counts_are_cleaned_to_nothing():
    hostile = {"step": -5, "opt": "x", "groups": 1.5, "last": 7, "wait": {"²": 3, "9" * 400: 1, "1": 2**70, "2": 7}}
    assert P.clean_counts(hostile) == {"step": 0, "opt": 0, "groups": 0, "last": 0, "wait": {"2": 7}}


# ------------------------------------------------------------------ a live store stays bounded


def test_a_live_store_forgets_the_oldest_ended_runs():
    from trainmon.store.store import MAX_ENDED_RUNS

    store = Store()
    for run_id in range(1, MAX_ENDED_RUNS + 11):
        store.hello(run_id, float(run_id), dict(HELLO, pid=run_id, session=str(run_id)))
        store.events(run_id, float(run_id), _records(_loops()["optimizer"][:20]))
        if run_id > 3:  # runs 1-3 stay connected
            store.closed(run_id, float(run_id) + 0.5, "exit")
    ended = [r for r in store.runs.values() if not r.connected]
    assert len(ended) == MAX_ENDED_RUNS and {1, 2, 3} <= set(store.runs)
    assert min(r.id for r in ended) == 11  # runs 4-10, the oldest ended ones, went first
    assert set(store._seen) <= set(store.runs)
    report_store = Store(cap=None)
    for run_id in range(1, MAX_ENDED_RUNS + 11):
        report_store.hello(run_id, 0.0, dict(HELLO, pid=run_id, session=str(run_id)))
        report_store.closed(run_id, 0.0, "exit")
    assert len(report_store.runs) == MAX_ENDED_RUNS + 10  # a report keeps every run


def test_a_live_store_drops_series_nobody_updates():
    from trainmon.store.store import SERIES_IDLE_S

    store = Store()
    store.sample(0.0, {"proc.4242.cpu": 1.0, "cpu.busy": 5.0})
    for t in range(60, int(SERIES_IDLE_S) + 240, 60):
        store.sample(float(t), {"cpu.busy": 5.0})
    assert "cpu.busy" in store.series and "proc.4242.cpu" not in store.series


def test_a_live_store_keeps_the_last_minutes_of_each_series():
    from trainmon.store.store import SERIES_KEEP_S

    store = Store()
    for t in range(0, 3 * int(SERIES_KEEP_S)):
        store.sample(float(t), {"cpu.busy": float(t)})
    times = store.series["cpu.busy"].times
    assert times[-1] - times[0] <= SERIES_KEEP_S * 1.2 and times[-1] - times[0] >= SERIES_KEEP_S
    report_store = Store(cap=None, series_cap=None)
    for t in range(0, 3 * int(SERIES_KEEP_S), 10):
        report_store.sample(float(t), {"cpu.busy": float(t)})
    assert len(report_store.series["cpu.busy"]) == 3 * int(SERIES_KEEP_S) // 10  # a report keeps everything


def test_runs_share_one_step_budget():
    """Sixteen fast ranks hold no more steps between them than the budget; one run alone keeps its full cap."""
    from trainmon.store.store import MIN_RUN_STEPS, STEP_BUDGET

    def fill(store: Store, run_id: int, n: int) -> None:
        store.hello(run_id, 0.0, dict(HELLO, pid=run_id, session=str(run_id)))
        recs = array("q")
        for k in range(n):
            t = (k + 1) * 1_000_000
            recs.extend((P.K_WAIT | 1 << 8, t - 500_000, t - 400_000, 0, P.K_STEP, t, t, 0))
        store.events(run_id, 1.0, recs)

    alone = Store()
    fill(alone, 1, 150_000)
    assert len(alone.runs[1].steps) == 150_000
    many = Store()
    for run_id in range(1, 17):
        fill(many, run_id, 60_000)
    held = [len(r.steps) for r in many.runs.values()]
    assert sum(held) <= STEP_BUDGET and min(held) >= MIN_RUN_STEPS * 3 // 4  # tables are trimmed a quarter at a time
    assert all(r.steps.total == 60_000 for r in many.runs.values())  # counts are never trimmed
