"""Time outside the model, for loops that no loader drives (a ``get_batch`` of their own, as nanoGPT's train.py has).

Such a loop gives the agent optimizer steps and no ``__next__`` to time, so its data wait would read 0. Once several
optimizer steps in a row came with no loader batch (the sender thread sees that in the records it collects), the
agent times the model itself: the forward of each root module holding parameters (the optimizer's first: found once
from its parameters, by one scan of the garbage collector's objects, so a DDP or ``torch.compile`` wrapper is the
module timed, never what it wraps), ``torch.autograd.backward``, and the optimizer's work: each optimizer's ``step``
and ``zero_grad`` and ``torch.nn.utils.clip_grad_norm_``. A step's time outside the model is its span (from the end of
the previous optimizer step to the start of this one) less the time in all of those inside it; it is sent just before
the step's ``opt`` record, as a ``K_OUTSIDE`` record.

Why "step time minus forward, backward and optimizer", not "from optimizer.step to the next forward": nanoGPT fetches
the next batch right after the forward, inside its gradient-accumulation loop, before backward (so the host prepares
it while the GPU runs the forward). A boundary between two calls misses a batch fetched anywhere else; the
difference holds it wherever the loop fetches it, and with gradient accumulation every micro-batch's fetch too. The
price: it also holds what else the loop does outside the model (logging, metrics, the loop's own Python), which the
stack samples of ``_frames.py`` tell apart. On CUDA it is the host's time, which may overlap queued GPU work
(nothing here synchronises); a loop that calls the model inside ``optimizer.step(closure)`` is not measured (its
forward comes after the step began).

Cost: nothing for loops with a loader (nothing is patched). Once switched on, each forward, backward and
optimizer call pays a Python wrapper (benchmarks/agent_overhead.py has the figure). The wrappers of modules and
optimizers are bound methods of module-level functions (a ``copy.deepcopy`` of the model rebinds them, a pickled
model loads without them), check ``torch.compiler.is_compiling()`` first (inside a region dynamo traces they only
call through: no timing code is traced) and are removed when a loader drives the loop again, on ``detach()`` and in
forked children.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from types import MethodType
from typing import TYPE_CHECKING, Any

from trainmon.agent import _hot
from trainmon.protocol import K_OUTSIDE

if TYPE_CHECKING:
    from trainmon.agent._frames import FrameSampler

ENABLE_AFTER = 5  # optimizer steps without a loader batch before the model is timed
CHECK_AFTER = 20  # optimizer steps after switching on with no step measured: the modules timed are not the model
RETRY_S = 30.0
MAX_TRIES = 3
MAX_ROOTS = 16  # modules timed: those holding the optimizers' parameters first, then other ones with parameters
PREV_FORWARD = "_trainmon_forward"  # a module's own instance-level forward (torch.compile's), called by ours
PREV_STEP = "_trainmon_step"  # an optimizer's own instance-level step (an LR scheduler's wrapper)
PREV_ZERO = "_trainmon_zero_grad"

_pc = time.perf_counter_ns
# [depth inside the model, when the outermost call began, ns inside since the last step, forwards since it]
_st = [0, 0, 0, 0]
_live = [False]
_last_end = [0]  # when the last optimizer step ended (ns)
_tid = [0]  # the thread that steps the optimizer (the sampler reads its stack)
_measured = [0]  # K_OUTSIDE records made


def _never() -> bool:
    return False


_is_compiling: Callable[[], bool] = _never  # torch.compiler.is_compiling once switched on


def inside_model() -> bool:
    return _st[0] > 0


def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A root module's forward, timed (bound to the module as ``module.forward``)."""
    if _is_compiling() or not _live[0]:
        prev = self.__dict__.get(PREV_FORWARD)
        return prev(*args, **kwargs) if prev is not None else type(self).forward(self, *args, **kwargs)
    st = _st
    if not st[0]:
        st[1] = _pc()
    st[0] += 1
    st[3] += 1
    try:
        prev = self.__dict__.get(PREV_FORWARD)
        return prev(*args, **kwargs) if prev is not None else type(self).forward(self, *args, **kwargs)
    finally:
        st[0] -= 1
        if not st[0]:
            st[2] += _pc() - st[1]


def step(self: Any, *args: Any, **kwargs: Any) -> Any:
    """An optimizer's step: the step's time outside the model is recorded as it begins (before its ``opt`` record)."""
    prev = self.__dict__.get(PREV_STEP)
    self.__dict__["_opt_called"] = True  # what an LR scheduler's own step wrapper records (see below)
    if not _live[0] or _is_compiling():
        return prev(*args, **kwargs) if prev is not None else type(self).step(self, *args, **kwargs)
    st = _st
    outer = not st[0]
    if outer:
        t = _pc()
        last = _last_end[0]
        if last and st[3]:
            _hot.span(K_OUTSIDE, 0, last, t, max(0, t - last - st[2]))
            _measured[0] += 1
        st[1] = t
    st[0] += 1
    try:
        return prev(*args, **kwargs) if prev is not None else type(self).step(self, *args, **kwargs)
    finally:
        st[0] -= 1
        if outer:
            st[0] = st[2] = st[3] = 0
            _last_end[0] = _pc()
            _tid[0] = threading.get_ident()


# An LR scheduler wraps ``optimizer.step`` unless it finds this mark on it, and checks the mark at its first step;
# ``step`` records ``_opt_called`` as the scheduler's wrapper does, so a scheduler made before or after it works alike.
step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]


def timed(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A function of torch timed as inside the model: ``torch.autograd.backward`` (which ``Tensor.backward`` calls),
    ``torch.nn.utils.clip_grad_norm_`` (the optimizer's work, as ``zero_grad``)."""

    def inside(*args: Any, **kwargs: Any) -> Any:
        if not _live[0] or _is_compiling():
            return orig(*args, **kwargs)
        st = _st
        if not st[0]:
            st[1] = _pc()
        st[0] += 1
        try:
            return orig(*args, **kwargs)
        finally:
            st[0] -= 1
            if not st[0]:
                st[2] += _pc() - st[1]

    inside.__wrapped__ = orig  # type: ignore[attr-defined]
    inside.__trainmon_original__ = orig  # type: ignore[attr-defined]
    inside.__doc__ = orig.__doc__
    inside.__name__ = getattr(orig, "__name__", "inside")
    return inside


def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
    """An optimizer's zero_grad, timed as inside the model (the optimizer's work)."""
    prev = self.__dict__.get(PREV_ZERO)
    if not _live[0] or _is_compiling():
        return prev(*args, **kwargs) if prev is not None else type(self).zero_grad(self, *args, **kwargs)
    st = _st
    if not st[0]:
        st[1] = _pc()
    st[0] += 1
    try:
        return prev(*args, **kwargs) if prev is not None else type(self).zero_grad(self, *args, **kwargs)
    finally:
        st[0] -= 1
        if not st[0]:
            st[2] += _pc() - st[1]


def find_targets(torch: Any) -> tuple[list[Any], list[Any]]:
    """(root modules to time, optimizers): one pass over the collector's objects. A root is a module no other module
    holds as a child (a DDP or compiled wrapper, not what it wraps); those holding an optimizer's parameters come
    first, then other roots with parameters (a teacher, a frozen encoder: model compute too)."""
    module_t, optimizer_t = torch.nn.Module, torch.optim.Optimizer
    modules: list[Any] = []
    optimizers: list[Any] = []
    for obj in gc.get_objects():
        cls = type(obj)  # never obj.__class__: a proxy object may compute it
        if issubclass(cls, module_t):
            modules.append(obj)
        elif issubclass(cls, optimizer_t):
            optimizers.append(obj)
    if not optimizers:
        return [], []
    children = {id(c) for m in modules for c in (m.__dict__.get("_modules") or {}).values() if c is not None}
    trained = {id(p) for opt in optimizers for group in opt.param_groups for p in group.get("params", ())}
    owners: list[Any] = []
    others: list[Any] = []
    for m in modules:
        if id(m) in children:
            continue
        params = [id(p) for p in m.parameters()]
        if params:
            (owners if trained.intersection(params) else others).append(m)
    return (owners + others)[:MAX_ROOTS] if owners else [], optimizers


def _bind(obj: Any, name: str, prev_key: str, func: Callable[..., Any]) -> Callable[[], None]:
    """``obj.name = func`` bound to ``obj`` (its own instance-level ``name``, if any, kept under ``prev_key``);
    returns the undo."""
    own = obj.__dict__
    current = own.get(name)
    if isinstance(current, MethodType) and current.__func__ is func:
        return lambda: None  # already bound (a second scan found it again)
    if current is not None:
        own[prev_key] = current
    object.__setattr__(obj, name, MethodType(func, obj))

    def undo() -> None:
        bound = own.get(name)
        if isinstance(bound, MethodType) and bound.__func__ is func:
            prev = own.pop(prev_key, None)
            if prev is not None:
                object.__setattr__(obj, name, prev)
            else:
                del own[name]

    return undo


class OutsideProbe:
    """Decides from the sender thread (``observe``) when to time the model, and patches and unpatches it."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.lock = threading.Lock()
        self.on = False
        self.free_steps = 0  # optimizer steps with no loader batch since the last loader-driven batch
        self.steps_on = 0  # optimizer steps since switched on
        self.tries = 0
        self.retry_at = 0.0
        self.scan_s = 0.0  # the last scan's wall time
        self.sampler: FrameSampler | None = None
        self._undo: list[Callable[[], None]] = []

    def observe(self, counts: Any) -> None:
        """One collected batch's counts (``_sender.Counts``): switch on after ENABLE_AFTER optimizer steps with no
        loader batch, off once most steps of a batch follow one (several optimizers per batch count as one)."""
        if not counts.opt:
            return
        waits = sum(counts.wait.values())
        free = counts.opt if not waits else max(0, counts.opt - counts.groups)
        if waits and counts.groups >= free:
            self.free_steps = 0
            if self.on:
                self.disable()
            return
        self.free_steps += free
        if self.on:
            self.steps_on += counts.opt
            if self.steps_on >= CHECK_AFTER and not _measured[0]:
                self.disable()  # the forwards timed are not the loop's model: look again later
                self.retry_at = time.monotonic() + RETRY_S
            return
        if self.free_steps >= ENABLE_AFTER and self.tries < MAX_TRIES and time.monotonic() >= self.retry_at:
            self.enable()

    def enable(self) -> bool:
        import sys

        torch = sys.modules.get("torch")
        if torch is None:
            return False
        with self.lock:
            if self.on:
                return True
            self.tries += 1
            t0 = time.monotonic()
            roots, optimizers = find_targets(torch)
            self.scan_s = time.monotonic() - t0
            if not roots:
                self.retry_at = time.monotonic() + RETRY_S
                return False
            global _is_compiling
            _is_compiling = _compiling_check(torch)
            _st[:] = [0, 0, 0, 0]
            _last_end[0] = _measured[0] = 0
            try:
                self._patch(torch, roots, optimizers)
            except Exception:
                self._unpatch()
                raise
            _live[0] = True
            self.on = True
            self.steps_on = 0
            from trainmon.agent._frames import FrameSampler  # only now: attach() imports nothing it does not use

            self.sampler = FrameSampler(self.emit, _tid, inside_model, own_codes())
            self.sampler.start()
            return True

    def _patch(self, torch: Any, roots: list[Any], optimizers: list[Any]) -> None:
        for module in roots:
            self._undo.append(_bind(module, "forward", PREV_FORWARD, forward))
        for opt in optimizers:
            self._undo.append(_bind(opt, "step", PREV_STEP, step))
            self._undo.append(_bind(opt, "zero_grad", PREV_ZERO, zero_grad))
        self._time(torch.autograd, "backward")
        self._time(torch.nn.utils, "clip_grad_norm_")

    def _time(self, owner: Any, name: str) -> None:
        """``owner.name`` (a module's function, looked up at each call) timed as inside the model."""
        orig = getattr(owner, name, None)
        if orig is None or getattr(orig, "__trainmon_original__", None) is not None:
            return
        setattr(owner, name, timed(orig))

        def undo() -> None:
            if getattr(getattr(owner, name, None), "__trainmon_original__", None) is orig:
                setattr(owner, name, orig)

        self._undo.append(undo)

    def _unpatch(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass

    def disable(self) -> None:
        with self.lock:
            _live[0] = False
            self.on = False
            self._unpatch()
            sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.stop()

    def uninstall(self) -> None:
        """``detach()``, or a forked child (its patches are its own copies): everything undone."""
        self.disable()
        self.free_steps = 0


def _compiling_check(torch: Any) -> Callable[[], bool]:
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    return check if callable(check) else _never


def own_codes() -> frozenset[Any]:
    """The code objects of the wrappers above: a stack sample tells by them where the model begins."""
    return frozenset({forward.__code__, step.__code__, zero_grad.__code__, timed(_never).__code__})


def measured() -> int:
    return _measured[0]
