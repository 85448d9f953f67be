"""CUDA memory per interval, read by the agent's sender thread from the caching allocator, through the fake
``torch.cuda`` boundary (testsupport/fake_cuda.py: no GPU here): what the monitor gets is what the training reads of
itself with ``torch.cuda.max_memory_allocated()``, and a steady leak is a memory.creep with its rate."""

from __future__ import annotations

import json

from testsupport.paths import WORKLOADS
from testsupport.procs import start_python, wait_for
from trainmon.diagnose import Thresholds, evaluate
from trainmon.monitor import Monitor
from trainmon.store.cuda_memory import MB

FAKE_TRAIN = str(WORKLOADS / "fake_cuda_train.py")
TH = Thresholds(creep_min_s=3.0, creep_min_mb=8.0)  # a creep judged over seconds, not minutes


def _train(addr: str, leak_kb: float) -> tuple[dict, list]:
    """400 steps of ~10 ms, 256 MB of activations each, ``leak_kb`` kept for good per step; the run and the
    findings at its end."""
    m = Monitor(addr, interval=0.5, thresholds=TH)
    m.start()
    try:
        proc = start_python(FAKE_TRAIN, "400", "0", "5", "10", "256", str(leak_kb), env={"TRAINMON_ADDR": addr})
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        assert wait_for(lambda: any(r.ended for r in m.store.runs.values()), 20), "the run never ended"
        with m.store.lock:
            (run,) = [r for r in m.store.runs.values() if r.measured_by == "agent"]
            findings = evaluate(m.store, run.last_seen, TH)
    finally:
        m.stop()
    return {"own": json.loads(out.strip().splitlines()[-1]), "run": run}, findings


def test_the_monitor_holds_the_peaks_the_training_reads_and_names_a_steady_leak(addr):
    got, findings = _train(addr, leak_kb=64)
    own, memory = got["own"], got["run"].cuda_memory
    assert own["agent"]["cuda_memory_reads"] >= 20, own["agent"]  # about ten a second, never stopped by a failure
    assert memory.device == 0 and memory.total == 80 * 1024**3
    assert memory.latest("peak_allocated") == own["max_memory_allocated"]
    assert memory.latest("peak_reserved") == own["max_memory_reserved"]
    (creep,) = [f for f in findings if f.code == "memory.creep"]
    per_k = creep.evidence["growth_mb_per_1000_steps"]
    assert abs(per_k - 64 * 1000 / 1024) <= 0.15 * 62.5, creep.evidence  # the leak: 64 KB a step
    assert creep.evidence["minutes_to_full"] > 30 and creep.severity == "warning", creep.evidence
    assert "MB per 1000 steps" in creep.summary and "GiB would be full in about" in creep.summary


def test_a_steady_peak_is_no_creep(addr):
    got, findings = _train(addr, leak_kb=0)
    memory = got["run"].cuda_memory
    assert memory.latest("peak_allocated") == got["own"]["max_memory_allocated"] == (64 + 256) * MB
    assert "memory.creep" not in {f.code for f in findings}, findings
