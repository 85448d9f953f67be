"""The agent's own cost per step, measured live in the training process, from the sender thread only.

Two parts, each sent about once a second as a ``K_COST`` record over the interval it covers:

- ``hooks``: what the hot path adds to the training thread. The hooks' calls are counted in the records the sender
  collects anyway (each DataLoader wait, optimizer step and ``trainmon.agent.step()`` is one record; collections are
  read from ``gc.get_stats()``), and each kind of call is priced by a calibration: every ``CALIBRATE_S`` seconds the
  sender thread times the agent's own hook functions, copies with the same code writing to a private buffer, called
  the way torch calls them (a DataLoader iterator's ``__next__`` through ``next()``, the optimizer's post-hooks
  through the loop ``Optimizer.step`` runs them in) after other work, against the same calls without the agent, in
  its own CPU time, as benchmarks/agent_overhead.py measures the training thread's. Nothing is added to the hot
  path: the training thread never reads a clock for this. A loop whose model the agent times in bursts
  (agent/_outside.py) has its wrappers' steps priced at the price that module measures on the training thread. Not
  priced: the exposed-idle probe's CUDA events on a CUDA job (TRAINMON_EXPOSED_EVERY; scripts/gpu_check.py measures
  them) and a DataLoader's first batches read by the batch probe.
- ``sender``: the sender thread's own CPU time (``time.thread_time_ns()``: encoding, writing, the CUDA memory read,
  torch.compile's records, this meter).

The monitor divides both by the steps that ended in the interval. Standard library only.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

from trainmon.agent import _gc, _hot
from trainmon.protocol import COST_PARTS, K_COST, K_WAIT

CALIBRATE_S = 60.0  # between calibrations (the first at the first report with calls): ~10 ms of the sender's CPU each
REPORT_S = 1.0
CALLS = 30  # per timed loop
REPEATS = 5  # pairs of timed loops (without, with the agent's code) per kind: the median difference counts
KEEP = 5  # calibrations whose median prices the calls (one alone is noisy on a busy host)
# Between two calls of a hook the training runs other code that takes the caches from it: each timed call follows
# about a DataLoader __next__'s worth of Python on a trivial dataset (~150 attribute reads), or a tight loop would
# price the hooks with warm caches, at about half what a training pays (against benchmarks/agent_overhead.py).
_FILLER = [types.SimpleNamespace(a=i) for i in range(1050)]
_pc = time.perf_counter_ns


def _work(self: Any = None) -> int:
    total = 0
    for item in _FILLER[::7]:
        total += item.a
    return total


PRICED = ("wait", "opt", "step", "gc")


def _noop(*args: Any) -> None:
    return None


class _Iter:
    """Stands for a DataLoader iterator: its class ``__next__`` is set to the variant timed."""

    def __init__(self) -> None:
        self._trainmon_tag = K_WAIT


def _clone(fn: Callable[..., Any], globs: dict[str, Any]) -> Any:
    """``fn``'s code with its globals replaced: the same work, writing where ``globs`` says."""
    return types.FunctionType(fn.__code__, globs, fn.__name__, fn.__defaults__, fn.__closure__)


def _paired(bare: Callable[[int], None], agent: Callable[[int], None]) -> float:
    """Nanoseconds per call the agent's variant adds: the median difference of ``REPEATS`` pairs of loops of ``CALLS``
    calls, in this thread's CPU time (immune to the other threads that run meanwhile), in ABBA order."""
    diffs = []
    clock = time.thread_time_ns
    for k in range(REPEATS):
        spent = {}
        for variant, loop in ((0, bare), (1, agent)) if k % 2 == 0 else ((1, agent), (0, bare)):
            t0 = clock()
            loop(CALLS)
            spent[variant] = clock() - t0
        diffs.append((spent[1] - spent[0]) / CALLS)
    diffs.sort()
    return diffs[len(diffs) // 2]


def calibrate(kinds: Iterable[str] = PRICED) -> dict[str, float]:
    """Nanoseconds each hook of ``kinds`` adds per call, on this machine now: the agent's code against the same calls
    without it."""
    hot_globals = dict(vars(_hot))
    hot_globals["_buf"] = []  # the copies write here: nothing reaches the monitor
    out = {}
    for kind in kinds:
        if kind == "wait":
            patched = type("_Patched", (_Iter,), {"__next__": _clone(_hot.wrap_next(_work), hot_globals)})()
            bare = type("_Bare", (_Iter,), {"__next__": _work})()
            out[kind] = _paired(_nexts(bare), _nexts(patched))
        elif kind == "opt" and _hot.opt_record_via[0] == "step_code":
            step_code = _clone(_hot.optimizer_step_code, hot_globals)
            patched = type("_PatchedOptimizer", (), {"_optimizer_step_code": step_code})()
            bare = type("_BareOptimizer", (), {"_optimizer_step_code": _noop})()
            out[kind] = _paired(_step_codes(bare), _step_codes(patched))
        elif kind == "opt":
            hook = _clone(_hot.optimizer_step_post_hook, hot_globals)
            out[kind] = _paired(_post_hooks({}), _post_hooks({0: hook}))
        elif kind == "step":
            out[kind] = _paired(_calls(_noop), _calls(_clone(_hot.step, hot_globals)))
        elif kind == "gc":
            gc_globals = dict(vars(_gc))
            gc_globals["_hot"] = types.SimpleNamespace(_buf=hot_globals["_buf"])
            info = {"generation": 0, "collected": 0, "uncollectable": 0}
            out[kind] = _paired(_calls(_noop, info), _calls(_clone(_gc._on_gc, gc_globals), info))
    return {k: max(0.0, v) for k, v in out.items()}


def _nexts(it: Any) -> Callable[[int], None]:
    def loop(n: int) -> None:  # as a DataLoader loop calls its iterator
        for _ in range(n):
            next(it)

    return loop


def _step_codes(optimizer: Any) -> Callable[[int], None]:
    def loop(n: int) -> None:  # as torch.optim.Optimizer.step calls it, after the step's own work
        for _ in range(n):
            _work()
            optimizer._optimizer_step_code()

    return loop


def _post_hooks(extra: dict[int, Any]) -> Callable[[int], None]:
    own: dict[int, Any] = {}

    def loop(n: int) -> None:  # as torch.optim.Optimizer.step runs its post-hooks, after the step's own work
        for _ in range(n):
            _work()
            for post_hook in chain(own.values(), extra.values()):
                post_hook(None, (), {})

    return loop


def _calls(fn: Callable[..., Any], info: dict[str, int] | None = None) -> Callable[[int], None]:
    """A loop of ``n`` calls of ``fn`` (with ``info``: a collection's two, start and stop), each after other work."""
    if info is None:

        def loop(n: int) -> None:
            for _ in range(n):
                _work()
                fn()

        return loop

    def pairs(n: int) -> None:
        for _ in range(n):
            _work()
            fn("start", info)
            fn("stop", info)

    return pairs


def _collections() -> int:
    try:
        return sum(g.get("collections", 0) for g in gc.get_stats())
    except Exception:
        return 0


class CostMeter:
    """Counts the hooks' calls in each collected batch (``observe``) and sends the cost records (``tick``): both
    from the sender thread."""

    def __init__(self) -> None:
        self.prices: dict[str, float] = {}  # ns per call of each kind: the median of its last KEEP calibrations
        self._calibrations: dict[str, list[float]] = {}
        self.last_ns_per_step: float | None = None  # the latest interval's figure, for trainmon.agent.stats()
        self.totals = {"hooks_ns": 0.0, "sender_ns": 0.0, "steps": 0}  # over every interval reported
        self._calls = {"wait": 0, "opt": 0, "step": 0}
        self._outside_ns = 0.0  # the wrappers of a model timed in bursts (agent/_model_wrappers.py), priced per step
        outside = sys.modules.get("trainmon.agent._model_wrappers")  # its count lives on across detach() and attach()
        self._wrapped0 = outside._wrapped[0] if outside is not None else 0  # the steps its wrappers saw so far
        self._steps = 0
        self._t0 = 0
        self._cpu0 = 0
        self._gc0 = 0
        self._next_calibration = 0.0

    def observe(self, counts: Any) -> None:
        calls = self._calls
        calls["wait"] += sum(counts.wait.values())
        calls["opt"] += counts.opt
        calls["step"] += counts.step
        outside = sys.modules.get("trainmon.agent._model_wrappers")  # imported once a loop with no loader was met
        if outside is not None:
            steps = outside._wrapped[0]
            self._outside_ns += max(0, steps - self._wrapped0) * outside._price_per_step_ns[0]
            self._wrapped0 = steps
        self._steps += counts.step or counts.groups or max(counts.wait.values(), default=0)

    def tick(self) -> None:
        now = _pc()
        if not self._t0:
            self._start(now)
            return
        if now - self._t0 < REPORT_S * 1e9:
            return
        if time.monotonic() >= self._next_calibration:
            self._calibrate()
        cpu, collections = time.thread_time_ns(), _collections()
        sender = cpu - self._cpu0
        t0, t1 = self._t0, _pc()
        hooks = sum(n * self.prices.get(kind, 0.0) for kind, n in self._calls.items())
        hooks += (collections - self._gc0) * self.prices.get("gc", 0.0) + self._outside_ns
        _hot.span(K_COST, COST_PARTS.index("hooks"), t0, t1, int(hooks))
        if self._steps:
            self.last_ns_per_step = (hooks + sender) / self._steps
        totals = self.totals
        totals["hooks_ns"] += hooks
        totals["sender_ns"] += max(0, sender)
        totals["steps"] += self._steps
        _hot.span(K_COST, COST_PARTS.index("sender"), t0, t1, max(0, sender))
        self._start(t1, cpu, collections)

    def _calibrate(self) -> None:
        """The kinds of hooks called since the last report (and the collector's once), each priced at the median of
        its last KEEP calibrations. Nothing called yet: tried again at the next report."""
        kinds = [k for k, n in self._calls.items() if n]
        if not kinds:
            return
        if "gc" not in self.prices:
            kinds.append("gc")
        for kind, ns in calibrate(kinds).items():
            history = self._calibrations[kind] = [*self._calibrations.get(kind, [])[-(KEEP - 1) :], ns]
            self.prices[kind] = sorted(history)[len(history) // 2]
        self._next_calibration = time.monotonic() + CALIBRATE_S

    def _start(self, t: int, cpu: int | None = None, collections: int | None = None) -> None:
        self._t0 = t
        self._cpu0 = time.thread_time_ns() if cpu is None else cpu
        self._gc0 = _collections() if collections is None else collections
        self._calls = dict.fromkeys(self._calls, 0)
        self._outside_ns = 0.0
        self._steps = 0


__all__ = ["CALIBRATE_S", "REPORT_S", "CostMeter", "calibrate"]
