"""A small real PyTorch training with a known bottleneck; run as ``python -m trainmon.demo.train``.

The dataset's per-sample cost decides what starves the loop (``trainmon.demo.data``: CPU work, uncached reads, a
slow loopback object store, a rate limiter, a sleep); the options are ``trainmon.demo.options``. This module is the
training itself: the model, the loop (checkpoints, evaluation passes, a switch of loader, the stalls of
``trainmon.demo.stalls``) and ``--self-report FILE``, the script's own measurement of steps and data wait, which
the tests compare against trainmon's. Runs on CPU, or on CUDA with ``--device cuda``. The names of the data and
options modules stay importable from here.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import tempfile
import time
from typing import Any

from trainmon.demo.data import (
    PAGE,
    ObjectStore,
    TokenBucket,
    build_dataset,
    epoch_size,
    make_data_file,
    spin,
    with_worker_setup,
)
from trainmon.demo.feeds import BackgroundGenerator, ThreadedLoader, dataloader_x
from trainmon.demo.loop_work import StepMetrics, progress
from trainmon.demo.options import parse
from trainmon.demo.sizing import sized_width
from trainmon.demo.stalls import MetricsLog, TraceCache
from trainmon.demo.upload import MetricsUploader

__all__ = [
    "PAGE",
    "Loaders",
    "Loop",
    "ObjectStore",
    "TokenBucket",
    "build_dataset",
    "build_model",
    "epoch_size",
    "extra_compute",
    "main",
    "parse",
    "with_worker_setup",
]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if args.step_ms:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            print("trainmon.demo.train: --step-ms sizes one rank's model; give --width to a distributed run")
            return 2
        torch.set_num_threads(args.threads)
        args.width, measured = sized_width(args.step_ms, args.features, args.batch_size, torch.device(args.device))
        print(f"sized --width {args.width} for {args.step_ms:g} ms steps (measured {measured:.1f} ms)", flush=True)
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
        args.io_file = make_data_file(args.io_mb)
        cleanup.append(args.io_file)
    store = ObjectStore(args.remote_latency_ms, args.remote_kb) if args.remote_latency_ms else None
    if store is not None:
        args.remote = store.url

    loaders = Loaders(args, rank)
    device = torch.device(args.device)
    loop = Loop(args, build_model(args, rank, device, distributed), device, loaders, distributed)
    loop.run()
    loop.close()
    for path in cleanup:
        os.unlink(path)
    if distributed:
        torch.distributed.destroy_process_group()
    if args.self_report:
        _self_report(args, loop.step, loop.waits, loop.step_ends, loop.own)
    return 0


class Loaders:
    """Makes the run's DataLoaders, and keeps what each one's dataset reads per sample (``--switch-in-place``)."""

    def __init__(self, args: argparse.Namespace, rank: int) -> None:
        self.args = args
        self.rank = rank
        self.datasets_args: list[argparse.Namespace] = []

    def make(self, workers: int, plain: bool = False, cpu_ms: float = 0.0) -> Any:
        """A DataLoader with ``workers`` workers; ``plain``: its samples cost ``cpu_ms`` of CPU work, nothing else."""
        from torch.utils.data import DataLoader

        args = self.args
        if args.feed == "threadpool" and not plain:
            batches = epoch_size(args) // args.batch_size
            return ThreadedLoader(batches, args.batch_size, args.features, args.decode_kb, args.decode_threads, 4)
        a = argparse.Namespace(**vars(args))
        self.datasets_args.append(a)
        if plain:
            a.cpu_ms = a.sleep_ms = a.rate_limit = 0.0
            a.cpu_ms = cpu_ms
            a.io_reads, a.io_file, a.remote = 0, None, None
        dataset = with_worker_setup(build_dataset(a, epoch_size(args), self.rank), args.worker_setup_ms, workers)
        loader_class = dataloader_x(args.max_prefetch) if args.feed == "prefetch" and not plain else DataLoader
        return loader_class(
            dataset,
            batch_size=args.batch_size,
            shuffle=True,
            num_workers=workers,
            persistent_workers=args.persistent and workers > 0,
            pin_memory=args.pin_memory,
            multiprocessing_context=args.mp_context if workers > 0 else None,
        )

    def set_cpu_ms(self, cpu_ms: float) -> None:
        """Every dataset made so far costs ``cpu_ms`` of CPU work per sample from now on (same loaders, iterators)."""
        for a in self.datasets_args:
            a.cpu_ms = cpu_ms


def build_model(args: argparse.Namespace, rank: int, device: Any, distributed: bool) -> Any:
    """The MLP the demo trains (``--features`` → ``--width`` → 10), on ``device``; wrapped in DDP when distributed."""
    from torch import nn

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
    return model


def extra_compute(args: argparse.Namespace, rank: int) -> Any:
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


class Loop:
    """The training loop over epochs: its optimizer, loaders, stop condition, the switch, and what each step does
    besides training (metrics log, cached trees, watchdog, checkpoint, evaluation). Its own measurement: ``step``,
    ``waits`` (each batch's wait, s), ``step_ends`` (perf_counter at the start and after each step) and ``own``
    (each step's time in the loop's own per-step work: --metrics-window, --progress)."""

    def __init__(self, args: argparse.Namespace, model: Any, device: Any, loaders: Loaders, distributed: bool) -> None:
        import torch
        from torch import nn

        self.args, self.model, self.device, self.loaders, self.distributed = args, model, device, loaders, distributed
        self.opt = torch.optim.SGD(model.parameters(), lr=0.01)
        self.loss_fn = nn.CrossEntropyLoss()
        self.ckpt_path = os.path.join(tempfile.gettempdir(), f"trainmon-demo-ckpt-{os.getpid()}.pt")
        self.ballast = torch.zeros(int(args.checkpoint_mb * 2**20 / 4)) if args.checkpoint_every else None
        self.eval_loader = loaders.make(0, plain=True) if args.eval_every else None

        self.waits: list[float] = []
        self.own: list[float] = []
        self.step_ends: list[float] = [time.perf_counter()]
        self.deadline = time.monotonic() + args.seconds if args.seconds else None
        self.switch_step = int(args.steps * args.switch_at) if args.switch_at and not args.seconds else None
        self.switch_time = time.monotonic() + args.seconds * args.switch_at if args.switch_at and args.seconds else None
        self.loader = loaders.make(args.workers)
        self.step = 0
        self.metrics = MetricsLog(args.hang_after) if args.hang_after else None
        stall, timeout = args.upload_stall_after, args.upload_timeout_s
        self.upload = MetricsUploader(stall, timeout) if stall else None
        self.traces = TraceCache(args.trace_nodes, args.trace_keep) if args.trace_nodes else None
        self.step_metrics = StepMetrics(args.metrics_window) if args.metrics_window else None
        self.bar: Any = None

    def more(self) -> bool:
        """Whether to take another step: until --steps, or until --seconds (agreed by all ranks)."""
        if self.deadline is None:
            return self.step < self.args.steps
        go = time.monotonic() < self.deadline
        if self.distributed:
            import torch
            import torch.distributed as dist

            # Ranks reach the deadline a step apart: agree, or one would wait forever in the next all-reduce.
            flag = torch.tensor([1 if go else 0])
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            go = bool(flag.item())
        return go

    def run(self) -> None:
        while self.more():
            self.bar = progress(self.loader) if self.args.progress else None
            it = iter(self.bar if self.bar is not None else self.loader)
            while self.more():
                if self._switch_due() and self._switch():
                    break
                t0 = time.perf_counter()
                try:
                    x, y = next(it)
                except StopIteration:
                    break
                self.waits.append(time.perf_counter() - t0)
                self._train_step(x, y)
                self.step_ends.append(time.perf_counter())
            if isinstance(it, BackgroundGenerator):
                it.close()
            del it
            if self.bar is not None:
                self.bar.close()

    def _switch_due(self) -> bool:
        return (self.switch_step is not None and self.step == self.switch_step) or (
            self.switch_time is not None and time.monotonic() >= self.switch_time
        )

    def _switch(self) -> bool:
        """--switch-at: marks the switch; True where a new loader replaces the current one (the epoch ends)."""
        self.switch_step = self.switch_time = None
        import trainmon.agent  # the switch as a mark on the run's timeline (a no-op without the agent)

        trainmon.agent.mark("switch")
        if self.args.switch_in_place:  # the same DataLoader and iterator; its samples cost more from now on
            self.loaders.set_cpu_ms(self.args.switch_cpu_ms)
            return False
        self.loader = self.loaders.make(self.args.switch_workers, plain=True, cpu_ms=self.args.switch_cpu_ms)
        return True

    def _train_step(self, x: Any, y: Any) -> None:
        import torch

        args = self.args
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        self.opt.zero_grad(set_to_none=True)
        logits = self.model(x)
        loss = self.loss_fn(logits, y)
        loss.backward()
        self.opt.step()
        self.step += 1
        step = self.step
        t0 = time.perf_counter()
        if self.step_metrics is not None:
            self.step_metrics.log_metrics(step, logits, y, loss)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss.item():.4f}", lr=self.opt.param_groups[0]["lr"])
        self.own.append(time.perf_counter() - t0)
        if self.metrics is not None:
            self.metrics.log(step, loss.item())
        if self.upload is not None:
            self.upload.log(step, loss.item())
        if self.traces is not None:
            self.traces.record(step, args.batch_size)
        if args.watchdog_s:
            faulthandler.dump_traceback_later(args.watchdog_s, exit=True)  # re-armed by every step
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            torch.save({"model": self.model.state_dict(), "ballast": self.ballast}, self.ckpt_path)
            with open(self.ckpt_path, "rb+") as fh:
                os.fsync(fh.fileno())
        if self.eval_loader is not None and step % args.eval_every == 0:
            _evaluate(self.model, self.eval_loader, args.eval_batches)

    def close(self) -> None:
        """Remove the checkpoint, stop the metrics log and the watchdog."""
        if self.ballast is not None and os.path.exists(self.ckpt_path):
            os.unlink(self.ckpt_path)
        if self.metrics is not None:
            self.metrics.close()
        if self.step_metrics is not None:
            self.step_metrics.close()
        faulthandler.cancel_dump_traceback_later()


def _evaluate(model: Any, loader: Any, batches: int) -> None:
    import torch

    model.eval()
    with torch.no_grad():
        for i, (x, _) in enumerate(loader):
            model(x)
            spin(0.02)  # metric computation
            if i + 1 >= batches:
                break
    model.train()


def _self_report(
    args: argparse.Namespace, steps: int, waits: list[float], step_ends: list[float], own: list[float]
) -> None:
    w = args.warmup
    durations = [b - a for a, b in zip(step_ends[w:-1], step_ends[w + 1 :], strict=False)]
    report = {
        "steps": steps,
        "data_wait_fraction": sum(waits[w:]) / sum(durations) if durations else None,
        "own_code_fraction": sum(own[w:]) / sum(durations) if durations else None,
        "step_time_ms_p50": sorted(durations)[len(durations) // 2] * 1e3 if durations else None,
        "pid": os.getpid(),
    }
    with open(args.self_report, "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    sys.exit(main())
