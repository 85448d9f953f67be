"""Rules: pure functions ``rule(ctx: RuleContext) -> Finding | None``, one module per family of causes.

The stages below are what the engine (trainmon.diagnose.engine) runs, in order; what each code means, and how every
consumer treats it, is declared once in ``trainmon.diagnose.verdicts``. docs/architecture.md says how to add one.
"""

from trainmon.diagnose.rules.common import base_evidence, insufficient
from trainmon.diagnose.rules.compile import recompile_stall
from trainmon.diagnose.rules.context import Rule, RuleContext
from trainmon.diagnose.rules.dist import comm_bound, straggler
from trainmon.diagnose.rules.epochs import epoch_restart
from trainmon.diagnose.rules.gpu import (
    compute_bound,
    gpu_memory,
    gpu_throttled,
    host_sync,
    no_tensor_cores,
    small_work,
)
from trainmon.diagnose.rules.hang import hang, hang_episodes
from trainmon.diagnose.rules.host import host_memory, host_overhead
from trainmon.diagnose.rules.input import host_to_device, input_bound
from trainmon.diagnose.rules.loop_code import loop_code
from trainmon.diagnose.rules.memory import memory_creep
from trainmon.diagnose.rules.sampled import sampled_verdict
from trainmon.diagnose.rules.stalls import checkpoint_stall, periodic_stall
from trainmon.diagnose.thresholds import Thresholds

# A run found without an agent: judged from samples alone.
SAMPLED: Rule = sampled_verdict
# First, for every run with an agent: a finding here ends its judgement (a hang's window holds only old steps).
ENDING: tuple[Rule, ...] = (hang,)
# Then over its window, before steady steps are counted (restarts may leave few of them).
# Recompilations are judged on the run's compilations, not on its steady steps (a storm leaves few of those).
BEFORE_WARMUP: tuple[Rule, ...] = (checkpoint_stall, epoch_restart, recompile_stall)
# A finding here (too few steady steps) ends the run's judgement.
WARMUP_GATE: tuple[Rule, ...] = (insufficient,)
# Over the run's steady steps, its host figures and its evidence.
PER_RUN: tuple[Rule, ...] = (
    input_bound,
    periodic_stall,
    host_to_device,
    host_overhead,
    loop_code,
    gpu_memory,
    memory_creep,
    gpu_throttled,
    host_sync,
    small_work,
    no_tensor_cores,
    compute_bound,
)
# Over the ranks of one job (``ctx.job``), each with its own findings (``ctx.run_findings``).
PER_JOB: tuple[Rule, ...] = (straggler, comm_bound)
# Over the host (``ctx.host``).
PER_HOST: tuple[Rule, ...] = (host_memory,)

__all__ = [
    "BEFORE_WARMUP",
    "ENDING",
    "PER_HOST",
    "PER_JOB",
    "PER_RUN",
    "SAMPLED",
    "WARMUP_GATE",
    "Rule",
    "RuleContext",
    "Thresholds",
    "base_evidence",
    "hang_episodes",
]
