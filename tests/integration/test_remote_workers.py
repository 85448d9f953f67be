"""Real processes waiting in real ways, watched by the procs source as DataLoader workers: HTTP clients reading a
slow loopback server (urllib.request with a timeout, which polls; http.client without one, which blocks in recv)
wait on the network; a process that sleeps or waits on a condition while it holds an open keep-alive connection
does not. /proc/<pid>/io rchar, the old signal, sees none of the HTTP reads: recv() is not read()."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainmon.sources.host.procs import ProcSource

LATENCY_S = 0.02
PAYLOAD = b"x" * 65536


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        time.sleep(LATENCY_S)
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


CHILDREN = {
    # object-store style: one GET per sample with a read timeout (poll, then recv_into)
    "urllib": """
        import urllib.request
        print("ready", flush=True)
        while True:
            with urllib.request.urlopen("http://{addr}/obj", timeout=30) as r:
                r.read()
    """,
    # a kept-alive connection without a timeout: blocks in recv_into itself
    "http.client": """
        import http.client
        conn = http.client.HTTPConnection("{addr}")
        print("ready", flush=True)
        while True:
            conn.request("GET", "/obj")
            conn.getresponse().read()
    """,
    # slow per sample by a sleep, with a connection open that it fetched a manifest over
    "sleep": """
        import http.client, time
        conn = http.client.HTTPConnection("{addr}")
        conn.request("GET", "/manifest")
        conn.getresponse().read()
        print("ready", flush=True)
        while True:
            time.sleep(0.005)
    """,
    # slow per sample by a rate limiter: a condition a refill thread notifies
    "condition": """
        import http.client, threading, time
        conn = http.client.HTTPConnection("{addr}")
        conn.request("GET", "/manifest")
        conn.getresponse().read()
        cond, tokens = threading.Condition(), [0]
        def refill():
            while True:
                time.sleep(0.005)
                with cond:
                    tokens[0] += 1
                    cond.notify()
        threading.Thread(target=refill, daemon=True).start()
        print("ready", flush=True)
        while True:
            with cond:
                while not tokens[0]:
                    cond.wait()
                tokens[0] -= 1
    """,
}


@pytest.fixture
def children(server: str) -> Iterator[dict[str, subprocess.Popen]]:
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, code in CHILDREN.items():
            proc = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(code).replace("{addr}", server)],
                stdout=subprocess.PIPE,
                text=True,
            )
            procs[name] = proc
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", name
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=10)
            if proc.stdout:
                proc.stdout.close()


def test_network_waits_are_told_from_sleeps_and_locks(children: dict[str, subprocess.Popen]) -> None:
    pids = {name: proc.pid for name, proc in children.items()}
    with ProcSource(lambda: {pid: "worker" for pid in pids.values()}, hz_states=20) as src:
        src.sample()
        time.sleep(3.0)
        out = src.sample()
    figures = {
        name: {k.split(".", 2)[2]: v for k, v in out.items() if k.startswith(f"proc.{pid}.")}
        for name, pid in pids.items()
    }
    for name in ("urllib", "http.client"):
        f = figures[name]
        assert f["net_wait"] >= 0.5, (name, f)
        assert f["rchar_mb_s"] < 0.5, (name, f)  # recv() never counts in rchar: the old signal is blind here
    # Connections counted when the sample is taken: urllib's closes after each response, the kept-alive ones stay.
    assert figures["http.client"]["net_sockets"] >= 1, figures["http.client"]
    for name in ("sleep", "condition"):
        f = figures[name]
        assert f["net_wait"] <= 0.05, (name, f)
        assert f["net_sockets"] >= 1, (name, f)  # it holds a connection, yet waits on something else
    assert not any(k.endswith((".net_wait", ".net_sockets")) and "proc" in k for k in src.na_reasons), src.na_reasons
