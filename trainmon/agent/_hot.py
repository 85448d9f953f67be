"""The agent's per-batch and per-step path: clock reads and one append, nothing else.

Every record is four ints (tag, t0, t1, value) added to one flat list with one ``list.extend`` of a tuple, which is
atomic under the GIL; the list is never replaced, so the sender takes the records with a slice and a ``del`` of the
same length (each atomic: a record added between them stays for the next take) and packs them into the wire's int64
array in one C call (``array("q", ...)``). Why a flat list of ints: in a real training step the hooks run cold,
between the model's calls, and what they cost is mostly the code and memory they touch. ``list.extend`` and a small
tuple, freed at once, are what the interpreter does all the time (``struct.pack`` and ``array.frombytes`` are not:
5.0 µs a step on a DataLoader loop with a small model against 1.9 µs, 2-core VM). The buffer holds ints, which the
cyclic garbage collector does not track: a fast loop's records no longer count towards its generation-0 threshold
(a list of 4-tuples did: a trivial DataLoader loop ran 1 192 generation-0 collections over 400 000 steps with it, 647
with ints). The sender packs a flat list at about half the price per record of a list of tuples.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

from trainmon.protocol import K_CKPT, K_MARK, K_OPT, K_PHASE, K_STEP

_pc = time.perf_counter_ns  # CLOCK_MONOTONIC on Linux: shared with the monitor's time.monotonic()
_buf: list[int] = []  # flat: tag, t0, t1, value, record after record; never rebound (the sender slices it)
_ident = threading.get_ident
# The thread that trains (steps the optimizer): the main thread until the agent sees another one step
# (agent/_outside.py). A DataLoader iterated by any other thread feeds a prefetcher, not the loop.
_train = [threading.main_thread().ident or 0]


def on_training_thread() -> bool:
    return _ident() == _train[0]


# Held by whoever takes records out of the buffer (the sender's take, the training thread's shed): adding a record
# never takes it, and only adds at the end.
_take_lock = threading.Lock()


def take_all() -> tuple[list[array[int]], list[int]]:
    """What ``shed`` packed (oldest first) and the records held now (flat), both taken in one go: records added
    meanwhile stay for the next take."""
    global _packed
    with _take_lock:
        packed, _packed = _packed, []
        n = len(_buf)
        taken = _buf[:n]
        del _buf[:n]
    return packed, taken


def swap_buffer() -> array[int]:
    """Every record held (``take_all``'s, packed first) as flat int64s (tag, t0, t1, value)."""
    packed, taken = take_all()
    out = array("q")
    for chunk in packed:
        out.extend(chunk)
    out.extend(flat(taken))
    return out


def flat(records: list[int]) -> array[int]:
    """Flat records as one ``array('q')`` (one C call); where a field is not an int64, the records are packed 1024 at
    a time and the chunk holding it record by record, that record left out."""
    try:
        return array("q", records)
    except Exception:  # a field that is not an int64 (or whose __index__ raises): never the caller's error
        pass
    out = array("q")
    usable = len(records) - len(records) % 4
    for i in range(0, usable, 4096):
        chunk = records[i : min(usable, i + 4096)]
        try:
            out.extend(array("q", chunk))
        except Exception:
            for k in range(0, len(chunk), 4):
                try:
                    out.extend(array("q", chunk[k : k + 4]))
                except Exception:  # that record only is lost
                    pass
    return out


def reset_buffer() -> None:
    global _packed
    del _buf[:]
    _packed = []


def pending_records() -> int:
    return (len(_buf) + sum(len(a) for a in _packed)) // 4


def wrap_next(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_BaseDataLoaderIter.__next__``: the time spent inside it is the data wait."""

    def __next__(self: Any) -> Any:
        t0 = _pc()
        try:
            batch = orig(self)
        except StopIteration:
            # _trainmon_tag is K_WAIT | loader_id << 8; K_ITER_END == K_WAIT + 1.
            _buf.extend((self._trainmon_tag + 1, t0, _pc(), 0))
            raise
        _buf.extend((self._trainmon_tag, t0, _pc(), 0))
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
            _buf.extend((self._trainmon_tag + 1, t0, _pc(), 0))
            if pair is not None:
                drop(pair)
            raise
        except BaseException:
            if pair is not None:
                drop(pair)
            raise
        t1 = _pc()
        tag = self._trainmon_tag
        _buf.extend((tag, t0, t1, 0))
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
    _buf.extend((K_OPT, t, t, 0))


def optimizer_step_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    """The step's record where torch's step wrapper does not call ``_optimizer_step_code`` (see opt_record_via)."""
    t = _pc()
    _buf.extend((K_OPT, t, t, 0))


# How the optimizer step's record is made: "step_code" (optimizer_step_code) or "post_hook" (_torch_hooks.py decides)
opt_record_via = ["step_code"]


def step() -> None:
    t = _pc()
    _buf.extend((K_STEP, t, t, 0))
    if len(_buf) > CAP_FIELDS:
        shed()


def mark(name_id: int) -> None:
    t = _pc()
    _buf.extend((K_MARK | name_id << 8, t, t, 0))
    if len(_buf) > CAP_FIELDS:
        shed()


def span(kind: int, ident: int, t0: int, t1: int, value: int = 0) -> None:
    _buf.extend((kind | ident << 8, t0, t1, value))
    if len(_buf) > CAP_FIELDS:
        shed()


# The records a buffer holds between two sender ticks at most. A DataLoader's waits and the optimizer's steps come
# far slower than the sender packs them; explicit ``step()``, ``mark()`` and spans in a tight loop can come faster
# (millions a second), and then the calling thread packs the older half itself and hands it over packed (the sender
# queues it, and drops the oldest it holds beyond MAX_PENDING_BYTES, counted), so memory stays bounded.
CAP_RECORDS = 1 << 17
CAP_FIELDS = CAP_RECORDS * 4
_packed: list[array[int]] = []


def shed() -> None:
    """The buffer outgrew CAP_RECORDS: its older half packed for the sender, in order, ahead of what follows. Never
    waits: where the lock is held (the sender is taking the records, or a finaliser or signal handler that records
    something runs inside this very shed) the next record tries again."""
    if not _take_lock.acquire(blocking=False):
        return
    try:
        if len(_buf) <= CAP_FIELDS:
            return
        half = len(_buf) // 8 * 4
        older = _buf[:half]
        del _buf[:half]
        _packed.append(flat(older))
    finally:
        _take_lock.release()


def reset_lock() -> None:
    """A forked child's lock: the parent's sender may have held it at the fork."""
    global _take_lock
    _take_lock = threading.Lock()


def wrap_save(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.save``: a checkpoint event with its duration."""

    def save(*args: Any, **kwargs: Any) -> Any:
        t0 = _pc()
        try:
            return orig(*args, **kwargs)
        finally:
            _buf.extend((K_CKPT, t0, _pc(), 0))

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
            _buf.extend((K_PHASE | self._ident << 8, self._t0, _pc(), 0))
