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
