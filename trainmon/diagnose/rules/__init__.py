"""Rules: pure functions from window figures and system evidence to Findings, one module per family of causes.

The engine (trainmon.diagnose.engine) calls each one; docs/architecture.md says how to add a verdict.
"""

from trainmon.diagnose.rules.common import base_evidence, insufficient
from trainmon.diagnose.rules.dist import straggler
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
from trainmon.diagnose.rules.stalls import checkpoint_stall, periodic_stall
from trainmon.diagnose.thresholds import Thresholds

__all__ = [
    "Thresholds",
    "base_evidence",
    "checkpoint_stall",
    "compute_bound",
    "epoch_restart",
    "gpu_memory",
    "gpu_throttled",
    "hang",
    "hang_episodes",
    "host_memory",
    "host_overhead",
    "host_sync",
    "host_to_device",
    "input_bound",
    "insufficient",
    "no_tensor_cores",
    "periodic_stall",
    "small_work",
    "straggler",
]
