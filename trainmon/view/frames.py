"""The frame models: everything one screen draws, as plain data (what each pane shows, the shared time axis).

A :class:`Frame` is built by :mod:`trainmon.view.frame_builder`; the TUI only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainmon.diagnose.findings import Finding
from trainmon.numbers import NAN


@dataclass
class Axis:
    t0: float
    t1: float
    cols: int
    sub: int
    cursor_col: int | None
    cursor_t: float | None
    ticks: list[tuple[int, str]]
    cursor_label: str
    col_dt: float

    @property
    def buckets(self) -> int:
        return self.cols * self.sub


@dataclass
class StackEvidenceView:
    """Stacks the monitor dumped by itself when a critical verdict fired for a run (py-spy), as lines."""

    run: str  # "rank 1" or "pid 4242"
    reason: str  # the verdict code that fired
    at_label: str  # when the dump was taken
    lines: list[str]


@dataclass
class VerdictView:
    code: str
    severity: str
    summary: str
    advice: list[str]
    evidence: dict[str, Any]
    findings: list[Finding]
    since_s: float | None  # how long this verdict has held at the shown instant
    at_label: str
    stacks: list[StackEvidenceView] = field(default_factory=list)  # for the findings shown, taken by then


@dataclass
class StripCell:
    code: str | None
    severity: str | None
    change: bool = False  # the verdict changed in this column


@dataclass
class RunValues:
    step_ms: float = NAN
    wait_ms: float = NAN
    compute_ms: float = NAN
    wait_pct: float = NAN
    samples_s: float = NAN
    tokens_s: float = NAN  # sequence batches: non-padding tokens per second
    steps_s: float = NAN
    steps_total: int = 0


@dataclass
class RunView:
    key: int
    label: str  # "rank 1" or "pid 4242"
    name: str
    pid: int
    state: str  # "running", "ended: exit", ...
    loader: str  # "bs 32 · 2 workers · pin off · persistent"
    wait_ms: list[float]
    compute_ms: list[float]
    samples_s: list[float]
    wait_pct: list[float]
    marks: list[str]  # per column: "" or one letter: C checkpoint, E eval, M user mark
    values: RunValues
    # Its time budget up to the instant shown: (part's short name, share of its wall time), largest first.
    budget: list[tuple[str, float]] = field(default_factory=list)


@dataclass
class AgentlessView:
    pid: int
    wait_share: list[float]
    checkpoint_share: list[float]
    values: dict[str, float]
    name: str = ""  # the script, for a training found running without an agent


@dataclass
class EnergyView:
    """A run's GPU energy over the live window before the instant shown (``trainmon.analyses.energy_per_step``)."""

    run: str  # "rank 1" or "pid 4242"
    j_step: float
    j_sample: float
    method: str  # "nvml_counter", "power_integration", "mixed"
    gpus: list[int]
    shared: bool  # another run trains on one of these GPUs: the figures are the whole GPUs'


@dataclass
class GpuView:
    index: int
    name: str
    util: list[float]
    util_max: list[float]
    mem_pct: list[float]
    values: dict[str, float]
    throttle: list[str]
    gpm: dict[str, float]
    label: str = ""  # "GPU0"; a MIG device: "MIG0.1" (MIG index 1 of GPU 0)
    util_note: str = ""  # why NVML gives no utilisation: "n/a on MIG", "n/a in MIG mode"
    mig_of: int | None = None  # a MIG device's GPU
    mig_profile: str = ""  # "3g.40gb"
    energy: list[EnergyView] = field(default_factory=list)  # the runs training on this GPU


@dataclass
class CpuView:
    busy: list[float]
    iowait: list[float]
    mem_pct: list[float]
    per_core: list[float]
    values: dict[str, float]


@dataclass
class DiskView:
    name: str
    read: list[float]
    write: list[float]
    util: list[float]
    values: dict[str, float]
    activity: float


NS_NOTE = "n/a (other pid namespace)"


@dataclass
class ProcRow:
    pid: int
    role: str
    name: str
    cpu_pct: float
    state_r: float
    state_s: float
    state_d: float
    rss_mb: float
    read_mb_s: float
    gpu_mb: float
    # Set where the row has no figures because its pid is not the monitor's: "n/a (other pid namespace)".
    # Its pid is then the agent's own, which names another process here: never read, never dumped.
    note: str = ""
    run_id: int | None = None
    # Where gpu_mb came from when NVML's pids are not the monitor's: "host pid 3456789 (NVML), …", or why n/a.
    gpu_source: str = ""

    @property
    def key(self) -> str:
        """The row's identity in the table: the pid, or (no figures) the run and the agent's pid."""
        return f"ns{self.run_id}-{self.pid}" if self.note else str(self.pid)


@dataclass
class Frame:
    seq: int
    live: bool
    status: tuple[str, str]  # ("LIVE", ""), ("PAUSED", ...), ("REPLAY", "2× 0:12/0:30"), ("END", ...)
    window_s: float
    paused: bool
    focus: str | None
    axis: Axis
    verdict: VerdictView | None
    strip: list[StripCell]
    runs: list[RunView]
    agentless: list[AgentlessView]
    gpus: list[GpuView]
    gpu_error: str | None
    cpu: CpuView
    disks: list[DiskView]
    procs: list[ProcRow]
    notice: str | None = None
    self_cost: str | None = None  # "trainmon 0.8% CPU 48M": what watching costs at the instant shown

    @property
    def instant(self) -> float:
        """The instant the values columns describe: the cursor, else the right edge."""
        return self.axis.cursor_t if self.axis.cursor_t is not None else self.axis.t1


@dataclass
class Layout:
    """What the screen can hold: plot columns and samples per column."""

    cols: int = 60
    sub: int = 2
