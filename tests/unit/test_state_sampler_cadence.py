"""The thread-state sampler looks 10 times a second only while a verdict reads the states; otherwise it parks and
sample() looks once per tick, on real /proc of a real sleeping child."""

from __future__ import annotations

import subprocess
import sys
import time

from trainmon.diagnose.findings import Finding
from trainmon.metrics import PROC
from trainmon.monitor import states_matter


def finding(code: str, severity: str) -> Finding:
    return Finding(code, severity, "summary", [], {})


def test_states_matter_only_for_rules_that_read_them_or_an_open_cause() -> None:
    ok = finding("ok.compute_bound", "ok")
    assert not states_matter([ok], ok)
    assert not states_matter([], None)
    waiting = finding("insufficient_data", "ok")
    assert not states_matter([waiting], waiting)
    io = finding("input.io", "warning")
    assert states_matter([io, ok], io)
    # A state-reading finding below the headline still keeps the looks fast (it may become the headline).
    assert states_matter([ok, finding("input.too_few_workers", "ok")], ok)
    hang = finding("stall.hang", "critical")
    assert states_matter([hang], hang)
    gpu = finding("gpu.throttled", "warning")
    assert states_matter([gpu], gpu)  # a cause is open: the next one may need the states


def test_parked_sampler_costs_no_looks_and_sample_still_reports_states(source_for) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        src = source_for({child.pid: "worker"}, hz_states=20.0)
        src.sample()  # starts the sampler
        time.sleep(0.5)
        with src._lock:
            fast_looks = src._counts.get(child.pid, [0])[0]
        assert fast_looks >= 3, "the sampler looks while fast"

        src.set_fast(False)
        assert not src.fast
        for _ in range(2):  # drain what was looked at before parking (and a look that was under way)
            time.sleep(0.3)
            out = src.sample()
            assert out[PROC.key(child.pid, "state_S")] == 1.0
        time.sleep(0.6)
        with src._lock:
            assert src._counts.get(child.pid, [0])[0] == 0, "a parked sampler looks at nothing"
        out = src.sample()  # one look of its own
        assert out[PROC.key(child.pid, "state_S")] == 1.0

        src.set_fast(True)
        time.sleep(0.5)
        with src._lock:
            assert src._counts.get(child.pid, [0])[0] >= 3, "fast again"
    finally:
        child.kill()
        child.wait()
