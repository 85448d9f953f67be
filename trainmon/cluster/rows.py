"""The cluster as table rows (job, its nodes, each node's ranks) and a row's evidence, as plain strings: what the
TUI's table shows cell for cell and what ``trainmon cluster --once`` prints."""

from __future__ import annotations

from dataclasses import dataclass

from trainmon.cluster.state import (
    ClusterState,
    JobView,
    NodeRow,
    RankRow,
    RowVerdict,
    alerts_for,
)
from trainmon.diagnose.findings import CODES

COLUMNS = ("", "job / node / rank", "verdict", "step ms", "data wait", "samples/s", "GPU %", "throttled")


@dataclass(frozen=True)
class Row:
    key: str
    kind: str  # "job", "node", "rank"
    cells: tuple[str, ...]
    severity: str | None  # colours the verdict cell (None: no verdict)


def _num(v: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _verdict(v: RowVerdict | None) -> str:
    return v.code if v is not None else "n/a"


def rows(state: ClusterState) -> list[Row]:
    out: list[Row] = []
    for job in state.jobs:
        sps = [r.samples_per_s for r in job.ranks if r.samples_per_s is not None]
        out.append(
            Row(
                job.key,
                "job",
                (
                    "JOB",
                    job.label,
                    job.headline.code,
                    _num(job.step_median_s * 1e3 if job.step_median_s is not None else None),
                    _pct(job.wait_median),
                    _num(sum(sps) if sps else None),
                    _num(_job_gpu(job), "{:.0f}"),
                    str(sum(r.throttled for r in job.ranks)),
                ),
                job.headline.severity,
            )
        )
        for node in job.nodes:
            out.append(_node_row(node, "  "))
            for r in (r for r in job.ranks if r.instance == node.instance):
                out.append(_rank_row(r))
    return out


def _job_gpu(job: JobView) -> float | None:
    utils = [r.gpu_util for r in job.ranks if r.gpu_util is not None]
    return sum(utils) / len(utils) if utils else None


def _node_row(node: NodeRow, indent: str) -> Row:
    return Row(
        f"{node.key}",
        "node",
        (
            "NODE",
            f"{indent}{node.host}",
            _verdict(node.verdict),
            "",
            "",
            "",
            _num(node.gpu_util, "{:.0f}"),
            f"{node.throttled}/{node.gpus}" if node.gpus else "n/a",
        ),
        node.verdict.severity if node.verdict else None,
    )


def _rank_row(r: RankRow) -> Row:
    step = _num(r.step_s * 1e3 if r.step_s is not None else None)
    return Row(
        r.key,
        "rank",
        (
            "RANK" if r.connected else "GONE",
            f"    {r.label} pid {r.pid}" if r.rank else f"    {r.label}",
            _verdict(r.verdict),
            step,
            _pct(r.data_wait),
            _num(r.samples_per_s),
            _num(r.gpu_util, "{:.0f}"),
            f"{r.throttled}/{len(r.gpus)}" if r.gpus else "n/a",
        ),
        r.verdict.severity if r.verdict else None,
    )


def table_text(state: ClusterState) -> str:
    """The whole cluster as an aligned text table (``trainmon cluster --once``)."""
    body = [COLUMNS, *(r.cells for r in rows(state))]
    widths = [max(len(row[i]) for row in body) for i in range(len(COLUMNS))]
    lines = [f"trainmon cluster — {state.url}: {len(state.jobs)} job(s), {len(state.nodes)} node(s)", ""]
    for n, row in enumerate(body):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    for job in state.jobs:
        lines += ["", f"{job.label}: {job.headline.code} [{job.headline.severity}] {job.headline.summary}".rstrip()]
    return "\n".join(lines) + "\n"


def evidence(state: ClusterState, key: str) -> list[str]:
    """What a row rests on: its identity, figures, its job's medians, the verdicts and the alerts about it."""
    for job in state.jobs:
        if job.key == key:
            return _job_evidence(state, job)
        for node in job.nodes:
            if node.key == key:
                return _node_evidence(state, node)
        for r in job.ranks:
            if r.key == key:
                return _rank_evidence(state, job, r)
    return ["that row is no longer in Prometheus"]


def _meaning(v: RowVerdict | None) -> list[str]:
    if v is None:
        return ["verdict: none reported yet"]
    return [f"verdict: {v.code} [{v.severity}] — {CODES.get(v.code, 'a code this trainmon does not know')}"]


def _alerts(state: ClusterState, key: str) -> list[str]:
    found = alerts_for(state, key)
    if not found:
        return ["alerts: none active"]
    out = ["alerts:"]
    for a in found:
        summary = (a.get("annotations") or {}).get("summary", "")
        out.append(f"  {a['labels'].get('alertname', '?')} ({a.get('state', '?')}): {summary}".rstrip(": "))
    return out


def _job_evidence(state: ClusterState, job: JobView) -> list[str]:
    lines = [
        job.label,
        f"headline: {job.headline.code} [{job.headline.severity}] {job.headline.summary}".rstrip(),
        f"ranks: {len(job.ranks)} on {len(job.nodes)} node(s): " + ", ".join(n.host for n in job.nodes),
        f"median step time: {_num(job.step_median_s * 1e3 if job.step_median_s else None)} ms;"
        f" median data wait: {_pct(job.wait_median)}",
        f"a straggler: step time over {state.th.straggler_step_ratio:g}× the median, or data wait "
        f"{state.th.straggler_wait_gap:.0%} above it",
    ]
    for r in job.ranks:
        lines.append(
            f"  {r.label} on {r.node}: {_verdict(r.verdict)}, step {_num(r.step_s * 1e3 if r.step_s else None)} ms,"
            f" data wait {_pct(r.data_wait)}"
        )
    return lines + _alerts(state, job.key)


def _node_evidence(state: ClusterState, node: NodeRow) -> list[str]:
    return [
        f"node {node.host} (monitor {node.instance})",
        *_meaning(node.verdict),
        f"CPU busy: {_num(node.cpu_busy)} %",
        f"GPUs: {node.gpus}, utilisation {_num(node.gpu_util, '{:.0f}')} %, throttled {node.throttled}",
        *_alerts(state, node.key),
    ]


def _rank_evidence(state: ClusterState, job: JobView, r: RankRow) -> list[str]:
    lines = [
        f"{r.label} (pid {r.pid}, {r.name or 'python'}) of {job.label} on {r.node}",
        *_meaning(r.verdict),
        f"connected: {'yes' if r.connected else 'no'}; steps: {_num(r.steps, '{:.0f}')}",
        f"step time p50: {_num(r.step_s * 1e3 if r.step_s is not None else None)} ms"
        + _versus(r.step_s, job.step_median_s, ratio=True),
        f"data wait: {_pct(r.data_wait)}" + _versus(r.data_wait, job.wait_median, ratio=False),
        f"samples/s: {_num(r.samples_per_s)}",
        f"GPUs: {', '.join(r.gpus) or 'none known'}; utilisation {_num(r.gpu_util, '{:.0f}')} %;"
        f" throttled {r.throttled}",
    ]
    if job.straggler is r:
        lines.append(f"the job's straggler: {job.headline.summary}")
    return lines + _alerts(state, r.key)


def _versus(value: float | None, median: float | None, *, ratio: bool) -> str:
    if value is None or median is None:
        return ""
    if ratio:
        return f" ({value / median:.2f}× the job's median {median * 1e3:.1f} ms)" if median else ""
    return f" ({(value - median) * 100:+.1f} points from the job's median {median:.1%})"
