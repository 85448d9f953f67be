"""Patch torch (already imported, or when it gets imported) to time DataLoader waits and steps.

Only class attributes are replaced, and every replacement keeps the original so ``detach()``
and DataLoader workers (after fork) can restore it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainmon.agent import _hot
from trainmon.agent._batch import BatchProbe
from trainmon.agent._import_hook import AfterImport
from trainmon.protocol import K_FEED, K_ITER_START, K_WAIT

if TYPE_CHECKING:
    from trainmon.agent._cuda import ExposedProbe

WORKER_ENV = "TRAINMON_WORKER"


class Registry:
    """Loaders seen so far; talks to the sender through ``emit`` (a control-message sink)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        self.emit = emit
        self.next_id = 1
        self.worker_pids: dict[int, list[int]] = {}
        self.configs: dict[int, dict[str, Any]] = {}  # as reported: the measured batch figures are sent with them
        self.fed: set[int] = set()  # loaders iterated by another thread than the training thread (prefetchers)
        self.on_iter: Callable[[], None] | None = None  # a new iterator started (the batch probe reads its first)

    def register_loader(self, config: dict[str, Any]) -> int:
        lid = self.next_id
        self.next_id += 1
        self.configs[lid] = config
        self.emit({"loader": dict(config, id=lid)})
        return lid

    def iter_started(self, lid: int, it: Any, t0: int | None = None) -> None:
        """A new iterator of loader ``lid``, made from ``t0`` (before its workers started) until now.

        Each new set of workers is reported with ``t_ns``, the time its iterator began, so the monitor
        knows which processes served which loader when (non-persistent workers change every epoch)."""
        t1 = _hot._pc()
        t0 = t1 if t0 is None else t0
        # The tag is taken by the first __next__ (LazyTag): only then is it known which thread iterates it (a
        # prefetcher makes the iterator in the training thread and iterates it in its own).
        it.__dict__.pop("_trainmon_tag", None)
        it._trainmon_lid = lid
        workers = getattr(it, "_workers", None) or []
        pids = [w.pid for w in workers if getattr(w, "pid", None)]
        _hot.span(K_ITER_START, lid, t0, t1, len(pids))
        if pids and pids != self.worker_pids.get(lid):
            self.worker_pids[lid] = pids
            self.emit({"workers": {"loader": lid, "pids": pids, "t_ns": t0}})
        if self.on_iter is not None:
            self.on_iter()


def loader_config(loader: Any) -> dict[str, Any]:
    def attr(name: str, default: Any = None) -> Any:
        try:
            return getattr(loader, name, default)
        except Exception:
            return default

    dataset = attr("dataset")
    try:
        dataset_len = len(dataset)
    except Exception:
        dataset_len = None
    ctx = attr("multiprocessing_context")
    return {
        "batch_size": attr("batch_size"),
        "num_workers": attr("num_workers", 0),
        "pin_memory": bool(attr("pin_memory", False)),
        "prefetch_factor": attr("prefetch_factor"),
        "persistent_workers": bool(attr("persistent_workers", False)),
        "drop_last": bool(attr("drop_last", False)),
        "dataset": type(dataset).__name__ if dataset is not None else None,
        "dataset_len": dataset_len,
        "sampler": type(attr("sampler")).__name__,
        "multiprocessing_context": getattr(ctx, "_name", None) or (str(ctx) if ctx else None),
        "start_method": start_method(ctx) if attr("num_workers", 0) else None,
    }


def start_method(ctx: Any) -> str | None:
    """How the loader's workers start: its own context's method, else the process default, read without
    fixing it (``multiprocessing.get_start_method()`` would, and a later ``set_start_method`` would fail)."""
    name = getattr(ctx, "_name", None) or (ctx if isinstance(ctx, str) else None)
    if name:
        return str(name)
    try:
        import multiprocessing

        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    except Exception:
        return None


def iterator_config(it: Any) -> dict[str, Any]:
    """Config of a loader known only through an iterator made before ``attach()``."""

    def attr(name: str, default: Any = None) -> Any:
        return getattr(it, name, default)

    sampler = attr("_index_sampler")
    return {
        "batch_size": getattr(sampler, "batch_size", None),
        "num_workers": attr("_num_workers", 0),
        "pin_memory": bool(attr("_pin_memory", False)),
        "prefetch_factor": attr("_prefetch_factor"),
        "persistent_workers": bool(attr("_persistent_workers", False)),
        "drop_last": bool(attr("_drop_last", False)),
        "dataset": type(attr("_dataset")).__name__,
        "dataset_len": None,
        "sampler": type(sampler).__name__,
        "multiprocessing_context": None,
        "attached_late": True,
    }


class LazyTag:
    """Class-level default of ``_trainmon_tag``, read by an iterator's first ``__next__`` (again after each new
    epoch): ``wait`` records where the training thread iterates it, ``feed`` records where another thread does (a
    prefetcher's: its waits are the loader's, not the loop's). Registers iterators made before ``attach()``.

    A non-data descriptor, so an instance's own ``_trainmon_tag`` wins at no extra cost.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def __get__(self, it: Any, owner: type | None = None) -> Any:
        if it is None:
            return self
        try:
            lid = it.__dict__.get("_trainmon_lid")
            if lid is None:
                lid = self.registry.register_loader(iterator_config(it))
                self.registry.iter_started(lid, it)
            fed = not _hot.on_training_thread()
            tag = (K_FEED if fed else K_WAIT) | lid << 8
            it.__dict__["_trainmon_tag"] = tag
            if fed and lid not in self.registry.fed:
                self.registry.fed.add(lid)
                self.registry.emit({"feed": {"loader": lid, "thread": threading.current_thread().name[:80]}})
            return tag
        except Exception:
            it.__dict__["_trainmon_tag"] = K_WAIT
            return K_WAIT


class TorchHooks:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.installed = False
        self._undo: list[Callable[[], None]] = []
        self._watcher: AfterImport | None = None
        self._torchdata_watcher: AfterImport | None = None  # patches torchdata.nodes when the job imports it
        # Exposed GPU idle (see _cuda.py): the iterator class, its original __next__ and the CPU wrapper,
        # so poll_cuda can swap in the measuring wrapper once the job has initialised CUDA.
        self.lock = threading.Lock()  # install state vs. the sender thread's swap
        self.probe: ExposedProbe | None = None
        self._it_cls: Any = None
        self._orig_next: Any = None
        self._plain_next: Any = None
        self._cuda_decided = False
        self.pending_import = False  # installed while torch was being imported: patched by poll_import
        self.batches = BatchProbe(self)  # samples and tokens read off a few batches (agent/_batch.py)
        registry.on_iter = self.batches.arm

    def install(self) -> None:
        """Patch now if torch is imported, otherwise as soon as it is. ``trainmon attach`` can run this while the
        training is in the middle of ``import torch`` (torch is in sys.modules, still initialising): then the
        sender's tick patches once the import is done (``poll_import``), since no import of torch is to come."""
        torch = sys.modules.get("torch")
        if torch is not None and not _initialising(torch) and hasattr(torch, "optim"):
            self._patch()
        elif torch is not None:
            self.pending_import = True
        elif self._watcher is None:
            self._watcher = AfterImport(("torch",), lambda _name: self._patch(), once=True)
            sys.meta_path.insert(0, self._watcher)

    def poll_import(self) -> None:
        """Each sender tick, while torch was being imported at install: patch once it is done."""
        if not self.pending_import:
            return
        torch = sys.modules.get("torch")
        if torch is not None and not _initialising(torch) and hasattr(torch, "optim"):
            with self.lock:
                self.pending_import = False
                if not self.installed:
                    self._patch()

    def uninstall(self) -> None:
        with self.lock:
            self._uninstall()

    def _uninstall(self) -> None:
        self.pending_import = False
        self._plain_next = self._orig_next = self._it_cls = None
        self._cuda_decided = False
        if self._watcher is not None:
            try:
                sys.meta_path.remove(self._watcher)
            except ValueError:
                pass
            self._watcher = None
        if self._torchdata_watcher is not None and self._torchdata_watcher in sys.meta_path:
            sys.meta_path.remove(self._torchdata_watcher)
        self._torchdata_watcher = None
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:
                pass
        self.installed = False

    def _set(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner) if isinstance(owner, type) else hasattr(owner, name)
        old = getattr(owner, name, None)

        def undo() -> None:
            if had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)

        setattr(owner, name, value)
        self._undo.append(undo)

    def _patch(self) -> None:
        if self.installed:
            return
        self.installed = True
        import torch
        from torch.utils.data import dataloader as dl

        registry = self.registry
        it_cls = dl._BaseDataLoaderIter
        self._set(it_cls, "_trainmon_tag", LazyTag(registry))
        self._orig_next = it_cls.__next__
        self._plain_next = _hot.wrap_next(self._orig_next)
        self._set(it_cls, "__next__", self._plain_next)
        self._it_cls = it_cls

        orig_iter = dl.DataLoader.__iter__

        def __iter__(loader: Any) -> Any:
            lid = loader.__dict__.get("_trainmon_id")
            if lid is None:
                try:
                    lid = registry.register_loader(loader_config(loader))
                    object.__setattr__(loader, "_trainmon_id", lid)
                except Exception:
                    lid = 0
            # Spawned/forkserver workers inherit this, so an unguarded attach() in them stays inert.
            t0 = _hot._pc()  # before the workers start: their start-up is part of a restart's cost
            previous = os.environ.get(WORKER_ENV)
            os.environ[WORKER_ENV] = "1"
            try:
                it = orig_iter(loader)
            finally:
                if previous is None:
                    os.environ.pop(WORKER_ENV, None)
                else:
                    os.environ[WORKER_ENV] = previous
            try:
                registry.iter_started(lid, it, t0)
            except Exception:
                pass
            return it

        __iter__.__wrapped__ = orig_iter  # type: ignore[attr-defined]  # a function attribute mypy does not model
        self._set(dl.DataLoader, "__iter__", __iter__)

        self._patch_optimizer_step()

        import torch.serialization

        saver = _hot.wrap_save(torch.serialization.save)
        self._set(torch, "save", saver)
        self._set(torch.serialization, "save", saver)
        self._patch_torchdata()

    def _patch_optimizer_step(self) -> None:
        """Each optimizer step's record: from ``Optimizer._optimizer_step_code`` where torch's step wrapper calls it
        and nothing overrides it (a third of a post-hook's cost per step), else from a global post-hook."""
        from torch.optim import optimizer as opt_module

        cls = opt_module.Optimizer
        if step_code_hookable(cls):
            _hot.opt_record_via[0] = "step_code"
            self._set(cls, "_optimizer_step_code", _hot.optimizer_step_code)
            return
        _hot.opt_record_via[0] = "post_hook"
        handle = opt_module.register_optimizer_step_post_hook(_hot.optimizer_step_post_hook)
        self._undo.append(handle.remove)

    def _patch_torchdata(self) -> None:
        """``torchdata.nodes.Loader`` (agent/_torchdata.py): now if the job imported it, else when it does."""
        from trainmon.agent import _torchdata

        module = sys.modules.get(_torchdata.MODULE)
        if module is not None and not _initialising(module):
            try:
                _torchdata.install(self, module, LazyTag(self.registry))
            except Exception:
                pass
        elif self._torchdata_watcher is None:

            def patch(_name: str) -> None:
                with self.lock:
                    if self.installed:
                        _torchdata.install(self, sys.modules[_torchdata.MODULE], LazyTag(self.registry))

            self._torchdata_watcher = AfterImport((_torchdata.MODULE,), patch, once=True)
            sys.meta_path.insert(0, self._torchdata_watcher)

    def poll_cuda(self) -> None:
        """From the sender thread, each tick until decided: once the job itself has initialised CUDA,
        replace the wrapped ``__next__`` by the one that measures exposed GPU idle.

        ``torch.cuda.is_initialized()`` reads a Python flag: it neither initialises CUDA nor takes the
        context lock. A CPU-only job pays this check ten times a second in the sender thread, and
        nothing on its hot path."""
        if self._cuda_decided or self._plain_next is None:
            return
        from trainmon.agent import _cuda  # only once torch is patched: `import trainmon.agent` stays as small

        cuda = _cuda.cuda_module()
        try:
            if cuda is None or not cuda.is_initialized():
                return
        except Exception:
            self._cuda_decided = True
            return
        with self.lock:
            if self._cuda_decided or self._plain_next is None or not self.installed:
                return
            self._cuda_decided = True
            every = _cuda.every_from_env()
            if every <= 0:
                return
            self.probe = _cuda.ExposedProbe(
                cuda, every, on_fail=self._cuda_failed, on_device=lambda d: self.registry.emit({"cuda_device": d})
            )
            self._it_cls.__next__ = _hot.wrap_next_cuda(self._orig_next, self.probe)

    def _cuda_failed(self) -> None:
        """The probe failed (it logged why): back to the plain wrapper for the rest of the process."""
        with self.lock:
            if self._it_cls is not None and self._plain_next is not None:
                self._it_cls.__next__ = self._plain_next


def step_code_hookable(cls: Any) -> bool:
    """Whether every optimizer step calls ``cls._optimizer_step_code`` (torch's ``profile_hook_step`` wrapper does,
    since torch 1.13) and no optimizer class loaded so far has one of its own."""
    from types import CodeType

    own = vars(cls).get("_optimizer_step_code")
    wrapper = getattr(vars(cls).get("profile_hook_step"), "__func__", None)
    if own is None or wrapper is None or own is _hot.optimizer_step_code:
        return False
    calls = any(isinstance(c, CodeType) and "_optimizer_step_code" in c.co_names for c in wrapper.__code__.co_consts)
    pending = list(cls.__subclasses__())
    seen = 0
    while pending and seen < 10_000:
        sub = pending.pop()
        seen += 1
        if "_optimizer_step_code" in vars(sub):
            return False
        pending.extend(sub.__subclasses__())
    return calls


def _initialising(module: Any) -> bool:
    """Whether ``module`` is still running its import (its spec says so while the import system executes it)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))
