"""What the demo loop does each step besides training, as training scripts write it by hand (``--metrics``,
``--progress``): the CPU-side work that idles a GPU while the data is ready.

- ``StepMetrics``: predictions and labels moved to Python lists, a confusion matrix and each class's F1 computed in
  Python loops over the last ``window`` batches, and a log record serialised to JSON and written, every step.
- ``progress``: ``tqdm`` over the batches, its postfix set from ``loss.item()`` every step (``set_postfix``
  refreshes the bar each time it is called).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from typing import Any


def confusion_matrix(history: Iterable[tuple[list[int], list[int]]], classes: int) -> list[list[int]]:
    matrix = [[0] * classes for _ in range(classes)]
    for preds, truth in history:
        for p, t in zip(preds, truth, strict=True):
            matrix[t][p] += 1
    return matrix


def f1_scores(pairs: list[tuple[int, int]], classes: int) -> list[float]:
    """Each class's F1, counted by a pass over the (prediction, label) pairs per class."""
    scores = []
    for c in range(classes):
        tp = sum(1 for p, t in pairs if p == c and t == c)
        fp = sum(1 for p, t in pairs if p == c and t != c)
        fn = sum(1 for p, t in pairs if p != c and t == c)
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return scores


class StepMetrics:
    def __init__(self, window: int, classes: int = 10) -> None:
        self.history: collections.deque[tuple[list[int], list[int]]] = collections.deque(maxlen=window)
        self.classes = classes
        fd, self.path = tempfile.mkstemp(prefix="trainmon-demo-metrics-", suffix=".jsonl")
        self.file = os.fdopen(fd, "w")

    def log_metrics(self, step: int, logits: Any, labels: Any, loss: Any) -> None:
        self.history.append((logits.argmax(dim=1).tolist(), labels.tolist()))
        matrix = confusion_matrix(self.history, self.classes)
        f1 = f1_scores([pair for preds, truth in self.history for pair in zip(preds, truth, strict=True)], self.classes)
        seen = sum(map(sum, matrix))
        record = {
            "step": step,
            "loss": loss.item(),
            "accuracy": sum(matrix[c][c] for c in range(self.classes)) / seen,
            "macro_f1": sum(f1) / len(f1),
            "f1": f1,
            "confusion": matrix,
        }
        self.file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self.file.close()
        os.unlink(self.path)


def progress(batches: Iterable[Any]) -> Any:
    """``batches`` under a tqdm progress bar on stderr."""
    from tqdm import tqdm

    return tqdm(batches, desc="train", file=sys.stderr, dynamic_ncols=False, ncols=100)
