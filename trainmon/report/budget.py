"""A run's time budget as the report keeps it (``runs[].time_budget``) and as its formats print it."""

from __future__ import annotations

from trainmon.analyses.time_budget import NOT_MEASURED, PRECEDENCE, time_budget
from trainmon.diagnose.thresholds import Thresholds
from trainmon.report.schema import TimeBudgetRow
from trainmon.store.run import Run

# How the formats name each part, and the colour the HTML report gives it.
LABELS = {
    "unobserved_before": "before the first step",
    "warmup": "warm-up",
    "data_wait": "data wait",
    "communication": "communication",
    "compute": "compute",
    "evaluation": "evaluation",
    "checkpoints": "checkpoints",
    "epoch_restarts": "epoch restarts",
    "gc": "garbage collection",
    "compilation": "torch.compile",
    "long_steps": "long steps",
    "frozen": "frozen",
    "unobserved_gaps": "between steps",
    "unobserved_after": "after the last step",
}


COLOURS = {
    "unobserved_before": "#bdbdbd",
    "warmup": "#90a4ae",
    "data_wait": "#ef6c00",
    "communication": "#6a1b9a",
    "compute": "#1565c0",
    "evaluation": "#00838f",
    "checkpoints": "#ad1457",
    "epoch_restarts": "#558b2f",
    "gc": "#4e342e",
    "compilation": "#d81b60",
    "long_steps": "#f9a825",
    "frozen": "#c62828",
    "unobserved_gaps": "#e0e0e0",
    "unobserved_after": "#9e9e9e",
}


def budget_row(run: Run, first: float, end: float, th: Thresholds) -> TimeBudgetRow | None:
    """The run's time budget up to ``end``, its times in seconds from ``first`` (the report's start)."""
    budget = time_budget(run, end, th)
    if budget is None:
        return None
    return {
        "start_s": round(budget.start - first, 3),
        "end_s": round(budget.end - first, 3),
        "wall_s": round(budget.wall_s, 3),
        "parts_s": {k: round(v, 3) for k, v in budget.parts.items()},
        "long_steps_by_cause": {k: round(v, 3) for k, v in sorted(budget.long_steps.items(), key=lambda kv: -kv[1])},
        "compute_parts_s": {k: round(v, 3) for k, v in budget.compute.items()},
        "freezes": [
            {"t": round(f.start - first, 2), "length_s": round(f.seconds, 2), "resumed": f.resumed}
            for f in budget.freezes
        ],
        "precedence": list(PRECEDENCE),
        "not_measured": list(NOT_MEASURED),
        "steps_trimmed": budget.trimmed,
    }


def budget_parts(row: TimeBudgetRow, least: float = 0.0005) -> list[tuple[str, str, float, float]]:
    """(part, label, seconds, share of the wall time) of the parts that hold at least ``least`` of it, largest
    first."""
    wall = row["wall_s"]
    if wall <= 0:
        return []
    parts = [(k, v, v / wall) for k, v in row["parts_s"].items() if v / wall >= least]
    out = []
    for key, seconds, share in sorted(parts, key=lambda p: -p[1]):
        label = LABELS.get(key, key)
        if key == "long_steps" and row["long_steps_by_cause"]:
            causes = ", ".join(f"{c} {s:.1f} s" for c, s in row["long_steps_by_cause"].items())
            label += f" ({causes})"
        out.append((key, label, seconds, share))
    return out


def budget_summary(row: TimeBudgetRow) -> str:
    """One line: the wall time, then each part's share, largest first."""
    parts = " · ".join(f"{label} {share:.0%}" for _, label, _, share in budget_parts(row, 0.005))
    return f"{row['wall_s']:.1f} s: {parts}" if parts else f"{row['wall_s']:.1f} s"


def freeze_lines(row: TimeBudgetRow) -> list[str]:
    """One line per frozen span: when, how long, whether it resumed."""
    return [
        f"frozen at {f['t']:.1f} s for {f['length_s']:.1f} s, "
        + ("then resumed" if f["resumed"] else "until the run or the recording ended")
        for f in row["freezes"]
    ]


def budget_blocks(runs: list[tuple[str, TimeBudgetRow | None]]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Per run with a budget: its heading and (part, seconds, share) cells, largest first, then its freezes."""
    out = []
    for name, row in runs:
        if row is None:
            continue
        heading = f"{name}: {row['wall_s']:.1f} s from {row['start_s']:.1f} s"
        if row["steps_trimmed"]:
            heading += " (its oldest steps no longer held)"
        cells = [(label, f"{seconds:.1f} s", f"{share:.1%}") for _, label, seconds, share in budget_parts(row)]
        cells += [(line, "", "") for line in freeze_lines(row)]
        out.append((heading, cells))
    return out


BUDGET_TITLE = "Time budget"
BUDGET_NOTE = "every second of each run's wall time in one part; where spans overlap: " + " > ".join(
    LABELS.get(k, k) for k in PRECEDENCE
)
