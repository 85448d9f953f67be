"""A real accelerate training loop, written as a new user writes one: a small text classifier, a map-style dataset
that tokenizes each text in ``__getitem__`` (padded per batch by its collate function), ``num_workers=0``, the
DataLoader, model and optimizer passed to ``accelerator.prepare``, gradient accumulation with
``accelerator.accumulate``. Nothing is downloaded. Meant for ``accelerate launch --multi_gpu --num_processes 2``
(on the CPU: ``Accelerator(cpu=True)``, gloo).

    python acc_loop.py [--accum N] [--steps N] [--batch N]

Prints one JSON line per rank: its optimizer steps, and the samples/s and tokens/s (non-padding tokens) it counted
from the sixth optimizer step to the last.
"""

import argparse
import json
import random
import re
import sys
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset

WORDS = [f"w{i}" for i in range(500)]
VOCAB = {w: i + 2 for i, w in enumerate(WORDS)}  # 0: padding, 1: unknown
SPACES = re.compile(r"\s+")
MARKS = re.compile(r"[^a-z0-9 ]")


class Reviews(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        rng = random.Random(i)
        words = [rng.choice(WORDS) for _ in range(rng.randint(20, 120))]
        raw = "  ".join(w.upper() + rng.choice([",", ".", "!", ""]) for w in words) * 40
        ids = [VOCAB.get(w, 1) for w in SPACES.sub(" ", MARKS.sub(" ", raw.lower())).split()[: len(words)]]
        return {"input_ids": torch.tensor(ids), "label": i % 2}


def pad(items: list[dict]) -> dict:
    longest = max(len(x["input_ids"]) for x in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    for k, x in enumerate(items):
        ids[k, : len(x["input_ids"])] = x["input_ids"]
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": torch.tensor([x["label"] for x in items])}


class Classifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(len(VOCAB) + 2, 64, padding_idx=0)
        layer = torch.nn.TransformerEncoderLayer(64, 2, 128, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(64, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(input_ids), src_key_padding_mask=attention_mask == 0).mean(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accum)
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Reviews(100_000), batch_size=args.batch, shuffle=True, collate_fn=pad)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    samples = tokens = steps = 0
    ends: list[tuple[float, int, int]] = []
    for batch in loader:
        with accelerator.accumulate(model):
            samples += int(batch["input_ids"].shape[0])
            tokens += int(batch["attention_mask"].sum())
            logits = model(batch["input_ids"], batch["attention_mask"])
            loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        if accelerator.sync_gradients:
            steps += 1
            ends.append((time.perf_counter(), samples, tokens))
            if steps >= args.steps:
                break
    (t0, s0, k0), (t1, s1, k1) = ends[5], ends[-1]
    result = {
        "rank": accelerator.process_index,
        "global_step": steps,
        "samples_per_s": (s1 - s0) / (t1 - t0),
        "tokens_per_s": (k1 - k0) / (t1 - t0),
    }
    sys.stdout.write(json.dumps(result) + "\n")  # one write: the ranks share stdout, maybe unbuffered
    sys.stdout.flush()
    accelerator.end_training()


if __name__ == "__main__":
    main()
