"""Side by side with TraceML: the same training loop instrumented by trainmon and by TraceML, one run.

TraceML (``traceml-ai``, pinned below) is installed only into ``benchmarks/.venv-traceml`` (made on first use,
git-ignored; ``-c constraints/dev.txt`` and ``torch==2.13.0`` keep torch on the local CPU wheel). All three loop
processes run that venv's interpreter with the checkout on PYTHONPATH, so torch and Python are identical.
Each tool's collector runs as it would for a user: a real ``trainmon record`` subprocess, and ``traceml serve``
(TraceML's aggregator; the loop calls ``traceml.init(mode="auto")`` and wraps each step in ``trace_step``).

Figures (see benchmarks/_loop.py): per-step cost from paired in-process blocks (training-thread CPU; trainmon
adds its sender thread's CPU), plus the whole-process wall-clock difference against an uninstrumented process.

    python benchmarks/vs_traceml.py [--pairs 3000] [--traceml-pairs 600] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import BENCH, Row, add_json_arg, emit_rows, side_venv
from testsupport.paths import ROOT
from testsupport.procs import PY, child_env, force_stop, free_port, wait_for_path

TRACEML = "traceml-ai==0.5.0"
LOOP = str(BENCH / "_loop.py")


def run_loop(python: str, mode: str, tmp: str, extra: list[str]) -> dict:
    out = subprocess.run(
        [python, LOOP, mode, *extra], capture_output=True, text=True, cwd=tmp, env=child_env(), timeout=600
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 and not lines:
        raise RuntimeError(f"_loop.py {mode} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1])


def start_aggregator(python: str, tmp: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    traceml = str(Path(python).parent / "traceml")
    log = open(os.path.join(tmp, "traceml-serve.log"), "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            traceml,
            "serve",
            "--mode",
            "summary",
            "--aggregator-port",
            str(port),
            "--logs-dir",
            os.path.join(tmp, "traceml-logs"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp,
        env=child_env(),
    )
    deadline = time.monotonic() + 60
    while "ready" not in Path(log.name).read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"traceml serve did not start: {Path(log.name).read_text()[-1000:]}")
        time.sleep(0.2)
    return proc, port


def measure(pairs: int, traceml_pairs: int, pair_steps: int) -> list[Row]:
    python = str(side_venv("traceml", ["torch==2.13.0", TRACEML]))
    tmp = tempfile.mkdtemp(prefix="tm-vs-traceml-")
    address = os.path.join(tmp, "m.sock")
    rec = subprocess.Popen(
        [PY, "-m", "trainmon", "record", "-o", os.path.join(tmp, "vs.tmrec"), "--listen", address, "-q"],
        stderr=subprocess.DEVNULL,
        env=child_env(),
        cwd=ROOT,
    )
    agg = None
    try:
        wait_for_path(address, 30, rec)
        agg, port = start_aggregator(python, tmp)
        common = ["--pairs", str(pairs), "--pair-steps", str(pair_steps)]
        base1 = run_loop(python, "none", tmp, common)
        tm = run_loop(python, "trainmon", tmp, [*common, "--address", address])
        tml = run_loop(
            python,
            "traceml",
            tmp,
            [
                "--pairs",
                str(traceml_pairs),
                "--pair-steps",
                str(pair_steps),
                "--traceml-port",
                str(port),
                "--logs-dir",
                os.path.join(tmp, "traceml-logs"),
            ],
        )
        base2 = run_loop(python, "none", tmp, common)
    finally:
        force_stop(agg)
        force_stop(rec)
    return rows_from(base1, base2, tm, tml)


def rows_from(base1: dict, base2: dict, tm: dict, tml: dict) -> list[Row]:
    base = (base1["median_wall_ns"] + base2["median_wall_ns"]) / 2
    tm_us = tm["paired"]["cpu_ns"] / 1e3
    tm_lo, tm_hi = (x / 1e3 for x in tm["paired"]["ci"])
    tml_us = tml["paired"]["thread_cpu_ns"] / 1e3
    tml_lo, tml_hi = (x / 1e3 for x in tml["paired"]["ci"])
    ratio = tml_us / tm_us if tm_us > 0 else float("inf")
    worst = tml_lo / tm_hi if tm_hi > 0 else float("inf")
    whole_tm = (tm["median_wall_ns"] - base) / 1e3
    whole_tml = (tml["median_wall_ns"] - base) / 1e3
    note = (
        f"loop {base / 1e3:.0f} µs/step uninstrumented (DataLoader, Linear(4,1), backward, SGD); paired "
        f"in-process CPU-time differences; trainmon = training thread "
        f"{tm['paired']['thread_cpu_ns'] / 1e3:.2f} µs + sender thread {tm['paired']['sender_ns'] / 1e3:.2f} µs, "
        f"95% CI {tm_lo:.2f}..{tm_hi:.2f} µs; TraceML "
        f"{tml_lo:.0f}..{tml_hi:.0f} µs (ratio ≥ {worst:.0f}× at the CIs' worst ends); TraceML "
        f"{tml['traceml']['version']} mode={tml['traceml']['mode']} "
        f"(disabled={tml['traceml']['disabled']}); whole-process wall-clock vs an uninstrumented process: "
        f"TraceML {whole_tml:+.0f} µs, trainmon {whole_tm:+.0f} µs (process-to-process noise here is "
        f"±{abs(base1['median_wall_ns'] - base2['median_wall_ns']) / 2e3:.0f} µs)"
    )
    return [
        Row(
            "agent per step vs TraceML, same loop",
            "≤ 1 µs",
            f"{tm_us:.2f} µs",
            anchor=f"TraceML {tml_us:.0f} µs ({ratio:.0f}× trainmon)",
            met=tm_us <= 1.0,
            note=note,
        ),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3000, help="ABBA pairs for trainmon (its cost is small)")
    ap.add_argument("--traceml-pairs", type=int, default=600, help="ABBA pairs for TraceML")
    ap.add_argument("--pair-steps", type=int, default=10)
    add_json_arg(ap)
    args = ap.parse_args()
    emit_rows(measure(args.pairs, args.traceml_pairs, args.pair_steps), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
