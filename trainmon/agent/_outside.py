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

import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainmon.agent import _hot, _model_wrappers
from trainmon.agent._handover import Handover
from trainmon.agent._model_search import find_targets
from trainmon.agent._model_wrappers import (
    LOSSES,
    PREV_FORWARD,
    PREV_STEP,
    PREV_ZERO,
    _bind,
    _burst_cpu,
    _burst_left,
    _compiling_check,
    _end_burst,
    _last_end,
    _live,
    _measured,
    _native,
    _no_end,
    _patched,
    _price,
    _price_per_step_ns,
    _span,
    _st,
    _tid,
    _wrapped,
    forward,
    inside_model,
    model_codes,
    own_codes,
    step,
    timed,
    wait_codes,
    zero_grad,
)

if TYPE_CHECKING:
    from trainmon.agent._frames import FrameSampler

ENABLE_AFTER = 5  # optimizer steps without a loader batch before the model is timed
CHECK_AFTER = 20  # optimizer steps after switching on with no step measured: the modules timed are not the model
RETRY_S = 30.0
RETRY_FIRST_S = 1.0
MAX_TRIES = 3
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
# A difference beyond MAX_COLD times the calibration is the loop's own variation, not the wrappers: with steps of tens
# of milliseconds of CPU whose cost drifts (metrics over a window that fills), bursts and baseline differ by
# milliseconds, and pricing the wrappers at that cuts the bursts to MIN_DUTY with 10 s pauses: the steps between take a
# stale share of own code. Measured in place the wrappers cost about 3 times their
# calibration (benchmarks/agent_overhead.py: 11.6 against 4.1 µs).
PRICE_BURSTS = 16
PRICE_MIN = 3
PRIOR_FACTOR = 4.0
MAX_COLD = 25.0
BASELINE_DECAY = 0.9  # per tick with no burst


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
                # The forwards timed are not the loop's model: look again, soon after the first search (which took
                # the model it found among all objects: one built to time a step or size a batch and then dropped, as
                # the demo's --step-ms sizing does, is found there before the one that trains), later after that.
                self.disable()
                self.retry_at = self._retry_at()
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

    def _retry_at(self) -> float:
        """When to search for the model again: soon after the first search, later after the next ones."""
        return time.monotonic() + (RETRY_FIRST_S if self.tries == 1 else RETRY_S)

    def _price_per_step(self, forwards: float) -> float:
        assert self.price_ns is not None
        calibrated = self.price_ns[0] + forwards * self.price_ns[1]
        base_cpu, base_steps = self._baseline
        if len(self._burst_costs) < PRICE_MIN or base_steps <= 0:
            return calibrated * PRIOR_FACTOR
        costs = sorted(self._burst_costs)
        return max(calibrated, min(MAX_COLD * calibrated, costs[len(costs) // 2] - base_cpu / base_steps))

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
            if not roots:  # none yet (between a model that timed a step and the one that trains): soon, the first time
                self.retry_at = self._retry_at()
                return False
            _model_wrappers._is_compiling = _compiling_check(torch)
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
