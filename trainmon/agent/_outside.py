"""The model timed in bursts, for every loop: what a step spends in the model, and so what it spends outside it.

A loop fed by a DataLoader on its training thread has its data wait timed exactly at every batch; the rest of its
step is the model (forward, backward, the optimizer's work) and the loop's own code (metrics, logging, progress bars,
``.item()``), which only timing the model tells apart. A loop no loader drives on its training thread (a ``get_batch``
of its own, as nanoGPT's train.py has, or a prefetcher's thread feeding it through a queue: agent/_handover.py) has
no ``__next__`` of a DataLoader to time at all. Once ENABLE_AFTER optimizer steps came, fed or not (the sender thread
sees that in the records it collects), the agent times the model itself: the forward of each root module holding
parameters (the optimizer's first: found once from its parameters, among what the training thread's frames reach,
or else the garbage collector's objects, so a DDP or ``torch.compile`` wrapper is the module timed, never what it
wraps), ``torch.autograd.backward``, and the optimizer's work: each optimizer's ``step``
and ``zero_grad`` and ``torch.nn.utils.clip_grad_norm_``. A step's time outside the model is its span (from the end of
the previous optimizer step to the start of this one) less the time in all of those inside it; it is sent just before
the step's ``opt`` record, as a ``K_OUTSIDE`` record. The monitor takes the step's data wait from it where no loader
fed the step, and its own code (the time outside the model less the data wait) where one did.

Why "step time minus forward, backward and optimizer", not "from optimizer.step to the next forward": nanoGPT fetches
the next batch right after the forward, inside its gradient-accumulation loop, before backward (so the host prepares
it while the GPU runs the forward). A boundary between two calls misses a batch fetched anywhere else; the
difference holds it wherever the loop fetches it, and with gradient accumulation every micro-batch's fetch too. The
price: it also holds what else the loop does outside the model (logging, metrics, the loop's own Python), which the
stack samples of ``_frames.py`` tell apart. On CUDA it is the host's time, which may overlap queued GPU work
(nothing here synchronises); a loop that calls the model inside ``optimizer.step(closure)`` is not measured (its
forward comes after the step began).

Cost: once switched on, each forward, backward and optimizer call pays a Python wrapper, about 18 µs a step in all on
the reference host (benchmarks/agent_overhead.py), far above what the agent may cost a fast loop. So the model is
timed in bursts: the wrappers are put in place by the sender thread for BURST_STEPS measured steps, after which the
training thread takes them out itself (at the end of an optimizer step, without waiting on any lock), and the sender
starts the next burst after a pause long enough that the bursts' cost, spread over every step, stays within BUDGET_NS
a step (FED_BUDGET_NS where a loader feeds the loop: its wait needs no burst), or BUDGET_SHARE of a step's time where
that is more (slow steps: one long burst, every step measured). Many short bursts rather than a few long ones: the
steps between them take the share outside the model of the measured steps around them (store/derive.py), which holds
better the more places it is taken from. The stack samples go on throughout; between bursts they tell inside from
outside by the model's own code objects. The wrappers of modules and optimizers are bound methods of module-level
functions (a ``copy.deepcopy`` of the model rebinds them, a pickled model loads without them), check
``torch.compiler.is_compiling()`` first (inside a region dynamo traces they only call through: no timing code is
traced) and are removed on ``detach()`` and in forked children.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from types import CodeType, MethodType
from typing import TYPE_CHECKING, Any

from trainmon.agent import _hot
from trainmon.agent._handover import Handover
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
BURST_STEPS = 16  # measured steps a burst holds (the training thread ends it after them)
BUDGET_NS = 500.0  # what the bursts may cost, spread over every step ...
BUDGET_SHARE = 0.001  # ... or this share of a step's time, where that is more (slow steps: every step measured)
# A loader-fed loop's data wait is measured exactly at every step: bursts only split the rest into the model and the
# loop's own code, so they get less of the agent's per-step budget.
FED_BUDGET_NS = 150.0
MIN_DUTY = 0.01  # bursts take at least this share of the time, however dear a measured step
MAX_PAUSE_S = 10.0
# A measured step's price is the training thread's CPU per step in bursts (read by the thread itself as a burst
# begins and ends) less that over the sender's ticks with no burst in them: the median of the latest PRICE_BURSTS
# bursts against the decayed baseline. The calibration (_cost.py) times the wrappers on their own, with warm caches,
# at about a third of what they cost between a real model's calls (benchmarks/agent_overhead.py); it is the floor.
# Until PRICE_MIN bursts are in, or where the thread's CPU time cannot be read, the calibration times PRIOR_FACTOR.
PRICE_BURSTS = 16
PRICE_MIN = 3
PRIOR_FACTOR = 4.0
BASELINE_DECAY = 0.9  # per tick with no burst

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


def find_targets(torch: Any, everywhere: bool = True) -> tuple[list[Any], list[Any]]:
    """(root modules to time, optimizers). A root is a module no other module found holds (a DDP or compiled wrapper,
    not what it wraps); those holding an optimizer's parameters come first, then other roots with parameters (a
    teacher, a frozen encoder: model compute too). Looked for first in what the training thread's frames reach (a few
    hundred objects: a loop's locals, its script's globals, a trainer's attributes), and only where that finds no
    module holding an optimizer's parameters in the collector's objects (hundreds of thousands once torch is imported:
    a tenth of a second or more, holding the interpreter's lock); not there unless ``everywhere``."""
    module_t, optimizer_t = torch.nn.Module, torch.optim.Optimizer
    for search in (_reachable, _collected) if everywhere else (_reachable,):
        modules, optimizers = search(module_t, optimizer_t)
        roots = _roots(modules, optimizers, whole=search is _reachable)
        if roots:
            return roots, optimizers
    return [], []


STACK_DEPTH = 4  # attribute and item levels followed from a frame's locals (Lightning: self.trainer.strategy.model)
STACK_OBJECTS = 20_000  # objects looked at, at most
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, MethodType, CodeType)


def _reachable(module_t: type, optimizer_t: type) -> tuple[list[Any], list[Any]]:
    """Modules and optimizers reachable from the training thread's frames: their locals, the globals of the script
    running as ``__main__``, then attributes, dict values and list items, STACK_DEPTH levels deep. Never a module's
    attributes (its submodules are its own) nor a Python module's but ``__main__``'s."""
    import sys
    import types

    frame = sys._current_frames().get(_hot._train[0])
    level: list[Any] = []
    while frame is not None:
        level.extend(frame.f_locals.values())
        frame = frame.f_back
    main = sys.modules.get("__main__")
    if main is not None:
        level.extend(vars(main).values())
    modules: list[Any] = []
    optimizers: list[Any] = []
    seen: set[int] = set()
    for _ in range(STACK_DEPTH + 1):
        deeper: list[Any] = []
        for obj in level:
            if id(obj) in seen or len(seen) >= STACK_OBJECTS:
                continue
            seen.add(id(obj))
            cls = type(obj)  # never obj.__class__: a proxy object may compute it
            if issubclass(cls, module_t):
                modules.append(obj)
            elif issubclass(cls, optimizer_t):
                optimizers.append(obj)
            elif issubclass(cls, dict):
                deeper.extend(list(obj.values())[:256])
            elif issubclass(cls, list | tuple | set | frozenset):
                deeper.extend(list(obj)[:256])
            elif not issubclass(cls, _LEAVES) and not isinstance(obj, types.ModuleType | types.FunctionType):
                own = getattr(obj, "__dict__", None)  # a plain object's attributes (a trainer, a config)
                if type(own) is dict:
                    deeper.extend(list(own.values())[:256])
        level = deeper
    return modules, optimizers


def _collected(module_t: type, optimizer_t: type) -> tuple[list[Any], list[Any]]:
    """Every module and optimizer the garbage collector tracks: its objects filtered by their type at C speed (the
    classes of both kinds known now, in a set), with no Python code run per object."""
    from itertools import compress

    kinds = _subclasses(module_t) | _subclasses(optimizer_t)
    objects = gc.get_objects()
    found = list(compress(objects, map(kinds.__contains__, map(type, objects))))
    del objects
    modules = [obj for obj in found if issubclass(type(obj), module_t)]
    return modules, [obj for obj in found if issubclass(type(obj), optimizer_t)]


def _subclasses(cls: type) -> set[type]:
    """``cls`` and every class derived from it, however far down."""
    out = {cls}
    pending = [cls]
    while pending:
        sub: type
        for sub in type.__subclasses__(pending.pop()):
            if sub not in out:
                out.add(sub)
                pending.append(sub)
    return out


def _roots(modules: list[Any], optimizers: list[Any], whole: bool = False) -> list[Any]:
    """The roots among ``modules`` (held by none of the others, however deep), those holding an optimizer's parameters
    first; none where no root holds any, or (``whole``) where the roots hold some of an optimizer's parameters but
    not all: what a frame reached may be a block of the model whose forward the thread is in, not the model."""
    if not optimizers or not modules:
        return []
    held = {id(sub) for m in modules for sub in m.modules() if sub is not m}
    per_optimizer = [{id(p) for group in opt.param_groups for p in group.get("params", ())} for opt in optimizers]
    trained = set().union(*per_optimizer)
    owned: set[int] = set()
    owners: list[Any] = []
    others: list[Any] = []
    for m in modules:
        if id(m) in held:
            continue
        params = {id(p) for p in m.parameters()}
        if params:
            (owners if trained.intersection(params) else others).append(m)
            owned |= params
    if whole and any(ids & owned and ids - owned for ids in per_optimizer):
        return []
    return (owners + others)[:MAX_ROOTS] if owners else []


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


class OutsideProbe:
    """Decides from the sender thread (``observe``) when to time the model, and patches and unpatches it: on for
    bursts, off between them (see the module's docstring)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.lock = threading.Lock()
        self.on = False  # the model's time is being measured (in bursts)
        self.measuring = False  # ... and the wrappers are in place now (a burst)
        self.free_steps = 0  # optimizer steps with no loader batch since the last loader-driven batch
        self.fed_steps = 0  # optimizer steps each after a loader batch, since the last step with none
        self.fed = False  # the latest steps were fed by a loader on the training thread
        self.handover = Handover(emit)
        self.steps_on = 0  # optimizer steps since switched on
        self.tries = 0
        self.retry_at = 0.0
        self.scan_s = 0.0  # the last scan's wall time
        self.price_ns: tuple[float, float] | None = None  # a measured step's wrappers: (step and zero_grad, a forward
        # and its backward), calibrated by _cost.calibrate
        self.duty = 1.0  # the share of time the latest bursts were given
        self.step_price_ns = 0.0  # what a measured step costs the training thread, as priced at the latest burst
        self.burst_end = 0.0  # when the latest burst ended (monotonic)
        self._scheduled = True  # the pause after it has its end
        self._burst_costs: list[float] = []  # the latest bursts' CPU ns per step of the training thread
        self._baseline = [0.0, 0.0]  # its CPU ns and steps over the ticks with no burst (decayed sums)
        self._tick = (0, 0, False)  # the last tick's: the thread's CPU ns, _wrapped[0], a burst under way
        self.bursts = 0
        self.pause_until = 0.0
        self.sampler: FrameSampler | None = None
        self._targets: list[weakref.ref[Any]] = []  # roots, then optimizers: the objects a burst patches
        self._n_roots = 0
        self._burst: tuple[float, int, int, int] = (0.0, 0, 0, 0)  # its start: monotonic, _measured, _span, forwards
        self._undo: list[Callable[[], None]] = []

    def observe(self, counts: Any) -> None:
        """One collected batch's counts (``_sender.Counts``): switch on after ENABLE_AFTER optimizer steps, fed by a
        loader or not (several optimizers per batch count as one); while on, end a burst or a pause when its time
        has come, and keep the hand-over wrappers (``_handover.py``) in place while no loader feeds the training
        thread itself."""
        if not counts.opt:
            return
        waits = sum(counts.wait.values())
        free = counts.opt if not waits else max(0, counts.opt - counts.groups)
        fed = bool(waits) and counts.groups >= free
        if fed:
            self.free_steps = 0
            self.fed_steps += counts.opt
        else:
            self.free_steps += free
            self.fed_steps = 0
        if self.on:
            self.fed = fed
            self._handover(not fed)
            if not fed:
                self.handover.adopt()
            self.steps_on += counts.opt
            if self.steps_on >= CHECK_AFTER and not _measured[0]:
                self.disable()  # the forwards timed are not the loop's model: look again later
                self.retry_at = time.monotonic() + RETRY_S
                return
            if _tid[0] and _tid[0] != _hot._train[0]:
                _hot._train[0] = _tid[0]  # the optimizer steps in another thread than the main one
            self._account(counts.opt)
            self._pace()
            return
        ready = self.free_steps >= ENABLE_AFTER or self.fed_steps >= ENABLE_AFTER
        if ready and self.tries < MAX_TRIES and time.monotonic() >= self.retry_at:
            self.fed = fed
            if self.enable():
                self._handover(not fed)

    def _handover(self, wanted: bool) -> None:
        if wanted and not self.handover.installed:
            try:
                self.handover.install()
            except Exception:
                self.handover.uninstall()
        elif not wanted and self.handover.installed:
            self.handover.uninstall()

    def _account(self, steps: int) -> None:
        """The baseline: the training thread's CPU time per optimizer step over the ticks with no burst in them."""
        cpu, wrapped = _thread_cpu_ns(_native[0]), _wrapped[0]
        cpu0, wrapped0, burst0 = self._tick
        self._tick = (cpu or 0, wrapped, self.measuring)
        if cpu is None or not cpu0 or wrapped != wrapped0 or burst0 or self.measuring or steps <= 0:
            return
        base = self._baseline
        base[0] = base[0] * BASELINE_DECAY + (cpu - cpu0)
        base[1] = base[1] * BASELINE_DECAY + steps

    def _price_per_step(self, forwards: float) -> float:
        assert self.price_ns is not None
        calibrated = self.price_ns[0] + forwards * self.price_ns[1]
        base_cpu, base_steps = self._baseline
        if len(self._burst_costs) < PRICE_MIN or base_steps <= 0:
            return calibrated * PRIOR_FACTOR
        costs = sorted(self._burst_costs)
        return max(calibrated, costs[len(costs) // 2] - base_cpu / base_steps)

    def end_burst(self) -> None:
        """Called by the training thread as the burst's last measured step ends: the wrappers out, the burst's CPU
        time per step kept. Never waits: were the sender thread holding the lock, the next step tries again."""
        cpu = time.thread_time_ns()
        if not self.lock.acquire(blocking=False):
            _burst_left[0] = 1
            return
        try:
            _burst_left[0] = -1
            if not self.measuring:
                return
            steps = _wrapped[0] - _burst_cpu[1]
            if steps > 0 and _burst_cpu[0]:
                self._burst_costs = [*self._burst_costs[-(PRICE_BURSTS - 1) :], (cpu - _burst_cpu[0]) / steps]
            self._unpatch()
            self.measuring = _patched[0] = False
            self.burst_end = time.monotonic()
            self._scheduled = False
        finally:
            self.lock.release()

    def _duty(self) -> float | None:
        """The share of time bursts may take, from the steps measured since ``self._burst`` began (None: too few)."""
        _, m0, span0, fwd0 = self._burst
        measured = _measured[0] - m0
        if measured < BURST_STEPS or self.price_ns is None:
            return None
        step_ns = (_span[0] - span0) / measured
        forwards = max(1.0, (_wrapped[1] - fwd0) / measured)
        price = self.step_price_ns = _price_per_step_ns[0] = self._price_per_step(forwards)
        budget = max(FED_BUDGET_NS if self.fed else BUDGET_NS, BUDGET_SHARE * step_ns)
        self.duty = 1.0 if price <= budget else max(MIN_DUTY, budget / price)
        return self.duty

    def _pace(self) -> None:
        """After a burst the training thread ended: the pause that keeps bursts within their budget; a pause whose time
        is up: the next burst. Where every step may be measured, one long burst, its budget looked at again."""
        now = time.monotonic()
        with self.lock:
            if not self.on:
                return
            if self.measuring:
                if _burst_left[0] < 0:  # every step measured so far
                    duty = self._duty()
                    if duty is not None:
                        if duty < 1.0:
                            _burst_left[0] = BURST_STEPS  # the training thread ends it after these
                        self._burst = (now, _measured[0], _span[0], _wrapped[1])
                return
            if not self._scheduled:
                self._scheduled = True
                duty = self._duty()
                if duty is None or duty >= 1.0:
                    self._start_burst(now, BURST_STEPS if duty is None else -1)
                    return
                wall = max(0.0, self.burst_end - self._burst[0])
                self.pause_until = self.burst_end + min(MAX_PAUSE_S, wall * (1.0 / duty - 1.0))
            if now >= self.pause_until:
                self._start_burst(now, BURST_STEPS)

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
            roots, optimizers = find_targets(torch, everywhere=self.tries == 1)  # the collector's objects once
            self.scan_s = time.monotonic() - t0
            if not roots:
                self.retry_at = time.monotonic() + RETRY_S
                return False
            global _is_compiling
            _is_compiling = _compiling_check(torch)
            _st[:] = [0, 0, 0, 0]
            _last_end[0] = _measured[0] = _tid[0] = _native[0] = 0
            self._burst_costs, self._baseline, self._tick = [], [0.0, 0.0], (0, 0, False)
            self._targets = [weakref.ref(obj) for obj in (*roots, *optimizers)]
            self._n_roots = len(roots)
            codes = model_codes(torch, roots, optimizers)
            del roots, optimizers
            if self.price_ns is None:
                self.price_ns = _price()
            _end_burst[0] = self.end_burst
            self._start_burst(time.monotonic(), -1)  # until the sender has priced it against the budget
            _live[0] = True
            self.on = True
            self.steps_on = 0
            from trainmon.agent._frames import FrameSampler  # only now: attach() imports nothing it does not use

            self.sampler = FrameSampler(
                self.emit, _tid, inside_model, own_codes() | codes, native=_native, model=codes, data=wait_codes()
            )
            self.sampler.start()
            return True

    def _start_burst(self, now: float, steps: int) -> None:
        """The wrappers in place (under ``self.lock``) for ``steps`` measured steps (< 0: until told); the burst's first
        step is not measured (no end before it)."""
        _last_end[0] = 0
        _burst_left[0] = steps
        try:
            self._patch()
        except Exception:
            self._unpatch()
            raise
        self.measuring = _patched[0] = True
        self.bursts += 1
        self._burst = (now, _measured[0], _span[0], _wrapped[1])

    def _patch(self) -> None:
        import sys

        torch = sys.modules["torch"]
        for k, ref in enumerate(self._targets):
            obj = ref()
            if obj is None:
                continue  # collected since the scan
            if k < self._n_roots:
                self._undo.append(_bind(obj, "forward", PREV_FORWARD, forward))
            else:
                self._undo.append(_bind(obj, "step", PREV_STEP, step))
                self._undo.append(_bind(obj, "zero_grad", PREV_ZERO, zero_grad))
        self._time(torch.autograd, "backward")
        self._time(torch.nn.utils, "clip_grad_norm_")
        for name in LOSSES:  # a loss computed in the loop (``F.cross_entropy(model(x), y)``) is the model's work too
            self._time(torch.nn.functional, name)

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
        self.handover.uninstall()
        with self.lock:
            _live[0] = False
            _burst_left[0] = -1
            _end_burst[0] = _no_end
            self.on = self.measuring = _patched[0] = False
            self._unpatch()
            self._targets = []
            sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.stop()

    def uninstall(self) -> None:
        """``detach()``, or a forked child (its patches are its own copies): everything undone."""
        self.disable()
        self.free_steps = self.fed_steps = 0
        _hot._train[0] = threading.main_thread().ident or 0


def _thread_cpu_ns(native_id: int) -> int | None:
    """A thread's CPU time so far (Linux's schedstat, in ns), or None where it cannot be read."""
    if not native_id:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


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
