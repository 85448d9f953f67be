"""The training thread's wait for a batch that another thread makes: a prefetcher's queue, a pool's future.

A loop fed by a background thread (prefetch_generator's ``BackgroundGenerator`` around a DataLoader, a custom iterator
decoding on a ``ThreadPoolExecutor``, the iterators of DALI, FFCV or Ray Data) makes no DataLoader wait on the training
thread: the DataLoader, if any, is iterated by the prefetcher's thread (``feed`` records, agent/_torch_hooks.py). What
the loop waits on is the hand-over: its iterator's ``__next__`` blocks in ``queue.Queue.get``, ``Future.result`` or a
``multiprocessing`` queue's ``get`` until the other thread has the batch ready. While the training thread has no
DataLoader wait of its own (the sender thread sees that, agent/_outside.py), those three are wrapped at class level:
called by the training thread from within a batch iterator (a ``__next__``, a ``next`` or a generator frame among
the few frames above the call), each call is one ``handover`` record with its span; called by any other thread, the
wrapper is one comparison of thread ids. The first such call also names the iterator's class (the ``self`` of the
outermost ``__next__`` frame above it, read in the training thread itself): the sender then times that class's
``__next__`` whole (``iterator`` records: its own bookkeeping, a pool's ``submit``, the wait), and the blocking calls
inside it record nothing more. A generator has no ``__next__`` of its own to time: its blocking calls stand for it.
Everything is taken out as soon as a DataLoader drives the loop again, on ``detach()`` and in forked children.
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


MAX_CLASSES = 8  # iterator classes whose __next__ is timed whole
_inside = [0]  # depth of timed iterator __next__ calls on the training thread (their blocking calls record nothing)
_found: list[type] = []  # iterator classes named by a blocking call, not yet timed (the sender times them)
_seen: set[Any] = set()  # the code objects of the __next__ frames already looked at


def _iterator_frame(frame: Any) -> tuple[bool, Any]:
    """(whether a batch iterator's frame is among the DEPTH frames from ``frame`` up, the outermost ``__next__`` frame
    among them or None)."""
    inside, outer = False, None
    k = 0
    while frame is not None and k < DEPTH:
        code = frame.f_code
        if code.co_name in ITERATOR_NAMES or code.co_flags & CO_GENERATOR:
            inside = True
        if code.co_name == "__next__":
            outer = frame
        frame = frame.f_back
        k += 1
    return inside, outer


def _name(frame: Any) -> None:
    """Keep the class of the iterator whose ``__next__`` is ``frame``, where that ``__next__`` is a Python function of
    the class itself: once per code object, at most MAX_CLASSES of them."""
    code = frame.f_code
    if code in _seen or len(_seen) >= MAX_CLASSES:
        return
    _seen.add(code)
    cls = type(frame.f_locals.get("self"))  # the training thread's own frame, read by that thread
    if getattr(cls.__dict__.get("__next__"), "__code__", None) is code:
        _found.append(cls)


def timed_get(orig: Callable[..., Any], kind: int) -> Callable[..., Any]:
    """A blocking ``get``/``result`` method, timed when the training thread calls it from a batch iterator."""
    ident, train, pc, span, getframe = _hot._ident, _hot._train, _hot._pc, _hot.span, sys._getframe
    inside = _inside

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if ident() != train[0] or inside[0]:
            return orig(self, *args, **kwargs)
        t0 = pc()
        try:
            return orig(self, *args, **kwargs)
        finally:
            t1 = pc()
            try:
                inside_iterator, outer = _iterator_frame(getframe(1))
                if inside_iterator:
                    span(K_HANDOVER, kind, t0, t1)
                    if outer is not None:
                        _name(outer)
            except Exception:
                pass

    wait.__trainmon_original__ = orig  # type: ignore[attr-defined]
    wait.__wrapped__ = orig  # type: ignore[attr-defined]
    wait.__name__ = getattr(orig, "__name__", "get")
    wait.__qualname__ = getattr(orig, "__qualname__", "get")
    wait.__doc__ = orig.__doc__
    return wait


def timed_next(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An iterator class's own ``__next__``, timed whole when the training thread calls it."""
    ident, train, pc, span = _hot._ident, _hot._train, _hot._pc, _hot.span
    inside, kind = _inside, HANDOVER_KINDS.index("iterator")

    def __next__(self: Any) -> Any:
        if ident() != train[0]:
            return orig(self)
        inside[0] += 1
        t0 = pc()
        try:
            return orig(self)
        finally:
            inside[0] -= 1
            span(K_HANDOVER, kind, t0, pc())

    __next__.__trainmon_original__ = orig  # type: ignore[attr-defined]
    __next__.__wrapped__ = orig  # type: ignore[attr-defined]
    __next__.__doc__ = orig.__doc__
    return __next__


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

    def __init__(self, emit: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._undo: list[Callable[[], None]] = []
        self.emit = emit  # tells the monitor which iterator hands the batches over (INFO "handover")

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

    def adopt(self) -> None:
        """From the sender thread, while installed: time whole the ``__next__`` of the iterator classes found since."""
        while _found and self._undo:
            cls = _found.pop()
            orig = cls.__dict__.get("__next__")
            if orig is None or getattr(orig, "__trainmon_original__", None) is not None:
                continue
            wrapper = timed_next(orig)
            type.__setattr__(cls, "__next__", wrapper)
            self._undo.append(_restore(cls, "__next__", orig, wrapper))
            if self.emit is not None:
                name = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls.__name__)}"
                self.emit({"handover": {"iterator": name[:200]}})

    def uninstall(self) -> None:
        del _found[:]
        _seen.clear()
        _inside[0] = 0
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
    return frozenset({timed_get(_identity, 0).__code__, timed_next(_identity).__code__})


def _identity(it: Any) -> Any:
    return it
