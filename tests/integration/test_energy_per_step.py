"""Energy per step of real (CPU) trainings reporting to a real Monitor whose NVML is the fake pynvml, each training
listed as the one process on a GPU of its own (as NVML lists a CUDA process): GPU 0 has the energy counter and
draws 300 W while its power reading says 250 W (the reading is an average that can miss what the counter counts);
GPU 1 has no counter (an older GPU: Not Supported) and draws 150 W. Mid-run the driver is "reloaded" on GPU 0 (its
counter starts again from 0).

By hand: a GPU drawing P watts for a training's own step time (``tests/workloads/steady.py`` times every step
itself) spends P × that time per step. The report's joules per step must match that within 3 %: the counter's
300 W on GPU 0 (not the 250 W its power reading says), power × time on GPU 1, and the reset costs nothing but the
one interval it falls in, measured from power. The report of the recording made meanwhile says the same.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time

from testsupport.fake_pynvml import GIB, FakeNvml
from testsupport.paths import STEADY
from testsupport.procs import start_python, wait_for
from trainmon.analyses.energy_per_step import COUNTER
from trainmon.export.prometheus import MonitorCollector
from trainmon.metrics import GPU
from trainmon.monitor import Monitor
from trainmon.record import load_recording
from trainmon.record.writer import Recorder
from trainmon.report import build_report
from trainmon.sources.gpu.energy_counter import MAX_PLAUSIBLE_W
from trainmon.view.extract import energy_views

STEPS, STEP_MS, BATCH = "300", "30", 8
DRAW_W = {0: 300.0, 1: 150.0}


def own_step_s(proc) -> tuple[list[float], int]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    return result["times"], result["pid"]


def test_joules_per_step_of_real_trainings_match_the_draw_times_their_own_step_time(addr, tmp_path):
    fake = FakeNvml(2, clock=time.monotonic)
    fake.set_power(0, 250_000, draw_mw=300_000)
    fake.devices[1].energy_counter = False
    fake.set_power(1, 150_000)
    recording = Recorder(str(tmp_path / "run.tmrec"))  # what `trainmon record` writes, beside the live store
    m = Monitor(addr, interval=0.25, nvml_module=fake, sinks=[recording])
    m.start()
    trainings = []
    try:
        for gpu in (0, 1):
            proc = start_python(STEADY, STEPS, STEP_MS, env={"TRAINMON_ADDR": addr})
            trainings.append(proc)
            fake.devices[gpu].processes = [(proc.pid, GIB)]
        pids = [p.pid for p in trainings]

        def running() -> bool:
            runs = [r for r in m.store.runs.values() if r.pid in pids]
            return len(runs) == 2 and all(r.steps.total > 120 for r in runs)

        assert wait_for(running, 90)
        snap = m.last_snapshot
        with m.store.lock:
            live = {v.run: v for v in energy_views(m.store, snap.t)}
        assert live[f"pid {pids[0]}"].method == COUNTER and live[f"pid {pids[0]}"].gpus == [0]
        assert live[f"pid {pids[1]}"].method == "power_integration" and live[f"pid {pids[1]}"].gpus == [1]
        fams = {f.name: f for f in MonitorCollector(m).collect()}
        assert fams["trainmon_gpu_energy_joules"].type == "counter"
        gauges = {s.labels["pid"]: s.value for s in fams["trainmon_run_energy_per_step_joules"].samples}
        assert set(gauges) == {str(p) for p in pids} and all(v > 0 for v in gauges.values())

        fake.reset_energy(0)  # the driver reloads under training 0
        own = [own_step_s(p) for p in trainings]
        time.sleep(0.6)  # the monitor samples past the last steps
    finally:
        for p in trainings:
            if p.poll() is None:
                p.kill()
                p.communicate()
        m.stop()
        recording.close()

    report = build_report(m.store)
    replayed, warnings = load_recording(str(tmp_path / "run.tmrec"))  # `trainmon report FILE`
    assert not warnings and [r.get("energy") for r in build_report(replayed)["runs"]] == [
        r.get("energy") for r in report["runs"]
    ]
    rows = {r["pid"]: r for r in report["runs"]}
    for gpu, (times, pid) in enumerate(own):
        row = rows[pid]
        e = row["energy"]
        step_s = statistics.mean(times[row["warmup_steps"] :])
        by_hand = DRAW_W[gpu] * step_s
        assert e["gpus"] == [gpu] and e["shared_with"] == [] and e["steps"] > 200
        assert abs(e["joules_per_step"] - by_hand) <= 0.03 * by_hand, (gpu, e, by_hand)
        assert abs(e["joules_per_sample"] - e["joules_per_step"] / BATCH) < 1e-3
    assert rows[own[0][1]]["energy"]["method"] == "mixed"  # the counter, and power for the reset's interval
    assert rows[own[1][1]]["energy"]["method"] == "power_integration"
    assert rows[own[0][1]]["energy"]["joules_per_step"] > 280.0 * statistics.mean(own[0][0][10:])  # not 250 W

    energy = m.store.series[GPU.key(0, "energy_j")]
    how = m.store.series[GPU.key(0, "energy_counter")]
    points = list(energy)
    rises = [(b - a, t1 - t0) for (t0, a), (t1, b) in itertools.pairwise(points) if a == a and b == b]
    # Never negative, never beyond what a GPU can draw. (An interval's own rise is the counter read when the GPU
    # source's turn came in the tick, over the ticks' times: it varies by that delay; sums over steps do not.)
    assert rises and all(0.0 <= j <= MAX_PLAUSIBLE_W * dt for j, dt in rises)
    methods = [v for v in how.values if v == v]
    assert methods.count(0.0) == 1 and methods.count(1.0) == len(methods) - 1
