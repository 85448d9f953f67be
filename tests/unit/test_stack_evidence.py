"""Stack dumps kept as evidence: recorded as the monitor's INFO entry and replayed into the store, cleaned like
everything a recording holds, never taken from an agent, listed and printed by every report format; GC spans
recorded and replayed alike."""

from __future__ import annotations

import json
from array import array

from testsupport.stores import HUNG_PID, hung_dump, hung_store
from trainmon import protocol as P
from trainmon.monitor import Fanout
from trainmon.record import Recorder, load_recording
from trainmon.report import build_report, render
from trainmon.store.stacks import MAX_FRAMES, clean_stacks, stack_lines
from trainmon.store.store import Store

NS = 1_000_000_000


def record(path: str, infos: list[dict]) -> Store:
    """A run with steps, garbage collections and the given INFO messages, into a recording and a live store."""
    live = Store()
    rec = Recorder(path)
    sink = Fanout([live, rec])
    sink.hello(1, 10.0, {"pid": HUNG_PID, "name": "train.py"})
    sink.info(1, 10.0, {"loader": {"id": 1, "batch_size": 8, "num_workers": 1}})
    recs: list[int] = []
    for k in range(40):
        t = 10.0 + k * 0.05
        end = int((t + 0.05) * NS)
        recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + 0.001) * NS), 0, P.K_OPT, end, end, 0]
        if k % 10 == 9:
            recs += [P.K_GC, int((t + 0.01) * NS), int((t + 0.02) * NS), 2 if k == 39 else 0]
    sink.events(1, 12.0, array("q", recs))
    for info in infos:
        sink.info(1, 13.0, info)
    sink.sample(13.0, {"cpu.busy": 10.0})
    rec.close()
    return live


def test_stacks_and_gc_spans_replay_into_the_store_as_the_monitor_kept_them(tmp_path):
    path = str(tmp_path / "r.tmrec")
    dump = hung_dump(12.5)
    live = record(path, [{"stacks": dump}])
    store, warnings = load_recording(path)
    assert warnings == []
    run, was = store.runs[1], live.runs[1]
    assert run.stack_dumps == was.stack_dumps == [clean_stacks(dump)]
    main = run.stack_dumps[0]["processes"][0]["threads"][0]
    assert main["frames"][0] == ["MetricsLog.log", "trainmon/demo/stalls.py", 37]
    assert list(run.gc.gen) == list(was.gc.gen) == [0, 0, 0, 2]
    assert list(run.gc.start) == list(was.gc.start) and run.gc.total == 4
    assert run.steps.total == was.steps.total == 40  # gc records never break the step derivation


def test_a_recording_without_stacks_reads_as_before(tmp_path):
    path = str(tmp_path / "r.tmrec")
    record(path, [{"drops": 3}])
    store, warnings = load_recording(path)
    assert warnings == [] and store.runs[1].stack_dumps == [] and store.runs[1].dropped_records == 3


def test_damaged_or_crafted_stacks_are_cleaned_or_dropped(tmp_path):
    path = str(tmp_path / "r.tmrec")
    crafted = {
        "reason": "x" * 500,
        "t": 12.0,
        "processes": [
            {"pid": "42", "role": 7, "threads": [{"tid": -1, "frames": [["f", "a.py", 1]] * 500 + ["junk"]}]},
            "not a process",
        ]
        * 20,
    }
    huge = {"t": 10**400, "processes": []}  # JSON integers have no bound; a float does
    record(path, [{"stacks": crafted}, {"stacks": "nope"}, {"stacks": {"t": float("nan"), "processes": []}}])
    record(str(tmp_path / "huge.tmrec"), [{"stacks": huge}])
    store, _ = load_recording(path)
    dumps = store.runs[1].stack_dumps
    assert len(dumps) == 1  # the other two are not dumps
    assert load_recording(str(tmp_path / "huge.tmrec"))[0].runs[1].stack_dumps == []
    d = dumps[0]
    assert len(d["reason"]) == 64 and len(d["processes"]) == 8  # 16 entries read, half of them not processes
    proc = d["processes"][0]
    assert proc["pid"] == 0 and proc["role"] == "7" and proc["threads"][0]["tid"] == 0
    assert len(proc["threads"][0]["frames"]) == MAX_FRAMES
    json.dumps(d)  # what reports write


def test_an_agent_cannot_send_stacks():
    assert "stacks" not in P.clean_info({"stacks": hung_dump(1.0)})


def test_reports_list_the_dumps_and_print_them():
    store = hung_store()
    report = build_report(store)
    (run,) = report["runs"]
    (dump,) = run["stack_dumps"]
    assert dump["reason"] == "stall.hang" and 0 < dump["t"] < report["duration_s"]
    assert json.loads(render(report, "json"))["runs"][0]["stack_dumps"] == [dump]
    lines = stack_lines(dump)
    assert lines[0] == f"main pid {HUNG_PID}: 2 Python threads (py-spy 32 ms)"
    assert "      MetricsLog._rotate_later (trainmon/demo/stalls.py:50)" in lines
    assert "worker pid 5000: process 5000 has exited" in lines
    heading = f"pid {HUNG_PID}: dumped when stall.hang fired, at {dump['t']:.1f} s"
    text = render(report, "text")
    assert f"Stacks of {heading}:" in text and "    MetricsLog.log (trainmon/demo/stalls.py:37)" in text
    assert f"### Stacks of {heading}" in render(report, "markdown")
    html = render(report, "html")
    assert "<h2>Stacks of" in html and "MetricsLog.log (trainmon/demo/stalls.py:37)" in html


def test_runs_without_dumps_list_none_and_print_nothing():
    store = hung_store(dump_after_s=None)
    report = build_report(store)
    assert report["runs"][0]["stack_dumps"] == []
    assert "Stacks of" not in render(report, "text") and "<h2>Stacks" not in render(report, "html")


def test_printed_are_the_latest_dump_of_each_cause_the_report_names_the_json_keeps_all():
    store = hung_store()
    end = store.runs[1].steps.end[-1]
    store.info(1, end + 10.0, {"stacks": hung_dump(end + 10.0, reason="input.io")})  # a cause the report never names
    store.info(1, end + 40.0, {"stacks": hung_dump(end + 40.0)})  # the hang dumped again later
    report = build_report(store)
    assert [d["reason"] for d in report["runs"][0]["stack_dumps"]] == ["input.io", "stall.hang", "stall.hang"]
    text = render(report, "text")
    assert text.count("Stacks of ") == 1 and "input.io fired" not in text
    latest = report["runs"][0]["stack_dumps"][-1]["t"]
    assert f"dumped when stall.hang fired, at {latest:.1f} s" in text
