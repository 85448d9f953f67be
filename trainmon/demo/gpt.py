"""A nanoGPT-style training with no DataLoader: ``python -m trainmon.demo.gpt``.

The loop is nanoGPT's train.py: the first batch fetched before the loop, then per iteration, for each micro-step of
gradient accumulation, the forward, the NEXT batch fetched (``X, Y = get_batch("train")``: prepared by the host while
an accelerator runs the forward), the backward; then gradient clipping, the optimizer step, ``zero_grad`` and a log
line every ``--log-interval`` steps (``loss.item()``). ``get_batch(split)`` draws random offsets into a text corpus,
as nanoGPT's does into its token memmap; with ``--tokenize live`` it encodes each slice there, with a byte-level BPE
in pure Python (``trainmon.demo.gpt_parts``), so the main thread spends much of each step on it; with
``--tokenize ahead`` the corpus was encoded once before training and ``get_batch`` only slices token ids.

``--source loader`` draws the same batches from a generator wrapped in ``trainmon.agent.loader`` (a streaming
dataset as DALI, FFCV or Ray Data would give it), ``--source torchdata`` from a ``torchdata.nodes.Loader`` over it.

The script measures its own batch time: the seconds spent in ``get_batch`` (or in ``next()`` of the loader) within
each step (from one optimizer step's end to the next's), over the steady steps (after ``--warmup``). It prints that
share at the end and writes it with ``--self-report FILE`` (``batch_fraction``) for the tests to hold trainmon's
data-wait figure against.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from trainmon.demo.sizing import median_s


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainmon.demo.gpt")
    p.add_argument("--seconds", type=float, default=20.0, help="train this long (0: --steps)")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--tokenize", choices=("live", "ahead"), default="live", help="in get_batch, or once before")
    p.add_argument("--source", choices=("get_batch", "loader", "torchdata"), default="get_batch")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--merges", type=int, default=64, help="BPE merges (each one rescans a slice it encodes)")
    p.add_argument(
        "--model-ms",
        type=float,
        default=0.0,
        help="set --n-embd so the model's part of a step takes about this long here (timed at start-up)",
    )
    p.add_argument("--corpus-kb", type=int, default=48)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-interval", type=int, default=0, help="estimate_loss every N steps (0: never)")
    p.add_argument("--eval-iters", type=int, default=4)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--compile", action="store_true", help="torch.compile the model, as nanoGPT does")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-attach", action="store_true")
    p.add_argument("--warmup", type=int, default=10, help="steps excluded from the self-report")
    p.add_argument("--self-report", default=None)
    return p.parse_args(argv)


MAX_EMBD = 2048  # --model-ms never sizes the embedding wider than this


class Batches:
    """``get_batch(split)`` over a corpus, as nanoGPT's: ``batch_size`` rows at random offsets, y = x shifted by one."""

    def __init__(self, args: argparse.Namespace, torch: Any) -> None:
        from trainmon.demo.gpt_parts import ByteBPE, corpus

        self.torch, self.args = torch, args
        text = corpus(args.corpus_kb * 1024)
        cut = int(len(text) * 0.9)
        self.text = {"train": text[:cut], "val": text[cut:]}
        self.tok = ByteBPE(text[:8192], args.merges)
        self.rng = random.Random(1)
        self.ids: dict[str, Any] = {}
        if args.tokenize == "ahead":  # nanoGPT's prepare.py: token ids written once, sliced by get_batch
            self.ids = {k: torch.tensor(self.tok.encode(v), dtype=torch.long) for k, v in self.text.items()}

    def get_batch(self, split: str) -> tuple[Any, Any]:
        torch, args = self.torch, self.args
        block = args.block_size
        if self.ids:
            data = self.ids[split]
            ix = torch.randint(len(data) - block, (args.batch_size,))
            x = torch.stack([data[i : i + block] for i in ix])
            y = torch.stack([data[i + 1 : i + 1 + block] for i in ix])
        else:
            text, span = self.text[split], 3 * (block + 1)  # a byte-level BPE keeps fewer than 3 bytes per token
            rows = []
            for _ in range(args.batch_size):
                i = self.rng.randrange(len(text) - span)
                ids = self.tok.encode(text[i : i + span])[: block + 1]
                rows.append(ids + [0] * (block + 1 - len(ids)))
            data = torch.tensor(rows, dtype=torch.long)
            x, y = data[:, :-1], data[:, 1:]
        if args.device.startswith("cuda"):
            return x.pin_memory().to(args.device, non_blocking=True), y.pin_memory().to(args.device, non_blocking=True)
        return x, y

    def stream(self, split: str) -> Iterator[tuple[Any, Any]]:
        """The same batches as a generator (a streaming dataset)."""
        while True:
            yield self.get_batch(split)


Batch = Callable[[str], tuple[Any, Any]]


def batch_function(batches: Batches, args: argparse.Namespace) -> Batch:
    """What the loop calls for its next train batch: get_batch itself, or ``next()`` of a loader over the stream."""
    if args.source == "get_batch":
        return batches.get_batch
    if args.source == "torchdata":
        tn = importlib.import_module("torchdata.nodes")
        it = iter(tn.Loader(tn.IterableWrapper(batches.stream("train"))))
    else:
        import trainmon.agent

        it = iter(trainmon.agent.loader(batches.stream("train"), name="bpe-stream"))
    return lambda split: next(it) if split == "train" else batches.get_batch(split)


class Meter:
    """The script's own measure: batch seconds within each step (timed around each call, in the loop), and each
    step's duration."""

    def __init__(self) -> None:
        self.in_step = 0.0
        self.batch_s: list[float] = []
        self.step_s: list[float] = []
        self.last = time.perf_counter()

    def step_done(self) -> None:
        now = time.perf_counter()
        self.step_s.append(now - self.last)
        self.batch_s.append(self.in_step)
        self.last, self.in_step = now, 0.0

    def share(self, warmup: int) -> float | None:
        steps = sum(self.step_s[warmup:])
        return sum(self.batch_s[warmup:]) / steps if steps > 0 else None


def estimate_loss(model: Any, get_batch: Batch, meter: Meter, iters: int, torch: Any) -> dict[str, float]:
    out = {}
    model.eval()
    with torch.no_grad():
        for split in ("train", "val"):
            losses = []
            for _ in range(iters):
                t0 = time.perf_counter()
                x, y = get_batch(split)
                meter.in_step += time.perf_counter() - t0
                losses.append(model(x, y)[1].item())
            out[split] = sum(losses) / len(losses)
    model.train()
    return out


def train(args: argparse.Namespace, torch: Any, get_batch: Batch, model: Any, optimizer: Any, meter: Meter) -> int:
    """nanoGPT's loop; returns the optimizer steps taken."""
    deadline = time.monotonic() + args.seconds if args.seconds else None
    x, y = get_batch("train")  # fetch the very first batch
    meter.last = time.perf_counter()
    step = 0
    while step < args.steps and (deadline is None or time.monotonic() < deadline):
        if args.eval_interval and step % args.eval_interval == 0:
            losses = estimate_loss(model, get_batch, meter, args.eval_iters, torch)
            print(f"step {step}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        for _ in range(args.grad_accum):
            _, loss = model(x, y)
            loss = loss / args.grad_accum
            t0 = time.perf_counter()
            x, y = get_batch("train")  # the next batch, while the forward runs on an accelerator
            meter.in_step += time.perf_counter() - t0
            loss.backward()
        if args.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        meter.step_done()
        optimizer.zero_grad(set_to_none=True)
        if step % args.log_interval == 0:
            print(f"iter {step}: loss {loss.item() * args.grad_accum:.4f}", flush=True)
        step += 1
    return step


def sized_embd(args: argparse.Namespace, torch: Any) -> tuple[int, float]:
    """The embedding width at which the model's part of a step (the gradient-accumulated forwards and backwards,
    the optimizer) takes about ``--model-ms`` on this host, and the time it measured there in ms: timed at the
    configured width, scaled (the products grow with the square of the width) and timed again, up to four times,
    until within a tenth of it."""
    from trainmon.demo.gpt_parts import GPT

    batches = Batches(args, torch)
    x, y = batches.get_batch("train")
    device = torch.device(args.device)
    measured = 0.0
    for _ in range(4):
        gpt = GPT(batches.tok.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd).to(device)
        optimizer = torch.optim.AdamW(gpt.parameters(), lr=6e-4)
        step = functools.partial(_model_step, gpt, optimizer, x, y, args.grad_accum)
        measured = median_s(step, 3, device, warm=1) * 1e3
        if abs(measured - args.model_ms) <= 0.1 * args.model_ms:
            break
        quantum = 2 * args.n_head
        width = args.n_embd * math.sqrt(args.model_ms / measured)
        args.n_embd = int(min(MAX_EMBD, max(quantum, round(width / quantum) * quantum)))
    return args.n_embd, measured


def _model_step(gpt: Any, optimizer: Any, x: Any, y: Any, grad_accum: int) -> None:
    for _ in range(grad_accum):
        gpt(x, y)[1].backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.model_ms:
        import torch

        torch.set_num_threads(args.threads)
        embd, measured = sized_embd(args, torch)
        print(f"sized --n-embd {embd} for {args.model_ms:g} ms of model per step (measured {measured:.1f} ms)")
    if not args.no_attach:
        import trainmon.agent

        trainmon.agent.attach(name=os.environ.get("TRAINMON_DEMO_NAME") or "demo-gpt")
    import torch

    from trainmon.demo.gpt_parts import GPT

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batches = Batches(args, torch)
    gpt = GPT(batches.tok.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd).to(args.device)
    model = torch.compile(gpt) if args.compile else gpt
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95))
    meter = Meter()
    steps = train(args, torch, batch_function(batches, args), model, optimizer, meter)
    share = meter.share(args.warmup)
    shown = "n/a" if share is None else f"{share:.1%}"
    print(f"{steps} steps; batches took {shown} of the step time (steady state, after {args.warmup} steps)")
    if args.self_report:
        durations = sorted(meter.step_s[args.warmup :])
        report = {
            "steps": steps,
            "batch_fraction": share,
            "step_time_ms_p50": durations[len(durations) // 2] * 1e3 if durations else None,
            "pid": os.getpid(),
        }
        with open(args.self_report, "w") as fh:
            json.dump(report, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
