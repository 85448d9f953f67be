"""Every job, node and rank that trainmon monitors report to one Prometheus, at one instant, and each job's
headline verdict across its nodes. Headless (the TUI and ``--once`` both draw this).

A rank is one run of a monitor (``instance``, ``pid``); ranks of one job share its ``job_id`` on every node; a
node is one monitor. A job's headline is a straggler where one rank's step time or data wait diverges from the
job's median by the straggler rule's own thresholds (``Thresholds.straggler_step_ratio`` and ``straggler_wait_gap``,
which the contrib alerts use too; a config file sets them here as for every monitor), else the worst verdict its
ranks' own monitors give, with how many ranks hold it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainmon import metrics as M
from trainmon.cluster.prom import ClusterError, Prometheus, Sample
from trainmon.diagnose.findings import CODES, SEVERITIES
from trainmon.diagnose.thresholds import Thresholds
from trainmon.metrics import GPU, HOST

GPU_UTIL = GPU.fields["util"].prom or ""
CPU_BUSY = HOST["cpu.busy"].prom or ""
METRICS = (
    M.STEP_TIME.exposed,
    M.DATA_WAIT.exposed,
    M.SAMPLES_RATE.exposed,
    M.RUN_CONNECTED.exposed,
    M.RUN_VERDICT.exposed,
    M.RUN_GPU.exposed,
    M.STEPS.exposed,
    M.VERDICT.exposed,
    GPU_UTIL,
    M.GPU_THROTTLED.exposed,
    CPU_BUSY,
)
RUN_FIGURES = {
    M.STEP_TIME.exposed: "step_s",
    M.DATA_WAIT.exposed: "data_wait",
    M.SAMPLES_RATE.exposed: "samples_per_s",
    M.STEPS.exposed: "steps",
}


@dataclass
class RowVerdict:
    code: str
    severity: str
    summary: str = ""

    @property
    def order(self) -> tuple[int, int]:
        """Worse first: severity, then the code table's priority (read at use: codes are added over time)."""
        codes = list(CODES)
        return (-SEVERITIES.index(self.severity), codes.index(self.code) if self.code in codes else len(codes))


@dataclass
class RankRow:
    instance: str  # the monitor that reports it (Prometheus's scrape target)
    pid: str
    job_id: str
    node: str
    rank: str
    name: str
    connected: bool = True
    verdict: RowVerdict | None = None
    step_s: float | None = None
    data_wait: float | None = None
    samples_per_s: float | None = None
    steps: float | None = None
    gpus: list[str] = field(default_factory=list)
    gpu_util: float | None = None
    throttled: int = 0

    @property
    def key(self) -> str:
        return f"rank|{self.instance}|{self.pid}"

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank else f"pid {self.pid}"


@dataclass
class NodeRow:
    instance: str
    host: str
    verdict: RowVerdict | None = None
    gpu_util: float | None = None
    gpus: int = 0
    throttled: int = 0
    cpu_busy: float | None = None

    @property
    def key(self) -> str:
        return f"node|{self.instance}"


@dataclass
class JobView:
    job_id: str  # "" for a lone process (shown by its node and pid)
    ranks: list[RankRow]
    nodes: list[NodeRow]
    headline: RowVerdict
    step_median_s: float | None = None
    wait_median: float | None = None
    straggler: RankRow | None = None

    @property
    def key(self) -> str:
        return f"job|{self.job_id or self.ranks[0].key}"

    @property
    def label(self) -> str:
        return f"job {self.job_id}" if self.job_id else f"{self.ranks[0].node} pid {self.ranks[0].pid}"


@dataclass
class ClusterState:
    url: str
    jobs: list[JobView]
    nodes: list[NodeRow]
    alerts: list[dict[str, Any]]
    th: Thresholds = field(default_factory=Thresholds)  # what judged its stragglers


def _median(values: Iterable[float | None]) -> float | None:
    known = sorted(v for v in values if v is not None and math.isfinite(v))
    if not known:
        return None
    mid = len(known) // 2
    return known[mid] if len(known) % 2 else (known[mid - 1] + known[mid]) / 2


def _mean(values: Iterable[float]) -> float | None:
    known = [v for v in values if math.isfinite(v)]
    return sum(known) / len(known) if known else None


def fetch(prom: Prometheus, th: Thresholds | None = None) -> ClusterState:
    """One instant of the cluster; ClusterError when Prometheus cannot be read or has no trainmon series."""
    samples = prom.query(f"{{__name__=~{_quoted('|'.join(METRICS))}}}")
    if not samples:
        raise ClusterError(
            f"Prometheus at {prom.url} has no trainmon series: does it scrape monitors started with "
            "trainmon --prometheus HOST:PORT (or trainmon record --prometheus)?"
        )
    try:
        alerts = prom.alerts()
    except ClusterError:
        alerts = []
    return build(prom.url, samples, alerts, th)


def _quoted(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build(url: str, samples: list[Sample], alerts: list[dict[str, Any]], th: Thresholds | None = None) -> ClusterState:
    th = th or Thresholds()
    runs: dict[tuple[str, str], RankRow] = {}
    nodes: dict[str, NodeRow] = {}
    gpu_util: dict[tuple[str, str], float] = {}
    throttled: dict[tuple[str, str], float] = {}
    run_gpus: list[tuple[tuple[str, str], str]] = []
    for s in samples:
        inst = s.labels.get("instance", "")
        node = nodes.setdefault(inst, NodeRow(inst, s.labels.get("host", inst)))
        if s.name == M.VERDICT.exposed:
            node.verdict = RowVerdict(s.labels.get("code", "?"), _severity(s.labels))
        elif s.name == GPU_UTIL:
            gpu_util[(inst, s.labels.get("gpu", ""))] = s.value
        elif s.name == M.GPU_THROTTLED.exposed:
            throttled[(inst, s.labels.get("gpu", ""))] = s.value
        elif s.name == CPU_BUSY:
            node.cpu_busy = s.value
        elif "pid" in s.labels:
            run = _run(runs, inst, s.labels)
            if s.name in RUN_FIGURES:
                setattr(run, RUN_FIGURES[s.name], s.value if math.isfinite(s.value) else None)
            elif s.name == M.RUN_CONNECTED.exposed:
                run.connected = s.value == 1
            elif s.name == M.RUN_VERDICT.exposed:
                run.verdict = RowVerdict(s.labels.get("code", "?"), _severity(s.labels))
            elif s.name == M.RUN_GPU.exposed:
                run_gpus.append(((inst, s.labels["pid"]), s.labels.get("gpu", "")))
    for key, gpu in run_gpus:
        runs[key].gpus.append(gpu)
    for run in runs.values():
        run.gpus.sort()
        run.gpu_util = _mean(gpu_util[(run.instance, g)] for g in run.gpus if (run.instance, g) in gpu_util)
        run.throttled = sum(1 for g in run.gpus if throttled.get((run.instance, g), 0) == 1)
    for node in nodes.values():
        mine = [k for k in gpu_util if k[0] == node.instance]
        node.gpus = len(mine)
        node.gpu_util = _mean(gpu_util[k] for k in mine)
        node.throttled = sum(1 for k, v in throttled.items() if k[0] == node.instance and v == 1)
    jobs = _jobs(list(runs.values()), nodes, th)
    shown_nodes = sorted(nodes.values(), key=lambda n: (n.host, n.instance))
    return ClusterState(url, jobs, shown_nodes, alerts, th)


def _severity(labels: dict[str, str]) -> str:
    sev = labels.get("severity", "ok")
    return sev if sev in SEVERITIES else "ok"


def _run(runs: dict[tuple[str, str], RankRow], inst: str, labels: dict[str, str]) -> RankRow:
    key = (inst, labels["pid"])
    if key not in runs:
        runs[key] = RankRow(
            inst,
            labels["pid"],
            labels.get("job_id", ""),
            labels.get("node") or labels.get("host", inst),
            labels.get("rank", ""),
            labels.get("name", ""),
        )
    return runs[key]


def _rank_order(r: RankRow) -> tuple[int, str, str]:
    return (int(r.rank) if r.rank.isdigit() else 1 << 30, r.node, r.pid)


def _jobs(runs: list[RankRow], nodes: dict[str, NodeRow], th: Thresholds) -> list[JobView]:
    groups: dict[str, list[RankRow]] = {}
    for r in runs:
        groups.setdefault(r.job_id or r.key, []).append(r)
    jobs = []
    for ranks in groups.values():
        ranks.sort(key=_rank_order)
        its_nodes = sorted(
            {nodes[r.instance].instance: nodes[r.instance] for r in ranks}.values(), key=lambda n: n.host
        )
        jobs.append(judge(JobView(ranks[0].job_id, ranks, its_nodes, RowVerdict("insufficient_data", "ok")), th))
    return sorted(jobs, key=lambda j: (j.headline.order, j.label))


def judge(job: JobView, th: Thresholds) -> JobView:
    """The job's medians over its connected ranks, its straggler if one diverges, and its headline."""
    live = [r for r in job.ranks if r.connected]
    job.step_median_s = _median(r.step_s for r in live)
    job.wait_median = _median(r.data_wait for r in live)
    if len(live) > 1:
        job.straggler, job.headline = _straggler(job, live, th) or (None, job.headline)
        if job.straggler is not None:
            return job
    verdicts = [r.verdict for r in live if r.verdict is not None]
    if not verdicts:
        job.headline = RowVerdict("insufficient_data", "ok", "no rank has a verdict yet")
        return job
    worst = min(verdicts, key=lambda v: v.order)
    holding = [r for r in live if r.verdict is not None and r.verdict.code == worst.code]
    where = sorted({r.node for r in holding})
    job.headline = RowVerdict(
        worst.code, worst.severity, f"{len(holding)} of {len(live)} rank(s) on {', '.join(where)} ({worst.code})"
    )
    return job


def _straggler(job: JobView, live: list[RankRow], th: Thresholds) -> tuple[RankRow, RowVerdict] | None:
    med_step, med_wait = job.step_median_s, job.wait_median
    ratio, gap = th.straggler_step_ratio, th.straggler_wait_gap
    slow = [r for r in live if r.step_s is not None and med_step and r.step_s > ratio * med_step]
    waiting = [r for r in live if r.data_wait is not None and med_wait is not None and r.data_wait > med_wait + gap]
    if slow and med_step:
        r = max(slow, key=lambda x: x.step_s or 0.0)
        why = f"steps in {(r.step_s or 0) * 1e3:.0f} ms, {(r.step_s or 0) / med_step - 1:.0%} above the job's median"
    elif waiting and med_wait is not None:
        r = max(waiting, key=lambda x: x.data_wait or 0.0)
        why = f"waits on data {r.data_wait or 0:.0%} of its step, the job's median {med_wait:.0%}"
    else:
        return None
    own = f"; its own verdict: {r.verdict.code}" if r.verdict is not None else ""
    return r, RowVerdict("dist.straggler", "warning", f"{r.label} on {r.node} {why}{own}")


def alerts_for(state: ClusterState, key: str) -> list[dict[str, Any]]:
    """The active alerts about a row: a job's (by job_id), a node's (its instance), a rank's (instance and pid)."""
    out = []
    for a in state.alerts:
        labels = a["labels"]
        kind, _, rest = key.partition("|")
        if kind == "job":
            hit = labels.get("job_id") == rest
        elif kind == "node":
            hit = labels.get("instance") == rest and "pid" not in labels
        else:
            inst, _, pid = rest.partition("|")
            hit = labels.get("instance") == inst and labels.get("pid") == pid
        if hit:
            out.append(a)
    return out
