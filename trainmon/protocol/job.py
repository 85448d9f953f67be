"""The one identity of a job, from a rank's environment: the same id for every rank of it, on every node.

The agent sends it in its hello (``job_id``), discovery gives it to a training it samples, and the store takes it
from a run's hello (an agent from before ``job_id`` existed sends only its environment); reports, Prometheus labels
and the cluster view show the store's. Standard library only: the agent calls it in the user's job.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_JOB_ID = 200
# Set by `trainmon run` in every process of the command it launches (trainmon/launch.py): one job for all of them.
TRAINMON_JOB = "TRAINMON_JOB"


def job_identity(env: Mapping[str, str], launcher: int | None = None) -> str | None:
    """The elastic run id, else the rendezvous address and world size, else the scheduler's job, else the
    ``trainmon run`` that launched it, else the launcher process (torchrun, accelerate) that started it; None: a
    job of one process."""
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":  # torchrun's default --rdzv-id is "none": the same on unrelated jobs
        return str(run_id)[:MAX_JOB_ID]
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}/{env.get('WORLD_SIZE', '?')}"[:MAX_JOB_ID]
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}"[:MAX_JOB_ID]
    if env.get(TRAINMON_JOB):
        return str(env[TRAINMON_JOB])[:MAX_JOB_ID]
    if launcher is not None:
        return f"launcher-{launcher}"
    return None
