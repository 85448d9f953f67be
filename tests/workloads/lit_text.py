"""A real Lightning fit, written as a new user writes one: a small text classifier, a map-style dataset that cleans
and tokenizes each text in ``__getitem__`` (padded per batch by its collate function), ``num_workers=0``, validation
every 40 batches. Nothing is downloaded.

    python lit_text.py ROOT [--callback] [--accum N] [--max-steps N] [--batch N] [--devices N]

``--callback`` passes trainmon's TrainmonCallback (else run it under ``trainmon run``); ``--devices 2`` trains with
``strategy="ddp"`` on the CPU (gloo), Lightning starting the second rank itself. Prints one JSON line per rank: its
optimizer steps, the samples/s and tokens/s (non-padding tokens) its own model counted from the sixth optimizer step
to the last, how many validations ran and how many TrainmonCallbacks the Trainer holds.
"""

import argparse
import json
import random
import re
import sys
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

WORDS = [f"w{i}" for i in range(500)]
VOCAB = {w: i + 2 for i, w in enumerate(WORDS)}  # 0: padding, 1: unknown
SPACES = re.compile(r"\s+")
MARKS = re.compile(r"[^a-z0-9 ]")


class Reviews(Dataset):
    """Texts of 20 to 120 words, cleaned and tokenized on every access (no cache)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        rng = random.Random(self.seed * 1_000_003 + i)
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


class Classifier(L.LightningModule):
    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.embed = torch.nn.Embedding(len(VOCAB) + 2, 64, padding_idx=0)
        layer = torch.nn.TransformerEncoderLayer(64, 2, 128, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2)
        self.head = torch.nn.Linear(64, 2)
        self.samples = self.tokens = 0
        self.ends: list[tuple[float, int, int]] = []
        self.last_step = 0
        self.validations = 0

    def forward(self, batch: dict) -> torch.Tensor:
        h = self.encoder(self.embed(batch["input_ids"]), src_key_padding_mask=batch["attention_mask"] == 0)
        return self.head(h.mean(1))

    def training_step(self, batch: dict, i: int) -> torch.Tensor:
        self.samples += int(batch["input_ids"].shape[0])
        self.tokens += int(batch["attention_mask"].sum())
        return torch.nn.functional.cross_entropy(self(batch), batch["labels"])

    def on_train_batch_end(self, outputs, batch, i) -> None:
        if self.trainer.global_step > self.last_step:
            self.last_step = self.trainer.global_step
            self.ends.append((time.perf_counter(), self.samples, self.tokens))

    def validation_step(self, batch: dict, i: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self(batch), batch["labels"]), sync_dist=True)

    def on_validation_end(self) -> None:
        self.validations += 1

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(Reviews(100_000, 1), batch_size=self.batch, shuffle=True, collate_fn=pad)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(Reviews(48, 2), batch_size=self.batch, collate_fn=pad)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--callback", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--devices", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    callbacks = []
    if args.callback:
        from trainmon.integrations.lightning import TrainmonCallback

        callbacks.append(TrainmonCallback())
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_steps=args.max_steps,
        accumulate_grad_batches=args.accum,
        val_check_interval=40,
        limit_val_batches=6,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        default_root_dir=args.root,
        callbacks=callbacks,
    )
    model = Classifier(args.batch)
    trainer.fit(model)
    (t0, s0, k0), (t1, s1, k1) = model.ends[5], model.ends[-1]
    result = {
        "rank": trainer.global_rank,
        "global_step": trainer.global_step,
        "samples_per_s": (s1 - s0) / (t1 - t0),
        "tokens_per_s": (k1 - k0) / (t1 - t0),
        "evaluations": model.validations,
        "trainmon_callbacks": [type(cb).__name__ for cb in trainer.callbacks].count("TrainmonCallback"),
    }
    sys.stdout.write(json.dumps(result) + "\n")  # one write: the ranks share stdout, maybe unbuffered
    sys.stdout.flush()


if __name__ == "__main__":
    main()
