"""trainmon.cluster: a job's headline across nodes, from the samples Prometheus returns."""

from __future__ import annotations

from trainmon.cluster.prom import Sample, base_url
from trainmon.cluster.rows import evidence, rows, table_text
from trainmon.cluster.state import build


def _rank(inst: str, node: str, rank: int, step: float, wait: float, code: str, sev: str, up: float = 1) -> list:
    labels = {"instance": inst, "host": node, "node": node, "job_id": "j", "rank": str(rank), "pid": str(100 + rank)}
    return [
        Sample("trainmon_step_time_seconds", labels, step),
        Sample("trainmon_data_wait_ratio", labels, wait),
        Sample("trainmon_samples_per_second", labels, 100.0),
        Sample("trainmon_run_connected", labels, up),
        Sample("trainmon_run_verdict_info", {**labels, "code": code, "severity": sev}, 1.0),
    ]


def _node(inst: str, node: str, code: str, sev: str) -> list:
    return [Sample("trainmon_verdict_info", {"instance": inst, "host": node, "code": code, "severity": sev}, 1.0)]


def test_the_worst_verdict_heads_the_job_with_how_many_ranks_hold_it():
    samples = [
        *_node("a", "node-a", "ok.compute_bound", "ok"),
        *_node("b", "node-b", "input.io", "critical"),
        *_rank("a", "node-a", 0, 0.1, 0.05, "ok.compute_bound", "ok"),
        *_rank("a", "node-a", 1, 0.1, 0.05, "ok.compute_bound", "ok"),
        *_rank("b", "node-b", 2, 0.1, 0.08, "input.io", "critical"),
        *_rank("b", "node-b", 3, 0.1, 0.08, "input.io", "critical"),
    ]
    (job,) = build("http://p", samples, []).jobs
    assert (job.headline.code, job.headline.severity) == ("input.io", "critical")
    assert job.headline.summary == "2 of 4 rank(s) on node-b (input.io)" and job.straggler is None
    assert [r.kind for r in rows(build("http://p", samples, []))] == [
        "job",
        "node",
        "rank",
        "rank",
        "node",
        "rank",
        "rank",
    ]


def test_a_rank_far_above_the_median_is_the_straggler_and_a_gone_rank_is_not_counted():
    samples = [
        *_node("a", "node-a", "ok.compute_bound", "ok"),
        *_node("b", "node-b", "gpu.throttled", "warning"),
        *_rank("a", "node-a", 0, 0.100, 0.02, "ok.compute_bound", "ok"),
        *_rank("a", "node-a", 1, 0.104, 0.02, "ok.compute_bound", "ok"),
        *_rank("b", "node-b", 2, 0.160, 0.02, "gpu.throttled", "warning"),
        *_rank("b", "node-b", 3, 9.000, 0.90, "stall.hang", "critical", up=0),  # left the job
    ]
    state = build(
        "http://p", samples, [{"labels": {"alertname": "X", "instance": "b", "pid": "102"}, "state": "firing"}]
    )
    (job,) = state.jobs
    assert job.step_median_s == 0.104 and job.straggler is not None and job.straggler.rank == "2"
    assert job.headline.code == "dist.straggler"
    assert job.headline.summary == (
        "rank 2 on node-b steps in 160 ms, 54% above the job's median; its own verdict: gpu.throttled"
    )
    lines = evidence(state, job.straggler.key)
    assert "step time p50: 160.0 ms (1.54× the job's median 104.0 ms)" in lines
    assert "alerts:" in lines and "  X (firing)" in lines
    assert "GONE" in table_text(state)


def test_urls():
    assert base_url("prom:9090") == "http://prom:9090"
    assert base_url("https://prom.example/prometheus/graph") == "https://prom.example/prometheus"


def test_the_straggler_is_judged_by_the_thresholds_a_config_file_sets(tmp_path):
    """The cluster view reads the straggler rule's own thresholds: a rank 30 % slower than its job's median is a
    straggler at the default ratio (1.25), not once a config file raises it to 1.5; the evidence says which."""
    from trainmon.config import load

    samples = [
        *_node("a", "node-a", "ok.compute_bound", "ok"),
        *_rank("a", "node-a", 0, 0.100, 0.05, "ok.compute_bound", "ok"),
        *_rank("a", "node-a", 1, 0.100, 0.05, "ok.compute_bound", "ok"),
        *_rank("a", "node-a", 2, 0.130, 0.05, "ok.compute_bound", "ok"),
    ]
    (job,) = build("http://p", samples, []).jobs
    assert job.headline.code == "dist.straggler" and job.straggler is not None and job.straggler.rank == "2"
    config = tmp_path / "trainmon.toml"
    config.write_text("[thresholds]\nstraggler_step_ratio = 1.5\n")
    th = load(str(config)).thresholds
    state = build("http://p", samples, [], th)
    (job,) = state.jobs
    assert job.straggler is None and job.headline.code == "ok.compute_bound"
    assert any("over 1.5× the median" in line for line in evidence(state, job.key))
