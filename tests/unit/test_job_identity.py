"""One job identity: the runs the rules group as ranks of one job are exactly those reports, Prometheus and the
cluster view label with one job id, whatever the launcher's environment and whatever the agent sent."""

from __future__ import annotations

import itertools

from trainmon.store.run import Run

ENVS = [
    {},
    {"TRAINMON_JOB": "t1"},
    {"TRAINMON_JOB": "t2"},
    {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2"},
    {"TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2"},
    {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29501", "WORLD_SIZE": "2"},
    {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "TRAINMON_JOB": "t1"},
    {"SLURM_JOB_ID": "77"},
    {"SLURM_JOB_ID": "77", "TRAINMON_JOB": "t2"},
]
SENT = [None, "", "elastic-9", "10.0.0.1:29500/2"]  # the agent's own job_id (None: an agent from before it sent one)


def runs() -> list[Run]:
    out = []
    for k, (env, sent, pid) in enumerate(itertools.product(ENVS, SENT, (10, 11))):
        hello = {"pid": pid, "host": "h", "job": env} | ({"job_id": sent} if sent is not None else {})
        out.append(Run(k, hello, 0.0))
    return out


def test_the_rules_grouping_and_the_labels_never_disagree():
    all_runs = runs()
    for a, b in itertools.combinations(all_runs, 2):
        same_key = a.job_key == b.job_key
        same_label = bool(a.job_id) and a.job_id == b.job_id
        lone = not a.job_id and not b.job_id and (a.host, a.pid) == (b.host, b.pid)
        assert same_key == (same_label or lone), (a.hello, b.hello, a.job_key, b.job_key)


def test_ranks_that_sent_their_job_id_late_join_their_job():
    # Lightning's ddp spawn: the rank's hello has no rendezvous yet; the identity message brings it.
    early = Run(1, {"pid": 10, "host": "h", "job": {}}, 0.0)
    other = Run(2, {"pid": 11, "host": "h", "job": {}, "job_id": "10.0.0.1:29500/2"}, 0.0)
    assert early.job_key != other.job_key
    early.apply_info({"dist": {"rank": 0, "world_size": 2, "job_id": "10.0.0.1:29500/2", "job": {}}})
    assert early.job_key == other.job_key and early.job_id == other.job_id


def test_the_agent_discovery_and_the_store_derive_one_identity(monkeypatch):
    """The same environment gives one job id whether the agent reports the rank, discovery samples it (its hello
    made by trainmon/sources/discovery/unattached.py) or the store reads an old hello's environment: one function makes
    all three (trainmon/protocol/job.py). A sampled training started by a launcher is a job of that launcher."""
    from trainmon import agent
    from trainmon.protocol import clean_hello, job_identity
    from trainmon.sources.discovery.discover import Training
    from trainmon.sources.discovery.unattached import _hello as sampled_hello

    for env in ENVS:
        for key in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "SLURM_JOB_ID", "TRAINMON_JOB"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        from_agent = agent._hello(None, "s")["job_id"]
        training = Training(4242, "train.py", "main", ["python", "train.py"], dict(env), [], None, 5.0)
        sampled = Run(1, clean_hello(sampled_hello(training, "h")), 0.0)
        old = Run(2, {"pid": 7, "host": "h", "job": dict(env)}, 0.0)
        assert from_agent == training.job_id == job_identity(env), env
        assert sampled.job_id == old.job_id == (from_agent or ""), env
    launched = Training(4243, "train.py", "rank", ["python", "train.py"], {}, [], 99, 5.0)
    assert launched.job_id == "launcher-99"
    assert Run(3, clean_hello(sampled_hello(launched, "h")), 0.0).job_id == "launcher-99"
