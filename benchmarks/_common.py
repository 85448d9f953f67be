"""What only the benchmark scripts share: result rows, statistics, /proc readings, sleeping loads, side venvs.

Every benchmark script prints its own table and, with ``--json FILE``, writes its rows for run_all.py. Child
processes (environment, waiting, stopping) and the fake NVML come from testsupport, as for the tests.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from testsupport.paths import ROOT
from testsupport.procs import PY

BENCH = ROOT / "benchmarks"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Row:
    """One line of the results table."""

    figure: str
    target: str
    measured: str
    anchor: str = ""  # the side-by-side competitor's figure, measured in the same run
    met: bool | None = None  # None: no target, or not measured
    note: str = ""
    source: str = ""  # the benchmark that made it (run_all.py: a partial run replaces its own rows)


def write_rows(path: str | None, rows: Sequence[Row]) -> None:
    if path:
        Path(path).write_text(json.dumps([asdict(r) for r in rows], indent=1))


def read_rows(path: Path) -> list[Row]:
    return [Row(**r) for r in json.loads(path.read_text())]


def verdict(row: Row) -> str:
    return {True: "met", False: "MISSED", None: ""}[row.met]


RESULTS_JSON = BENCH / "results.json"  # the rows of the last `make bench`, which results.md and docs/overhead.md show


def markdown_table(rows: Sequence[Row]) -> list[str]:
    """The rows as a Markdown table (results.md and the README's Overhead section)."""
    lines = ["| figure | target | measured | side by side | |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r.figure, r.target, r.measured, r.anchor, verdict(r)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def rows_of(text: str) -> list[Row]:
    """The rows of a results.json's text."""
    return [Row(**r) for r in json.loads(text)["rows"]]


def read_results(path: Path = RESULTS_JSON) -> tuple[list[str], list[Row]]:
    """(context lines, rows) of the last full run."""
    data = json.loads(path.read_text())
    return list(data["context"]), [Row(**r) for r in data["rows"]]


def write_results(context: Sequence[str], rows: Sequence[Row], path: Path = RESULTS_JSON) -> None:
    path.write_text(json.dumps({"context": list(context), "rows": [asdict(r) for r in rows]}, indent=1) + "\n")


def format_table(rows: Sequence[Row]) -> str:
    head = ("figure", "target", "measured", "side by side", "")
    cells = [head, *((r.figure, r.target, r.measured, r.anchor, verdict(r)) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_rows(rows: Sequence[Row]) -> None:
    print(format_table(rows))
    for r in rows:
        if r.note:
            print(f"  · {r.figure}: {r.note}")


def emit_rows(rows: Sequence[Row], json_path: str | None) -> None:
    """What every benchmark ends with: its table printed, and its rows written for run_all.py when asked."""
    print_rows(rows)
    write_rows(json_path, rows)


# ---------------------------------------------------------------- statistics


def median(xs: Iterable[float]) -> float:
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def quantile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (q in [0, 1]); the rules interpolate instead (trainmon.diagnose.live.window.quantile)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def median_ci(xs: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free 95 % confidence interval of the median (order statistics)."""
    s = sorted(xs)
    n = len(s)
    if n < 6:
        return float("nan"), float("nan")
    k = max(0, int((n - z * n**0.5) / 2))
    return s[k], s[n - 1 - k]


def iqr(xs: Sequence[float]) -> tuple[float, float]:
    return quantile(xs, 0.25), quantile(xs, 0.75)


def slope_per_hour(ts: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over ts (seconds), per hour."""
    if len(ts) < 2:
        return 0.0
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var * 3600


# ---------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * PAGE / 1e6


class Usage:
    """CPU share of one core and RSS of one process over a window, sampled every ``every`` seconds."""

    def __init__(self, pid: int, label: str) -> None:
        self.pid = pid
        self.label = label
        self.t: list[float] = []
        self.cpu: list[float] = []
        self.rss: list[float] = []

    def sample(self) -> bool:
        try:
            cpu, rss = cpu_seconds(self.pid), rss_mb(self.pid)
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            return False
        self.t.append(time.monotonic())
        self.cpu.append(cpu)
        self.rss.append(rss)
        return True

    @property
    def alive(self) -> bool:
        return os.path.exists(f"/proc/{self.pid}")

    def cpu_share(self) -> float:
        """Fraction of one core used over the whole window."""
        if len(self.t) < 2:
            return float("nan")
        return (self.cpu[-1] - self.cpu[0]) / (self.t[-1] - self.t[0])

    def rss_last(self) -> float:
        return self.rss[-1] if self.rss else float("nan")

    def rss_growth_per_hour(self) -> float:
        return slope_per_hour(self.t, self.rss)

    def summary(self) -> dict:
        return {
            "label": self.label,
            "cpu_share": self.cpu_share(),
            "rss_mb": self.rss_last(),
            "rss_max_mb": max(self.rss, default=float("nan")),
            "rss_first_mb": self.rss[0] if self.rss else float("nan"),
            "rss_slope_mb_per_h": self.rss_growth_per_hour(),
            "seconds": self.t[-1] - self.t[0] if self.t else 0,
        }


def watch(usages: Sequence[Usage], seconds: float, every: float = 1.0, log_every: float = 0.0) -> None:
    """Sample every process until ``seconds`` have passed (a process that died stops being sampled)."""
    start = time.monotonic()
    next_log = start + log_every if log_every else float("inf")
    for u in usages:
        u.sample()
    while (left := start + seconds - time.monotonic()) > 0:
        time.sleep(min(every, left))
        for u in usages:
            u.sample()
        if time.monotonic() >= next_log:
            next_log += log_every
            parts = [f"{u.label} {u.cpu_share() * 100:.2f}% {u.rss_last():.0f} MB" for u in usages]
            print(f"  [{time.monotonic() - start:6.0f} s] " + " · ".join(parts), flush=True)


def other_load(exclude: Iterable[int] = ()) -> str:
    """What else keeps this host busy: load average and the top CPU users outside the benchmark."""
    skip = set(exclude) | {os.getpid()}
    try:
        out = subprocess.run(
            ["ps", "-eo", "pid,pcpu,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    top = []
    for line in out.splitlines():
        pid, pcpu, comm = line.split(None, 2)
        if int(pid) in skip or float(pcpu) < 5:
            continue
        top.append(f"{comm.strip()} {pcpu}%")
        if len(top) == 4:
            break
    load = os.getloadavg()[0]
    return f"load {load:.2f} on {os.cpu_count()} CPUs" + (f"; busiest others: {', '.join(top)}" if top else "")


# ---------------------------------------------------------------- sleeping loads


SLEEPER = """
import sys, threading, time
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=time.sleep, args=(1e6,), daemon=True).start()
print('ready', flush=True)
time.sleep(1e6)
"""


def spawn_sleepers(n: int, threads: int) -> list[subprocess.Popen]:
    """``n`` sleeping Python children with ``threads`` threads each (DataLoader-worker-like), started in parallel."""
    procs = [
        subprocess.Popen([PY, "-S", "-c", SLEEPER, str(threads)], stdout=subprocess.PIPE, text=True) for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None
        p.stdout.readline()
    return procs


# ---------------------------------------------------------------- side virtualenvs


def side_venv(name: str, packages: Sequence[str], *, constraints: bool = True) -> Path:
    """``benchmarks/.venv-NAME`` with ``packages`` installed (git-ignored; made once, reused after).

    Competitors are installed only here, never into the project's environment. ``-c constraints/dev.txt`` pins
    what they share with the project (torch resolves to the local CPU wheel, never a CUDA download).
    """
    venv = BENCH / f".venv-{name}"
    python = venv / "bin" / "python"
    marker = venv / ".bench-installed"
    spec = " ".join(packages)
    if marker.exists() and marker.read_text() == spec:
        return python
    if not python.exists():
        subprocess.run([base_python(), "-m", "venv", str(venv)], check=True)
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if constraints:
        cmd += ["-c", str(ROOT / "constraints" / "dev.txt")]
    print(f"  installing {spec} into {venv.relative_to(ROOT)} (once)", flush=True)
    subprocess.run([*cmd, *packages], check=True)
    marker.write_text(spec)
    return python


def base_python() -> str:
    """The interpreter the project venv was made from (so side venvs run the same Python)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def add_json_arg(ap) -> None:
    ap.add_argument("--json", metavar="FILE", default=None, help="also write the result rows to FILE (for run_all)")
