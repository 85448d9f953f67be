"""Communication spans in the store, the window figures built on them, and the rules dist.comm and dist.straggler
on constructed ranks: compute stragglers under synchronous DDP, data stragglers, communication-bound jobs, and
the balanced jobs that must get neither."""

from __future__ import annotations

import math
from array import array

from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.diagnose.live.window import run_window
from trainmon.report.runs import run_summary
from trainmon.store.store import Store

MS = 1_000_000
JOB = {"job": {"MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"}, "world_size": 2}
DDP = P.K_COMM | P.COMM_OPS.index("ddp_grad_sync") << 8
ALL_REDUCE = P.K_COMM | P.COMM_OPS.index("all_reduce") << 8


def rank_records(
    compute_ms: float | list[float], comm_ms: float | list[float], wait_ms: float = 0.5, steps: int = 200, op: int = DDP
) -> list[int]:
    """Steps as a synchronous DDP rank makes them: a data wait, its own work, a gradient synchronisation that
    blocks it ``comm_ms``, then the optimizer step. Lists give each step's figure in turn."""
    recs: list[int] = []
    t = 0.0
    for i in range(steps):
        c = compute_ms[i % len(compute_ms)] if isinstance(compute_ms, list) else compute_ms
        m = comm_ms[i % len(comm_ms)] if isinstance(comm_ms, list) else comm_ms
        recs += [P.K_WAIT | 1 << 8, int(t * MS), int((t + wait_ms) * MS), 0]
        t0 = t + wait_ms + c
        if m:
            recs += [op, int(t0 * MS), int((t0 + m) * MS), 0]
        t = t0 + m
        recs += [P.K_OPT, int(t * MS), int(t * MS), 0]
    return recs


def add_rank(store: Store, rank: int, recs: list[int], hello: dict | None = None) -> float:
    run_id = rank + 1
    store.hello(run_id, 0.0, {"pid": 100 + rank, "rank": rank, **(JOB if hello is None else hello)})
    store.info(run_id, 0, {"loader": {"id": 1, "batch_size": 32, "num_workers": 2, "persistent_workers": True}})
    end = max(recs[2::4]) / 1e9
    store.events(run_id, end, array("q", recs))
    return end


def job(*ranks: list[int], hello: dict | None = None) -> tuple[Store, float]:
    store = Store()
    end = max(add_rank(store, r, recs, hello) for r, recs in enumerate(ranks))
    for k in range(int(end) + 1):
        store.sample(
            float(k), {"cpu.busy": 40.0, "cpu.iowait": 0.0, "cpu.cores": 8.0, "mem.used_pct": 30.0, "swap.used_mb": 0.0}
        )
    return store, end


def codes(store: Store, t: float, th: Thresholds | None = None) -> list[str]:
    return [f.code for f in evaluate(store, t, th)]


def finding(store: Store, t: float, code: str):
    return next(f for f in evaluate(store, t) if f.code == code)


# ---------------------------------------------------------------- store and window


def test_comm_spans_go_to_the_steps_that_hold_them_across_batches():
    recs = rank_records(20, 5, steps=60)
    store = Store()
    store.hello(1, 0.0, {"pid": 100, "rank": 0})
    store.info(1, 0, {"loader": {"id": 1, "batch_size": 32, "num_workers": 2, "persistent_workers": True}})
    # Batches cut at every 7th record: a step's comm record often arrives before the record that closes it.
    for i in range(0, len(recs), 28):
        store.events(1, 0.0, array("q", recs[i : i + 28]))
    steps = store.runs[1].steps
    assert len(steps) == 60
    assert all(math.isclose(c, 0.005, abs_tol=1e-9) for c in steps.comm), list(steps.comm)
    assert math.isclose(store.runs[1].comm_by_op["ddp_grad_sync"], 60 * 0.005, rel_tol=1e-9)


def test_comm_in_the_folded_stretch_of_a_large_batch_is_kept():
    store, _ = job(rank_records(20, 5, steps=300))
    steps = store.runs[1].steps
    assert len(steps) == 300 and math.isclose(sum(steps.comm), 300 * 0.005, rel_tol=1e-6)


def test_window_comm_figures_and_per_rank_compute():
    store, end = job(rank_records([20, 20, 20, 60], [5, 5, 5, 45]))
    w = run_window(store.runs[1], end - 20, end)
    assert math.isclose(w.comm_fraction, w.comm_s / w.step_time_s)
    assert math.isclose(w.comm_share_p50(), 5 / 25.5, rel_tol=1e-3)  # the median step, not the long ones
    assert math.isclose(w.compute_p50_s(), 0.020, rel_tol=1e-3)


def test_a_run_without_comm_records_has_no_comm_figures():
    store, end = job(rank_records(20, 0))
    w = run_window(store.runs[1], end - 20, end)
    assert math.isnan(w.comm_fraction) and math.isnan(w.comm_share_p50())
    assert run_summary(store.runs[1])["comm_fraction"] is None
    assert "dist.comm" not in codes(store, end)


def test_report_comm_fraction_of_the_steady_steps():
    store, _ = job(rank_records(20, 5))
    assert math.isclose(run_summary(store.runs[1])["comm_fraction"], 5 / 25.5, abs_tol=1e-4)


# ---------------------------------------------------------------- dist.straggler


def test_compute_straggler_under_synchronous_ddp_is_named_with_its_score():
    # Equal steps (50.5 ms) on both ranks: rank 0 waits 30 ms in the all-reduce for rank 1's 48 ms of work.
    store, end = job(rank_records(20, 30), rank_records(48, 2))
    f = evaluate(store, end)[0]
    assert f.code == "dist.straggler" and f.severity == "critical", f.summary
    ev = f.evidence
    assert ev["rank"] == 1 and ev["kind"] == "compute"
    assert math.isclose(ev["score"], 20 / 48, abs_tol=1e-3) and ev["score_threshold"] == 0.75
    assert ev["ranks"]["rank 1"]["compute_ms_p50"] == 48.0 and ev["ranks"]["rank 0"]["comm_ms"] == 30.0
    assert ev["ranks"]["rank 0"]["data_wait_ms"] == 0.5
    assert "rank 1" in f.summary and "0.42" in f.summary
    assert any("clocks" in a for a in f.advice)
    assert "dist.comm" not in codes(store, end)  # rank 0's time in collectives is explained by rank 1


def test_compute_score_threshold_borderline():
    store, end = job(rank_records(30, 9), rank_records(38, 1))  # score 30 / 38 = 0.79
    assert "dist.straggler" not in codes(store, end)
    store, end = job(rank_records(30, 11), rank_records(41, 0.1))  # score 30 / 41 = 0.73
    assert finding(store, end, "dist.straggler").evidence["kind"] == "compute"
    assert "dist.straggler" not in codes(store, end, Thresholds(straggler_score=0.7))


def test_data_straggler_still_found_through_its_wait_gap():
    store, end = job(rank_records(3, 30, wait_ms=0.5), rank_records(3, 0.5, wait_ms=30))
    f = finding(store, end, "dist.straggler")
    assert f.evidence["rank"] == 1 and f.evidence["kind"] == "data"
    assert "dist.comm" not in codes(store, end)


def test_unsynchronised_ranks_without_comm_keep_the_step_ratio():
    store, end = job(rank_records(40, 0), rank_records(55, 0))  # ratio 1.36: score 0.73 also flags it
    assert finding(store, end, "dist.straggler").evidence["rank"] == 1
    store, end = job(rank_records(40, 0), rank_records(52, 0))  # ratio 1.29, score 0.77: the step ratio
    f = finding(store, end, "dist.straggler")
    assert f.evidence["kind"] == "step" and f.evidence["rank"] == 1


# ---------------------------------------------------------------- dist.comm


def test_comm_bound_job_gets_dist_comm_with_its_advice():
    store, end = job(rank_records(20, 15), rank_records(20, 14))
    f = evaluate(store, end)[0]
    assert f.code == "dist.comm" and f.severity == "critical", f.summary
    assert math.isclose(f.evidence["comm_share"], 14 / 34.5, abs_tol=1e-3)  # rank 1 arrives last: its 14 ms
    assert f.evidence["by_op"] == {"ddp_grad_sync": 1.0} and f.evidence["ranks_seen"] == 2
    assert f.evidence["world_size"] == 2
    text = " ".join(f.advice)
    for knob in ("bucket_cap_mb", "no_sync()", "register_comm_hook", "NCCL_SOCKET_IFNAME"):
        assert knob in text, knob
    assert "41%" in f.summary and "ddp_grad_sync" in f.summary


def test_comm_share_thresholds():
    store, end = job(rank_records(45, 4), rank_records(45, 4))  # 8 %
    assert not {"dist.comm", "dist.straggler"} & set(codes(store, end))
    store, end = job(rank_records(40, 5), rank_records(40, 5))  # 11 %: a warning
    f = finding(store, end, "dist.comm")
    assert f.severity == "warning"
    assert "dist.comm" not in codes(store, end, Thresholds(comm_share=0.15))


def test_imbalance_below_the_straggler_score_is_not_communication():
    # Rank 0 waits 4 ms for rank 1 each step (17 % of its step) but rank 1 spends 4 % in collectives.
    store, end = job(rank_records(20, 5), rank_records(24, 1))
    assert not {"dist.comm", "dist.straggler"} & set(codes(store, end))


def test_a_few_steps_held_up_by_a_preempted_peer_do_not_make_a_comm_bound_job():
    store, end = job(rank_records(40, [1, 1, 1, 1, 60]), rank_records(40, [1, 1, 60, 1, 1]))
    assert not {"dist.comm", "dist.straggler"} & set(codes(store, end))


def test_ranks_taking_turns_to_be_late_are_not_communication():
    # On a crowded host each rank in turn is preempted for 15 ms and the other waits for it in the all-reduce:
    # half of each rank's steps are 44 % communication, yet the transfer itself takes 1 ms.
    store, end = job(rank_records([35, 20], [1, 16]), rank_records([20, 35], [16, 1]))
    assert not {"dist.comm", "dist.straggler"} & set(codes(store, end))
    w0 = run_window(store.runs[1], end - 20, end)
    assert w0.comm_share_p50() > 0.2  # what each rank alone would suggest


def test_steps_are_matched_across_ranks_by_their_ends():
    # Rank 1's table starts 3 steps later (it attached late): its steps still pair with rank 0's by time.
    store = Store()
    add_rank(store, 0, rank_records(20, 15, steps=200))
    late = rank_records(21, 14, steps=203)[3 * 12 :]
    end = add_rank(store, 1, late)
    for k in range(int(end) + 1):
        store.sample(float(k), {"cpu.busy": 40.0, "cpu.cores": 8.0, "mem.used_pct": 30.0})
    f = finding(store, end, "dist.comm")
    assert math.isclose(f.evidence["comm_share"], 14 / 35.5, abs_tol=1e-3)


def test_calls_of_the_jobs_own_lead_the_advice():
    store, end = job(rank_records(20, 10, op=ALL_REDUCE), rank_records(20, 10, op=ALL_REDUCE))
    f = finding(store, end, "dist.comm")
    assert "all_reduce" in f.advice[0] and f.evidence["by_op"] == {"all_reduce": 1.0}


def test_a_single_rank_seen_says_so():
    store, end = job(rank_records(20, 15), hello={"job": {"MASTER_PORT": "29500"}, "world_size": 8})
    f = finding(store, end, "dist.comm")
    assert "the only rank seen" in f.summary and f.evidence["world_size"] == 8 and f.evidence["ranks_seen"] == 1


def test_a_compute_stragglers_own_small_data_wait_does_not_take_over_its_advice():
    # Rank 1 waits 3 ms on data loaded in its main process (a warning of its own), but its 48 ms of work is why
    # rank 0 waits.
    store, end = job(rank_records(20, 33, wait_ms=0.5), rank_records(48, 2, wait_ms=3.0))
    f = finding(store, end, "dist.straggler")
    assert f.evidence["kind"] == "compute" and f.evidence["sub_cause"] is None
    assert not any("num_workers" in a for a in f.advice) and any("clocks" in a for a in f.advice)
