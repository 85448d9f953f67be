"""The verdict registry: one declaration per code, read by everything that treats verdicts differently.

The engine (which codes end a run's judgement), the verdict tracker and the report's headline (``immediate``), the
monitor (``reads_states``: the thread-state sampler looks fast while such a finding stands), automatic stack dumps
(``dump_workers``), every report format (``colour``, ``meaning``), Prometheus (the code set) and the verdict
reference, docs/verdicts.md (written from it by scripts/reference.py; a test fails when the page is stale) all read
it. Each family's declarations are in a module of their own (``input_verdicts``...); the order of ``VERDICTS``
below is the priority among findings of the same severity (the first wins). Codes are a public contract: add, never
rename.

Adding a verdict: its declaration in its family's module and its place in ``VERDICTS``, its rule in
``diagnose/rules/`` declared with ``@rule(stage, code)``, a scenario (docs/architecture.md, "Where a change goes");
``python scripts/reference.py`` writes its reference entry.
"""

from __future__ import annotations

from trainmon.diagnose.verdicts.declaration import GREY, INPUT_COLOUR, Verdict
from trainmon.diagnose.verdicts.dist_verdicts import DIST_COMM, DIST_STRAGGLER
from trainmon.diagnose.verdicts.gpu_verdicts import GPU_NO_TENSOR_CORES, GPU_SMALL_WORK, GPU_THROTTLED
from trainmon.diagnose.verdicts.host_verdicts import HOST_LOOP_CODE, HOST_OVERHEAD, HOST_SYNC
from trainmon.diagnose.verdicts.input_verdicts import (
    INPUT_EPOCH_RESTART,
    INPUT_HOST_TO_DEVICE,
    INPUT_IO,
    INPUT_MAIN_PROCESS,
    INPUT_TOO_FEW_WORKERS,
    INPUT_WORKERS_CPU,
)
from trainmon.diagnose.verdicts.judgement_verdicts import INSUFFICIENT_DATA, OK_COMPUTE_BOUND
from trainmon.diagnose.verdicts.memory_verdicts import MEMORY_CREEP, MEMORY_GPU_PRESSURE, MEMORY_HOST_PRESSURE
from trainmon.diagnose.verdicts.stall_verdicts import STALL_CHECKPOINT, STALL_HANG, STALL_PERIODIC, STALL_RECOMPILE

__all__ = ["BY_CODE", "GREY", "INPUT_COLOUR", "VERDICTS", "Verdict", "verdict"]

# The order is the priority among findings of the same severity (the first wins).
VERDICTS: tuple[Verdict, ...] = (
    STALL_HANG,
    STALL_CHECKPOINT,
    STALL_RECOMPILE,
    DIST_STRAGGLER,
    INPUT_MAIN_PROCESS,
    INPUT_IO,
    INPUT_WORKERS_CPU,
    INPUT_TOO_FEW_WORKERS,
    INPUT_EPOCH_RESTART,
    INPUT_HOST_TO_DEVICE,
    DIST_COMM,
    HOST_OVERHEAD,
    HOST_LOOP_CODE,
    HOST_SYNC,
    GPU_SMALL_WORK,
    GPU_NO_TENSOR_CORES,
    MEMORY_HOST_PRESSURE,
    MEMORY_GPU_PRESSURE,
    MEMORY_CREEP,
    GPU_THROTTLED,
    STALL_PERIODIC,
    OK_COMPUTE_BOUND,
    INSUFFICIENT_DATA,
)

BY_CODE: dict[str, Verdict] = {v.code: v for v in VERDICTS}


def verdict(code: str) -> Verdict:
    """The declaration of ``code``; a code this trainmon does not know gets a neutral one (from a newer
    recording, or a Prometheus label)."""
    return BY_CODE.get(code) or Verdict(code, "a code this trainmon does not know")
