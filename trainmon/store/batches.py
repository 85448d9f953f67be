"""Samples and tokens per batch of a DataLoader, from its config: its own ``batch_size``, else what the agent
measured on its batches (``measured_*``, see agent/_batch.py), which is all there is when a batch sampler makes
the batches (accelerate's DataLoaderShard under transformers.Trainer, custom batch samplers, ``batch_size=None``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _count(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def batch_size(config: Mapping[str, Any]) -> int | None:
    """Samples per batch: the loader's ``batch_size``, else the measured mean (rounded), else None."""
    own = _count(config, "batch_size")
    if own:
        return own
    batches, samples = _count(config, "measured_batches"), _count(config, "measured_samples")
    return max(1, round(samples / batches)) if batches and samples else None


def batch_measured(config: Mapping[str, Any]) -> bool:
    """Whether the batch size comes from the batches rather than the loader's own setting."""
    return not _count(config, "batch_size") and batch_size(config) is not None


def tokens_per_sample(config: Mapping[str, Any]) -> float:
    """Mean tokens per sample of a loader of token sequences (attention-mask-aware), else NaN."""
    batches, samples = _count(config, "measured_batches"), _count(config, "measured_samples")
    token_batches, tokens = _count(config, "measured_token_batches"), _count(config, "measured_tokens")
    if not (batches and samples and token_batches and tokens):
        return math.nan
    return (tokens / token_batches) / (samples / batches)
