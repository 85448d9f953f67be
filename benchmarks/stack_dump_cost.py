"""What an automatic stack dump costs (trainmon/autodump.py), and what the agent's GC hook costs.

Stack dumps: a target process with torch imported and two DataLoader workers (fork) runs a loop that only reads the
clock and notes the longest gap between two reads. py-spy dumps its main process and a worker ``--dumps`` times
each, with ``--nonblocking`` (what the monitor uses) and without (py-spy then stops every thread of the target for
the read). Per dump: wall time, py-spy's CPU (RUSAGE_CHILDREN, dumps one at a time) and the longest stop the target
saw while it ran, beside the longest it saw over as long an interval without a dump.

GC hook: paired blocks of ``gc.collect(0)`` over a small young generation with the agent's gc.callbacks hook
installed and not (ABBA, ``agent_overhead.paired``): the training thread's CPU time added per collection.

    python benchmarks/stack_dump_cost.py [--dumps 15] [--pairs 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Row, add_json_arg, emit_rows, median, quantile
from benchmarks.agent_overhead import paired
from testsupport.procs import PY, child_env
from trainmon.agent import _gc, _hot
from trainmon.sources.pyspy.py_spy import find_pyspy

TARGET = """
import os, sys, threading, time
import torch
from torch.utils.data import DataLoader, Dataset

class Data(Dataset):
    def __len__(self):
        return 10**6
    def __getitem__(self, i):
        return torch.zeros(8)

it = iter(DataLoader(Data(), batch_size=4, num_workers=2, persistent_workers=True))
next(it)
print(" ".join(str(w.pid) for w in it._workers), flush=True)
longest = 0.0
last = time.perf_counter()
for line in sys.stdin:  # "mark": reset; "read": print the longest gap since the mark
    if line.startswith("mark"):
        longest, last = 0.0, time.perf_counter()
        stop = False

        def spin():
            global longest, last
            while not stop:
                now = time.perf_counter()
                longest = max(longest, now - last)
                last = now

        t = threading.Thread(target=spin)
        t.start()
    else:
        stop = True
        t.join()
        print(f"{longest:.6f}", flush=True)
"""


def children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def longest_stop(target: subprocess.Popen, during: Callable[[], None]) -> float:
    """The target's longest gap between two clock reads while ``during`` runs (0.05 s margins either side)."""
    assert target.stdin is not None and target.stdout is not None
    target.stdin.write("mark\n")
    target.stdin.flush()
    time.sleep(0.05)
    during()
    time.sleep(0.05)
    target.stdin.write("read\n")
    target.stdin.flush()
    return float(target.stdout.readline())


def dump_costs(binary: str, pid: int, target: subprocess.Popen | None, blocking: bool, n: int) -> dict:
    """Per dump: wall time, py-spy's CPU, and (``target``: the process dumped) its longest stop during the dump,
    beside its longest stop over as long an interval without one (the host's own scheduling noise)."""
    walls: list[float] = []
    cpus: list[float] = []
    gaps: list[float] = []
    quiet: list[float] = []
    cmd = [binary, "dump", "--json", "--pid", str(pid)] + ([] if blocking else ["--nonblocking"])

    def dump() -> None:
        c0, t0 = children_cpu(), time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - t0)
        cpus.append(children_cpu() - c0)
        if out.returncode:
            raise SystemExit(f"py-spy failed: {out.stderr.strip()}")

    for _ in range(n):
        if target is None:
            dump()
            continue
        gaps.append(longest_stop(target, dump))
        quiet.append(longest_stop(target, lambda: time.sleep(walls[-1])))
    return {"wall": walls, "cpu": cpus, "gap": gaps, "quiet": quiet}


def gc_hook_cost(pairs: int, steps: int) -> dict:
    junk: list[object] = []

    def block(k: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(k):
            junk.extend([[] for _ in range(50)])  # a young generation to collect
            gc.collect(0)
            junk.clear()
        return (time.perf_counter_ns() - t0) / k, (time.thread_time_ns() - c0) / k

    def on() -> None:
        _gc.install()

    def off() -> None:
        _gc.uninstall()
        _hot.reset_buffer()

    return paired(block, on, off, pairs, steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dumps", type=int, default=15)
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--steps", type=int, default=200)
    add_json_arg(ap)
    args = ap.parse_args()
    binary = find_pyspy()
    if binary is None:
        raise SystemExit("py-spy not found")
    rows: list[Row] = []
    target = subprocess.Popen(
        [PY, "-c", textwrap.dedent(TARGET)],
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert target.stdout is not None
        worker = int(target.stdout.readline().split()[0])
        for role, pid in (("main process (torch imported)", target.pid), ("DataLoader worker", worker)):
            for blocking in (False, True):
                r = dump_costs(binary, pid, target if pid == target.pid else None, blocking, args.dumps)
                mode = "blocking (py-spy default)" if blocking else "--nonblocking (used)"
                note = f"p95 wall {quantile(r['wall'], 0.95) * 1e3:.0f} ms"
                if r["gap"]:
                    note += (
                        f"; the process's longest stop during the dump: median {median(r['gap']) * 1e3:.1f} ms "
                        f"(max {max(r['gap']) * 1e3:.1f}), over as long without a dump: median "
                        f"{median(r['quiet']) * 1e3:.1f} ms (max {max(r['quiet']) * 1e3:.1f})"
                    )
                rows.append(
                    Row(
                        f"stack dump of a {role}, {mode}",
                        "",
                        f"{median(r['wall']) * 1e3:.0f} ms wall, {median(r['cpu']) * 1e3:.0f} ms CPU",
                        note=note,
                    )
                )
    finally:
        target.kill()
        target.wait()
    r = gc_hook_cost(args.pairs, args.steps)
    rows.append(
        Row(
            "agent GC hook: CPU added per garbage collection",
            "",
            f"{r['thread_cpu_ns'] / 1e3:.2f} µs",
            note=f"wall-clock median {r['ns'] / 1e3:+.2f} µs; a gen-0 collection of 50 lists takes "
            f"{r['base_ns'] / 1e3:.1f} µs unhooked",
        )
    )
    emit_rows(rows, args.json)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
