"""A run that sent nothing since the last tick keeps its judgement: the tick costs it its ending rules only, while a
hang is still found as time passes and whatever the run sends is judged at the next tick."""

from __future__ import annotations

from array import array

from testsupport.stores import MS, hung_store, uniform_store
from trainmon import protocol as P
from trainmon.diagnose import Thresholds, engine, evaluate
from trainmon.diagnose.live.memo import WindowMemo


def _counting_gather(monkeypatch) -> list[int]:
    calls: list[int] = []
    gather = engine.gather

    def counted(*args, **kwargs):
        calls.append(1)
        return gather(*args, **kwargs)

    monkeypatch.setattr(engine, "gather", counted)
    return calls


def test_a_silent_run_keeps_its_judgement_and_its_hang_is_found_on_time(monkeypatch):
    store = hung_store(silent_s=40.0)
    end = store.runs[1].steps.end[-1]
    th = Thresholds()
    ticks = [end + k for k in range(1, 40)]
    plain = [[f.code for f in evaluate(store, t, th)] for t in ticks]
    calls = _counting_gather(monkeypatch)
    memo = WindowMemo()
    memoised = [[f.code for f in evaluate(store, t, th, window_memo=memo)] for t in ticks]
    assert memoised == plain
    assert plain[0] == ["ok.compute_bound"] and plain[-1] == ["stall.hang"]
    # Judged as it went silent and once more as its last record left the live window: never in the 37 ticks between.
    assert len(calls) == 2


def test_what_a_run_sends_is_judged_at_the_next_tick(monkeypatch):
    store = uniform_store(wait_ms=2.0, step_ms=50.0, steps=400)
    run = store.runs[1]
    t = run.steps.end[-1] + 0.5
    th = Thresholds()
    memo = WindowMemo()
    calls = _counting_gather(monkeypatch)
    first = evaluate(store, t, th, window_memo=memo)
    assert evaluate(store, t + 1.0, th, window_memo=memo)[0].code == first[0].code and len(calls) == 1
    store.events(1, t + 1.5, array("q", [P.K_COST, 0, int(1e9), 500]))  # the agent's own cost: nothing to judge
    evaluate(store, t + 2.0, th, window_memo=memo)
    assert len(calls) == 1
    # Then steps that wait on their loader nine tenths of the time: judged at once.
    t0 = run.steps.end[-1] * 1e3
    recs: list[int] = []
    for i in range(400):
        s = t0 + i * 50.0
        recs += [
            P.K_WAIT | 1 << 8,
            int(s * MS),
            int((s + 45.0) * MS),
            0,
            P.K_OPT,
            int((s + 50) * MS),
            int((s + 50) * MS),
            0,
        ]
    store.events(1, (t0 + 400 * 50.0) / 1e3, array("q", recs))
    later = run.steps.end[-1] + 0.5
    for k in range(int(later) - int(t) + 2):
        store.sample(float(int(t) + k), {"cpu.busy": 40.0, "cpu.cores": 8.0})
    memoised = evaluate(store, later, th, window_memo=memo)
    assert len(calls) == 2
    assert [f.code for f in memoised] == [f.code for f in evaluate(store, later, th)]
    assert memoised[0].code.startswith("input.")
