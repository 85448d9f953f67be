"""Time the training thread spends blocked in torch.distributed communication: ``comm`` records (K_COMM).

Standard library only. Nothing is patched, and torch is not touched, until the job itself has initialised a
process group (``torch.distributed.is_initialized()``, a flag read from the sender thread each tick); the
modules are then taken from ``sys.modules``, never imported here.

What a record spans (its id names the operation, ``protocol.COMM_OPS``):

- **torch.distributed's collectives** (``all_reduce``, ``all_gather*``, ``reduce_scatter*``, ``broadcast``,
  ``barrier``, ``send``/``recv``, the ``*_object`` helpers, ...): the call's wall time. On gloo a
  synchronous call returns once the data has been exchanged, so that is the time the thread waited for its
  peers and the network; an asynchronous call (``async_op=True``) returns once enqueued, and its wait is
  timed at ``Work.wait()``. Calls nested in a timed call (a synchronous collective waits on its own
  ``Work``; the object helpers call other collectives) are inside its span and not recorded again.
- **DistributedDataParallel's gradient synchronisation**. Its reducer launches a bucket's all-reduce as
  soon as the bucket's gradients are ready, overlapped with the rest of backward, and waits for all of them
  in C++ at backward's end, where no Python wrapper can see it. When a DDP forward will synchronise
  (grad enabled, not under ``no_sync()``), a pre-hook on its output's autograd node queues a callback as
  backward reaches it; the engine runs that callback once every gradient is computed, just before DDP's
  own finishing callback, and the callback queues another that runs just after it. The span between
  them is the all-reduce time backward did not hide, plus DDP's copy of the averaged gradients. No
  communication hook is registered, so ``register_comm_hook`` stays the job's own.
- **FSDP**: FSDP (and fully_shard) issue their all-gathers and reduce-scatters through the functions above,
  so they are timed the same way. Collectives traced into a compiled graph (``torch.ops._c10d_functional``,
  used under ``torch.compile``) are not seen.

On NCCL (GPU) a collective is enqueued on a CUDA stream and ``wait()`` only makes the current stream wait:
the host returns almost at once. There the records hold the host-side cost (the launch, and any blocking
the job itself does, e.g. ``TORCH_NCCL_BLOCKING_WAIT``), not the GPU's time in communication, which the
agent cannot read without synchronising; a rank held up by a slower peer then shows up at its next
synchronising call (``.item()``, ``.cpu()``), not here.

Cost: a collective call pays two clock reads, a thread-local counter and one append (about 1 µs); a DDP
step pays a pre-hook and two autograd callbacks (about 20 µs, benchmarks/dist_comm_cost.py). A function the job
bound by name before the patch (``from torch.distributed import all_reduce`` run before ``init_process_group``)
keeps the original.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from trainmon.agent import _hot
from trainmon.protocol import COMM_OPS, K_COMM

_OP = {name: i for i, name in enumerate(COMM_OPS)}
# torch.distributed function → operation; functions this torch lacks are skipped.
COLLECTIVES: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_single": "all_gather",
    "all_gather_coalesced": "all_gather",
    "all_gather_object": "all_gather",
    "_all_gather_base": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_single": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "broadcast": "broadcast",
    "broadcast_object_list": "broadcast",
    "_broadcast_coalesced": "broadcast",
    "reduce": "reduce",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "gather": "gather",
    "gather_object": "gather",
    "scatter": "scatter",
    "scatter_object_list": "scatter",
    "barrier": "barrier",
    "monitored_barrier": "barrier",
    "send": "send",
    "send_object_list": "send",
    "recv": "recv",
    "recv_object_list": "recv",
}
DDP_TAG = K_COMM | _OP["ddp_grad_sync"] << 8
WAIT_TAG = K_COMM | _OP["wait"] << 8


class _Depth(threading.local):
    depth = 0  # > 0 while this thread is inside a timed call


_local = _Depth()


def wrap_call(orig: Callable[..., Any], tag: int) -> Callable[..., Any]:
    """A collective (or ``Work.wait``): its wall time is one ``comm`` record, unless a timed call encloses it."""
    pc = _hot._pc
    local = _local

    def timed(*args: Any, **kwargs: Any) -> Any:
        if local.depth:
            return orig(*args, **kwargs)
        local.depth = 1
        t0 = pc()
        try:
            return orig(*args, **kwargs)
        finally:
            local.depth = 0
            _hot._buf.extend((tag, t0, pc(), 0))

    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(timed, attr, getattr(orig, attr))
        except (AttributeError, TypeError):
            pass
    # Attributes on a function object: mypy does not model them, hence attr-defined.
    timed.__wrapped__ = orig  # type: ignore[attr-defined]
    timed.__trainmon_original__ = orig  # type: ignore[attr-defined]
    return timed


class _GradSync:
    """One DDP backward's synchronisation: pre-hook → callback before DDP's finaliser → callback after it.

    Every callback swallows its own errors: an exception in an autograd callback would fail backward."""

    __slots__ = ("fired", "queue", "t0")
    open_since = 0  # the start of a span whose closing callback has not run yet (class-wide, one per backward)

    def __init__(self, queue: Callable[[Callable[[], None]], None]) -> None:
        self.queue = queue
        self.fired = False
        self.t0 = 0

    def pre(self, grad_outputs: Any) -> None:
        if self.fired:
            return
        self.fired = True
        try:
            # Backward is still computing, so no span of this backward is open: one left open is from a
            # backward that failed before its last callback.
            _GradSync.open_since = 0
            self.queue(self.ready)
        except Exception:
            pass

    def ready(self) -> None:
        try:
            if _GradSync.open_since:
                return  # another DDP model in the same backward: its span covers this one's
            self.t0 = _GradSync.open_since = _hot._pc()
            self.queue(self.done)
        except Exception:
            _GradSync.open_since = 0

    def done(self) -> None:
        try:
            _GradSync.open_since = 0
            _hot._buf.extend((DDP_TAG, self.t0, _hot._pc(), 0))
        except Exception:
            pass


def _grad_nodes(output: Any, tensor_type: type) -> list[Any]:
    """The autograd nodes of the tensors a DDP forward returned (a tensor, a sequence or a mapping of them)."""
    if isinstance(output, tensor_type):
        items: Any = (output,)
    elif isinstance(output, dict):
        items = output.values()
    elif isinstance(output, (list, tuple)):
        items = output
    else:
        return []
    nodes = []
    for item in items:
        fn = getattr(item, "grad_fn", None) if isinstance(item, tensor_type) else None
        if fn is not None and fn not in nodes:
            nodes.append(fn)
            if len(nodes) == 4:
                break
    return nodes


def wrap_ddp_forward(orig: Callable[..., Any], torch: Any) -> Callable[..., Any]:
    """``DistributedDataParallel.forward``: arm the gradient-synchronisation span of the coming backward."""
    grad_enabled = torch.is_grad_enabled
    tensor_type = torch.Tensor
    queue = torch.autograd.Variable._execution_engine.queue_callback

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = orig(self, *args, **kwargs)
        try:
            if (
                grad_enabled()
                and self.require_backward_grad_sync
                and not getattr(self, "_use_python_reducer", False)
                and not getattr(self, "_delay_all_reduce_all_params", False)
            ):
                nodes = _grad_nodes(output, tensor_type)
                if nodes:
                    sync = _GradSync(queue)
                    for node in nodes:  # whichever backward reaches first arms it (the loss may use only one)
                        node.register_prehook(sync.pre)
        except Exception:
            pass
        return output

    forward.__wrapped__ = orig  # type: ignore[attr-defined]
    forward.__trainmon_original__ = orig  # type: ignore[attr-defined]
    forward.__doc__ = orig.__doc__
    return forward


class DistHooks:
    """Patches torch.distributed once the job has a process group; ``poll`` runs in the sender thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.installed = False
        self.ddp_patched = False
        self.closed = False  # uninstalled for good: a tick still running must not patch again
        self._undo: list[Callable[[], None]] = []

    def poll(self) -> None:
        """Each sender tick, until done: patch the collectives once a process group exists, and DDP once its
        module is imported. A few dict lookups and a flag read per tick."""
        if self.ddp_patched or self.closed:
            return
        dist = sys.modules.get("torch.distributed")
        if dist is None:
            return
        try:
            if not self.installed and not (dist.is_available() and dist.is_initialized()):
                return
        except Exception:
            return
        with self.lock:
            if self.closed:
                return
            if not self.installed:
                self.installed = True
                self._patch_collectives(dist)
            if not self.ddp_patched:
                self._patch_ddp()

    def _set(self, owner: Any, name: str, value: Any) -> None:
        old = getattr(owner, name)

        def undo() -> None:
            setattr(owner, name, old)

        setattr(owner, name, value)
        self._undo.append(undo)

    def _patch_collectives(self, dist: Any) -> None:
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        for name, op in COLLECTIVES.items():
            orig = getattr(dist, name, None)
            if orig is None or hasattr(orig, "__trainmon_original__"):
                continue
            timed = wrap_call(orig, K_COMM | _OP[op] << 8)
            self._set(dist, name, timed)
            if c10d is not None and getattr(c10d, name, None) is orig:
                self._set(c10d, name, timed)  # calls between torch's own collectives: nested, not re-counted
        work = getattr(c10d, "Work", None) if c10d is not None else None
        if work is not None and callable(getattr(work, "wait", None)):
            self._set(work, "wait", wrap_call(work.wait, WAIT_TAG))

    def _patch_ddp(self) -> None:
        mod = sys.modules.get("torch.nn.parallel.distributed")
        torch = sys.modules.get("torch")
        ddp = getattr(mod, "DistributedDataParallel", None)
        if ddp is None or torch is None:
            return
        self.ddp_patched = True
        if not hasattr(ddp.forward, "__trainmon_original__"):
            self._set(ddp, "forward", wrap_ddp_forward(ddp.forward, torch))

    def uninstall(self) -> None:
        with self.lock:
            self.closed = True
            while self._undo:
                try:
                    self._undo.pop()()
                except Exception:
                    pass
            self.installed = self.ddp_patched = False
