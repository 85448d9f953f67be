"""The agent's own cost per step, shown live: a real DataLoader loop under a real monitor; the status line, --json,
Prometheus and the screen's time axis show the figure the agent measured of itself."""

from __future__ import annotations

import math
import re

from testsupport.paths import LOOP
from testsupport.procs import start_python, wait_for
from trainmon.export.json_stream import tick
from trainmon.export.prometheus import MonitorCollector
from trainmon.monitor import Monitor, status_line
from trainmon.store.agent_cost import per_step_text
from trainmon.view.frame_builder import _self_cost


def test_the_agent_cost_per_step_is_shown_live(addr):
    m = Monitor(addr, interval=0.5)
    m.start()
    proc = start_python(LOOP, "3000", "0", "none", "1", env={"TRAINMON_ADDR": addr})  # ~4 s of 1 ms samples
    try:
        assert wait_for(lambda: any(not math.isnan(r.agent_step_ns) for r in m.run_statuses(m.store.last_t or 0)), 60)
        snap = m.tick()
        (run,) = [r for r in snap.runs if r.measured_by == "agent"]
        with m.store.lock:
            text = _self_cost(m.store, snap.t, 1.0)
        metrics = {s.name: s for fam in MonitorCollector(m).collect() for s in fam.samples}
    finally:
        proc.kill()
        proc.communicate()
        m.stop()
    ns = run.agent_step_ns
    assert 0 < ns < 5e6, ns  # a per-step figure: hooks and the sender thread, never a second's worth
    shown = rf"  · agent {re.escape(per_step_text(ns))}/step( \((<)?[\d.]+% of a step\))?$"  # its share, when high
    assert re.search(shown, status_line(snap)), status_line(snap)
    assert text is not None and "agent " in text and text.endswith("/step"), text
    line = tick(snap)
    assert line["runs"][0]["agent_step_us"] == round(ns / 1e3, 3)
    assert line["self"]["agent_step_us"] == round(ns / 1e3, 3)
    assert metrics["trainmon_agent_step_overhead_seconds"].value == ns / 1e9
