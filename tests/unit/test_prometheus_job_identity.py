"""One job id for every rank of a job on every node: from the agent's hello, and for agents that sent none,
from the launcher environment they did send."""

from __future__ import annotations

import pytest

from trainmon import agent
from trainmon.protocol import clean_hello
from trainmon.store.run import Run

LAUNCHERS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "SLURM_JOB_ID", "TRAINMON_JOB")


@pytest.mark.parametrize(
    ("env", "job_id"),
    [
        ({"TORCHELASTIC_RUN_ID": "exp-7", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}, "exp-7"),
        ({"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "n1", "MASTER_PORT": "2", "WORLD_SIZE": "16"}, "n1:2/16"),
        ({"SLURM_JOB_ID": "4242", "TRAINMON_JOB": "abc"}, "slurm-4242"),
        ({"TRAINMON_JOB": "abc"}, "abc"),
        ({}, None),
    ],
)
def test_the_agent_names_the_job_and_an_old_hello_gets_the_same_id(monkeypatch, env, job_id):
    for key in (*LAUNCHERS, "TRAINMON_NODE", "RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TRAINMON_NODE", "gpu-node-3")
    monkeypatch.setenv("RANK", "5")
    hello = agent._hello(None, "s1")
    assert hello["job_id"] == job_id and hello["node"] == "gpu-node-3" and hello["global_rank"] == 5
    run = Run(1, clean_hello(hello), 0.0)
    assert (run.job_id, run.node, run.rank) == (job_id or "", "gpu-node-3", 5)
    old = {k: v for k, v in hello.items() if k not in ("job_id", "node", "global_rank")}
    old_run = Run(2, clean_hello(old), 0.0)
    assert old_run.job_id == (job_id or "") and old_run.node == hello["host"]
