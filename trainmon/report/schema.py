"""The report's shape: one TypedDict per part, so every format reads only keys the builder writes.

The JSON report is these dicts as built, keys in the order the builder writes them. Figures that come from a
table of sampled series (per disk, per GPU, per process) are named after the series, so they are plain
``dict[str, ...]`` maps rather than fixed keys.
"""

from __future__ import annotations

from typing import Any, TypedDict

# "<figure>_p50", "<figure>_p95", "<figure>_max" per sampled figure; ``cores`` for the CPU.
CpuFigures = dict[str, float | None]
DiskFigures = dict[str, float | None]
# "index", "<figure>_p50/_p95/_max" for each figure the GPU reported, "mem_total_mb", "power_limit_w",
# "throttle_reasons" (list of names), and "name"/"uuid" where the recording names its GPUs.
GpuFigures = dict[str, Any]
# "pid" and, for each process figure sampled, its median ("rss_mb": its maximum).
ProcFigures = dict[str, float | None]


class FigureStats(TypedDict):
    p50: float | None
    p95: float | None
    max: float | None


class OutsideModelSteps(TypedDict):
    measured: int
    estimated: int


class StepTimes(TypedDict):
    p50: float | None
    p95: float | None


class LoaderConfig(TypedDict):
    batch_size: int | None
    num_workers: int | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None


class JobIdentity(TypedDict):
    """Which job a run is a rank of, across nodes: the same ``id`` on every rank of the job."""

    id: str  # "" for a lone process
    node: str  # the node the rank trains on (TRAINMON_NODE, else its host name)
    global_rank: int | None


class Framework(TypedDict):
    """The trainer that drove a run's loop: "transformers", "lightning" or "accelerate", and its version."""

    name: str
    version: str | None


class ProcessFigures(TypedDict):
    """A run's main process and its DataLoader workers."""

    main: ProcFigures
    workers: list[ProcFigures]
    workers_cpu_pct_total: float | None
    workers_cpu_pct_mean: float | None


class EpochRestarts(TypedDict):
    """DataLoader workers started again by new iterators (no ``persistent_workers``), over the whole run."""

    epoch_restarts: int
    epoch_restart_s: float | None  # their cost: start-up and first batch beyond a normal wait
    epoch_restart_fraction: float | None  # that cost / the run's wall time from its first iterator with workers


class RunEnergyRow(TypedDict):
    """A run's GPU energy over its steady state, on its own GPUs (``trainmon.analyses.energy_per_step``)."""

    joules_per_step: float | None
    joules_per_sample: float | None
    joules_per_token: float | None  # sequence batches only
    method: str  # "nvml_counter", "power_integration" (power × time), or "mixed" (some intervals each way)
    joules: float | None  # over the steps measured
    steps: int  # the steady steps measured
    unmeasured_steps: int  # steady steps left out: some interval they touch had no energy figure
    gpus: list[int]
    # Other runs on these GPUs meanwhile: the figures are then the whole GPUs' energy, not split between them
    shared_with: list[str]


class RunEnergyPart(TypedDict, total=False):
    energy: RunEnergyRow  # only where the run's GPUs recorded energy and a steady step was measured


class RunSummary(EpochRestarts, RunEnergyPart):
    """One run's figures over its steady state (warm-up steps excluded)."""

    pid: int  # in the monitor's pid namespace where known (own, mapped); else (unmapped) the agent's own
    agent_pid: int  # the pid the training reported for itself, in its own pid namespace
    pid_namespace: str  # "own" (the monitor's), "mapped" (another, pids mapped), "unmapped" (never read)
    rank: int | None
    name: str
    host: str
    steps: int | None  # None: a run measured by sampling (no steps known)
    warmup_steps: int | None
    step_time_ms: StepTimes
    data_wait_fraction: float | None  # None: nothing measured it (no loader, the model not timed)
    exposed_wait_fraction: float | None  # share of step time the GPU sat idle because of waits (CUDA only)
    comm_fraction: float | None  # share of step time blocked in collectives (None: no communication measured)
    # What measured the data wait: a loader's __next__ ("dataloader", "torchdata", "iterable"), the steps' time outside
    # the model where no loader fed them ("outside_model"), "sampling" (py-spy, no agent), or None (nothing)
    data_wait_measured_as: str | None
    # "outside_model": the steps the agent timed, in bursts, and those between bursts given their share
    outside_model_steps: OutsideModelSteps | None
    # The steady step split (trainmon.diagnose.own_code.step_parts): data_wait, model, comm, own_code (shares), the
    # functions holding the own code; None where the agent never timed the model
    step_parts: dict[str, Any] | None
    samples_per_s: float | None
    tokens_per_s: float | None  # sequence batches: tokens (attention-mask-aware) per second of steady state
    dataloader: LoaderConfig | None
    # "loader": the DataLoader's batch_size; "batches": read off its batches (a batch sampler makes them); None
    batch_size_source: str | None
    loaders: int
    worker_pids: list[int]  # in the monitor's pid namespace (the workers that could be mapped)
    agent_worker_pids: list[int]  # as the training reported them
    checkpoints: int
    checkpoint_s: float | None
    device: str | None
    ended: str | None
    dropped_records: int
    argv: list[str] | None
    job: JobIdentity
    framework: Framework | None  # None: a plain PyTorch loop


class FreezeRow(TypedDict):
    """A frozen span of a run: from ``t`` (seconds from the report's start) for ``length_s``."""

    t: float
    length_s: float
    resumed: bool  # the run did something again at its end (else it ended with the run or the recording)


class TimeBudgetRow(TypedDict):
    """A run's wall time split so that every second lies in exactly one part (``trainmon.analyses.time_budget``):
    ``parts_s`` sum to ``wall_s``; where spans overlap the one first in ``precedence`` takes the time."""

    start_s: float  # the run's wall time, in seconds from the report's start
    end_s: float
    wall_s: float
    parts_s: dict[str, float]  # unobserved_before, warmup, data_wait, communication, compute, evaluation, ...
    long_steps_by_cause: dict[str, float]  # the long_steps part: the training's own phase, or "unexplained"
    # The compute part split into "model" (forward, backward, optimizer) and "own_code" (the loop's own code where the
    # agent timed the model, else 0): they sum to parts_s["compute"].
    compute_parts_s: dict[str, float]
    freezes: list[FreezeRow]
    precedence: list[str]
    not_measured: list[str]  # parts the store keeps nothing for (compilation)
    steps_trimmed: bool  # the oldest steps were no longer held: the budget starts at the oldest one kept


class Measurement(TypedDict):
    """How a run was measured (see RunRow)."""

    measured_by: str
    attached_at: float | None
    data_wait_samples: int | None


class RunRow(RunSummary):
    """A run as the report lists it: its summary plus its processes and the py-spy estimate.

    ``measured_by``: "agent", or "sampling" for a training found running without one (``steps`` null, its
    ``data_wait_fraction`` the share of py-spy samples of its main thread in data waits). ``attached_at``: seconds
    into the recording when ``trainmon attach`` injected the agent into the running process (null: the agent was
    there from the start)."""

    measured_by: str
    attached_at: float | None
    data_wait_samples: int | None  # sampling: the samples the estimate rests on (None for an agent's run)

    processes: ProcessFigures
    pyspy_data_wait_share: float | None
    gpus: list[int]  # the NVML indices of the run's own GPUs (none known: empty)
    # Stacks the monitor dumped when a critical verdict fired (format: trainmon.store.stacks; "t" in seconds
    # from the report's start), oldest first; none taken: empty.
    stack_dumps: list[dict[str, Any]]
    time_budget: TimeBudgetRow | None  # None: a run with no step (measured by sampling)


class FindingDict(TypedDict):
    code: str
    severity: str
    summary: str
    advice: list[str]
    # The same advice as data, item for item: kind ("setting", "env", "code"), knob and value (the first setting),
    # every setting, why, and the sentence. Advice recommending what the run already has is left out.
    advice_items: list[dict[str, Any]]
    evidence: dict[str, Any]


class HeldFinding(FindingDict):
    """A finding with the seconds it held over the report's phases (as the headline or beside it)."""

    held_s: float


class TimelineEntry(TypedDict):
    """One phase: from ``t`` to ``end`` (seconds from the start), judged over its own steps."""

    t: float
    code: str
    end: float
    severity: str
    summary: str


class MemoryFigures(TypedDict):
    used_percent_max: float | None
    swap_used_mb_max: float | None


class AgentCostFigures(TypedDict):
    """What a run's agent cost its training, as the agent measured it (``cost`` records) over the whole run: per step,
    its hooks on the training thread (their calls at their calibrated price) and its sender thread's CPU, in µs."""

    run: str
    per_step_us: float
    hooks_us: float
    sender_us: float
    share_of_step_time: float | None  # the cost over the time of the steps it was measured over


class MonitorCost(TypedDict):
    """What the watching cost, from the monitor's own series (``self.*``): CPU in % of one core, RSS in MiB (None for
    a recording without them); and each agent's own cost per step."""

    cpu_percent_p50: float | None
    cpu_percent_p95: float | None
    helpers_cpu_percent_p50: float | None  # py-spy sampling, beside the monitor
    rss_mb_max: float | None
    agents: list[AgentCostFigures]  # runs whose agent measured its cost (recordings since it does)


class _SystemOptional(TypedDict, total=False):
    gpu_error: str  # only when no GPU was sampled: why
    monitor_cost: MonitorCost  # recordings that sampled it (every one made since it exists)


class SystemSection(_SystemOptional):
    cpu: CpuFigures
    memory: MemoryFigures
    disks: dict[str, DiskFigures]
    gpus: list[GpuFigures]


class AgentlessProcess(TypedDict):
    """A process watched by py-spy only."""

    pid: int
    data_wait_share: float | None
    samples: int
    process: ProcFigures


class IdleProcess(TypedDict):
    """A process that attached the agent but never trained."""

    pid: int
    name: str


class RunSeries(TypedDict):
    run: str
    step_ms: list[float | None]
    wait_ms: list[float | None]
    steps_per_s: list[float]
    checkpoints: list[float]


class SeriesSection(TypedDict):
    """Binned series on one time axis: bin ``k`` covers ``[k * dt, (k + 1) * dt)`` s from the start."""

    dt: float
    bins: int
    runs: list[RunSeries]
    metrics: dict[str, list[float | None]]


class _ReportOptional(TypedDict, total=False):
    warnings: list[str]  # what the recording reader skipped (set by the caller)


class Report(_ReportOptional):
    trainmon_report: int
    duration_s: float
    runs: list[RunRow]
    verdict: HeldFinding
    findings: list[HeldFinding]
    timeline: list[TimelineEntry]
    system: SystemSection
    agentless: list[AgentlessProcess]
    idle_processes: list[IdleProcess]
    series: SeriesSection
    thresholds: dict[str, float]
    recording: dict[str, Any]
