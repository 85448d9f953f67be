"""``make bench``: every benchmark of docs/overhead.md on this machine, one table, and benchmarks/results.md.

Every figure is held against its value in benchmarks/results.json as committed (benchmarks/_regress.py): one that got
more than 20 % worse, at the same ratio to its peers where the row names them, is printed as REGRESSED, written into
the results' context, and the run exits with status 1.

Each benchmark runs as its own process (``--json`` rows collected here), one after the other so they never
compete with each other; what else was running on the host is written down with the results.

    python benchmarks/run_all.py [--soak-minutes M] [--only NAME ...] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    BENCH,
    RESULTS_JSON,
    Row,
    format_table,
    markdown_table,
    other_load,
    read_results,
    read_rows,
    write_results,
)
from benchmarks._regress import committed_rows, regressions
from scripts.reference import overhead_page
from testsupport.paths import ROOT
from testsupport.procs import PY

RESULTS = BENCH / "results.md"
OVERHEAD = ROOT / "docs" / "overhead.md"  # the reference page of these figures (scripts/reference.py)


def benchmarks(soak_minutes: float) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {
        "agent_overhead": [],
        "vs_traceml": [],
        # trainmon's TUI beside nvitop and glances (tmux 120×40), trainmon record beside glances --stdout:
        # one healthy training (2 ranks × 10 steps/s, 1 GPU), then 16 ranks × 1000 steps/s on 8 GPUs.
        "side_by_side:everyday": ["--load", "everyday"],
        "side_by_side:heavy": ["--load", "heavy"],
        "ingest": [],
        "recording_size": [],
    }
    if soak_minutes:  # RSS over a long window: the everyday screen beside nvitop and glances, then the heavy load
        window = ["--rounds", "1", "--window", str(soak_minutes * 60), "--label", f" over {soak_minutes:g} min"]
        out["side_by_side:soak"] = ["--load", "everyday", "--phases", "screens", *window]
        out["monitor_cost"] = ["--soak-minutes", str(soak_minutes)]
    return out


def run_one(name: str, extra: list[str], tmp: str) -> tuple[list[Row], float]:
    out = os.path.join(tmp, f"{name.replace(':', '-')}.json")
    t0 = time.monotonic()
    print(f"== {name} {' '.join(extra)}", flush=True)
    script = name.split(":")[0]
    res = subprocess.run([PY, str(BENCH / f"{script}.py"), "--json", out, *extra], cwd=ROOT)
    took = time.monotonic() - t0
    if res.returncode != 0 or not os.path.exists(out):
        return [Row(f"{name}", "", "failed", met=False, note=f"exit status {res.returncode}")], took
    return read_rows(Path(out)), took


def host_line() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs, {mem:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def git_rev() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return f"{rev}{' + uncommitted changes' if dirty else ''}"


def markdown(rows: list[Row], context: list[str]) -> str:
    lines = ["# Benchmark results", "", "Written by `make bench` (benchmarks/run_all.py); do not edit by hand.", ""]
    lines += [f"- {c}" for c in context]
    lines += ["", *markdown_table(rows), "", "## Notes", ""]
    lines += [f"- **{r.figure}**: {r.note}" for r in rows if r.note]
    return "\n".join(lines) + "\n"


def merged(old: list[Row], fresh: list[Row]) -> list[Row]:
    """The last run's rows with those of the benchmarks run again (same source, or same figure for rows written before
    rows named their source) replaced by the fresh ones, in the place of the first of them."""
    sources = {r.source for r in fresh}
    figures = {r.figure for r in fresh}
    out: list[Row] = []
    placed = False
    for r in old:
        if r.source in sources or r.figure in figures:
            if not placed:
                out += fresh
                placed = True
            continue
        out.append(r)
    return out if placed else out + fresh


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--soak-minutes", type=float, default=0.0, help="also a monitor_cost soak of this many minutes")
    ap.add_argument("--only", nargs="*", default=None, help="run only these benchmarks")
    ap.add_argument("--no-write", action="store_true", help="do not rewrite benchmarks/results.md")
    args = ap.parse_args()
    committed = committed_rows()  # the budget: what was last committed, before this run writes anything
    tmp = tempfile.mkdtemp(prefix="tm-bench-all-")
    before = other_load()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    rows: list[Row] = []
    timings = []
    for name, extra in benchmarks(args.soak_minutes).items():
        if args.only and name not in args.only and name.split(":")[0] not in args.only:
            continue
        got, took = run_one(name, extra, tmp)
        if name == "side_by_side:soak":  # a long window is for RSS; the CPU figures are the short windows'
            got = [r for r in got if "RSS" in r.figure]
        for r in got:
            r.source = name
        rows += got
        timings.append(f"{name} {took:.0f} s")
    after = other_load()
    context = [
        f"run {started} at {git_rev()}; {host_line()}",
        f"host before: {before}; after: {after}",
        f"durations: {', '.join(timings)}",
    ]
    print()
    print(format_table(rows))
    print()
    for c in context:
        print(c)
    missed = [r.figure for r in rows if r.met is False]
    print(
        f"{len([r for r in rows if r.met])} targets met, {len(missed)} missed"
        + (f": {'; '.join(missed)}" if missed else "")
    )
    regressed = regressions(committed, rows)
    for r in regressed:
        print(r.line())
    print(f"{len(regressed)} figures REGRESSED against results.json at HEAD" if regressed else "no figure regressed")
    context.append(
        "against the committed results: " + ("; ".join(r.line() for r in regressed) if regressed else "no regression")
    )
    if not args.no_write:
        if args.only and RESULTS_JSON.exists():  # a partial run replaces its own rows among the last full run's
            old_context, old_rows = read_results()
            rows = merged(old_rows, rows)
            context = [*old_context, f"rerun {started} ({', '.join(args.only)}): {context[0]}"]
        write_results(context, rows)
        RESULTS.write_text(markdown(rows, context))
        OVERHEAD.write_text(overhead_page())
        print(
            f"wrote {RESULTS.relative_to(ROOT)}, {RESULTS_JSON.relative_to(ROOT)} and {OVERHEAD.relative_to(ROOT)} "
            "(the notes under the table in results.md say how each figure was measured)"
        )
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())
