"""The verdict registry: one declaration per code, read by everything that treats verdicts differently.

The engine (which codes end a run's judgement), the verdict tracker and the report's headline (``immediate``), the
monitor (``reads_states``: the thread-state sampler looks fast while such a finding stands), automatic stack dumps
(``dump_workers``), every report format (``colour``, ``meaning``), Prometheus (the code set) and the README's verdict
table (a test holds the table to this one) all read it. The order of ``VERDICTS`` is the priority among findings of
the same severity (the first wins). Codes are a public contract: add, never rename.

Adding a verdict: a declaration here, a rule module in ``diagnose/rules/`` registered in its ``RULES``, a row in the
README's verdict table, a scenario (docs/architecture.md, "Where a change goes").
"""

from __future__ import annotations

from dataclasses import dataclass

INPUT_COLOUR = "#c62828"
GREY = "#616161"


@dataclass(frozen=True)
class Verdict:
    code: str
    meaning: str  # one line: what holds when this code is given
    colour: str = GREY  # in the HTML report's timeline and charts
    immediate: bool = False  # shown as soon as it holds, and heads a report that has it (a hang only gets worse)
    reads_states: bool = False  # its rule reads the thread states: they are sampled fast while it stands
    dump_workers: int = 1  # stack dumps when it turns critical: the main process and this many workers
    thresholds: tuple[str, ...] = ()  # the Thresholds fields its rule reads (the README's table names them)

    @property
    def family(self) -> str:
        """``input``, ``stall``, ``gpu``...: the part before the dot (the code itself when it has none)."""
        return self.code.split(".", 1)[0]


_INPUT = ("wait_warning", "wait_critical")

VERDICTS: tuple[Verdict, ...] = (
    Verdict(
        "stall.hang",
        "no step for far longer than usual while the process lives (stacks dumped automatically)",
        "#b71c1c",
        immediate=True,
        reads_states=True,
        dump_workers=8,
        thresholds=("hang_min_s", "hang_step_factor"),
    ),
    Verdict(
        "stall.checkpoint",
        "checkpoint saves take a material share of wall time",
        "#6a1b9a",
        reads_states=True,
        thresholds=("checkpoint_share", "checkpoint_critical_share"),
    ),
    Verdict(
        "stall.recompile",
        "torch.compile recompilations (or an eager fallback at the recompile limit) take a material share of the time",
        "#d81b60",
        thresholds=("compile_share", "compile_critical_share"),
    ),
    Verdict(
        "dist.straggler",
        "one rank is slower than the rest",
        "#00838f",
        thresholds=("straggler_wait_gap", "straggler_step_ratio", "straggler_score"),
    ),
    Verdict(
        "input.main_process",
        "data loads in the main process (num_workers=0) and the loop waits on it",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *_INPUT,
            "worker_busy_pct",
            "latency_workers_per_core",
            "advice_min_compute_share",
            "workers_ahead_share",
        ),
    ),
    Verdict(
        "input.io",
        "DataLoader workers mostly wait on reads rather than compute",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *_INPUT,
            "io_d_state",
            "disk_busy_pct",
            "disk_read_mb_s",
            "iowait_pct",
            "net_wait_share",
            "remote_rchar_mb_s",
            "io_block_read_share",
            "io_disk_read_mb_s",
            "io_remote_read_share",
        ),
    ),
    Verdict(
        "input.workers_cpu",
        "workers are CPU-bound and the host CPU is saturated",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(*_INPUT, "worker_busy_pct", "cpu_saturated_pct", "runq_starved_ms_s"),
    ),
    Verdict(
        "input.too_few_workers",
        "workers are busy all the time while the host has idle cores",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=(
            *_INPUT,
            "worker_busy_pct",
            "latency_workers_per_core",
            "runq_starved_ms_s",
            "workers_ahead_share",
            "advice_min_compute_share",
        ),
    ),
    Verdict(
        "input.epoch_restart",
        "worker start-up and first batches at every epoch (no persistent_workers) cost wall time",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=("epoch_restart_share", "epoch_restart_critical_share"),
    ),
    Verdict(
        "input.host_to_device",
        "host→device copies are exposed",
        INPUT_COLOUR,
        reads_states=True,
        thresholds=("h2d_pcie_rx_mb_s", "host_overhead_gpu_util"),
    ),
    Verdict(
        "dist.comm",
        "time in collectives is a material share of the step and no single rank explains it",
        "#0097a7",
        thresholds=("comm_share", "comm_critical_share"),
    ),
    Verdict(
        "host.overhead",
        "the main thread is busy outside data waits while the accelerator idles",
        "#283593",
        thresholds=("host_overhead_gpu_util", "host_overhead_main_cpu"),
    ),
    Verdict(
        "host.loop_code",
        "the loop's own per-step code (metrics, logging, progress bars, .item()) takes a material share of the step",
        "#1a237e",
        thresholds=("loop_code_share", "loop_code_critical_share"),
    ),
    Verdict(
        "host.sync",
        "the GPU drains every step because the host waits on it (.item(), .cpu(), synchronize)",
        "#3949ab",
        thresholds=("gpu_drained_pct", "gpu_busy_pct"),
    ),
    Verdict(
        "gpu.small_work",
        "the GPU reports busy but its SMs are mostly idle: small batches, tiny or launch-bound kernels",
        "#e65100",
        thresholds=("sm_active_low_pct", "gpu_busy_pct"),
    ),
    Verdict(
        "gpu.no_tensor_cores",
        "SMs active, tensor pipes idle on a GPU that has them: AMP / bf16 / TF32 unused",
        "#f57f17",
        thresholds=("tensor_idle_pct", "sm_active_low_pct"),
    ),
    Verdict(
        "memory.host_pressure",
        "host memory nearly full or swapping",
        "#4e342e",
        thresholds=("host_mem_pct", "swap_growth_mb"),
    ),
    Verdict("memory.gpu_pressure", "accelerator memory nearly full", "#4e342e", thresholds=("gpu_mem_pct",)),
    Verdict(
        "memory.creep",
        "a run's per-step peak accelerator memory grows steadily",
        "#6d4c41",
        thresholds=("creep_min_mb", "creep_min_s", "creep_rising_share", "creep_critical_min"),
    ),
    Verdict(
        "gpu.throttled",
        "clocks held down by power or thermal limits",
        "#d84315",
        thresholds=("throttle_share", "throttle_power_cap_clock"),
    ),
    Verdict(
        "stall.periodic",
        "recurring long steps (eval, logging bursts, GC)",
        "#8e24aa",
        reads_states=True,
        thresholds=("long_step_factor", "periodic_share", "periodic_irregularity", "gc_explains"),
    ),
    Verdict(
        "ok.compute_bound",
        "no starvation: the accelerator (or the compute) is the limit",
        "#2e7d32",
        thresholds=("wait_warning", "gpu_busy_pct", "wait_critical", "workers_ahead_share"),
    ),
    Verdict(
        "insufficient_data",
        "too few steps after warm-up to judge",
        "#9e9e9e",
        thresholds=("min_steps", "sampled_min_samples", "sampled_idle_cpu_pct"),
    ),
)

BY_CODE: dict[str, Verdict] = {v.code: v for v in VERDICTS}


def verdict(code: str) -> Verdict:
    """The declaration of ``code``; a code this trainmon does not know gets a neutral one (from a newer
    recording, or a Prometheus label)."""
    return BY_CODE.get(code) or Verdict(code, "a code this trainmon does not know")
