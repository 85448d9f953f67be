"""torch.compile as the store keeps it and stall.recompile judges it: synthetic runs built through the Ingest calls
(the agent's compile records and INFO messages), and the time budget's compilation part."""

from __future__ import annotations

import math
from array import array

from testsupport.stores import MS, uniform_store
from trainmon import protocol as P
from trainmon.analyses.time_budget import time_budget
from trainmon.diagnose import Thresholds, evaluate
from trainmon.store.compiles import guard_of

REASON = "0/{a}: tensor 'input_ids' size mismatch at index 1. expected {e}, actual {n}"


def _compile(store, t0_ms: float, t1_ms: float, attempt: int, frame: int = 0, trigger: int = 1) -> None:
    rec = [P.K_COMPILE | (frame + 1) << 8, int(t0_ms * MS), int(t1_ms * MS), attempt << 8 | trigger]
    store.events(1, t1_ms / 1e3, array("q", rec))


def _told(store, attempt: int, seconds: float, **extra) -> None:
    info = {
        "frame": 0,
        "attempt": attempt,
        "id": f"0/{attempt}",
        "name": "forward",
        "file": "/src/model.py",
        "line": 12,
        "seconds": seconds,
        "reason": REASON.format(a=attempt - 1, e=8 * attempt, n=8 * attempt + 8) if attempt else None,
        "forward": True,
        **extra,
    }
    store.info(1, 0.0, P.clean_info({"compile": info}))


def storm_store(recompiles: int, each_ms: float, limit: bool = False):
    """200 steps of 50 ms (10 s); the first compilation in the first step, then ``recompiles`` of ``each_ms`` spread
    over the last 8 s (each inside a step, as a recompilation happens in the forward)."""
    store = uniform_store(wait_ms=1.0, step_ms=50.0, steps=200)
    _compile(store, 1.0, 40.0, 0)
    _told(store, 0, 0.039)
    for k in range(recompiles):
        t0 = 2000.0 + k * 8000.0 / max(1, recompiles)
        _compile(store, t0, t0 + each_ms, k + 1)
        _told(store, k + 1, each_ms / 1e3)
    if limit:
        _told(
            store,
            recompiles + 1,
            0.01,
            name=None,
            fail="Unsupported",
            limit=True,
            limit_type="recompile_limit",
            limit_value=8,
            t_ns=int(9_900 * MS),
        )
    return store


def _finding(store, code: str = "stall.recompile"):
    found = [f for f in evaluate(store, 10.0, Thresholds()) if f.code == code]
    return found[0] if found else None


def test_the_failed_guard_is_kept_without_its_values():
    assert guard_of(REASON.format(a=3, e=32, n=40)) == "tensor 'input_ids' size mismatch at index 1"
    assert guard_of("!0/2/1: ___check_obj_id(L['self'].training, 7)") == "___check_obj_id(L['self'].training, 7)"
    assert guard_of("") == ""


def test_recompilations_taking_a_share_of_the_window_name_the_function_and_the_guard():
    f = _finding(storm_store(recompiles=6, each_ms=500.0))  # 3 s of 10
    assert f is not None and f.severity == "critical", f
    assert f.evidence["function"] == "forward (model.py:12)"
    assert f.evidence["failed_guard"] == "tensor 'input_ids' size mismatch at index 1"
    assert f.evidence["recompilations"] == 6 and math.isclose(f.evidence["recompile_s"], 3.0, abs_tol=0.01)
    assert "forward (model.py:12)" in f.summary and "size mismatch at index 1" in f.summary
    assert f.advice[0].startswith("mark the varying dimension dynamic: torch._dynamo.mark_dynamic(input_ids")


def test_a_few_short_recompilations_and_the_first_compilation_do_not_fire():
    assert _finding(storm_store(recompiles=2, each_ms=100.0)) is None  # 0.2 s of 10 s
    assert _finding(storm_store(recompiles=0, each_ms=0.0)) is None  # compiled once, in the first step


def test_a_function_sent_back_to_eager_at_the_limit_holds_after_the_storm():
    store = storm_store(recompiles=2, each_ms=100.0, limit=True)
    f = _finding(store)
    assert f is not None and f.severity == "warning", f
    assert "hit recompile_limit = 8 and runs eagerly since" in f.summary
    assert f.evidence["eager_fallback"] == ["forward (model.py:12)"] and f.evidence["limit"] == "recompile_limit = 8"


def test_a_compilation_told_again_after_a_reconnect_counts_once():
    store = storm_store(recompiles=1, each_ms=100.0)
    _told(store, 1, 0.1)
    (fn,) = store.runs[1].compiles.functions.values()
    assert fn.compiles == 2 and fn.guards == {"tensor 'input_ids' size mismatch at index 1": 1}


def test_the_time_budget_counts_compilation_and_still_sums_to_the_wall_time():
    store = storm_store(recompiles=6, each_ms=500.0)
    run = store.runs[1]
    budget = time_budget(run, 10.0, Thresholds())
    assert budget is not None
    assert math.isclose(budget.parts["compilation"], 3.0 + 0.039, abs_tol=0.01), budget.parts
    assert math.isclose(budget.total_s, budget.wall_s, rel_tol=1e-9), (budget.total_s, budget.wall_s)


def test_out_of_order_compile_records_are_kept_sorted():
    store = uniform_store(steps=20)
    _compile(store, 500.0, 600.0, 2)
    _compile(store, 100.0, 200.0, 1)
    compiles = store.runs[1].compiles
    assert list(compiles.start) == [0.1, 0.5] and list(compiles.attempt) == [1, 2]
    assert [a for _, _, _, a in compiles.between(0.0, 1.0, recompiles=True)] == [1, 2]
