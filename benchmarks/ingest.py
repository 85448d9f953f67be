"""Ingest: step records per second the monitor absorbs on one core, and a step's latency into the store.

Throughput: a server subprocess runs the real AgentServer (its one thread does all parsing and ingestion) over a
real Unix socket, feeding the Monitor's fan-out into a Store (and, in the second row, a Recorder as well, as
``trainmon record`` does). Client sockets (threads of this process) send pre-encoded streams as fast as the socket
takes them: preamble, HELLO, a loader INFO, then EVENTS frames of ``--frame-records`` records (200: what the real
sender sends per 0.1 s tick at 1000 steps/s), each step a DataLoader wait and an optimizer step. The server is
saturated, so records per CPU-second of its ingest thread is what one core absorbs; the wall-clock rate on this
shared host is printed beside it.

Latency: a full Monitor (8 fake GPUs, 1 s ticks, a Recorder, as ``trainmon record``) in this process, with a
probe sink after the store in its fan-out, and real agent processes (benchmarks/_agent_load.py, 1000 steps/s,
the real sender with its 0.1 s tick): for every step record, the monitor's CLOCK_MONOTONIC when the store has it
minus the agent's ``perf_counter_ns`` at the step's end.

    python benchmarks/ingest.py [--clients 8] [--records 4000000] [--irregular 50] [--no-latency]
        [--latency-agents 16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Row, add_json_arg, emit_rows, other_load, quantile
from testsupport.procs import PY, child_env, force_stop, force_stop_all, wait_for_path
from trainmon import protocol as P

TARGET_RATE = 500_000
TARGET_P99_MS = 200.0


# ---------------------------------------------------------------- throughput: the stream


def step_records(steps: int, t0_ns: int, period_ns: int = 1_000_000, irregular: int = 0) -> array:
    """``steps`` steps of a DataLoader loop: (wait of loader 1, t, t + 200 µs), (opt, t + period, same); with
    ``irregular``, every that many steps a batch of an evaluation loader (2) follows the optimizer step, as in a
    loop that validates now and then: a record that breaks the regular pattern."""
    recs = array("q", bytes(steps * 2 * P.RECORD_BYTES))
    wait_tag = P.K_WAIT | 1 << 8
    for i in range(steps):
        t = t0_ns + i * period_ns
        j = i * 8
        recs[j : j + 8] = array("q", (wait_tag, t, t + 200_000, 0, P.K_OPT, t + period_ns, t + period_ns, 0))
    if irregular:
        out = array("q")
        for k in range(0, steps, irregular):
            end = 8 * min(k + irregular, steps)
            t = recs[end - 3]  # the last step's optimizer step, when the next step's wait begins
            out += recs[8 * k : end]
            out += array("q", (P.K_WAIT | 2 << 8, t + 1, t + 2, 0))
        recs = out
    return recs


def opening(pid: int) -> bytes:
    """Preamble, HELLO and the train loader's INFO of one simulated agent."""
    hello = {"pid": pid, "host": "bench", "session": f"s{pid}", "name": "ingest", "argv": [], "protocol": 1}
    loader = {"loader": {"id": 1, "batch_size": 32, "num_workers": 4}}
    return P.PREAMBLE + P.json_frame(P.F_HELLO, hello) + P.json_frame(P.F_INFO, loader)


def event_frames(steps: int, frame_records: int, irregular: int = 0) -> bytes:
    recs = step_records(steps, time.monotonic_ns(), irregular=irregular)
    per = frame_records * P.RECORD_FIELDS
    return b"".join(
        P.frame(P.F_EVENTS, P.events_payload(recs[start : start + per])) for start in range(0, len(recs), per)
    )


def send_all(address: str, data: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(address)
        view = memoryview(data)
        for i in range(0, len(view), 1 << 20):
            s.sendall(view[i : i + (1 << 20)])
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the server closes when it has read everything


def throughput(clients: int, records: int, frame_records: int, recorder: bool, tmp: str, irregular: int = 0) -> dict:
    steps = records // clients // 2
    frames = event_frames(steps, frame_records, irregular)
    n_records = len(step_records(steps, 0, irregular=irregular)) // P.RECORD_FIELDS
    streams = [opening(100 + i) + frames for i in range(clients)]
    address = os.path.join(tmp, f"ingest-{int(recorder)}-{irregular}.sock")
    out = os.path.join(tmp, f"ingest-{int(recorder)}-{irregular}.json")
    cmd = [PY, __file__, "--serve", address, "--expect", str(n_records * clients), "--out", out]
    if recorder:
        cmd += ["--record", os.path.join(tmp, "ingest.tmrec")]
    server = subprocess.Popen(cmd, env=child_env())
    try:
        wait_for_path(address, 30, server)
        threads = [threading.Thread(target=send_all, args=(address, s)) for s in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        server.wait(timeout=300)
    finally:
        force_stop(server)
    return json.loads(Path(out).read_text())


# ---------------------------------------------------------------- throughput: the server side


def thread_cpu_s(native_id: int) -> float:
    with open(f"/proc/self/task/{native_id}/schedstat") as fh:
        return int(fh.read().split()[0]) / 1e9


def process_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def serve(address: str, expect: int, out: str, record: str | None) -> None:
    from trainmon.ingest.agent_server import AgentServer
    from trainmon.monitor import Fanout
    from trainmon.store.store import Store

    store = Store()
    sinks: list[Any] = [store]
    recorder = None
    if record:
        from trainmon.record import Recorder

        recorder = Recorder(record)
        sinks.append(recorder)
    server = AgentServer(Fanout(sinks), address)
    server.start()
    tid = server._thread.native_id  # type: ignore[union-attr]

    def ingested() -> int:
        return sum(r.records for r in list(store.runs.values()))

    while ingested() == 0:
        time.sleep(0.001)
    t0, c0, p0, n0 = time.monotonic(), thread_cpu_s(tid), process_cpu_s(), ingested()
    deadline = t0 + 300
    while (n := ingested()) < expect and time.monotonic() < deadline:
        time.sleep(0.01)
    t1, c1 = time.monotonic(), thread_cpu_s(tid)
    if recorder is not None:
        recorder.close()  # the last chunk's compression counts too
    p1 = process_cpu_s()
    server.stop()
    Path(out).write_text(
        json.dumps(
            {
                "records": n - n0,
                "wall_s": t1 - t0,
                "thread_cpu_s": c1 - c0,
                "process_cpu_s": p1 - p0,
                "complete": n >= expect,
                "steps": sum(r.steps.total for r in store.runs.values()),
            }
        )
    )


# ---------------------------------------------------------------- latency


class LatencyProbe:
    """An Ingest sink placed after the store: how long ago (ns) each step record's step ended."""

    def __init__(self) -> None:
        self.lat_ns = array("q")
        self.started = False

    def events(self, run_id: int, t: float, records: array) -> None:
        if not self.started:
            return
        now = time.perf_counter_ns()
        tags = records[0 :: P.RECORD_FIELDS]
        ends = records[2 :: P.RECORD_FIELDS]
        i = -1
        try:
            while True:
                i = tags.index(P.K_STEP, i + 1)
                self.lat_ns.append(now - ends[i])
        except ValueError:
            pass

    def hello(self, *a: Any) -> None: ...
    def info(self, *a: Any) -> None: ...
    def closed(self, *a: Any) -> None: ...
    def sample(self, *a: Any) -> None: ...
    def meta(self, *a: Any) -> None: ...


def latency(agents: int, rate: float, seconds: float, warmup: float, tmp: str) -> dict:
    from benchmarks._fake_gpus import fake_gpus, feeder
    from trainmon.monitor import Monitor
    from trainmon.record import Recorder

    probe = LatencyProbe()
    recorder = Recorder(os.path.join(tmp, "latency.tmrec"))
    address = os.path.join(tmp, "latency.sock")
    fake, owners = fake_gpus(8, [])
    monitor = Monitor(address, interval=1.0, sinks=[probe, recorder], nvml_module=fake)
    monitor.listeners.append(feeder(fake, owners))
    monitor.start()
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(agents):
            env = child_env(RANK=str(rank), WORLD_SIZE=str(agents), MASTER_ADDR="127.0.0.1", MASTER_PORT="29998")
            procs.append(
                subprocess.Popen(
                    [PY, str(Path(__file__).parent / "_agent_load.py"), "--address", address, "--rate", str(rate)],
                    stdout=subprocess.DEVNULL,
                    env=env,
                )
            )
        time.sleep(warmup)
        probe.started = True
        time.sleep(seconds)
        probe.started = False
        context = other_load([p.pid for p in procs])
    finally:
        force_stop_all(procs)
        monitor.stop()
        recorder.close()
    ms = sorted(x / 1e6 for x in probe.lat_ns)
    return {
        "n": len(ms),
        "p50": quantile(ms, 0.5),
        "p99": quantile(ms, 0.99),
        "max": ms[-1] if ms else float("nan"),
        "context": context,
    }


# ---------------------------------------------------------------- rows


def rate_row(name: str, r: dict, frame_records: int, clients: int) -> Row:
    per_core = r["records"] / r["thread_cpu_s"] if r["thread_cpu_s"] > 0 else float("nan")
    wall = r["records"] / r["wall_s"] if r["wall_s"] > 0 else float("nan")
    per_proc = r["records"] / r["process_cpu_s"] if r["process_cpu_s"] > 0 else float("nan")
    note = (
        f"{r['records']} records ({r['steps']} steps) from {clients} sockets, {frame_records}-record frames; "
        f"wall-clock {wall:,.0f}/s on this shared host; per CPU-second of the whole process {per_proc:,.0f}/s"
    )
    return Row(name, f"≥ {TARGET_RATE:,}/s", f"{per_core:,.0f}/s", met=per_core >= TARGET_RATE, note=note)


def measure(args: argparse.Namespace) -> list[Row]:
    tmp = tempfile.mkdtemp(prefix="tm-ingest-")
    rows = []
    r = throughput(args.clients, args.records, args.frame_records, False, tmp)
    rows.append(rate_row("ingest: step records/s on one core (store)", r, args.frame_records, args.clients))
    r = throughput(args.clients, args.records, args.frame_records, True, tmp)
    rows.append(rate_row("ingest: step records/s on one core (store + recorder)", r, args.frame_records, args.clients))
    r = throughput(args.clients, args.records, args.frame_records, False, tmp, irregular=args.irregular)
    rows.append(
        rate_row(
            f"ingest: step records/s on one core (store, an eval batch every {args.irregular} steps)",
            r,
            args.frame_records,
            args.clients,
        )
    )
    if args.no_latency:
        return rows
    lat = latency(args.latency_agents, args.latency_rate, args.latency_seconds, 5.0, tmp)
    rows.append(
        Row(
            "latency step end → store, p99",
            f"≤ {TARGET_P99_MS:.0f} ms",
            f"{lat['p99']:.0f} ms",
            met=lat["p99"] <= TARGET_P99_MS,
            note=(
                f"p50 {lat['p50']:.0f} ms, max {lat['max']:.0f} ms over {lat['n']} steps of "
                f"{args.latency_agents} agents × {args.latency_rate:g} steps/s (sender tick 0.1 s), full "
                f"monitor with recorder and 8 fake GPUs; host: {lat['context']}"
            ),
        )
    )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--records", type=int, default=4_000_000, help="records in all (two per step)")
    ap.add_argument("--frame-records", type=int, default=200)
    ap.add_argument("--irregular", type=int, default=50, help="steps between eval batches in the third row")
    ap.add_argument("--no-latency", action="store_true", help="the throughput rows only")
    ap.add_argument("--latency-agents", type=int, default=16)
    ap.add_argument("--latency-rate", type=float, default=1000.0)
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--serve", metavar="ADDR", help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--record", default=None, help=argparse.SUPPRESS)
    add_json_arg(ap)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.expect, args.out, args.record)
        return 0
    emit_rows(measure(args), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
