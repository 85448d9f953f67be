"""Samples and tokens per batch, read off the batches themselves on a sampled subset of them.

``DataLoader.batch_size`` is None whenever a batch sampler makes the batches (accelerate's ``DataLoaderShard``
under ``transformers.Trainer``, custom batch samplers, ``batch_size=None`` loaders of pre-batched data), so the
agent reads the leading dimension of a batch's first tensor instead, and, for sequence batches, how many tokens
it holds (an ``attention_mask`` where there is one: padding is not work).

Cost: nothing on the hot path. ``_BaseDataLoaderIter.__next__`` is the plain timing wrapper all the time except
while a measuring round is armed: the first batches of each new iterator, then a few batches once a second (the
sender thread arms it). Arming swaps the class's ``__next__`` for a wrapper that calls the plain one, then reads
the batch; once the round's batches are read, the plain wrapper is put back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

FIRST_BATCHES = 3  # read at each new iterator
ROUND_BATCHES = 2  # read per periodic round
ROUND_EVERY_S = 1.0
MAX_MEASURED = 256  # past this many batches of a loader, its sums are halved: a mean that follows changes
TOKEN_KEYS = ("input_ids", "tokens", "token_ids")
MASK_KEYS = ("attention_mask",)


def _shape(x: Any) -> tuple[int, ...] | None:
    """A tensor's (or array's) shape, or None for anything else (never imports torch)."""
    shape = getattr(x, "shape", None)
    if shape is None or getattr(x, "dtype", None) is None:
        return None
    try:
        return tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        return None


def _is_integer(x: Any) -> bool:
    dtype = x.dtype
    kind = getattr(dtype, "kind", None)  # numpy
    if isinstance(kind, str):
        return kind in "iu"
    if getattr(dtype, "is_floating_point", True) or getattr(dtype, "is_complex", True):
        return False
    return str(dtype) != "torch.bool"


def _count(mask: Any, shape: tuple[int, ...]) -> int:
    """Non-zero entries of an attention mask on the host; a mask elsewhere is not read (that would wait on the
    device): every position counts then."""
    device = getattr(mask, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        return shape[0] * shape[1]
    try:
        return int(mask.sum())
    except Exception:
        return shape[0] * shape[1]


def _sequence(x: Any, shape: tuple[int, ...] | None) -> bool:
    return shape is not None and len(shape) == 2 and _is_integer(x)


def measure(batch: Any) -> tuple[int, int]:
    """(samples, tokens) of one batch: samples 0 when it holds no tensor, tokens -1 when it is not a sequence batch.

    Samples: the leading dimension of the first tensor (of a tensor, a tuple or list, or a mapping such as a
    dict or a ``BatchEncoding``; one level of nesting). Tokens: an ``input_ids``-like B×T integer tensor (by
    name in a mapping, else a first tensor that is one), counted by its ``attention_mask`` where the mapping
    has one of the same shape."""
    if isinstance(batch, Mapping):
        return _measure_mapping(batch)
    shape = _shape(batch)
    if shape is not None:
        if not shape:
            return 0, -1
        return shape[0], shape[0] * shape[1] if _sequence(batch, shape) else -1
    if isinstance(batch, (tuple, list)):
        for item in batch[:16]:
            if isinstance(item, Mapping):
                return _measure_mapping(item)
            shape = _shape(item)
            if shape:
                return shape[0], shape[0] * shape[1] if _sequence(item, shape) else -1
    return 0, -1


def _measure_mapping(batch: Mapping[Any, Any]) -> tuple[int, int]:
    for key in TOKEN_KEYS:
        ids = batch.get(key)
        shape = _shape(ids)
        if _sequence(ids, shape):
            assert shape is not None
            for mkey in MASK_KEYS:
                mask = batch.get(mkey)
                if _shape(mask) == shape:
                    return shape[0], _count(mask, shape)
            return shape[0], shape[0] * shape[1]
    for n, value in enumerate(batch.values()):
        if n >= 32:
            break
        shape = _shape(value)
        if shape:
            return shape[0], -1
    return 0, -1


class BatchStats:
    """One loader's measured batches: how many, and their samples and tokens (sums, halved past MAX_MEASURED)."""

    __slots__ = ("batches", "samples", "sent", "token_batches", "tokens")

    def __init__(self) -> None:
        self.batches = self.samples = self.tokens = self.token_batches = 0
        self.sent: tuple[float, float] | None = None

    def add(self, samples: int, tokens: int) -> None:
        if self.batches >= MAX_MEASURED:
            self.batches //= 2
            self.samples //= 2
            self.token_batches //= 2
            self.tokens //= 2
        self.batches += 1
        self.samples += samples
        if tokens >= 0:
            self.token_batches += 1
            self.tokens += tokens

    def fields(self) -> dict[str, int]:
        out = {"measured_batches": self.batches, "measured_samples": self.samples}
        if self.token_batches:
            out["measured_token_batches"] = self.token_batches
            out["measured_tokens"] = self.tokens
        return out

    def changed(self) -> bool:
        """Whether the means moved by more than 1 % since they were last sent (then: remember them as sent)."""
        now = (self.samples / self.batches, self.tokens / self.token_batches if self.token_batches else 0.0)
        sent = self.sent
        if sent is not None and all(abs(a - b) <= 0.01 * max(abs(b), 1e-9) for a, b in zip(now, sent, strict=True)):
            return False
        self.sent = now
        return True


class _Registry(Protocol):
    @property
    def configs(self) -> dict[int, dict[str, Any]]: ...

    @property
    def emit(self) -> Callable[[dict[str, Any]], None]: ...


class BatchHooks(Protocol):
    """What the probe reads of ``_torch_hooks.TorchHooks`` (named here, not imported: that module imports this one)."""

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def installed(self) -> bool: ...

    @property
    def _it_cls(self) -> Any: ...

    @property
    def registry(self) -> _Registry: ...


class BatchProbe:
    """Arms and disarms the measuring ``__next__`` of ``hooks``; reports each loader's means with its config."""

    def __init__(self, hooks: BatchHooks) -> None:
        self.hooks = hooks
        self.stats: dict[int, BatchStats] = {}
        self.left = 0  # batches still to read in this round
        self.wrapper: Callable[[Any], Any] | None = None  # the measuring __next__ while armed
        self.base: Callable[[Any], Any] | None = None  # what it replaced (and calls)
        self.next_round = 0.0

    def arm(self, batches: int = FIRST_BATCHES) -> None:
        """Read the next ``batches`` batches (any thread; the class attribute is swapped under the hooks' lock)."""
        hooks = self.hooks
        with hooks.lock:
            self.left = max(self.left, batches)
            cls = hooks._it_cls
            if cls is None or not hooks.installed:
                return
            base = cls.__dict__.get("__next__")
            if base is None or (self.wrapper is not None and base is self.wrapper):
                return  # not patched, or armed already
            self.base = base
            self.wrapper = _measuring(base, self)
            cls.__next__ = self.wrapper

    def disarm(self) -> None:
        hooks = self.hooks
        with hooks.lock:
            cls = hooks._it_cls
            if cls is not None and self.wrapper is not None and cls.__dict__.get("__next__") is self.wrapper:
                cls.__next__ = self.base  # else it was replaced meanwhile (CUDA probe, uninstall): leave that
            self.wrapper = self.base = None

    def tick(self) -> None:
        """From the sender thread: a periodic round once a second."""
        now = time.monotonic()
        if now >= self.next_round and self.hooks.installed:
            self.next_round = now + ROUND_EVERY_S
            self.arm(ROUND_BATCHES)

    def seen(self, it: Any, batch: Any) -> None:
        self.left -= 1
        if self.left <= 0:
            self.disarm()
        samples, tokens = measure(batch)
        if samples <= 0:
            return
        lid = it._trainmon_tag >> 8
        stats = self.stats.get(lid)
        if stats is None:
            stats = self.stats[lid] = BatchStats()
        stats.add(samples, tokens)
        config = self.hooks.registry.configs.get(lid)
        if config is not None and stats.changed():
            self.hooks.registry.emit({"loader": dict(config, id=lid, **stats.fields())})


def _measuring(base: Callable[[Any], Any], probe: BatchProbe) -> Callable[[Any], Any]:
    """The plain wrapper (which times the wait), then the batch read outside the timed span."""

    def __next__(self: Any) -> Any:
        batch = base(self)
        try:
            probe.seen(self, batch)
        except Exception:
            pass
        return batch

    __next__.__trainmon_original__ = getattr(base, "__trainmon_original__", base)  # type: ignore[attr-defined]
    __next__.__wrapped__ = base  # type: ignore[attr-defined]
    return __next__
