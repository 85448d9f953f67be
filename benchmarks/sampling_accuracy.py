"""How right is the agentless data-wait estimate? py-spy sampling
(trainmon.sources.pyspy.py_spy.PySpySampler) against the
training's own meters, on real CPU trainings written like pytorch/examples' imagenet/main.py.

Each case of tests/workloads/examples_imagenet.py runs in its own process and prints its cumulative data_time and
batch_time every few steps. After a warm-up the harness samples one span of ``--seconds``, from one meter line to a
later one: a PySpySampler built as the monitor builds it, read once a second as the monitor reads it, its shares
combined as the report combines them (weighted by samples). Per case:

- the script's own data-wait fraction over the sampled span (data_time over batch_time between its two meter lines),
  the estimate, the error, the samples taken and the estimate's binomial standard error;
- the sampler's CPU: py-spy's (RUSAGE_CHILDREN over the span: the training is reaped only at the end) plus the
  sampler thread's own, as a share of one core;
- the target's slowdown: steps/s in ``--pairs`` pairs of adjacent blocks of ``--block`` s, one sampled (a fresh
  sampler) and one not, in ABBA order; the median of the pairs' relative loss (the host's other load moves the
  absolute rate far more than sampling does, hence pairs of short blocks).

    python benchmarks/sampling_accuracy.py [--seconds 40] [--cases main-process,one-worker,...] [--json FILE]
        [--sampler record|dump] [--interval S] [--chunk S] [--pairs 4] [--block 5]

``--sampler dump`` runs the sampler as it was before (one ``py-spy dump`` every 0.2 s) under the same load;
``--interval`` and ``--chunk`` set PySpySampler's rate and the length of each py-spy record.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import queue
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import CLK_TCK, Row, add_json_arg, emit_rows
from testsupport.paths import ROOT
from testsupport.procs import PY, child_env
from trainmon.metrics import PYSPY
from trainmon.sources.pyspy.py_spy import PySpySampler, dump
from trainmon.sources.pyspy.py_stacks import DATA_WAIT, classify

WORKLOAD = ROOT / "tests" / "workloads" / "examples_imagenet.py"
CASES = ("main-process", "one-worker", "saturated", "healthy")
METER = re.compile(r"^meter step=(\d+) data_time_sum=([\d.]+) batch_time_sum=([\d.]+) t=([\d.]+)")
TOLERANCE = 0.10
TICK_S = 1.0
PAIR_NOTE = "blocks, unsampled beside sampled"  # the monitor's default interval: it reads every source once a tick


@dataclass(frozen=True)
class Meter:
    """One cumulative line of the script's own figures."""

    step: int
    data_s: float
    batch_s: float
    t: float  # time.monotonic() in the training when it printed the line


def own_fraction(first: Meter, last: Meter) -> float:
    """The script's data-wait fraction between two of its meter lines."""
    return (last.data_s - first.data_s) / max(1e-9, last.batch_s - first.batch_s)


def steps_per_s(first: Meter, last: Meter) -> float:
    return (last.step - first.step) / max(1e-9, last.t - first.t)


class Training:
    """A workload case in its own process; a reader thread queues its meter lines."""

    def __init__(self, case: str, seconds: float, print_freq: int = 5) -> None:
        self.case = case
        self.proc = subprocess.Popen(
            [PY, str(WORKLOAD), "--case", case, "--seconds", str(seconds), "--print-freq", str(print_freq)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=child_env(),
        )
        self.pid = self.proc.pid
        self._lines: queue.Queue[Meter | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if m := METER.match(line):
                self._lines.put(Meter(int(m[1]), float(m[2]), float(m[3]), float(m[4])))
        self._lines.put(None)

    def next_meter(self, timeout: float = 60.0) -> Meter:
        meter = self._lines.get(timeout=timeout)
        if meter is None:
            raise RuntimeError(f"{self.case}: the training ended (exit {self.proc.wait()})")
        return meter

    def meter_after(self, t: float, timeout: float = 60.0) -> Meter:
        """The first meter line printed at or after monotonic time ``t``."""
        while True:
            meter = self.next_meter(timeout)
            if meter.t >= t:
                return meter

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def __enter__(self) -> Training:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Span:
    """One sampled span of one case."""

    case: str
    own: float  # the script's own data-wait fraction over the span
    estimate: float  # the sampler's, combined over the monitor's ticks as the report combines them
    samples: int
    seconds: float
    steps_per_s: float
    pyspy_cpu_s: float = math.nan
    thread_cpu_s: float = math.nan
    sampler_error: str | None = None

    @property
    def error(self) -> float:
        return self.estimate - self.own

    @property
    def se(self) -> float:
        """Binomial standard error of the estimate: sqrt(p(1-p)/n)."""
        p, n = self.estimate, self.samples
        return math.sqrt(max(0.0, p * (1 - p)) / n) if n else math.nan

    @property
    def cpu_share(self) -> float:
        return (self.pyspy_cpu_s + self.thread_cpu_s) / self.seconds


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _thread_cpu(tid: int | None) -> float:
    if tid is None:
        return 0.0
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class DumpSampler:
    """The sampler as it was before py-spy record: one ``py-spy dump`` of the main thread every ``interval`` s,
    kept here to compare the two under the same load (``--sampler dump``)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.error: str | None = None
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            result = dump(self.pid)
            main = result.main_thread()
            self.error = result.error
            if main is not None and main.frames:
                with self._lock:
                    self._counts[classify(main)] += 1
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def sample(self, now: float | None = None) -> dict[str, float]:
        with self._lock:
            counts, self._counts = self._counts, collections.Counter()
        n = sum(counts.values())
        return {
            PYSPY.key(self.pid, "data_wait_share"): counts[DATA_WAIT] / n if n else math.nan,
            PYSPY.key(self.pid, "samples"): float(n),
        }

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def sample_span(
    training: Training, seconds: float, *, tick: float = TICK_S, sampler_kind: str = "record", **options: float
) -> Span:
    """Sample ``training`` from one of its meter lines until the first one at least ``seconds`` later, reading the
    sampler once a ``tick`` as the monitor does."""
    first = training.next_meter()
    cpu0 = _children_cpu()
    sampler = _make_sampler(training.pid, sampler_kind, options)
    thread = sampler._thread
    tid = thread.native_id if thread is not None else None  # its CPU: /proc/self/task/<tid>
    weighted = total = 0.0

    def read() -> None:
        nonlocal weighted, total
        values = sampler.sample(time.monotonic())
        share, n = values[PYSPY.key(training.pid, "data_wait_share")], values[PYSPY.key(training.pid, "samples")]
        if n > 0 and not math.isnan(share):
            weighted += share * n
            total += n

    try:
        next_tick = time.monotonic() + tick
        while time.monotonic() < first.t + seconds:
            time.sleep(max(0.0, min(next_tick, first.t + seconds) - time.monotonic()))
            if time.monotonic() >= next_tick:
                read()
                next_tick += tick
        last = training.meter_after(first.t + seconds)
        thread_cpu = _thread_cpu(tid)  # before close(): the thread's /proc entry goes with it
    finally:
        sampler.close()
    read()
    return Span(
        case=training.case,
        own=own_fraction(first, last),
        estimate=weighted / total if total else math.nan,
        samples=int(total),
        seconds=last.t - first.t,
        steps_per_s=steps_per_s(first, last),
        pyspy_cpu_s=_children_cpu() - cpu0,
        thread_cpu_s=thread_cpu,
        sampler_error=sampler.error,
    )


def _make_sampler(pid: int, sampler_kind: str, options: dict[str, float]) -> PySpySampler | DumpSampler:
    return PySpySampler(pid, **options) if sampler_kind == "record" else DumpSampler(pid)


def block_rate(training: Training, seconds: float, sampler_kind: str | None, options: dict[str, float]) -> float:
    """Steps/s from one meter line to the first one ``seconds`` later, sampled (a fresh sampler) or not (None)."""
    first = training.next_meter()
    sampler = _make_sampler(training.pid, sampler_kind, options) if sampler_kind else None
    try:
        last = training.meter_after(first.t + seconds)
    finally:
        if sampler is not None:
            sampler.close()
    return steps_per_s(first, last)


def paired_slowdown(
    training: Training, pairs: int, block_s: float, sampler_kind: str, options: dict[str, float]
) -> list[tuple[float, float]]:
    """(unsampled, sampled) steps/s of ``pairs`` adjacent blocks, in ABBA order so that a drift of the host's other
    load cancels out."""
    out = []
    for i in range(pairs):
        sampled_first = i % 2 == 1
        a = block_rate(training, block_s, sampler_kind if sampled_first else None, options)
        b = block_rate(training, block_s, None if sampled_first else sampler_kind, options)
        out.append((b, a) if sampled_first else (a, b))
    return out


@dataclass
class CaseResult:
    span: Span
    pairs: list[tuple[float, float]]  # (unsampled, sampled) steps/s of adjacent blocks

    @property
    def slowdown(self) -> float:
        """Median over the pairs of the relative loss of steps/s while sampled."""
        losses = [1 - on / off for off, on in self.pairs if off > 0]
        return statistics.median(losses) if losses else math.nan

    @property
    def slowdown_spread(self) -> tuple[float, float]:
        losses = [1 - on / off for off, on in self.pairs if off > 0]
        return (min(losses), max(losses)) if losses else (math.nan, math.nan)


def run_case(
    case: str,
    seconds: float,
    warmup: float = 5.0,
    sampler_kind: str = "record",
    pairs: int = 4,
    block_s: float = 5.0,
    **options: float,
) -> CaseResult:
    with Training(case, seconds=3600) as training:  # killed when done
        first = training.next_meter(timeout=120)
        training.meter_after(first.t + warmup)
        span = sample_span(training, seconds, sampler_kind=sampler_kind, **options)
        slow = paired_slowdown(training, pairs, block_s, sampler_kind, options)
    return CaseResult(span, slow)


def rows_for(results: list[CaseResult]) -> list[Row]:
    rows = []
    for r in results:
        s = r.span
        rows.append(
            Row(
                f"agentless data wait, {s.case}",
                f"within ±{TOLERANCE:.2f} of the script's own",
                f"{s.estimate:.3f} vs {s.own:.3f} (error {s.error:+.3f}, ±{s.se:.3f} s.e.)",
                met=abs(s.error) <= TOLERANCE,
                note=(
                    f"{s.samples} samples over {s.seconds:.1f} s; sampler CPU {100 * s.cpu_share:.1f} % of a core "
                    f"(py-spy {s.pyspy_cpu_s:.2f} s, thread {s.thread_cpu_s:.2f} s); target slowdown "
                    f"{100 * r.slowdown:+.1f} % (median of {len(r.pairs)} paired {PAIR_NOTE}; pairs "
                    f"{100 * r.slowdown_spread[0]:+.1f} to {100 * r.slowdown_spread[1]:+.1f} %)"
                    + (f"; sampler error: {s.sampler_error}" if s.sampler_error else "")
                ),
            )
        )
    return rows


def print_table(results: list[CaseResult]) -> None:
    head = ("case", "own", "estimate", "error", "s.e.", "samples", "sampler CPU", "steps/s", "slowdown")
    print("  ".join(f"{h:>12}" for h in head))
    for r in results:
        s = r.span
        cells = (
            s.case,
            f"{s.own:.3f}",
            f"{s.estimate:.3f}",
            f"{s.error:+.3f}",
            f"{s.se:.3f}",
            str(s.samples),
            f"{100 * s.cpu_share:.1f} %",
            f"{s.steps_per_s:.2f}",
            f"{100 * r.slowdown:+.1f} %",
        )
        print("  ".join(f"{c:>12}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="sampled span per case")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--sampler",
        choices=("record", "dump"),
        default="record",
        help="record: PySpySampler (py-spy record in chunks); dump: one py-spy dump every 0.2 s, as before",
    )
    parser.add_argument("--interval", type=float, help="PySpySampler's mean seconds between samples (its default)")
    parser.add_argument("--chunk", type=float, help="PySpySampler's seconds per py-spy record (its default)")
    parser.add_argument("--pairs", type=int, default=4, help="pairs of blocks for the slowdown")
    parser.add_argument("--block", type=float, default=5.0, help="seconds per slowdown block")
    add_json_arg(parser)
    args = parser.parse_args()
    options = {name: value for name in ("interval", "chunk") if (value := getattr(args, name)) is not None}
    print(f"host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; sampler: {args.sampler} {options or ''}")
    results = []
    for case in args.cases.split(","):
        results.append(
            run_case(case, args.seconds, sampler_kind=args.sampler, pairs=args.pairs, block_s=args.block, **options)
        )
        print_table(results[-1:])
    print()
    print_table(results)
    emit_rows(rows_for(results), args.json)


if __name__ == "__main__":
    main()
