"""Longer fuzzing than the test suite's: mutate valid wire streams and recordings for a while and feed
them through the monitor's real decoding paths (the same drivers as tests/reliability/test_fuzz.py).

    python benchmarks/fuzz.py --seconds 300     # make fuzz

Each target runs for ``--seconds``: a seed corpus (what a real agent sends, what a real recorder
writes) is mutated — bit flips, byte runs, inserted and deleted spans, splices, length fields set to
interesting values — then decoded into a fresh Store, and the rules and report summaries read it.
Anything but a protocol error (wire) or a RecordingError (file) is a crash: the input is saved
under ``--crashes`` and the exit status is 1. RSS is sampled to show memory stays bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
import time
import traceback
from array import array
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testsupport.fuzz import WireHarness
from testsupport.procs import proc_status
from trainmon import protocol as P
from trainmon.diagnose.engine import evaluate
from trainmon.record import format as R
from trainmon.report import build_report, run_summary
from trainmon.store.store import Store

INTERESTING = [
    0,
    1,
    7,
    8,
    31,
    32,
    33,
    255,
    256,
    0x7FFF,
    0xFFFF,
    0x10000,
    P.MAX_HELLO_FRAME,
    P.MAX_JSON_FRAME,
    P.MAX_FRAME,
    P.MAX_FRAME + 1,
    0x7FFFFFFF,
    0xFFFFFFFF,
]


def rss_mb() -> float:
    return proc_status(os.getpid())["rss_kb"] / 1024


def _events(rng: random.Random, n: int) -> array:
    out = array("q")
    t = 10**12
    for i in range(n):
        t += rng.randint(1, 10**7)
        kind = rng.choice(
            [
                P.K_WAIT,
                P.K_WAIT,
                P.K_OPT,
                P.K_STEP,
                P.K_ITER_START,
                P.K_ITER_END,
                P.K_CKPT,
                P.K_MARK,
                P.K_PHASE,
                P.K_EXPOSED,
            ]
        )
        out.extend((kind | rng.choice([0, 1, 2]) << 8, t, t + rng.randint(0, 10**6), i))
    return out


def wire_seeds(rng: random.Random) -> list[bytes]:
    hello = {
        "pid": 4242,
        "ppid": 1,
        "host": "h",
        "session": "s",
        "name": "train.py",
        "argv": ["python", "train.py"],
        "rank": 0,
        "world_size": 1,
        "job": {"MASTER_PORT": "29500"},
        "protocol": 1,
        "mono_ns": 1,
        "wall": 1.0,
        "connection": 2,
        "counts": {"step": 3, "opt": 5, "groups": 4, "last": 1, "wait": {"1": 9}},
    }
    infos = [
        {
            "loader": {
                "id": 1,
                "batch_size": 32,
                "num_workers": 2,
                "pin_memory": False,
                "prefetch_factor": 2,
                "persistent_workers": False,
            }
        },
        {"workers": {"loader": 1, "pids": [11, 12]}},
        {"name": {"id": 1, "name": "eval"}},
        {"drops": 5},
        {"device": "cuda:0"},
        {"bye": "exit"},
    ]
    body = b"".join(P.json_frame(P.F_INFO, i) for i in infos[:5])
    events = b"".join(P.frame(P.F_EVENTS, P.events_payload(_events(rng, n))) for n in (1, 10, 200))
    hello_frame = P.json_frame(P.F_HELLO, hello)
    return [
        P.PREAMBLE + hello_frame + body + events + P.json_frame(P.F_INFO, infos[5]),
        P.PREAMBLE + P.json_frame(P.F_AUTH, {"token": "t"}) + hello_frame + events,
        P.PREAMBLE + hello_frame,
    ]


def file_seeds(rng: random.Random) -> list[bytes]:
    enc = R.RecordEncoder
    seeds = []
    for n_chunks in (1, 3):
        chunks = []
        for c in range(n_chunks):
            recs = [enc.meta(0.0, {"trainmon": "0", "interval": 1.0})] if c == 0 else []
            recs += [
                enc.hello(1, 1.0, {"pid": 42, "host": "h", "session": "s", "argv": ["a"]}),
                enc.info(1, 1.0, {"loader": {"id": 1, "batch_size": 8, "num_workers": 2}}),
                enc.events(1, 1.5, _events(rng, 50)),
                enc.sample(2.0, {"cpu.busy": 50.0, "mem.used_pct": 10.0, "proc.42.cpu": 99.0}),
                enc.closed(1, 3.0, "exit"),
            ]
            chunks.append(R.encode_chunk(b"".join(recs)))
        seeds.append(R.FILE_HEADER + b"".join(chunks))
    return seeds


def mutate(rng: random.Random, data: bytes, corpus: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # bit flip
            buf[min(pos, len(buf) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # random run
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 2 and buf:  # delete a span
            del buf[pos : pos + rng.randint(1, 64)]
        elif op == 3:  # an interesting 32-bit length anywhere
            buf[pos : pos + 4] = struct.pack("<I", rng.choice(INTERESTING))
        elif op == 4:  # splice with another input
            other = rng.choice(corpus)
            cut = rng.randrange(len(other) + 1)
            buf = buf[:pos] + bytearray(other[cut : cut + rng.randint(1, 512)]) + buf[pos:]
        elif op == 5:  # truncate
            del buf[pos:]
        elif op == 6 and buf:  # repeat a span
            span = buf[pos : pos + rng.randint(1, 64)]
            buf[pos:pos] = span * rng.randint(1, 8)
    return bytes(buf)


def _consume(store: Store, rng: random.Random) -> None:
    evaluate(store, store.last_t if store.last_t is not None else 0.0)
    for run in store.runs.values():
        run_summary(run)
    if rng.random() < 0.05:  # the whole report now and then (it evaluates the rules up to 900 times)
        json.dumps(build_report(store))


def fuzz_wire(seconds: float, rng: random.Random, crashes: Path) -> dict:
    harness = WireHarness()
    corpus = wire_seeds(rng)
    outcomes: Counter = Counter()
    n = failures = 0
    rss = [rss_mb()]
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            data = mutate(rng, rng.choice(corpus), corpus)
            pieces = [rng.randint(1, 4096) for _ in range(rng.randint(0, 4))]
            harness.store.runs.clear()
            try:
                error = harness.run(data, pieces)
                outcomes[(error or "accepted").split(":")[0][:48]] += 1
                _consume(harness.store, rng)
            except Exception:
                failures += 1
                _save(crashes, "wire", data, traceback.format_exc())
            n += 1
            if n % 2000 == 0:
                rss.append(rss_mb())
    finally:
        harness.close()
    return {
        "inputs": n,
        "crashes": failures,
        "rss_mb": [round(x, 1) for x in (rss[0], max(rss), rss[-1])],
        "outcomes": dict(outcomes.most_common(12)),
    }


def fuzz_files(seconds: float, rng: random.Random, crashes: Path) -> dict:
    corpus = file_seeds(rng)
    records = [raw for seed in corpus for raw in R.iter_chunks(seed, [])]  # the seeds' record streams
    outcomes: Counter = Counter()
    n = failures = 0
    rss = [rss_mb()]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if rng.random() < 0.5:  # mutated records in a valid chunk (fresh CRC): fuzzes the record decoding
            data = R.FILE_HEADER + R.encode_chunk(mutate(rng, rng.choice(records), records))
        else:  # mutated files: fuzzes the chunk layer
            data = mutate(rng, rng.choice(corpus), corpus)
        store, warnings = Store(cap=None, series_cap=None), []
        try:
            R.replay_into(data, store, warnings)
            outcomes[warnings[0].split(";")[0][:40] if warnings else "clean"] += 1
            _consume(store, rng)
        except R.RecordingError as exc:
            outcomes["RecordingError: " + str(exc)[:30]] += 1
        except Exception:
            failures += 1
            _save(crashes, "file", data, traceback.format_exc())
        n += 1
        if n % 2000 == 0:
            rss.append(rss_mb())
    return {
        "inputs": n,
        "crashes": failures,
        "rss_mb": [round(x, 1) for x in (rss[0], max(rss), rss[-1])],
        "outcomes": dict(outcomes.most_common(12)),
    }


def _save(crashes: Path, kind: str, data: bytes, trace: str) -> None:
    crashes.mkdir(parents=True, exist_ok=True)
    stem = crashes / f"{kind}-{int(time.time() * 1000)}"
    stem.with_suffix(".bin").write_bytes(data)
    stem.with_suffix(".txt").write_text(trace)
    print(f"crash ({kind}): {trace.strip().splitlines()[-1]} -> {stem}.bin", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0, help="per target")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--crashes", type=Path, default=Path("fuzz-crashes"))
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    result = {
        "seed": seed,
        "wire": fuzz_wire(args.seconds, rng, args.crashes),
        "recording": fuzz_files(args.seconds, rng, args.crashes),
    }
    print(json.dumps(result, indent=2))
    return 1 if result["wire"]["crashes"] or result["recording"]["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
