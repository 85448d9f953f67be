"""The wrappers that time the model in a burst (agent/_outside.py puts them in place and takes them out), the state
they share with the training thread, their calibration, and the code objects that tell the stack sampler where the
model and the agent's wrappers are.

The wrappers are module-level functions bound to each module and optimizer (a ``copy.deepcopy`` of the model
rebinds them, a pickled model loads without them); their state is module-level lists, read and written by the
training thread without a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType, MethodType
from typing import Any

from trainmon.agent import _hot
from trainmon.protocol import K_OUTSIDE

PREV_FORWARD = "_trainmon_forward"  # a module's own instance-level forward (torch.compile's), called by ours
PREV_STEP = "_trainmon_step"  # an optimizer's own instance-level step (an LR scheduler's wrapper)
PREV_ZERO = "_trainmon_zero_grad"
# The functional losses (``nn.CrossEntropyLoss`` and the other loss modules call them): timed as the model's work.
LOSSES = (
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
)

_pc = time.perf_counter_ns
# [depth inside the model, when the outermost call began, ns inside since the last step, forwards since it]
_st = [0, 0, 0, 0]
_live = [False]
_last_end = [0]  # when the last optimizer step ended (ns)
_tid = [0]  # the thread that steps the optimizer (the sampler reads its stack) ...
_native = [0]  # ... and its native id (the probe reads its CPU time)
_measured = [0]  # K_OUTSIDE records made
_span = [0]  # ns of the steps measured (their spans, from the end of the step before)
_patched = [False]  # the wrappers are in place (a burst)
_wrapped = [0, 0]  # optimizer steps and forwards the wrappers saw (the meter in _cost.py prices them) ...
_price_per_step_ns = [0.0]  # ... at this price a step (OutsideProbe._price_per_step)
_burst_left = [-1]  # measured steps the burst under way still makes (the training thread ends it at 0; < 0: no end)
_burst_cpu = [0, 0]  # the training thread's CPU time (ns) and _wrapped[0] as the burst's first step ended


def _no_end() -> None:
    return None


_end_burst: list[Callable[[], None]] = [_no_end]  # the probe's, called by the training thread at a burst's end


def _never() -> bool:
    return False


_is_compiling: Callable[[], bool] = _never  # torch.compiler.is_compiling once switched on


def inside_model() -> bool | None:
    """Inside the model by the wrappers' count during a burst; None between bursts: the sampler tells it by the model's
    code objects on the stack."""
    return _st[0] > 0 if _patched[0] else None


def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A root module's forward, timed (bound to the module as ``module.forward``)."""
    if _is_compiling() or not _live[0]:
        prev = self.__dict__.get(PREV_FORWARD)
        return prev(*args, **kwargs) if prev is not None else type(self).forward(self, *args, **kwargs)
    st = _st
    if st[0] <= 0:
        st[0] = 0
        st[1] = _pc()
    st[0] += 1
    st[3] += 1
    try:
        prev = self.__dict__.get(PREV_FORWARD)
        return prev(*args, **kwargs) if prev is not None else type(self).forward(self, *args, **kwargs)
    finally:
        st[0] -= 1
        if st[0] <= 0:
            st[2] += _pc() - st[1]


def step(self: Any, *args: Any, **kwargs: Any) -> Any:
    """An optimizer's step: the step's time outside the model is recorded as it begins (before its ``opt`` record)."""
    prev = self.__dict__.get(PREV_STEP)
    self.__dict__["_opt_called"] = True  # what an LR scheduler's own step wrapper records (see below)
    if not _live[0] or _is_compiling():
        return prev(*args, **kwargs) if prev is not None else type(self).step(self, *args, **kwargs)
    st = _st
    outer = st[0] <= 0
    if outer:
        t = _pc()
        last = _last_end[0]
        wrapped = _wrapped
        wrapped[0] += 1
        wrapped[1] += st[3]
        if last and st[3]:
            _hot.span(K_OUTSIDE, 0, last, t, max(0, t - last - st[2]))
            _measured[0] += 1
            _span[0] += t - last
            _burst_left[0] -= 1
        st[0] = 0
        st[1] = t
    st[0] += 1
    try:
        return prev(*args, **kwargs) if prev is not None else type(self).step(self, *args, **kwargs)
    finally:
        st[0] -= 1
        if outer:
            st[0] = st[2] = st[3] = 0
            if not _last_end[0]:  # a burst's first step: which thread steps, and its CPU time from here on
                _tid[0] = threading.get_ident()
                _native[0] = threading.get_native_id()
                _burst_cpu[0] = time.thread_time_ns()
                _burst_cpu[1] = _wrapped[0]
            _last_end[0] = _pc()
            if not _burst_left[0]:
                _end_burst[0]()


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
        if st[0] <= 0:
            st[0] = 0
            st[1] = _pc()
        st[0] += 1
        try:
            return orig(*args, **kwargs)
        finally:
            st[0] -= 1
            if st[0] <= 0:
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
    if st[0] <= 0:
        st[0] = 0
        st[1] = _pc()
    st[0] += 1
    try:
        return prev(*args, **kwargs) if prev is not None else type(self).zero_grad(self, *args, **kwargs)
    finally:
        st[0] -= 1
        if st[0] <= 0:
            st[2] += _pc() - st[1]


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
            prev = own.get(prev_key)  # put back before its key goes: a call in between finds one or the other
            if prev is not None:
                object.__setattr__(obj, name, prev)
                own.pop(prev_key, None)
            else:
                del own[name]

    return undo


def _price() -> tuple[float, float]:
    """A measured step's wrappers timed on their own (the floor of its price): (the optimizer's step and zero_grad, a
    forward and its backward), in ns, as _cost.py times the other hooks."""

    from trainmon.agent._cost import _paired

    hot_globals = dict(vars(_hot))
    hot_globals["_buf"] = []  # the copies write here: nothing reaches the monitor
    prices = [max(0.0, _paired(*_loops(kind, hot_globals))) for kind in ("step", "forward")]
    return prices[0], prices[1]


class _Model:
    def forward(self, *args: Any) -> None:
        return None


class _Optimizer:
    def step(self, *args: Any) -> None:
        return None

    def zero_grad(self, *args: Any) -> None:
        return None


def _loops(kind: str, hot_globals: dict[str, Any]) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """The bare and the timed loops of the calibration: ``step``, an optimizer's ``step`` (its K_OUTSIDE record made)
    and ``zero_grad``; ``forward``, a forward and its backward. Copies of the wrappers write to private state."""
    import types

    from trainmon.agent._cost import _clone, _noop, _work

    globs = dict(globals())
    globs.update(
        _hot=types.SimpleNamespace(span=_clone(_hot.span, hot_globals)),
        _st=[0, 0, 0, 0],
        _live=[True],
        _last_end=[0],
        _measured=[0],
        _span=[0],
        _wrapped=[0, 0],
        _tid=[0],
        _native=[0],
        _burst_left=[-1],
        _burst_cpu=[0, 0],
        _end_burst=[_no_end],
    )
    st = globs["_st"]

    def loop(first: Callable[[Any], Any], second: Callable[[Any], Any]) -> Callable[[int], None]:
        def calls(n: int) -> None:
            for _ in range(n):
                _work()
                first(None)
                st[3] = 1  # a forward since the last step: the step makes its record
                _work()
                second(None)

        return calls

    if kind == "step":
        opt = _Optimizer()
        for name, fn in (("step", step), ("zero_grad", zero_grad)):
            object.__setattr__(opt, name, MethodType(_clone(fn, globs), opt))
        bare_opt = _Optimizer()
        return loop(bare_opt.step, bare_opt.zero_grad), loop(opt.step, opt.zero_grad)
    model = _Model()
    object.__setattr__(model, "forward", MethodType(_clone(forward, globs), model))
    return loop(_Model().forward, _noop), loop(model.forward, _clone(timed(_noop), globs))


def _unwrapped(fn: Any) -> Iterator[CodeType]:
    """The code objects of ``fn`` and of what it wraps (``__wrapped__``), each a frame a call of it puts on a stack."""
    seen = 0
    while fn is not None and seen < 8:
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if isinstance(code, CodeType):
            yield code
        fn = getattr(fn, "__wrapped__", None)
        seen += 1


def model_codes(torch: Any, roots: list[Any], optimizers: list[Any]) -> frozenset[CodeType]:
    """The code objects whose frames on the training thread's stack mean it is in the model: the roots' forwards, the
    optimizers' ``step`` and ``zero_grad``, ``torch.autograd.backward`` and gradient clipping (what the wrappers time,
    for the stack samples taken between bursts, when no wrapper is on the stack)."""
    codes: set[CodeType] = set()
    for root in roots:
        codes.update(_unwrapped(type(root).forward))
        own = root.__dict__.get(PREV_FORWARD) or root.__dict__.get("forward")
        if own is not None and getattr(own, "__func__", None) is not forward:
            codes.update(_unwrapped(own))
    for opt in optimizers:
        for name in ("step", "zero_grad"):
            codes.update(_unwrapped(getattr(type(opt), name, None)))
    timed_fns = [(torch.autograd, "backward"), (torch.nn.utils, "clip_grad_norm_")]
    timed_fns += [(torch.nn.functional, name) for name in LOSSES]
    for owner, name in timed_fns:
        fn = getattr(owner, name, None)
        codes.update(_unwrapped(getattr(fn, "__trainmon_original__", fn)))
    module = torch.nn.Module  # a compiled module's forward wraps Module.__call__: any module's call, not the model's
    generic = {
        *own_codes(),
        *(
            code
            for name in ("__call__", "_call_impl", "_wrapped_call_impl")
            for code in _unwrapped(getattr(module, name, None))
        ),
    }
    return frozenset(code for code in codes if code not in generic)


def _compiling_check(torch: Any) -> Callable[[], bool]:
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    return check if callable(check) else _never


def own_codes() -> frozenset[Any]:
    """The code objects of the wrappers above: a stack sample tells by them where the model begins."""
    return frozenset({forward.__code__, step.__code__, zero_grad.__code__, timed(_never).__code__})


def _identity(it: Any) -> Any:
    return it


def wait_codes() -> frozenset[Any]:
    """The code objects of the agent's wrappers of a batch's wait (a DataLoader's ``__next__``, ``agent.loader``'s, a
    hand-over's): a stack sample with one of them on it is the loop waiting for its data, not its own code."""
    import types

    from trainmon.agent import _handover, _iterable

    probe = types.SimpleNamespace(begin=None, end=None, drop=None)
    codes = {
        _hot.wrap_next(_identity).__code__,
        _hot.wrap_next_cuda(_identity, probe).__code__,
        _iterable.LoaderIterator.__next__.__code__,
    }
    return frozenset(codes) | _handover.wrapper_codes()


def measured() -> int:
    return _measured[0]
