"""torch.compile seen by the agent: real compilations (backend "eager": Dynamo tracing and guards, no code generation)
in a child process under a real monitor. What reaches the monitor is what torch itself recorded, and the agent
changes nothing torch compiles."""

from __future__ import annotations

import json

from testsupport.paths import WORKLOADS
from testsupport.procs import start_python, wait_for
from trainmon.diagnose import Thresholds, evaluate
from trainmon.monitor import Monitor

SHAPES = str(WORKLOADS / "compile_shapes.py")


def _run(addr: str, calls: int, limit: int, **env: str) -> dict:
    proc = start_python(SHAPES, str(calls), str(limit), env={"TRAINMON_ADDR": addr, **env})
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_compilations_reach_the_monitor_with_function_guard_and_eager_fallback(addr):
    m = Monitor(addr, interval=0.5)
    m.start()
    try:
        own = _run(addr, calls=6, limit=3)
        assert wait_for(lambda: any(r.ended for r in m.store.runs.values()), 20), "the run never ended"
        (run,) = [r for r in m.store.runs.values() if r.measured_by == "agent"]
        with m.store.lock:
            functions = {f.name: f for f in run.compiles.functions.values()}
            spans = list(zip(run.compiles.frame, run.compiles.attempt, strict=True))
            t = m.store.last_t or 0.0
            findings = evaluate(m.store, t, Thresholds())
    finally:
        m.stop()
    assert own["attached"] and own["limit_hit"], own
    fn = functions["fn"]
    assert fn.file.endswith("compile_shapes.py") and fn.line > 0
    assert fn.compiles == 3 and fn.top_guard == "tensor 'x' size mismatch at index 0", fn
    assert fn.limit_type == "recompile_limit" and fn.limit_value == 3 and fn.limit_t is not None, fn
    assert sorted(a for f, a in spans if f == fn.frame) == [0, 1, 2], spans  # a span per compilation the limit let run
    assert functions["with_break"].compiles == 1 and run.compiles.graph_breaks["total"] >= 1, run.compiles.graph_breaks
    # Every compilation torch recorded reached the monitor (the refused one included), each once.
    told = sum(f.compiles for f in run.compiles.functions.values()) + len(run.compiles.fallen_back())
    assert told == len(set(own["compile_ids"])), (told, own["compile_ids"])
    (finding,) = [f for f in findings if f.code == "stall.recompile"]
    assert "fn (compile_shapes.py:" in finding.summary and "recompile_limit = 3" in finding.summary, finding.summary
    assert finding.evidence["failed_guard"] == "tensor 'x' size mismatch at index 0", finding.evidence
    assert any("mark_dynamic(x" in advice for advice in finding.advice), finding.advice


def test_the_agent_changes_nothing_torch_compiles(addr):
    """The same calls with the agent and with TRAINMON_DISABLE=1: the same results and the same compilations, as torch
    itself recorded them (no monitor listening: the agent runs, retrying in the background)."""
    with_agent = _run(addr, calls=5, limit=3)
    without = _run(addr, calls=5, limit=3, TRAINMON_DISABLE="1")
    assert with_agent["attached"] and not without["attached"]
    assert with_agent["checksum"] == without["checksum"]
    assert with_agent["compile_ids"] == without["compile_ids"] and with_agent["limit_hit"] == without["limit_hit"]
    assert with_agent["agent"].get("compilations", 0) >= 3, with_agent["agent"]  # the agent did read them


def test_a_run_that_never_compiles_costs_no_compile_watch(addr):
    """No torch.compile: torch._dynamo is never imported by the agent."""
    code = (
        "import json, sys, time, trainmon.agent as a, torch\n"
        "a.attach(); time.sleep(0.5)\n"
        "print(json.dumps({'dynamo': 'torch._dynamo' in sys.modules}))\n"
    )
    proc = start_python("-c", code, env={"TRAINMON_ADDR": addr})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"dynamo": False}
