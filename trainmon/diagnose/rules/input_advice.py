"""The input rules' advice that does not depend on the figures: one module constant per piece, each item setting at
most one knob to a value (``advice.fit_to_window`` then drops an item already in place alone)."""

from __future__ import annotations

from trainmon.diagnose.findings import HIGHER, AdviceItem

STAGE = AdviceItem("stage the dataset on local disk before training, or cache it after the first epoch")
NET_ADVICE = (
    STAGE,
    AdviceItem(
        "keep more requests in flight: a thread pool or asyncio inside each worker (or __getitems__ for a "
        "whole batch), more workers, a higher prefetch_factor",
        {"prefetch_factor": HIGHER},
        "more remote requests in flight",
    ),
    AdviceItem("read fewer, larger objects (sharded formats) and reuse connections to amortise per-request latency"),
)
DISK_ADVICE = (
    AdviceItem(
        "pack small files into large sequential shards (WebDataset, LMDB, HDF5, TFRecord) and read them in order"
    ),
    AdviceItem("copy the dataset to local NVMe or RAM (/dev/shm), or cache decoded samples"),
    AdviceItem("raise num_workers to keep more reads in flight", {"num_workers": HIGHER}, "more reads in flight"),
    AdviceItem(
        "raise prefetch_factor so each worker keeps more reads in flight",
        {"prefetch_factor": HIGHER},
        "more reads in flight per worker",
    ),
)
LATENCY_ADVICE = (
    AdviceItem(
        "overlap the slow requests inside each worker: a thread pool or asyncio in the dataset, "
        "or fetch a whole batch at once (__getitems__)"
    ),
    AdviceItem(
        "raise prefetch_factor so each worker keeps more samples in flight",
        {"prefetch_factor": HIGHER},
        "more samples in flight per worker",
    ),
)
# Each item sets one knob to a value, so that one already in place is dropped alone (advice.fit_to_window).
STAY_AHEAD = (
    AdviceItem(
        "set persistent_workers=True so the workers (and the batches they prepared) outlive each epoch",
        {"persistent_workers": True},
        "workers outlive each epoch",
    ),
    AdviceItem(
        "set prefetch_factor≥2 so each worker keeps batches ready ahead of the loop",
        {"prefetch_factor": 2},
        "batches ready ahead of the loop",
        at_least=("prefetch_factor",),
    ),
)
FEWER_TENSORS = AdviceItem(
    "hand the loop fewer, larger tensors per batch: stack each sample's fields into one tensor in the dataset "
    "or collate_fn (every tensor of a batch costs the main process a shared-memory handle to receive), and "
    "send compact dtypes (uint8 images, int32 ids) to convert after the copy"
)
RCHAR_ADVICE = (
    STAGE,
    AdviceItem(
        "raise num_workers to keep more remote requests in flight",
        {"num_workers": HIGHER},
        "more remote requests in flight",
    ),
    AdviceItem(
        "raise prefetch_factor so each worker keeps more remote requests in flight",
        {"prefetch_factor": HIGHER},
        "more remote requests in flight per worker",
    ),
    AdviceItem("read fewer, larger objects (sharded formats) to amortise per-request latency"),
)
