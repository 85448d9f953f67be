"""The agent's per-batch and per-step path: clock reads and one append, nothing else.

Every record is a 4-tuple of ints appended to a list with one ``list.append``, which is atomic under the GIL, so the
sender thread can swap the buffer at any moment without tearing a record; the sender packs the records into the
wire's int64 array (``swap_buffer``). Why a list of tuples, not an ``array('q')`` grown by ``frombytes(pack(...))``:
in a real training step the hooks run cold, between the model's calls, and what they cost is mostly the code and
memory they touch. ``list.append`` and a small tuple are what the interpreter does all the time; ``struct.pack`` and
``array.frombytes`` (a realloc every other record of an array started afresh each tick) are not. On a DataLoader
loop with a small model the hooks cost 5.0 µs a step the array's way and 1.9 µs this way (2-core VM; 0.93 and
0.43 µs on a loop with no model); the sender pays about 0.1 µs a record to pack them, off the training thread.
"""

from __future__ import annotations

import struct
import threading
import time
from array import array
from collections.abc import Callable
from itertools import starmap
from typing import Any

from trainmon.protocol import K_CKPT, K_MARK, K_OPT, K_PHASE, K_STEP

_pc = time.perf_counter_ns  # CLOCK_MONOTONIC on Linux: shared with the monitor's time.monotonic()
_buf: list[tuple[int, int, int, int]] = []
_one = struct.Struct("4q").pack  # native order and size, as array("q") holds them
_ident = threading.get_ident
# The thread that trains (steps the optimizer): the main thread until the agent sees another one step
# (agent/_outside.py). A DataLoader iterated by any other thread feeds a prefetcher, not the loop.
_train = [threading.main_thread().ident or 0]


def on_training_thread() -> bool:
    return _ident() == _train[0]


def take_buffer() -> list[tuple[int, int, int, int]]:
    """Hand the filled buffer to the sender and start a fresh one (a thread that loaded the old one may still append
    its record to it: the sender waits a moment before it packs them)."""
    global _buf
    full, _buf = _buf, []
    return full


def swap_buffer() -> array[int]:
    """Every record held (``take_packed``'s, then ``take_buffer``'s) as flat int64s (tag, t0, t1, value)."""
    out = array("q")
    for packed in take_packed():
        out.extend(packed)
    out.extend(flat(take_buffer()))
    return out


def flat(records: list[tuple[int, int, int, int]]) -> array[int]:
    """Records as one flat ``array('q')``, packed 1024 at a time (each chunk one C call: the sender gives the lock up
    between chunks); a chunk holding a record that is not four int64s is packed record by record, that one left out."""
    out = array("q")
    for i in range(0, len(records), 1024):
        chunk = records[i : i + 1024]
        try:
            out.frombytes(b"".join(starmap(_one, chunk)))
        except (struct.error, TypeError, ValueError):
            for record in chunk:
                try:
                    out.frombytes(_one(*record))
                except (struct.error, TypeError, ValueError):
                    pass
    return out


def reset_buffer() -> None:
    global _buf, _packed
    _buf = []
    _packed = []


def pending_records() -> int:
    return len(_buf) + sum(len(a) for a in _packed) // 4


def wrap_next(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_BaseDataLoaderIter.__next__``: the time spent inside it is the data wait."""

    def __next__(self: Any) -> Any:
        t0 = _pc()
        try:
            batch = orig(self)
        except StopIteration:
            # _trainmon_tag is K_WAIT | loader_id << 8; K_ITER_END == K_WAIT + 1.
            _buf.append((self._trainmon_tag + 1, t0, _pc(), 0))
            raise
        _buf.append((self._trainmon_tag, t0, _pc(), 0))
        return batch

    # Attributes on a function object: mypy does not model them, hence attr-defined.
    __next__.__trainmon_original__ = orig  # type: ignore[attr-defined]
    __next__.__wrapped__ = orig  # type: ignore[attr-defined]
    return __next__


def wrap_next_cuda(orig: Callable[[Any], Any], probe: Any) -> Callable[[Any], Any]:
    """``__next__`` once the job has initialised CUDA: the wait as above, plus a CUDA event pair around it
    (``_cuda.ExposedProbe``) that tells how much of the wait left the GPU idle. Installed in place of
    ``wrap_next``'s wrapper, so CPU-only jobs never take this path or a branch for it."""
    begin, end, drop = probe.begin, probe.end, probe.drop

    def __next__(self: Any) -> Any:
        pair = begin()  # event A first: the probe's own work stays out of the timed wait
        t0 = _pc()
        try:
            batch = orig(self)
        except StopIteration:
            _buf.append((self._trainmon_tag + 1, t0, _pc(), 0))
            if pair is not None:
                drop(pair)
            raise
        except BaseException:
            if pair is not None:
                drop(pair)
            raise
        t1 = _pc()
        tag = self._trainmon_tag
        _buf.append((tag, t0, t1, 0))
        if pair is not None:
            end(pair, tag, t0, t1)
        return batch

    __next__.__trainmon_original__ = orig  # type: ignore[attr-defined]
    __next__.__wrapped__ = orig  # type: ignore[attr-defined]
    return __next__


def optimizer_step_code(self: Any) -> None:
    """``Optimizer._optimizer_step_code``: torch's step wrapper calls this no-op of its own (kept for the profiler,
    which reads ``self`` from its frame, as it can from this one) after every optimizer step, before the post-hooks:
    the step's record at the price of a method call, not of a post-hook's call through ``chain``."""
    t = _pc()
    _buf.append((K_OPT, t, t, 0))


def optimizer_step_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    """The step's record where torch's step wrapper does not call ``_optimizer_step_code`` (see opt_record_via)."""
    t = _pc()
    _buf.append((K_OPT, t, t, 0))


# How the optimizer step's record is made: "step_code" (optimizer_step_code) or "post_hook" (_torch_hooks.py decides)
opt_record_via = ["step_code"]


def step() -> None:
    t = _pc()
    _buf.append((K_STEP, t, t, 0))
    if len(_buf) > CAP_RECORDS:
        shed()


def mark(name_id: int) -> None:
    t = _pc()
    _buf.append((K_MARK | name_id << 8, t, t, 0))
    if len(_buf) > CAP_RECORDS:
        shed()


def span(kind: int, ident: int, t0: int, t1: int, value: int = 0) -> None:
    _buf.append((kind | ident << 8, t0, t1, value))
    if len(_buf) > CAP_RECORDS:
        shed()


# The records a buffer holds between two sender ticks at most. A DataLoader's waits and the optimizer's steps come
# far slower than the sender packs them; explicit ``step()``, ``mark()`` and spans in a tight loop can come faster
# (millions a second), and then the calling thread packs the older half itself and hands it over packed (the sender
# queues it, and drops the oldest it holds beyond MAX_PENDING_BYTES, counted), so memory stays bounded.
CAP_RECORDS = 1 << 17
_packed: list[array[int]] = []


def shed() -> None:
    """The buffer outgrew CAP_RECORDS: its older half packed for the sender, in order, ahead of what follows."""
    global _buf
    full = _buf
    half = len(full) // 2
    _buf = full[half:]
    _packed.append(flat(full[:half]))


def take_packed() -> list[array[int]]:
    """What ``shed`` packed since the sender last looked, oldest first."""
    global _packed
    out, _packed = _packed, []
    return out


def wrap_save(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.save``: a checkpoint event with its duration."""

    def save(*args: Any, **kwargs: Any) -> Any:
        t0 = _pc()
        try:
            return orig(*args, **kwargs)
        finally:
            _buf.append((K_CKPT, t0, _pc(), 0))

    # Attributes on a function object: mypy does not model them, hence attr-defined.
    save.__trainmon_original__ = orig  # type: ignore[attr-defined]
    save.__wrapped__ = orig  # type: ignore[attr-defined]
    save.__doc__ = orig.__doc__
    save.__name__ = getattr(orig, "__name__", "save")
    return save


class Phase:
    """``with trainmon.agent.phase("eval"):`` — a named span."""

    __slots__ = ("_ident", "_t0")

    def __init__(self, ident: int) -> None:
        self._ident = ident
        self._t0 = 0

    def __enter__(self) -> Phase:
        self._t0 = _pc()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ident >= 0:
            _buf.append((K_PHASE | self._ident << 8, self._t0, _pc(), 0))
