"""Many clients: a crowd of real agents at once, and hundreds of hostile ones, against a real
``trainmon record`` subprocess whose RSS, descriptors and threads are read from /proc."""

from __future__ import annotations

import json
import random
import socket
import struct
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable

from testsupport.paths import TINY
from testsupport.procs import proc_status, report_json, start_python, start_recorder, stop
from testsupport.reliability import note
from trainmon import protocol as P
from trainmon.record import load_recording

HELLO_TIMEOUT_S = 2.0


def _recorder(addr: str, output: str) -> subprocess.Popen:
    return start_recorder(addr, output, env={"TRAINMON_HELLO_TIMEOUT": str(HELLO_TIMEOUT_S)})


def _agents(addr: str, n: int, steps: int, step_ms: float, start_at: float = 0.0) -> list[subprocess.Popen]:
    return [start_python(TINY, str(steps), str(step_ms), str(start_at), env={"TRAINMON_ADDR": addr}) for _ in range(n)]


def _results(procs: list[subprocess.Popen]) -> dict[int, dict]:
    out = {}
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0 and stderr == "", stderr
        result = json.loads(stdout)
        out[result["pid"]] = result
    return out


def _steps_by_pid(path: str) -> dict[int, int]:
    store, _ = load_recording(path)
    return {run.pid: run.steps.total for run in store.runs.values()}


def test_64_agents_connecting_at_once(addr, tmp_path):
    rec = str(tmp_path / "crowd.tmrec")
    recorder = _recorder(addr, rec)
    time.sleep(1.0)
    before = proc_status(recorder.pid)
    start_at = time.time() + 4.0  # every agent calls attach() at this instant
    results = _results(_agents(addr, 64, steps=100, step_ms=5, start_at=start_at))
    time.sleep(1.5)
    after = proc_status(recorder.pid)
    stop(recorder)
    assert recorder.returncode == 0
    steps = _steps_by_pid(rec)
    note("crowd64", before=before, after=after, runs=len(steps))
    assert {pid: 100 for pid in results} == steps
    assert all(r["agent"]["connections"] == 1 for r in results.values())
    assert after["fds"] <= before["fds"] + 2  # every connection closed again


# ------------------------------------------------------------------ hostile clients


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Wait until the monitor closes this connection (True) or ``timeout`` passes (False)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _send_then_wait(data: bytes) -> Callable[[socket.socket], bool]:
    def run(sock: socket.socket) -> bool:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return True
        return _closed_by_peer(sock, 10)

    return run


def _endless_lines(sock: socket.socket) -> bool:
    deadline = time.monotonic() + 10
    sock.settimeout(1)
    try:
        while time.monotonic() < deadline:
            sock.sendall(b"GET /" + b"x" * 200 + b" HTTP/1.1\r\n")
    except (BrokenPipeError, ConnectionResetError):
        return True
    return False


def _one_byte_per_second(sock: socket.socket) -> bool:
    data = P.PREAMBLE + P.json_frame(P.F_HELLO, {"pid": 4242, "host": "slow"})
    for i in range(len(data)):
        try:
            sock.sendall(data[i : i + 1])
        except (BrokenPipeError, ConnectionResetError):
            return True
        if _closed_by_peer(sock, 1.0):
            return True
    return False


def _json(kind: int, payload: bytes) -> bytes:
    return P.frame(kind, payload)


def _hello(pid: int, **extra) -> bytes:
    return P.json_frame(P.F_HELLO, {"pid": pid, "host": "garbage", "session": f"g{pid}", **extra})


def _garbage_catalogue(rng: random.Random) -> list[tuple[str, Callable[[socket.socket], bool]]]:
    """300 hostile clients; every one must end with the monitor closing its connection."""
    pre = P.PREAMBLE
    wrong_hellos = [
        b"[1, 2]",
        b'"hello"',
        b'{"pid": "12"}',
        b'{"pid": -1}',
        b'{"pid": 1.5}',
        b'{"pid": true}',
        b'{"pid": 99999999999999999999999}',
        b"{}",
        b"null",
        b'{"pid": NaN}',
    ]
    wrong_infos = [
        {"loader": "x"},
        {"loader": {"id": "1", "batch_size": "big"}},
        {"loader": {"id": 1, "batch_size": -4, "num_workers": [1], "pin_memory": "yes"}},
        {"workers": {"loader": 1, "pids": "many"}},
        {"workers": {"loader": 10**30, "pids": [1]}},
        {"name": {"id": 10**30, "name": {"a": 1}}},
        {"drops": "lots"},
        {"bye": 7},
        {"device": [1]},
        {"loader": {"id": 2**62}},
        {"unknown": 1},
    ]
    out: list[tuple[str, Callable[[socket.socket], bool]]] = []
    for _ in range(50):
        out.append(("random bytes", _send_then_wait(b"X" + rng.randbytes(rng.randint(1, 8192)))))
    for _ in range(30):
        out.append(("endless lines", _endless_lines))
    for i in range(30):
        data = [
            pre + struct.pack("<BI", P.F_EVENTS, 0xFFFFFFFF),
            pre + struct.pack("<BI", P.F_HELLO, P.MAX_HELLO_FRAME + 1) + b"{" * 1000,
            pre + _hello(50000 + i) + struct.pack("<BI", P.F_EVENTS, P.MAX_FRAME + 1) + b"\0" * 4096,
            pre + _hello(50000 + i) + struct.pack("<BI", P.F_INFO, P.MAX_JSON_FRAME + 1),
        ][i % 4]
        out.append(("oversize frame", _send_then_wait(data)))
    for i in range(30):
        out.append(
            (
                "invalid UTF-8",
                _send_then_wait(
                    pre + _json(P.F_HELLO, b'{"pid": 7, "name": "\xff\xfe\xc3"}')
                    if i % 2
                    else pre + _hello(60000 + i) + _json(P.F_INFO, b'{"bye": "\xed\xa0\x80"}')
                ),
            )
        )
    for i in range(60):
        if i % 2:
            data = pre + _json(P.F_HELLO, wrong_hellos[i % len(wrong_hellos)])
        else:  # a hello with every field of the wrong type, then wrong INFOs, random events, a torn events frame
            hello = _hello(
                70000 + i,
                argv={"x": 1},
                rank="0",
                job=[1, 2],
                counts={"wait": {"1": "x"}, "opt": -5},
                wall="now",
                name=["n"] * 50,
            )
            infos = b"".join(P.json_frame(P.F_INFO, info) for info in wrong_infos)
            events = P.frame(P.F_EVENTS, rng.randbytes(P.RECORD_BYTES * 64))
            data = pre + hello + infos + events + P.frame(P.F_EVENTS, b"\0" * 33)
        out.append(("wrong types", _send_then_wait(data)))
    for _ in range(20):
        out.append(("deeply nested JSON", _send_then_wait(pre + _json(P.F_HELLO, b"[" * 60000))))
    for _ in range(40):
        out.append(("connects, never speaks", lambda sock: _closed_by_peer(sock, 10)))
    for _ in range(40):
        out.append(("one byte per second", _one_byte_per_second))
    return out


def _attack(addr: str, catalogue: list[tuple[str, Callable[[socket.socket], bool]]]) -> Counter:
    closed: Counter = Counter()
    lock = threading.Lock()

    def client(name: str, behave: Callable[[socket.socket], bool]) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(10)
            sock.connect(addr)
            ok = behave(sock)
        except OSError:
            ok = False
        finally:
            sock.close()
        with lock:
            closed[name, ok] += 1

    threads = [threading.Thread(target=client, args=item, daemon=True) for item in catalogue]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return closed


def test_300_hostile_clients_cannot_hurt_the_monitor_or_the_real_agents(addr, tmp_path):
    rec = str(tmp_path / "hostile.tmrec")
    recorder = _recorder(addr, rec)
    time.sleep(1.5)
    before = proc_status(recorder.pid)
    agents = _agents(addr, 4, steps=300, step_ms=10)
    catalogue = _garbage_catalogue(random.Random(7))
    assert len(catalogue) == 300
    started = time.monotonic()
    outcome = _attack(addr, catalogue)
    attack_s = time.monotonic() - started
    results = _results(agents)
    time.sleep(1.0)
    after = proc_status(recorder.pid)
    assert recorder.poll() is None, "the monitor died"
    stop(recorder)
    assert recorder.returncode == 0
    note(
        "hostile300",
        before=before,
        after=after,
        attack_s=round(attack_s, 1),
        outcome={f"{name}: {'closed' if ok else 'OPEN'}": n for (name, ok), n in sorted(outcome.items())},
    )
    assert all(ok for (_name, ok) in outcome), outcome  # the monitor closed every hostile connection
    assert sum(outcome.values()) == 300
    assert (after["rss_kb"] - before["rss_kb"]) / 1024 < 32
    # No thread per client; the monitor's own workers that start when first needed (the thread-state sampler
    # once workers are seen, the stack dumper at a first critical verdict) may have started meanwhile.
    assert after["fds"] <= before["fds"] + 2 and after["threads"] <= before["threads"] + 2
    steps = _steps_by_pid(rec)
    for pid, result in results.items():
        assert steps[pid] == result["steps"] == 300, "a real agent lost steps"
    report = report_json(rec)  # the report copes with what the hostile clients left in the recording
    assert {r["pid"] for r in report["runs"]} >= set(results)
