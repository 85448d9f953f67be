"""The diagnosis tests: each demo scenario is a real small training with one known bottleneck,
run under a real `trainmon record`; the report must name that bottleneck."""

from __future__ import annotations

import subprocess

import pytest

from testsupport.procs import child_env, report_json, start_recorder, stop
from trainmon.demo.scenarios import SCENARIOS, command
from trainmon.record import load_recording


def run_scenario(name: str, addr: str, tmp_path) -> dict:
    scenario = SCENARIOS[name]
    rec = str(tmp_path / f"{name}.tmrec")
    recorder = start_recorder(addr, rec)
    try:
        res = subprocess.run(
            command(scenario), env=child_env(TRAINMON_ADDR=addr), capture_output=True, text=True, timeout=240
        )
        assert res.returncode == scenario.status, res.stderr[-3000:]
    finally:
        stop(recorder)
    return report_json(rec)


def mark_time(rec: str, name: str) -> float:
    """When the run marked ``name`` (trainmon.agent.mark), in seconds from the recording's start: the report's clock."""
    store, _ = load_recording(rec)
    marks = [t for run in store.runs.values() for t, mark in run.marks if mark == name]
    assert marks, f"no {name!r} mark in {rec}"
    return marks[0] - (store.first_t or 0.0)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_is_diagnosed(name, addr, tmp_path):
    scenario = SCENARIOS[name]
    report = run_scenario(name, addr, tmp_path)
    verdict = report["verdict"]
    detail = f"{verdict['code']}: {verdict['summary']} | timeline {report['timeline']}"
    assert verdict["code"] == scenario.expected, detail
    assert verdict["advice"] and verdict["evidence"]
    assert len(report["runs"]) == scenario.ranks
    if scenario.timeline:
        judged = [e["code"] for e in report["timeline"] if e["code"] != "insufficient_data"]
        positions = [judged.index(code) for code in scenario.timeline if code in judged]
        assert len(positions) == len(scenario.timeline) and positions == sorted(positions), detail
        # The report's phases split where the job switched DataLoaders (the demo marks the moment).
        switch = mark_time(str(tmp_path / f"{name}.tmrec"), "switch")
        after = next(e for e in report["timeline"] if e["code"] == scenario.timeline[-1])
        assert abs(after["t"] - switch) <= 3.0, f"switched at {switch:.1f} s | {detail}"
    elif scenario.expected.startswith("input."):
        # A steady input-bound run keeps one verdict for its whole life: no phase of another cause.
        assert {e["code"] for e in report["timeline"]} - {"insufficient_data"} == {scenario.expected}, detail
    if name == "healthy":
        assert not [f for f in report["findings"] if f["severity"] != "ok"], report["findings"]
    if name != "hang":  # no false alarm: every other scenario steps until it ends
        assert "stall.hang" not in {f["code"] for f in report["findings"]} | {e["code"] for e in report["timeline"]}
    if name == "hang":
        ev = verdict["evidence"]
        assert ev["limit_s"] == 30.0 and ev["silent_s"] > 30.0, detail  # max(30 s, 10 x p95): the default
        assert ev["main_thread_in"].startswith("MetricsLog.log"), detail
        (dump,) = [d for d in report["runs"][0]["stack_dumps"] if d["reason"] == "stall.hang"]
        procs = {p["role"]: p for p in dump["processes"]}
        assert [p["role"] for p in dump["processes"]].count("worker") == 2, dump
        assert all(p["error"] is None and p["elapsed_ms"] > 0 for p in dump["processes"]), dump
        threads = {t["name"]: [f[0] for f in t["frames"]] for t in procs["main"]["threads"]}
        assert threads["MainThread"][0] == "MetricsLog.log" and "main" in threads["MainThread"], threads
        assert threads["metrics-rotate"][0] == "MetricsLog._rotate_later", threads
        worker = [f[0] for t in procs["worker"]["threads"] if t["main"] for f in t["frames"]]
        assert "_worker_loop" in worker, worker  # the workers live on, waiting for indices
    if name == "gc":
        ev = verdict["evidence"]
        assert "gen-2 garbage collection" in verdict["summary"] and verdict["advice"][0].startswith("call gc.freeze()")
        assert ev["gc"]["gen2"]["count"] >= 2 and ev["gc_explained_long_steps"] >= 2, detail
        assert ev["gc_gen2_pause_ms_p50"] >= 10.0, detail
    if name == "straggler":
        assert verdict["evidence"]["rank"] == 1 and verdict["evidence"]["kind"] == "data", detail
        assert "dist.comm" not in {f["code"] for f in report["findings"]}, report["findings"]
    if scenario.ranks > 1:
        comm = {r["rank"]: r["comm_fraction"] for r in report["runs"]}
        assert all(isinstance(c, float) and 0 <= c < 1 for c in comm.values()), comm
    if name == "compute-straggler":
        ev = verdict["evidence"]
        assert ev["rank"] == 1 and ev["kind"] == "compute" and ev["score"] < 0.75, detail
        ranks = ev["ranks"]
        assert ranks["rank 1"]["compute_ms_p50"] > ranks["rank 0"]["compute_ms_p50"], ranks
        assert ranks["rank 0"]["comm_fraction"] > ranks["rank 1"]["comm_fraction"], ranks  # rank 0 waits for it
    if name == "comm-bound":
        ev = verdict["evidence"]
        assert ev["comm_share"] >= 0.10 and "ddp_grad_sync" in ev["by_op"], detail
        assert all(r["comm_fraction"] >= 0.10 for r in report["runs"]), report["runs"]
    if name == "ddp-healthy":
        codes = {f["code"] for f in report["findings"]} | {e["code"] for e in report["timeline"]}
        assert not codes & {"dist.comm", "dist.straggler"}, (report["findings"], report["timeline"])
    if name == "slow-storage":
        assert verdict["evidence"]["sub_cause"] == "disk"
    if name == "remote-storage":
        ev = verdict["evidence"]
        assert ev["sub_cause"] == "remote" and ev["workers_net_wait"] >= 0.25, detail
        assert ev["workers_rchar_mb_s"] < 0.5, detail  # recv() reads: invisible to rchar, seen in the wait channels
        assert ev["cores_of"] == "run" and ev["cores_usable"] >= 1 and ev["cores_source"], detail
    if name == "rate-limited":
        ev = verdict["evidence"]
        assert ev["sub_cause"] == "latency" and ev["workers_net_wait"] <= 0.05, detail
        assert ev["workers_net_sockets"] >= 1, detail  # holds a connection, yet waits on its rate limiter
        codes = {f["code"] for f in report["findings"]} | {e["code"] for e in report["timeline"]}
        assert "input.io" not in codes, (report["findings"], report["timeline"])
    for finding in [verdict, *report["findings"]]:
        ev = finding["evidence"]
        if "suggested_num_workers" in ev:  # never more workers than the host can run
            assert ev["suggested_num_workers"] <= ev["num_workers_cap"], finding
            cap = ev["cores"] * (1 if ev["num_workers_bound"] == "usable_cores" else 4)
            assert ev["num_workers_cap"] == cap, finding
    if name == "lightning":
        # The train loader's one worker is busy all the time: judged on its own (never averaged with the
        # validation loader's), more workers help only as far as the usable cores go.
        ev = verdict["evidence"]
        assert ev["sub_cause"] == "cpu" and ev["workers_cpu_pct_mean"] >= 70, detail
        assert ev["num_workers_bound"] == "usable_cores" and ev["suggested_num_workers"] <= ev["cores"], detail
        assert ev["other_loader_workers"] >= 1, detail  # the validation loader's workers were there, left out
    if name == "epoch-restart":
        ev = verdict["evidence"]
        assert ev["persistent_workers"] is False and ev["start_method"] == "fork", detail
        assert ev["restart_share"] >= 0.05 and ev["restarts"] >= 2, detail
        (run,) = report["runs"]
        assert run["epoch_restarts"] >= 3 and run["epoch_restart_fraction"] >= 0.05, run
    if name in ("epoch-persistent", "epoch-steady"):
        codes = {f["code"] for f in report["findings"]} | {e["code"] for e in report["timeline"]}
        assert "input.epoch_restart" not in codes, (report["findings"], report["timeline"])
        assert {e["code"] for e in report["timeline"]} - {"insufficient_data"} == {scenario.expected}, detail
    if name == "epoch-persistent":
        (run,) = report["runs"]
        assert run["epoch_restarts"] == 0 and run["dataloader"]["persistent_workers"] is True, run
