"""A small real PyTorch training with a known bottleneck; run as ``python -m trainmon.demo.train``.

The dataset's per-sample cost decides what starves the loop: CPU work (decode/augment), uncached
random reads from a real file (O_DIRECT), HTTP GETs from a slow loopback object store (remote storage,
through urllib.request as object-store clients do), a client-side rate limiter (latency), or a plain
sleep (latency). ``--self-report FILE`` writes the script's own measurement of steps and data
wait, which the tests compare against trainmon's. Runs on CPU, or on CUDA with ``--device cuda``.
"""

from __future__ import annotations

import argparse
import faulthandler
import http.client
import json
import mmap
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trainmon.demo.stalls import MetricsLog, TraceCache

PAGE = 4096


def _spin(seconds: float) -> None:
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
    import torch
    from torch.utils.data import Dataset

    slow_rank = args.slow_rank is not None and rank == args.slow_rank

    class SyntheticDataset(Dataset):
        def __init__(self) -> None:
            self.io = _Io()

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
            if args.cpu_ms:
                _spin(args.cpu_ms / 1e3)
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainmon.demo.train")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seconds", type=float, default=0.0, help="stop after this long instead (0: use --steps)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--cpu-ms", type=float, default=0.0, help="CPU work per sample in the loader")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="latency per sample (a slow service)")
    p.add_argument("--io-reads", type=int, default=0, help="uncached random reads per sample (O_DIRECT)")
    p.add_argument("--io-kb", type=int, default=4, help="size of each read")
    p.add_argument("--io-mb", type=int, default=256, help="size of the data file the reads hit")
    p.add_argument("--io-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("--remote-latency-ms", type=float, default=0.0, help="GET each sample from a slow loopback store")
    p.add_argument("--remote-kb", type=int, default=256)
    p.add_argument("--remote", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--manifest",
        action="store_true",
        help="with --remote-latency-ms: fetch only a manifest per worker, over a connection kept open",
    )
    p.add_argument("--rate-limit", type=float, default=0.0, help="samples per second per worker (a token bucket)")
    p.add_argument("--width", type=int, default=512, help="hidden width: sets compute per step")
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--checkpoint-mb", type=float, default=64.0)
    p.add_argument("--eval-every", type=int, default=0, help="run an evaluation pass every N steps")
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument(
        "--switch-at",
        type=float,
        default=0.0,
        help="after this share of the run, switch to --switch-workers workers with --switch-cpu-ms per sample "
        "(and no other per-sample cost); the switch is marked on the run's timeline as 'switch'",
    )
    p.add_argument("--switch-workers", type=int, default=2, help="(--switch-at) workers after the switch")
    p.add_argument("--switch-cpu-ms", type=float, default=0.0, help="(--switch-at) CPU work per sample after it")
    p.add_argument(
        "--switch-in-place",
        action="store_true",
        help="(--switch-at, --workers 0) keep the DataLoader: only its samples' CPU work becomes --switch-cpu-ms",
    )
    p.add_argument("--slow-rank", type=int, default=None, help="(distributed) this rank's data is slower")
    p.add_argument("--slow-sleep-ms", type=float, default=0.0)
    p.add_argument(
        "--extra-matmuls",
        type=int,
        default=0,
        help="each forward multiplies the hidden activations by a fixed width×width matrix this many times more "
        "(compute without parameters)",
    )
    p.add_argument(
        "--extra-rank",
        type=int,
        default=None,
        help="(distributed) only this rank does --extra-matmuls: a slower or throttled device",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-attach", action="store_true")
    p.add_argument("--warmup", type=int, default=5, help="steps excluded from the self-report")
    p.add_argument("--self-report", default=None)
    p.add_argument("--mp-context", default=None, choices=[None, "fork", "spawn", "forkserver"])
    p.add_argument(
        "--hang-after", type=float, default=0.0, help="rotate the metrics log after this long: a deadlock (0: never)"
    )
    p.add_argument("--watchdog-s", type=float, default=0.0, help="exit (faulthandler) after this long without a step")
    p.add_argument("--trace-nodes", type=int, default=0, help="a Python tree of this many nodes per step, cached")
    p.add_argument("--trace-keep", type=int, default=60, help="steps whose trees the cache keeps")
    p.add_argument("--epoch-batches", type=int, default=0, help="batches per epoch (0: one epoch for the whole run)")
    p.add_argument(
        "--worker-setup-ms", type=float, default=0.0, help="CPU time each worker spends building the dataset's index"
    )
    p.add_argument("--epochs", type=int, default=0, help="(python -m trainmon.demo.lit) stop after this many epochs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    if not args.no_attach:
        import trainmon.agent

        trainmon.agent.attach(name=os.environ.get("TRAINMON_DEMO_NAME") or "demo-train")

    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0"))
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cleanup: list[str] = []
    if args.io_reads:
        args.io_file = _make_data_file(args.io_mb)
        cleanup.append(args.io_file)
    if args.remote_latency_ms:
        store = ObjectStore(args.remote_latency_ms, args.remote_kb)
        args.remote = store.url

    datasets_args: list[argparse.Namespace] = []  # what each dataset reads per sample (--switch-in-place)

    def loader_for(workers: int, plain: bool = False, cpu_ms: float = 0.0) -> DataLoader:
        a = argparse.Namespace(**vars(args))
        datasets_args.append(a)
        if plain:
            a.cpu_ms = a.sleep_ms = a.rate_limit = 0.0
            a.cpu_ms = cpu_ms
            a.io_reads, a.io_file, a.remote = 0, None, None
        dataset = with_worker_setup(build_dataset(a, epoch_size(args), rank), args.worker_setup_ms, workers)
        return DataLoader(
            dataset,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=workers,
            persistent_workers=args.persistent and workers > 0,
            pin_memory=args.pin_memory,
            multiprocessing_context=args.mp_context if workers > 0 else None,
        )

    device = torch.device(args.device)
    layers = nn.Sequential(
        nn.Linear(args.features, args.width),
        nn.ReLU(),
        nn.Linear(args.width, args.width),
        nn.ReLU(),
        nn.Linear(args.width, 10),
    ).to(device)
    if args.extra_matmuls:
        layers.insert(2, extra_compute(args, rank))  # on every rank, so parameter names match across ranks
    model: nn.Module = layers
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    ckpt_path = os.path.join(tempfile.gettempdir(), f"trainmon-demo-ckpt-{os.getpid()}.pt")
    ballast = torch.zeros(int(args.checkpoint_mb * 2**20 / 4)) if args.checkpoint_every else None
    eval_loader = loader_for(0, plain=True) if args.eval_every else None

    waits: list[float] = []
    step_ends: list[float] = [time.perf_counter()]
    deadline = time.monotonic() + args.seconds if args.seconds else None
    switch_step = int(args.steps * args.switch_at) if args.switch_at and not args.seconds else None
    switch_time = time.monotonic() + args.seconds * args.switch_at if args.switch_at and args.seconds else None
    loader = loader_for(args.workers)
    step = 0
    metrics = MetricsLog(args.hang_after) if args.hang_after else None
    traces = TraceCache(args.trace_nodes, args.trace_keep) if args.trace_nodes else None

    def more() -> bool:
        if deadline is None:
            return step < args.steps
        go = time.monotonic() < deadline
        if distributed:
            # Ranks reach the deadline a step apart: agree, or one would wait forever in the next all-reduce.
            flag = torch.tensor([1 if go else 0])
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            go = bool(flag.item())
        return go

    while more():
        it = iter(loader)
        while more():
            if (switch_step is not None and step == switch_step) or (
                switch_time is not None and time.monotonic() >= switch_time
            ):
                switch_step = switch_time = None
                import trainmon.agent  # the switch as a mark on the run's timeline (a no-op without the agent)

                trainmon.agent.mark("switch")
                if args.switch_in_place:
                    for a in datasets_args:  # the same DataLoader and iterator; its samples cost more from now on
                        a.cpu_ms = args.switch_cpu_ms
                else:
                    loader = loader_for(args.switch_workers, plain=True, cpu_ms=args.switch_cpu_ms)
                    break
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if metrics is not None:
                metrics.log(step, loss.item())
            if traces is not None:
                traces.record(step, args.batch_size)
            if args.watchdog_s:
                faulthandler.dump_traceback_later(args.watchdog_s, exit=True)  # re-armed by every step
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                torch.save({"model": model.state_dict(), "ballast": ballast}, ckpt_path)
                with open(ckpt_path, "rb+") as fh:
                    os.fsync(fh.fileno())
            if eval_loader is not None and step % args.eval_every == 0:
                _evaluate(model, eval_loader, args.eval_batches)
            step_ends.append(time.perf_counter())
        del it
    if ballast is not None and os.path.exists(ckpt_path):
        os.unlink(ckpt_path)
    if metrics is not None:
        metrics.close()
    faulthandler.cancel_dump_traceback_later()
    for path in cleanup:
        os.unlink(path)
    if distributed:
        torch.distributed.destroy_process_group()
    if args.self_report:
        _self_report(args, step, waits, step_ends)
    return 0


def extra_compute(args: argparse.Namespace, rank: int):
    """``--extra-matmuls`` products of the activations with a fixed matrix (a tensor, not a parameter or a buffer:
    DDP neither reduces nor broadcasts it), forward and backward; on ``--extra-rank`` only where given."""
    import torch
    from torch import nn

    n = args.extra_matmuls if args.extra_rank is None or rank == args.extra_rank else 0
    matrix = torch.randn(args.width, args.width, generator=torch.Generator().manual_seed(1)) / args.width**0.5

    class ExtraCompute(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.matrix = matrix.to(args.device)

        def forward(self, h):
            for _ in range(n):
                h = torch.tanh(h @ self.matrix)
            return h

    return ExtraCompute()


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


def _evaluate(model, loader, batches: int) -> None:
    import torch

    model.eval()
    with torch.no_grad():
        for i, (x, _) in enumerate(loader):
            model(x)
            _spin(0.02)  # metric computation
            if i + 1 >= batches:
                break
    model.train()


def _make_data_file(mb: int) -> str:
    fd, path = tempfile.mkstemp(prefix="trainmon-demo-data-", dir=os.environ.get("TRAINMON_DEMO_DATA_DIR"))
    block = os.urandom(1 << 20)
    with os.fdopen(fd, "wb") as fh:
        for _ in range(mb):
            fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())
    return path


def _self_report(args: argparse.Namespace, steps: int, waits: list[float], step_ends: list[float]) -> None:
    w = args.warmup
    durations = [b - a for a, b in zip(step_ends[w:-1], step_ends[w + 1 :], strict=False)]
    report = {
        "steps": steps,
        "data_wait_fraction": sum(waits[w:]) / sum(durations) if durations else None,
        "step_time_ms_p50": sorted(durations)[len(durations) // 2] * 1e3 if durations else None,
        "pid": os.getpid(),
    }
    with open(args.self_report, "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    sys.exit(main())
