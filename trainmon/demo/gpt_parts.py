"""The parts of the nanoGPT-style demo (``trainmon.demo.gpt``): a text corpus, a byte-level BPE tokenizer in pure
Python (minbpe's ``BasicTokenizer``: merges learnt on the corpus, applied lowest rank first) and a small GPT (nanoGPT's
model.py: causal self-attention blocks, tied embeddings, cross-entropy loss from ``forward(idx, targets)``).

The tokenizer is the part that makes a ``get_batch`` expensive when it runs on every batch: each merge it applies
rescans the bytes it encodes, in the training's main thread.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

_TEXT = (
    "the of and to in is was for on that with as by at from his her they this which had not are but be have were "
    "one all been their has would when there more so who them some into time could only its other than then now "
    "over such about first after made many years most where these may between should under those while during "
    "river mountain letter harbour engine garden winter market thunder lantern village orchard silver journey "
    "ancient measure quietly northern slowly bright narrow distant morning evening window kitchen library"
)
WORDS = tuple(_TEXT.split(" "))


def corpus(chars: int, seed: int = 0) -> str:
    """About ``chars`` characters of English-like text: sentences of common words, commas and full stops."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 18))]
        if len(words) > 8:
            words[rng.randint(3, len(words) - 3)] += ","
        sentence = " ".join(words).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def _pair_counts(ids: list[int]) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for pair in itertools.pairwise(ids):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def _merge(ids: list[int], pair: tuple[int, int], idx: int) -> list[int]:
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if i < n - 1 and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(idx)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class ByteBPE:
    """Byte-level BPE: ``merges`` merges learnt on ``text``; ``encode`` applies them one at a time."""

    def __init__(self, text: str, merges: int) -> None:
        ids = list(text.encode("utf-8"))
        self.merges: dict[tuple[int, int], int] = {}
        for k in range(merges):
            counts = _pair_counts(ids)
            if not counts:
                break
            pair = max(counts, key=counts.__getitem__)
            self.merges[pair] = 256 + k
            ids = _merge(ids, pair, 256 + k)
        self.vocab_size = 256 + len(self.merges)

    def encode(self, text: str) -> list[int]:
        ids = list(text.encode("utf-8"))
        merges = self.merges
        while len(ids) >= 2:
            counts = _pair_counts(ids)
            pair = min(counts, key=lambda p: merges.get(p, math.inf))
            if pair not in merges:
                break
            ids = _merge(ids, pair, merges[pair])
        return ids


class SelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(n_embd), SelfAttention(n_embd, n_head), nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT, small: ``model(idx, targets) -> (logits, loss)``."""

    def __init__(self, vocab: int, block: int, n_layer: int, n_head: int, n_embd: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for layer in self.h:
            x = layer(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
