"""trainmon's in-process agent. Standard library only; torch is patched, never imported here.

    import trainmon.agent
    trainmon.agent.attach()          # or: trainmon run -- python train.py
    for batch in trainmon.agent.loader(pipeline):   # a batch source that is not a DataLoader
        ...

Fail-open: nothing here raises into training code, and with no monitor listening ``attach()``
returns at once while a background thread retries with backoff.
"""

from __future__ import annotations

import atexit
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from trainmon import __version__, protocol
from trainmon.agent import _gc, _hot
from trainmon.agent._frameworks import Frameworks
from trainmon.agent._redact import redact_argv
from trainmon.agent._sender import Sender, debug
from trainmon.agent._torch_hooks import WORKER_ENV, Registry, TorchHooks
from trainmon.protocol import job_identity

if TYPE_CHECKING:
    from trainmon.agent._compile import CompileWatch
    from trainmon.agent._cost import CostMeter
    from trainmon.agent._dist import DistHooks
    from trainmon.agent._iterable import Loader
    from trainmon.agent._memory import MemoryProbe
    from trainmon.agent._outside import OutsideProbe

__all__ = ["attach", "attached", "detach", "loader", "mark", "phase", "stats", "step"]

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_RANK_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "TRAINMON_JOB",
)
_lock = threading.Lock()
_agent: _Agent | None = None
_names: dict[str, int] = {}
# Set by `trainmon attach` (trainmon.attach) before it calls attach() in a process that was already running: the
# hello then says so (``attached_live``) and when (``attach_wall``), so the monitor knows the run began before it.
_LIVE_ATTACH = False


class _Agent:
    def __init__(self, address: str, name: str | None, token: str | None = None) -> None:
        self.session = secrets.token_hex(8)
        self.sender = Sender(
            address, _hello(name, self.session), token or os.environ.get("TRAINMON_TOKEN"), hello_extra=_hello_extra
        )
        self.registry = Registry(self.sender.add_control)
        self.hooks = TorchHooks(self.registry)
        self.dist: DistHooks | None = None  # made once the job imports torch.distributed
        self.frameworks = Frameworks(self.sender.add_control)  # which trainer drives the loop
        self._outside: OutsideProbe | None = None  # times the model in loops no loader drives (``outside``)
        # Made by the sender thread's first tick (``_watch``), not here: attach() returns without importing them.
        self.compile: CompileWatch | None = None  # torch.compile's compilations, once the job imports torch._dynamo
        self.memory: MemoryProbe | None = None  # the CUDA allocator's peaks, once the job has initialised CUDA
        self.cost: CostMeter | None = None  # the agent's own cost per step
        self.sender.on_batch = self._on_batch
        self.sender.on_stop = self._last_watch
        self.identity_sent = False  # the rank and job, told again once a process group exists
        self.stopped = False
        self.sender.on_tick = self._tick

    def _tick(self) -> None:
        """Each sender tick: has the job initialised CUDA, or a torch.distributed process group, yet?"""
        try:
            self.hooks.poll_import()
            self.hooks.poll_cuda()
            self.hooks.batches.tick()
        finally:
            if self.dist is None and "torch.distributed" in sys.modules:
                from trainmon.agent._dist import DistHooks  # only then: `import trainmon.agent` stays as small

                self.dist = DistHooks()
            if self.dist is not None:
                self.dist.poll()
                if self.dist.installed and not self.identity_sent:
                    self.identity_sent = True
                    self._send_identity()
            self._watch()

    def _watch(self) -> None:
        """Each sender tick: torch.compile's new compilations, the CUDA allocator's figures, the agent's own cost."""
        if self.compile is None or self.memory is None or self.cost is None:
            from trainmon.agent._compile import CompileWatch
            from trainmon.agent._cost import CostMeter
            from trainmon.agent._memory import MemoryProbe

            self.memory = MemoryProbe(self.sender.add_control)
            self.cost = CostMeter()
            self.compile = CompileWatch(self.sender.add_control)
            with self.hooks.lock:  # stop() may be running: it uninstalls under the same lock
                if not self.stopped:
                    self.compile.install()
        device = self.sender.latest("cuda_device")  # the training thread's device, once it told it
        if isinstance(device, dict) and isinstance(device.get("index"), int):
            self.memory.preferred = device["index"]
        for poll in (self.compile.poll, self.memory.poll, self.cost.tick):
            try:
                poll()
            except Exception as exc:
                debug(f"{poll.__qualname__} failed: {exc!r}")

    def _last_watch(self) -> None:
        """Before the final flush: the compilations torch recorded since the last tick (a storm at the very end), and
        the allocator's figures at the end."""
        if self.compile is not None:
            self.compile.poll()
        if self.memory is not None:
            self.memory.poll()

    def _on_batch(self, counts: Any) -> None:
        if self.cost is not None:
            self.cost.observe(counts)
        self.outside.observe(counts)

    def _send_identity(self) -> None:
        """Launchers that start ranks themselves (Lightning's ``strategy="ddp"``) set the rank's environment after
        ``attach()`` ran, or only in the ranks they spawn: once the process group exists, its rank, world size and
        job are told again, so every rank of the job is grouped as one."""
        ident = _identity()
        if ident is not None:
            self.sender.hello.update(ident, global_rank=ident["rank"])
            self.sender.add_control({"dist": ident})

    def start(self) -> None:
        try:
            self.hooks.install()
            self.frameworks.install()
            _gc.install()
            self.sender.start()
            iterable = sys.modules.get("trainmon.agent._iterable")  # imported by a first loader() call
            if iterable is not None:
                iterable.current[0] = self.registry
        except BaseException:
            _gc.uninstall()
            self.frameworks.uninstall()
            self.hooks.uninstall()
            _hot.reset_buffer()
            raise

    @property
    def outside(self) -> OutsideProbe:
        """Made on first use (the sender thread's first batch), not by attach(): attach() imports nothing more."""
        if self._outside is None:
            from trainmon.agent._outside import OutsideProbe

            self._outside = OutsideProbe(self.sender.add_control)
        return self._outside

    def stop(self, reason: str) -> None:
        _forget_registry(self.registry)
        if self._outside is not None:
            self._outside.uninstall()
        with self.hooks.lock:
            self.stopped = True
            if self.compile is not None:
                self.compile.uninstall()
        _gc.uninstall()
        self.frameworks.uninstall()
        self.hooks.uninstall()
        if self.dist is not None:
            self.dist.uninstall()
        self.sender.stop(reason=reason)
        if self.dist is not None:
            self.dist.uninstall()  # made by a tick that ran while stopping


def _forget_registry(registry: Registry | None) -> None:
    """``trainmon.agent.loader`` wrappers stop reporting to ``registry`` (None: to whichever they report to)."""
    iterable = sys.modules.get("trainmon.agent._iterable")
    if iterable is not None and (registry is None or iterable.current[0] is registry):
        iterable.current[0] = None


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _hello(name: str | None, session: str) -> dict[str, Any]:
    torch = sys.modules.get("torch")
    # orig_argv keeps "-m module" (sys.argv[0] is still "-m" while sitecustomize runs under trainmon run).
    orig = [sys.executable, *sys.argv]
    if sys.argv[:1] in (["-m"], ["-c"]) and getattr(sys, "orig_argv", None):
        orig = list(sys.orig_argv)
    argv = protocol.bounded_argv(redact_argv([sys.executable, *orig[1:]]))
    rank = _env_int("RANK")
    if rank is None:
        rank = _env_int("SLURM_PROCID")
    live: dict[str, Any] = {"attached_live": True, "attach_wall": time.time()} if _LIVE_ATTACH else {}
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "host": socket.gethostname(),
        "session": session,
        "name": str(name or protocol.script_name(orig, os.path.basename(sys.argv[0] or "") or "python"))[:200],
        "argv": argv,
        "rank": rank,
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "job": {k: os.environ[k] for k in _RANK_ENV if k in os.environ and not k.endswith("RANK")},
        "job_id": _job_id(),
        "node": (os.environ.get("TRAINMON_NODE") or socket.gethostname())[:200],
        "global_rank": rank,
        "torch": getattr(torch, "__version__", None) if torch is not None else None,
        "python": sys.version.split()[0],
        "trainmon": __version__,
        "protocol": protocol.VERSION,
        "mono_ns": time.monotonic_ns(),
        "wall": time.time(),
        **live,
    }


def _job_id() -> str | None:
    """One id for every rank of a job, on every node (trainmon/protocol/job.py; None: a job of one process)."""
    return job_identity(os.environ)


def _identity() -> dict[str, Any] | None:
    """The rank, world size and job of a process whose torch.distributed process group is initialised."""
    dist = sys.modules.get("torch.distributed")
    try:
        rank, world = int(dist.get_rank()), int(dist.get_world_size())  # type: ignore[union-attr]
    except Exception:
        return None
    return {
        "rank": rank,
        "world_size": world,
        "local_rank": _env_int("LOCAL_RANK"),
        "job_id": _job_id(),
        "job": {k: os.environ[k] for k in _RANK_ENV if k in os.environ and not k.endswith("RANK")},
    }


def _hello_extra() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    return {"torch": getattr(torch, "__version__", None), "device": _device_kind()}


def _device_kind() -> str | None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is not None and cuda.is_initialized():
            return f"cuda:{cuda.current_device()}"
    except Exception:
        pass
    return None


def attach(address: str | None = None, *, name: str | None = None, token: str | None = None) -> bool:
    """Start reporting this process to a trainmon monitor. Returns True when the agent runs.

    ``address`` is a Unix socket path or ``HOST:PORT``; default ``$TRAINMON_ADDR`` or the
    per-user socket. ``token``: the monitor's shared token (default ``$TRAINMON_TOKEN``), needed on a
    non-loopback TCP address. ``TRAINMON_DISABLE=1`` makes this a no-op.
    """
    global _agent
    try:
        if os.environ.get("TRAINMON_DISABLE", "").lower() in _TRUE:
            return False
        if os.environ.get(WORKER_ENV) == "1" and os.environ.get("TRAINMON_AGENT_IN_WORKERS", "") not in _TRUE:
            return False  # a DataLoader worker that re-ran the training script's attach()
        with _lock:
            if _agent is not None:
                return True
            agent = _Agent(protocol.resolve_address(address), name, token)
            agent.start()
            _agent = agent
        return True
    except Exception as exc:
        debug(f"attach failed, training continues without trainmon: {exc!r}")
        return False


def detach() -> None:
    """Flush what is buffered (at most ~1 s), close the connection and remove the patches."""
    global _agent
    try:
        with _lock:
            agent, _agent = _agent, None
        if agent is not None:
            agent.stop("detach")
    except Exception as exc:
        debug(f"detach failed: {exc!r}")


def attached() -> bool:
    return _agent is not None


def step() -> None:
    """Mark the end of a training step (for loops without an optimizer or with several)."""
    if _agent is not None:
        _hot.step()


def loader(iterable: Iterable[T], name: str | None = None) -> Loader[T]:
    """Time a batch source that is not a ``torch.utils.data.DataLoader`` as one: each ``__next__`` of the returned
    wrapper is a data wait of a loader named ``name`` (default: the source's type). For DALI, FFCV and Ray Data
    iterators, generators over a streaming dataset, any iterable of batches::

        for batch in trainmon.agent.loader(dali_iterator):
            ...

    The wrapper iterates like the source (and is an iterator too when the source is one); without an agent attached
    it only calls through. ``torchdata.nodes.Loader`` needs no wrapper: it is timed on its own."""
    from trainmon.agent import _iterable

    agent = _agent
    if agent is not None and _iterable.current[0] is None:
        _iterable.current[0] = agent.registry  # the first loader() of an agent attached before it
    return _iterable.Loader(iterable, name)


def _framework_seen(name: str, package: str) -> None:
    """trainmon's framework callbacks say which trainer drives the loop (one made before ``attach()`` ran)."""
    agent = _agent
    if agent is not None:
        try:
            agent.frameworks.seen(name, package)
        except Exception:
            pass


def _name_id(name: str) -> int:
    ident = _names.get(name)
    if ident is None:
        ident = _names[name] = len(_names) + 1
        if _agent is not None:
            _agent.sender.add_control({"name": {"id": ident, "name": str(name)[:200]}})
    return ident


def mark(name: str) -> None:
    """Put a named instant on the timeline (e.g. ``"eval"``, ``"lr-drop"``)."""
    try:
        if _agent is not None:
            _hot.mark(_name_id(name))
    except Exception:
        pass


def phase(name: str) -> _hot.Phase:
    """``with trainmon.agent.phase("eval"): ...`` — a named span on the timeline."""
    try:
        return _hot.Phase(_name_id(name) if _agent is not None else -1)
    except Exception:
        return _hot.Phase(-1)


def stats() -> dict[str, int]:
    """Agent counters: records sent and dropped, connections made."""
    agent = _agent
    if agent is None:
        return {"sent_records": 0, "dropped_records": 0, "connections": 0}
    s = agent.sender
    out = {"sent_records": s.sent_records, "dropped_records": s.dropped_records, "connections": s.connections}
    if agent._outside is not None and agent._outside.on:  # a loop no loader drives: the model timed
        from trainmon.agent import _model_wrappers

        out.update(outside_model=1, outside_steps=_model_wrappers.measured())
    probe = agent.hooks.probe
    if probe is not None:  # CUDA: exposed GPU idle pairs measured, skipped (pool exhausted, graph capture)
        out.update(probe.stats())
    if agent.compile is not None and agent.compile.compilations:  # torch.compile's compilations read
        out["compilations"] = agent.compile.compilations
    if agent.memory is not None and agent.memory.reads:  # CUDA allocator reads sent
        out["cuda_memory_reads"] = agent.memory.reads
    if agent.cost is not None and agent.cost.last_ns_per_step is not None:  # its own cost per step, latest second
        out["step_overhead_ns"] = round(agent.cost.last_ns_per_step)
    return out


def _after_fork_in_child() -> None:
    """A forked child (e.g. a DataLoader worker) starts inert: no sender, no patches, no buffer."""
    global _agent, _lock
    agent, _agent = _agent, None
    _lock = threading.Lock()  # another thread may have held it at the fork
    _forget_registry(None)
    _gc.uninstall()  # a worker's collections would fill a buffer nobody sends
    _hot.reset_lock()
    _hot.reset_buffer()
    if agent is not None:
        try:
            agent.frameworks.lock = threading.Lock()
            agent.frameworks.uninstall()
            agent.hooks.lock = threading.Lock()  # the sender thread may have held it at the fork
            agent.hooks.uninstall()
            if agent._outside is not None:
                agent._outside.lock = threading.Lock()
                agent._outside.uninstall()
            if agent.compile is not None:
                agent.compile.uninstall()  # a child's compilations would fill a buffer nobody sends
            if agent.dist is not None:
                agent.dist.lock = threading.Lock()
                agent.dist.uninstall()
        except Exception:
            pass


def _at_exit() -> None:
    agent = _agent
    if agent is not None:
        try:
            agent.sender.stop(reason="exit")
        except BaseException:  # a second Ctrl-C during the final flush: exit quietly all the same
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)
