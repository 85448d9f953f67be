"""Recording size per hour: 8 simulated GPUs and 8 ranks at 1 s, from a real recording, extrapolated.

A real ``trainmon record`` (benchmarks/_monitor_proc.py: cmd_record with the fake NVML of 8 GPUs) records 8 agent
processes (benchmarks/_agent_load.py, ranks of one job, ``--rate`` steps/s each with a DataLoader wait per step)
and their 32 DataLoader-worker-like tracked processes (4 per rank). The file's growth between the end of the
warm-up and the end of the run, per hour, is the figure. The recording is then read back (the format's own
reader) to split the size by record type: each type's records re-compressed alone, chunk by chunk, and the
compressed total shared out in proportion.

    python benchmarks/recording_size.py [--seconds 150] [--rate 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import BENCH, Row, add_json_arg, emit_rows, spawn_sleepers
from testsupport.procs import PY, child_env, force_stop, force_stop_all, wait_for_path
from trainmon.record import format as F

TARGET_MB_H = 20.0
NAMES = {
    F.R_META: "meta",
    F.R_HELLO: "hello",
    F.R_EVENTS: "events",
    F.R_INFO: "info",
    F.R_CLOSED: "closed",
    F.R_SAMPLE: "samples",
}


def record(tmp: str, ranks: int, rate: float, seconds: float, warmup: float) -> tuple[str, float, int]:
    """Run the recording; returns its path, bytes per second after the warm-up, and the number of chunks."""
    workers = spawn_sleepers(4 * ranks, 4)
    track = os.path.join(tmp, "tracked.pids")
    Path(track).write_text(" ".join(str(p.pid) for p in workers))
    address, out = os.path.join(tmp, "m.sock"), os.path.join(tmp, "size.tmrec")
    rec = subprocess.Popen(
        [
            PY,
            str(BENCH / "_monitor_proc.py"),
            "record",
            "--output",
            out,
            "--listen",
            address,
            "--interval",
            "1",
            "--gpus",
            "8",
            "--track",
            track,
        ],
        env=child_env(),
    )
    agents: list[subprocess.Popen] = []
    try:
        wait_for_path(address, 60, rec)
        for rank in range(ranks):
            env = child_env(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(ranks),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT="29997",
            )
            agents.append(
                subprocess.Popen(
                    [PY, str(BENCH / "_agent_load.py"), "--address", address, "--rate", str(rate)],
                    stdout=subprocess.DEVNULL,
                    env=env,
                )
            )
        time.sleep(warmup)
        s0, t0 = os.path.getsize(out), time.monotonic()
        time.sleep(seconds)
        s1, t1 = os.path.getsize(out), time.monotonic()
    finally:
        force_stop_all(agents)
        force_stop(rec, timeout=30)
        for w in workers:
            w.kill()
        force_stop_all(workers)
    return out, (s1 - s0) / (t1 - t0), 0


def breakdown(path: str) -> dict[str, float]:
    """Share of the compressed size per record type (each type re-compressed alone, per chunk)."""
    data = Path(path).read_bytes()
    warnings: list[str] = []
    comp: dict[str, int] = defaultdict(int)
    for raw in F.iter_chunks(data, warnings):
        parts: dict[str, bytearray] = defaultdict(bytearray)
        pos = 0
        while pos + F.RECORD_HEAD.size <= len(raw):
            kind, length = F.RECORD_HEAD.unpack_from(raw, pos)
            end = pos + F.RECORD_HEAD.size + length
            parts[NAMES.get(kind, str(kind))] += raw[pos:end]
            pos = end
        for name, body in parts.items():
            comp[name] += len(zlib.compress(bytes(body), 6))
    total = sum(comp.values()) or 1
    return {name: n / total for name, n in sorted(comp.items(), key=lambda kv: -kv[1])}


def measure(args: argparse.Namespace) -> list[Row]:
    tmp = tempfile.mkdtemp(prefix="tm-size-")
    path, bps, _ = record(tmp, args.ranks, args.rate, args.seconds, args.warmup)
    mb_h = bps * 3600 / 1e6
    shares = breakdown(path)
    split = ", ".join(f"{name} {share * mb_h:.1f}" for name, share in shares.items() if share >= 0.005)
    steps_h = args.ranks * args.rate * 3600
    note = (
        f"{args.ranks} ranks × {args.rate:g} steps/s (a wait + a step record each), 8 fake GPUs, "
        f"{4 * args.ranks} tracked workers, 1 s samples; measured over {args.seconds:.0f} s after a "
        f"{args.warmup:.0f} s warm-up; MB/h by record type: {split}"
    )
    rows = [
        Row(
            "recording size per hour (8 GPUs, 8 ranks, 1 s)",
            f"≤ {TARGET_MB_H:g} MB/h",
            f"{mb_h:.1f} MB/h",
            met=mb_h <= TARGET_MB_H,
            note=note,
        )
    ]
    events = shares.get("events", 0.0) * mb_h
    if events:
        rows[0].note += f"; events cost {events * 1e6 / steps_h:.1f} B per step compressed"
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rate", type=float, default=10.0, help="steps per second per rank (a 100 ms GPU step)")
    add_json_arg(ap)
    args = ap.parse_args()
    emit_rows(measure(args), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
