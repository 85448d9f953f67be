"""The demo training's data: a synthetic dataset whose per-sample cost decides what starves the loop.

Each sample costs what the options ask for (``trainmon.demo.options``): CPU work (decode/augment), uncached random
reads from a real file (O_DIRECT), HTTP GETs from a slow loopback object store (remote storage, through
urllib.request as object-store clients do), a client-side rate limiter (latency), a plain sleep (latency), and
optionally a per-worker index built before the first sample. With ``--cache-samples`` each process keeps what it
decoded in a dict, as datasets that cache decoded samples in memory do: the first pass over the data pays the
cost, later passes (with persistent workers) are served from the cache. `trainmon.demo.train` (and
``trainmon.demo.lit``) build their DataLoaders over it.
"""

from __future__ import annotations

import argparse
import http.client
import mmap
import os
import random
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PAGE = 4096


def spin(seconds: float) -> None:
    """Busy CPU work for ``seconds``."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


class ObjectStore:
    """A loopback HTTP object store (a thread per request): every GET waits ``latency_ms``, then returns ``kb`` KiB."""

    def __init__(self, latency_ms: float, kb: int) -> None:
        latency, payload = latency_ms / 1e3, os.urandom(kb * 1024)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive for clients that ask for it (http.client), as S3 does

            def do_GET(self) -> None:
                time.sleep(latency)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class TokenBucket:
    """A client-side rate limiter: ``rate`` requests per second; a refill thread adds tokens and wakes waiters."""

    def __init__(self, rate: float) -> None:
        self.period = 1.0 / rate
        self.tokens = 1
        self.cond = threading.Condition()
        threading.Thread(target=self._refill, daemon=True).start()

    def _refill(self) -> None:
        while True:
            time.sleep(self.period)
            with self.cond:
                self.tokens = min(self.tokens + 1, 4)
                self.cond.notify()

    def acquire(self) -> None:
        with self.cond:
            while self.tokens == 0:
                self.cond.wait()
            self.tokens -= 1


class _Io:
    """Per-process handles (a worker opens its own after fork/spawn)."""

    def __init__(self) -> None:
        self.pid = -1
        self.fd = -1
        self.buf: mmap.mmap | None = None
        self.session: http.client.HTTPConnection | None = None  # kept alive after fetching the manifest
        self.limiter: TokenBucket | None = None


def build_dataset(args: argparse.Namespace, size: int, rank: int = 0):
    """``size`` samples (``args.features`` floats and a label), each costing what ``args`` asks."""
    import torch
    from torch.utils.data import Dataset

    slow_rank = args.slow_rank is not None and rank == args.slow_rank

    class SyntheticDataset(Dataset):
        def __init__(self) -> None:
            self.io = _Io()
            # --cache-samples: what this process decoded, by index (each worker fills its own copy; persistent
            # workers keep theirs across epochs, new workers start empty).
            self.cache: dict[int, tuple[Any, int]] = {}

        def __len__(self) -> int:
            return size

        def _handles(self) -> _Io:
            if self.io.pid != os.getpid():
                self.io = _Io()
                self.io.pid = os.getpid()
                if args.io_file:
                    self.io.fd = os.open(args.io_file, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
                    self.io.buf = mmap.mmap(-1, args.io_kb * 1024)
                if args.manifest and args.remote:
                    # The sample list, fetched once per worker; the connection stays open in its pool.
                    self.io.session = http.client.HTTPConnection(args.remote.removeprefix("http://"), timeout=30)
                    self.io.session.request("GET", "/manifest")
                    self.io.session.getresponse().read()
                if args.rate_limit:
                    self.io.limiter = TokenBucket(args.rate_limit)
            return self.io

        def __getitem__(self, index: int):
            if args.cache_samples and (hit := self.cache.get(index)) is not None:
                return hit
            sample = self._load(index)
            if args.cache_samples:
                self.cache[index] = sample
            return sample

        def _load(self, index: int) -> tuple[Any, int]:
            if args.cpu_ms:
                spin(args.cpu_ms / 1e3)
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1e3)
            if slow_rank and args.slow_sleep_ms:
                time.sleep(args.slow_sleep_ms / 1e3)
            if args.io_file or args.remote or args.rate_limit:
                io = self._handles()
                pages = max(1, os.fstat(io.fd).st_size // PAGE - args.io_kb // 4) if io.fd >= 0 else 0
                if io.buf is not None:  # opened with --io-file, which --io-reads makes
                    for _ in range(args.io_reads):
                        os.preadv(io.fd, [io.buf], random.randrange(pages) * PAGE)
                if io.limiter is not None:
                    io.limiter.acquire()
                if args.remote and not args.manifest:
                    # One GET per sample with a read timeout, as object-store clients do (urllib3, botocore).
                    with urllib.request.urlopen(f"{args.remote}/samples/{index}", timeout=30) as response:
                        if len(response.read()) != args.remote_kb * 1024:
                            raise ConnectionError("short read from the object store")
            g = torch.Generator().manual_seed(index)
            return torch.randn(args.features, generator=g), int(index % 10)

    return SyntheticDataset()


def epoch_size(args: argparse.Namespace) -> int:
    """Samples per epoch: --epoch-batches batches, else enough for the whole run (epochs repeat in --seconds mode)."""
    if args.epoch_batches:
        return args.epoch_batches * args.batch_size
    return min(args.steps * args.batch_size + args.batch_size, 50_000)


def _build_index(seconds: float) -> dict[int, int]:
    """CPU work of a fixed duration with a bounded result: what opening a dataset's files costs a process."""
    index: dict[int, int] = {}
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:
        index[k & 0xFFFF] = hash((k, "sample"))
        k += 1
    return index


def with_worker_setup(dataset, setup_ms: float, workers: int):
    """``dataset`` as many real ones are written: each process that reads it first builds its own index (opens
    its files or database, reads a manifest), once per process, here ``setup_ms`` of CPU work. Without
    persistent_workers that happens again in every worker of every epoch."""
    if not setup_ms or not workers:
        return dataset
    from torch.utils.data import Dataset

    class IndexedDataset(Dataset):
        def __init__(self) -> None:
            self.pid = -1
            self.index: dict[int, int] = {}

        def __len__(self) -> int:
            return len(dataset)

        def __getitem__(self, i: int):
            if self.pid != os.getpid():
                self.index = _build_index(setup_ms / 1e3)
                self.pid = os.getpid()
            return dataset[i]

    return IndexedDataset()


def make_data_file(mb: int) -> str:
    """A file of ``mb`` MiB of random bytes, synced to disk, for the uncached reads of ``--io-reads``."""
    fd, path = tempfile.mkstemp(prefix="trainmon-demo-data-", dir=os.environ.get("TRAINMON_DEMO_DATA_DIR"))
    block = os.urandom(1 << 20)
    with os.fdopen(fd, "wb") as fh:
        for _ in range(mb):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    return path
