"""A torch.compile'd text classifier fed variable-length batches: ``python -m trainmon.demo.compiled``.

The data is as a variable-length NLP pipeline gives it: token sequences of 64 to ``--max-len`` tokens, batched by a
length-grouped sampler (Hugging Face's ``group_by_length``: shuffled, then sorted by length within mega-batches of
``--mega`` batches, so a batch's sequences are alike and the lengths change every few steps) and padded by the
collator to the batch's longest, rounded up to a multiple of 8 (``DataCollatorWithPadding(pad_to_multiple_of=8)``).
With ``--pad max_length`` every batch is padded to ``--max-len`` instead: one shape for the whole run.

The model is compiled as ``torch.compile(model, backend=--backend, dynamic=--dynamic)``. ``--dynamic false`` (what
code that wants static kernels, or CUDA graphs per shape, passes) makes every new length a recompilation, until the
function hits ``torch._dynamo.config.recompile_limit`` and runs eagerly from then on. ``--backend aot_eager`` traces
and compiles the forward and backward graphs without generating kernels (seconds, not minutes, per compilation on a
busy CPU); ``inductor`` is torch.compile's default.

``--self-report FILE`` writes what the script measured of itself, as torch recorded it (its compilation records:
seconds, recompilations, the recompile limit hit) and its own clock (step times), for the tests to hold trainmon's
figures against.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainmon.demo.compiled")
    p.add_argument("--seconds", type=float, default=20.0, help="train this long")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend (inductor: the default's)")
    p.add_argument("--dynamic", choices=("false", "none", "true"), default="none", help="torch.compile(dynamic=...)")
    p.add_argument("--pad", choices=("longest", "max_length"), default="longest", help="the collator's padding")
    p.add_argument("--max-len", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--mega", type=int, default=4, help="batches per length-sorted mega-batch")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-attach", action="store_true")
    p.add_argument("--self-report", default=None)
    return p.parse_args(argv)


def lengths(n: int, max_len: int, seed: int = 0) -> list[int]:
    """Sequence lengths of a corpus of reviews truncated at ``max_len``: at least 64 tokens, most under 110 (at most
    2.5 times the shortest: the steps' times vary with their length, never as much as a stall)."""
    rng = random.Random(seed)
    return [min(max_len, 64 + int(rng.expovariate(1 / 32))) for _ in range(n)]


def grouped_batches(lens: list[int], batch: int, mega: int, seed: int) -> list[list[int]]:
    """Hugging Face's LengthGroupedSampler: shuffled indices, cut into mega-batches, each sorted by length
    (longest first), then cut into batches."""
    rng = random.Random(seed)
    order = list(range(len(lens)))
    rng.shuffle(order)
    out = []
    size = batch * mega
    for k in range(0, len(order) - size + 1, size):
        chunk = sorted(order[k : k + size], key=lambda i: -lens[i])
        out += [chunk[j : j + batch] for j in range(0, size, batch)]
    return out


def build(args: argparse.Namespace, torch: Any) -> tuple[Any, Any]:
    """The dataset's token ids (one tensor per review) and the model."""
    gen = torch.Generator().manual_seed(0)
    lens = lengths(args.samples, args.max_len)
    data = [(torch.randint(1, 4000, (n,), generator=gen), int(n % 2)) for n in lens]
    nn = torch.nn

    class Classifier(nn.Module):  # type: ignore[name-defined]  # torch is imported at run time
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.embed = nn.Embedding(4000, dim, padding_idx=0)
            self.mix = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, 2)

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            h = self.embed(input_ids)
            h = self.norm(h + self.mix(h))
            mask = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            return self.head(pooled)

    return data, Classifier(args.dim).to(args.device)


def collate(pad: str, max_len: int, torch: Any) -> Any:
    """DataCollatorWithPadding: to the batch's longest rounded up to a multiple of 8, or to ``max_len``."""

    def fn(items: list[tuple[Any, int]]) -> dict[str, Any]:
        longest = max(len(ids) for ids, _ in items)
        width = max_len if pad == "max_length" else -(-longest // 8) * 8
        ids = torch.zeros(len(items), width, dtype=torch.long)
        mask = torch.zeros(len(items), width, dtype=torch.long)
        for row, (seq, _) in enumerate(items):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        labels = torch.tensor([label for _, label in items])
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return fn


def compile_records(torch: Any) -> dict[str, Any]:
    """What torch itself recorded of its compilations: seconds (forward and backward), recompilations, and whether a
    function hit the recompile limit."""
    records = torch._dynamo.utils.get_compilation_metrics()
    seconds = sum((m.entire_frame_compile_time_s or (m.duration_us or 0) / 1e6) for m in records if not m.fail_type)
    limit = [m for m in records if m.fail_type == "Unsupported" and "recompile limit" in str(m.fail_reason).lower()]
    forward = [m for m in records if m.is_forward is not False and not m.fail_type]
    return {
        "compile_s": seconds,
        "compilations": len(forward),
        "recompilations": sum(1 for m in forward if not str(m.compile_id).endswith("/0")),
        "limit_hit": bool(limit),
        "reasons": sorted({str(m.recompile_reason) for m in forward if m.recompile_reason})[:4],
    }


def train(args: argparse.Namespace, torch: Any, model: Any, loader: Any) -> list[float]:
    """The loop: forward, loss, backward, step; returns each step's seconds."""
    compiled = torch.compile(
        model, backend=args.backend, dynamic={"false": False, "none": None, "true": True}[args.dynamic]
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    deadline = time.monotonic() + args.seconds
    durations: list[float] = []
    while len(durations) < args.steps and time.monotonic() < deadline:
        for batch in loader:
            t0 = time.perf_counter()
            logits = compiled(batch["input_ids"].to(args.device), batch["attention_mask"].to(args.device))
            loss = loss_fn(logits, batch["labels"].to(args.device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            durations.append(time.perf_counter() - t0)
            if len(durations) % 50 == 0:
                print(f"step {len(durations)}: loss {loss.item():.4f}", flush=True)
            if len(durations) >= args.steps or time.monotonic() >= deadline:
                break
    return durations


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.no_attach:
        import trainmon.agent

        trainmon.agent.attach(name=os.environ.get("TRAINMON_DEMO_NAME") or "demo-compiled")
    import torch
    from torch.utils.data import DataLoader

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data, model = build(args, torch)
    batches = grouped_batches([len(ids) for ids, _ in data], args.batch_size, args.mega, seed=1)
    loader = DataLoader(data, batch_sampler=batches, collate_fn=collate(args.pad, args.max_len, torch), num_workers=0)
    durations = train(args, torch, model, loader)
    own = compile_records(torch)
    print(
        f"{len(durations)} steps; torch.compile: {own['compilations']} compilations, {own['recompilations']} "
        f"recompilations, {own['compile_s']:.1f} s, recompile limit hit: {own['limit_hit']}",
        flush=True,
    )
    if args.self_report:
        with open(args.self_report, "w") as fh:
            json.dump({"steps": len(durations), "step_s": durations, "pid": os.getpid(), **own}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
