"""The training thread's wait for a batch that another thread makes: a prefetcher's queue, a pool's future.

A loop fed by a background thread (prefetch_generator's ``BackgroundGenerator`` around a DataLoader, a custom iterator
decoding on a ``ThreadPoolExecutor``, the iterators of DALI, FFCV or Ray Data) makes no DataLoader wait on the training
thread: the DataLoader, if any, is iterated by the prefetcher's thread (``feed`` records, agent/_torch_hooks.py). What
the loop waits on is the hand-over: its iterator's ``__next__`` blocks in ``queue.Queue.get``, ``Future.result`` or a
``multiprocessing`` queue's ``get`` until the other thread has the batch ready. While the training thread has no
DataLoader wait of its own (the sender thread sees that, agent/_outside.py), those three are wrapped at class level:
called by the training thread from within a batch iterator (a ``__next__``, a ``next`` or a generator frame among
the few frames above the call), each call is one ``handover`` record with its span; called by any other thread, the
wrapper is one comparison of thread ids. They are taken out as soon as a DataLoader drives the loop again, on
``detach()`` and in forked children.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from trainmon.agent import _hot
from trainmon.protocol import HANDOVER_KINDS, K_HANDOVER

CO_GENERATOR = 0x20
ITERATOR_NAMES = frozenset({"__next__", "next", "__iter__"})
DEPTH = 4  # frames above the blocking call searched for the iterator's


def _in_iterator(frame: Any) -> bool:
    """Whether a batch iterator's frame is among the DEPTH frames from ``frame`` up."""
    k = 0
    while frame is not None and k < DEPTH:
        code = frame.f_code
        if code.co_name in ITERATOR_NAMES or code.co_flags & CO_GENERATOR:
            return True
        frame = frame.f_back
        k += 1
    return False


def timed_get(orig: Callable[..., Any], kind: int) -> Callable[..., Any]:
    """A blocking ``get``/``result`` method, timed when the training thread calls it from a batch iterator."""
    ident, train, pc, span, getframe = _hot._ident, _hot._train, _hot._pc, _hot.span, sys._getframe

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if ident() != train[0]:
            return orig(self, *args, **kwargs)
        t0 = pc()
        try:
            return orig(self, *args, **kwargs)
        finally:
            t1 = pc()
            try:
                if _in_iterator(getframe(1)):
                    span(K_HANDOVER, kind, t0, t1)
            except Exception:
                pass

    wait.__trainmon_original__ = orig  # type: ignore[attr-defined]
    wait.__wrapped__ = orig  # type: ignore[attr-defined]
    wait.__name__ = getattr(orig, "__name__", "get")
    wait.__qualname__ = getattr(orig, "__qualname__", "get")
    wait.__doc__ = orig.__doc__
    return wait


def _targets() -> list[tuple[Any, str, int]]:
    """(class, method, kind) of what a loop blocks in while another thread makes its batch."""
    import concurrent.futures
    import queue

    out: list[tuple[Any, str, int]] = [
        (queue.Queue, "get", HANDOVER_KINDS.index("queue")),
        (concurrent.futures.Future, "result", HANDOVER_KINDS.index("future")),
    ]
    mp = sys.modules.get("multiprocessing.queues")  # only where the job uses multiprocessing queues already
    if mp is not None:
        out.append((mp.Queue, "get", HANDOVER_KINDS.index("mp_queue")))
    return out


class Handover:
    """Puts the wrappers in place (``install``) and takes them out (``uninstall``); from the sender thread."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    @property
    def installed(self) -> bool:
        return bool(self._undo)

    def install(self) -> None:
        if self._undo:
            return
        for cls, name, kind in _targets():
            orig = cls.__dict__.get(name)
            if orig is None or getattr(orig, "__trainmon_original__", None) is not None:
                continue
            wrapper = timed_get(orig, kind)
            setattr(cls, name, wrapper)
            self._undo.append(_restore(cls, name, orig, wrapper))

    def uninstall(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass


def _restore(cls: Any, name: str, orig: Any, wrapper: Any) -> Callable[[], None]:
    def undo() -> None:
        if cls.__dict__.get(name) is wrapper:
            setattr(cls, name, orig)

    return undo


def wrapper_codes() -> frozenset[Any]:
    """The wrappers' code object: a stack sample with it on the stack is the loop waiting for its batch."""
    return frozenset({timed_get(lambda self: None, 0).__code__})
