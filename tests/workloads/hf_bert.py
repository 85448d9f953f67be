"""A real ``transformers.Trainer`` fit, written as a new user writes one: a small BERT built from its config, a
map-style dataset that cleans and tokenizes each text in ``__getitem__``, dynamic padding, the Trainer's default
``dataloader_num_workers=0``, evaluation every 40 steps. Nothing is downloaded.

    python hf_bert.py OUTPUT_DIR [--callback] [--attach] [--accum N] [--max-steps N] [--batch N]

``--callback`` passes trainmon's TrainmonCallback; ``--attach`` calls ``trainmon.agent.attach()`` before the
Trainer is made (neither: run it under ``trainmon run``). Prints one JSON line: the optimizer steps, the
samples/s and tokens/s (non-padding tokens) its own model counted from the sixth optimizer step to the last, how
many evaluations ran and how many TrainmonCallbacks the Trainer holds.
"""

import argparse
import json
import random
import re
import time

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

WORDS = [f"w{i}" for i in range(500)]
SPACES = re.compile(r"\s+")
MARKS = re.compile(r"[^a-z0-9 ]")


def make_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")


class Reviews(torch.utils.data.Dataset):
    """Texts of 20 to 120 words, cleaned and tokenized on every access (no cache), as many tutorials do."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, n: int, seed: int) -> None:
        self.tok, self.n, self.seed = tokenizer, n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        rng = random.Random(self.seed * 1_000_003 + i)
        words = [rng.choice(WORDS) for _ in range(rng.randint(20, 120))]
        raw = "  ".join(w.upper() + rng.choice([",", ".", "!", ""]) for w in words) * 40
        text = SPACES.sub(" ", MARKS.sub(" ", raw.lower())).strip()
        enc = self.tok(text, truncation=True, max_length=len(words))
        enc["labels"] = i % 2
        return enc


class Counting(BertForSequenceClassification):
    """Counts the samples and real tokens it trains on, the script's own throughput figures."""

    samples = 0
    tokens = 0

    def forward(self, input_ids=None, attention_mask=None, **kw):
        if self.training:
            Counting.samples += int(input_ids.shape[0])
            Counting.tokens += int(attention_mask.sum())
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, **kw)


class Clock(TrainerCallback):
    """When each optimizer step ended, with the samples and tokens counted up to it."""

    def __init__(self) -> None:
        self.ends: list[tuple[float, int, int]] = []
        self.evaluations = 0

    def on_step_end(self, args, state, control, **kw):
        self.ends.append((time.perf_counter(), Counting.samples, Counting.tokens))

    def on_evaluate(self, args, state, control, **kw):
        self.evaluations += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("output_dir")
    ap.add_argument("--callback", action="store_true")
    ap.add_argument("--attach", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=120)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    if args.attach:
        import trainmon.agent

        trainmon.agent.attach()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = make_tokenizer()
    config = BertConfig(
        vocab_size=len(WORDS) + 4,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=256,
        num_labels=2,
    )
    training = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch,
        per_device_eval_batch_size=args.batch,
        gradient_accumulation_steps=args.accum,
        eval_strategy="steps",
        eval_steps=40,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        logging_strategy="no",
        disable_tqdm=True,
    )
    clock = Clock()
    callbacks: list = [clock]
    if args.callback:
        from trainmon.integrations.huggingface import TrainmonCallback

        callbacks.append(TrainmonCallback())
    trainer = Trainer(
        model=Counting(config),
        args=training,
        train_dataset=Reviews(tok, 100_000, 1),
        eval_dataset=Reviews(tok, 48, 2),
        data_collator=DataCollatorWithPadding(tok),
        callbacks=callbacks,
    )
    trainer.train()
    (t0, s0, k0), (t1, s1, k1) = clock.ends[5], clock.ends[-1]
    print(
        json.dumps(
            {
                "global_step": trainer.state.global_step,
                "samples_per_s": (s1 - s0) / (t1 - t0),
                "tokens_per_s": (k1 - k0) / (t1 - t0),
                "evaluations": clock.evaluations,
                "trainmon_callbacks": [type(cb).__name__ for cb in trainer.callback_handler.callbacks].count(
                    "TrainmonCallback"
                ),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
