"""A freeze that resumes, for the demo training (``trainmon.demo.train``): metrics shipped to a collector.

``MetricsUploader``: the loop appends each step's metrics to a buffer under a lock; a background thread takes the
same lock every ``period_s`` and POSTs the buffer to a metrics collector (urllib, with a socket timeout), holding
the lock for the whole request, as simple uploaders do so that no line is lost or sent twice. The collector here
is a loopback HTTP server that, ``stall_after_s`` after it started, accepts one request and never answers (an
overloaded or wedged service). The upload then waits out its timeout with the lock held, and the loop's next log
call waits for the lock: the training stops stepping for about ``timeout_s``, then the timeout gives up on that
batch and training resumes. ``log`` prints when the loop froze and when it resumed (monotonic seconds, the clock
trainmon's recordings use), the training's own account of its freeze.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FROZE_S = 1.0  # a log call that waited this long for the lock is reported as a freeze


class Collector:
    """A loopback metrics collector: answers every POST at once, but the first one after ``stall_after_s``."""

    def __init__(self, stall_after_s: float) -> None:
        stall_at = time.monotonic() + stall_after_s
        stalled = threading.Event()
        wedged = threading.Event()  # never set: the wedged request never gets its answer

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if time.monotonic() >= stall_at and not stalled.is_set():
                    stalled.set()
                    wedged.wait()
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, name="metrics-collector", daemon=True).start()


class MetricsUploader:
    def __init__(self, stall_after_s: float, timeout_s: float, period_s: float = 0.5) -> None:
        self.collector = Collector(stall_after_s)
        self.timeout_s = timeout_s
        self.period_s = period_s
        self.lock = threading.Lock()
        self.buffer: list[str] = []
        self.dropped = 0
        threading.Thread(target=self._upload_forever, name="metrics-upload", daemon=True).start()

    def log(self, step: int, loss: float) -> None:
        t0 = time.monotonic()
        with self.lock:
            self.buffer.append(f"{step} {loss:.5f}\n")
        t1 = time.monotonic()
        if t1 - t0 >= FROZE_S:
            print(f"trainmon demo: froze at {t0:.3f} resumed at {t1:.3f} ({t1 - t0:.1f} s)", flush=True)

    def _upload_forever(self) -> None:
        while True:
            time.sleep(self.period_s)
            with self.lock:
                if not self.buffer:
                    continue
                body = "".join(self.buffer).encode()
                request = urllib.request.Request(self.collector.url, data=body, method="POST")
                try:
                    with urllib.request.urlopen(request, timeout=self.timeout_s):
                        pass
                except (urllib.error.URLError, TimeoutError, OSError):
                    self.dropped += 1  # the collector did not answer in time: this batch is lost
                self.buffer.clear()
