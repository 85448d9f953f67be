"""How the demo training's batches reach its loop besides a plain DataLoader (``--feed``), written as open-source code
writes them.

- ``prefetch``: ``DataLoaderX``, the DataLoader whose ``__iter__`` wraps the DataLoader's iterator in a
  ``BackgroundGenerator`` (prefetch_generator's pattern: a daemon thread filling a ``queue.Queue(max_prefetch)``;
  ``None`` ends it). The training thread waits on that queue; the DataLoader's ``__next__`` runs in the generator's
  thread.
- ``threadpool``: a custom batch iterator over compressed samples whose decoding runs on a
  ``concurrent.futures.ThreadPoolExecutor``, a few batches submitted ahead; ``__next__`` waits on the oldest batch's
  future. ``zlib.decompress`` and torch's reductions give the interpreter lock up, so the pool runs beside the loop
  on other cores, as image decoders do.
"""

from __future__ import annotations

import collections
import queue
import random
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class BackgroundGenerator(threading.Thread):
    """Runs ``generator`` in a daemon thread, ``max_prefetch`` items ahead of the consumer."""

    def __init__(self, generator: Iterator[Any], max_prefetch: int = 1) -> None:
        threading.Thread.__init__(self)
        self.queue: queue.Queue[Any] = queue.Queue(max_prefetch)
        self.generator = generator
        self.daemon = True
        self.stopped = False
        self.start()

    def run(self) -> None:
        for item in self.generator:
            self.queue.put(item)
            if self.stopped:
                return
        self.queue.put(None)

    def close(self) -> None:
        """The training's end: the thread let go of its DataLoader iterator while the interpreter is alive (a daemon
        thread left inside the iterator at exit can abort the process as the workers are torn down)."""
        self.stopped = True
        deadline = time.monotonic() + 10.0
        while self.is_alive() and time.monotonic() < deadline:
            try:
                self.queue.get(timeout=0.05)
            except queue.Empty:
                pass

    def next(self) -> Any:
        next_item = self.queue.get()
        if next_item is None:
            raise StopIteration
        return next_item

    def __next__(self) -> Any:
        return self.next()

    def __iter__(self) -> BackgroundGenerator:
        return self


def dataloader_x(max_prefetch: int) -> type:
    """The ``DataLoaderX`` class: a DataLoader whose iterator runs in a BackgroundGenerator."""
    from torch.utils.data import DataLoader

    class DataLoaderX(DataLoader):
        def __iter__(self) -> BackgroundGenerator:  # type: ignore[override]
            return BackgroundGenerator(super().__iter__(), max_prefetch)

    return DataLoaderX


class ThreadedLoader:
    """An epoch of ``batches`` thread-pool-decoded batches at each ``iter()`` (see DecodedBatches)."""

    def __init__(self, batches: int, batch_size: int, features: int, raw_kb: int, threads: int, ahead: int) -> None:
        self.options = (batches, batch_size, features, threads, ahead)
        self.samples = compressed_samples(features, raw_kb)

    def __iter__(self) -> DecodedBatches:
        return DecodedBatches(self.samples, *self.options)


def compressed_samples(features: int, raw_kb: int, count: int = 64) -> list[bytes]:
    """``count`` samples of about ``raw_kb`` KiB of float32 values each, zlib-compressed."""
    import torch

    values = raw_kb * 256 // features * features  # float32 values per sample, a whole number of pools
    return [
        zlib.compress(torch.randn(values, generator=torch.Generator().manual_seed(i)).numpy().tobytes(), 1)
        for i in range(count)
    ]


class DecodedBatches:
    """One epoch's batches of ``batch_size`` samples decoded by a thread pool: each sample is decompressed and
    pooled down to ``features`` values; ``ahead`` batches are in flight."""

    def __init__(
        self, samples: list[bytes], batches: int, batch_size: int, features: int, threads: int, ahead: int
    ) -> None:
        self.samples, self.batches, self.batch_size, self.features = samples, batches, batch_size, features
        rng = random.Random(0)
        self.order = [rng.randrange(len(samples)) for _ in range(batches * batch_size)]
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="decode")
        self.pending: collections.deque[Future[Any]] = collections.deque()
        self.submitted = 0
        for _ in range(ahead):
            self._submit()

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> DecodedBatches:
        return self

    def _submit(self) -> None:
        if self.submitted < self.batches:
            lo = self.submitted * self.batch_size
            self.pending.append(self.pool.submit(self._decode_batch, self.order[lo : lo + self.batch_size]))
            self.submitted += 1

    def _decode_batch(self, indices: list[int]) -> tuple[Any, Any]:
        import torch

        rows = []
        for i in indices:
            raw = torch.frombuffer(bytearray(zlib.decompress(self.samples[i])), dtype=torch.float32)
            rows.append(raw.view(self.features, -1).mean(dim=1))
        labels = torch.tensor([i % 10 for i in indices])
        return torch.stack(rows), labels

    def __next__(self) -> tuple[Any, Any]:
        if not self.pending:
            self.pool.shutdown(wait=False)
            raise StopIteration
        batch = self.pending.popleft().result()
        self._submit()
        return batch
