"""The runs table every human-readable format shows: its header and one row of cells per run."""

from __future__ import annotations

from trainmon.labels import run_label
from trainmon.report.schema import LoaderConfig, RunRow

RUN_HEADER = ["run", "steps", "step ms p50 / p95", "data wait", "samples/s", "loader"]


def fmt(value: object, suffix: str = "", digits: int = 1) -> str:
    """A figure for a cell: "n/a" when missing, floats to ``digits`` places."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}{suffix}"
    return f"{value}{suffix}"


def loader_cell(cfg: LoaderConfig | None) -> str:
    """Every DataLoader setting the report keeps, spelled out (screens use ``labels.loader_summary``)."""
    if not cfg:
        return "n/a"
    return (
        f"bs={fmt(cfg['batch_size'])} workers={fmt(cfg['num_workers'])} "
        f"pin={fmt(cfg['pin_memory'])} prefetch={fmt(cfg['prefetch_factor'])} "
        f"persistent={fmt(cfg['persistent_workers'])}"
    )


def _measured_as(run: RunRow) -> str:
    """How a wait no DataLoader measured was measured, beside the figure."""
    how = run.get("data_wait_measured_as")
    if run["data_wait_fraction"] is None or how in (None, "dataloader", "sampling"):
        return ""
    if how != "outside_model":
        return f" ({how})"
    counted = run.get("outside_model_steps")
    if counted and counted["estimated"]:  # timed in bursts: the rest took the measured steps' share
        timed = counted["measured"] / (counted["measured"] + counted["estimated"])
        return f" (outside model, {timed:.1%} of steps timed)"
    return " (outside model)"


def run_cells(run: RunRow) -> list[str]:
    """One run's row, in the order of RUN_HEADER."""
    st = run["step_time_ms"]
    wait = run["data_wait_fraction"]
    approx = "~" if run.get("measured_by") == "sampling" else ""
    return [
        f"{run_label(run['rank'], run['pid'])} {run['name']}".strip(),
        str(run["steps"]) if run["steps"] is not None else "sampled",
        f"{fmt(st['p50'])} / {fmt(st['p95'])}",
        approx + fmt(wait * 100 if wait is not None else None, "%") + _measured_as(run),
        fmt(run["samples_per_s"]),
        loader_cell(run["dataloader"]),
    ]
