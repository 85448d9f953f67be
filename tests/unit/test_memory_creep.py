"""memory.creep over synthetic runs: the agent's memory records (the allocator's peaks, about ten reads a second)
through the Ingest calls, for 10 minutes of 100 ms steps."""

from __future__ import annotations

import math
from array import array

from testsupport.stores import MS, uniform_store
from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.store.cuda_memory import MB

END_S = 600.0


def memory_store(peak_at):
    """6000 steps of 100 ms; a read every 100 ms whose peak allocated is ``peak_at(t)`` bytes (reserved: 1.2×)."""
    store = uniform_store(wait_ms=1.0, step_ms=100.0, steps=6000)
    store.info(1, 0.0, P.clean_info({"cuda_memory": {"index": 0, "total": 80 * 1024**3}}))
    recs: list[int] = []
    for k in range(1, int(END_S * 10)):
        t0, t1 = (k - 1) * 100 * MS, k * 100 * MS
        peak = int(peak_at(k / 10))
        for field, value in enumerate((peak, int(peak * 1.2), peak // 2, int(peak * 1.1))):
            recs += [P.K_MEMORY | field << 8, t0, t1, value]
    store.events(1, END_S, array("q", recs))
    return store


def creep(store):
    found = [f for f in evaluate(store, END_S, Thresholds()) if f.code == "memory.creep"]
    return found[0] if found else None


def test_a_steady_leak_is_named_with_its_rate_and_when_the_device_fills():
    f = creep(memory_store(lambda t: 4096 * MB + t / 60 * 100 * MB))  # 100 MB a minute
    assert f is not None, "no creep"
    assert math.isclose(f.evidence["growth_mb_per_min"], 100.0, rel_tol=0.05), f.evidence
    assert math.isclose(f.evidence["growth_mb_per_1000_steps"], 100.0 / 600 * 1000, rel_tol=0.05), f.evidence
    full = (80 * 1024 - 4096 - 1000) / 100  # minutes from the last peak (about 5 GB) to 80 GiB at 100 MB/min
    assert math.isclose(f.evidence["minutes_to_full"], full, rel_tol=0.05), f.evidence
    assert f.severity == "warning" and "MB/min" in f.summary


def test_a_leak_that_fills_the_device_soon_is_critical():
    f = creep(memory_store(lambda t: 70 * 1024 * MB + t / 60 * 500 * MB))  # 500 MB a minute from 70 GiB
    assert f is not None and f.severity == "critical" and f.evidence["minutes_to_full"] < 30, f


def test_a_peak_that_settles_is_no_creep():
    # The longest batch seen so far: the running peak rises often early, then rarely (a record every so often).
    assert creep(memory_store(lambda t: 4096 * MB + 300 * MB * (1 - math.exp(-t / 30)))) is None
    assert creep(memory_store(lambda t: 4096 * MB)) is None


def test_a_small_growth_is_no_creep():
    assert creep(memory_store(lambda t: 4096 * MB + t / 600 * 100 * MB)) is None  # 100 MB in 10 minutes
