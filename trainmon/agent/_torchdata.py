"""``torchdata.nodes.Loader``: its iterator's ``__next__`` timed as ``_BaseDataLoaderIter.__next__`` is.

torchdata's node pipelines (``ParallelMapper``, ``Batcher``, ``Prefetcher``, ``PinMemory`` chained by ``source``)
end in a ``Loader``, whose ``__iter__`` hands out one ``LoaderIterator`` (reset at each new pass). The class's
``__next__`` becomes ``_hot.wrap_next``'s wrapper (the same ``wait`` records, the loader id in ``_trainmon_tag``)
and ``Loader.__iter__`` registers the loader, kind ``"torchdata"``, with what its chain of nodes says: the
workers of its ``ParallelMapper`` (0 when none: every batch made in the main thread), their method, the batch size
of its ``Batcher``, a ``Prefetcher``'s factor, a ``PinMemory``. Patched when ``torchdata.nodes.loader`` is
imported (before or after ``attach()``); nothing of torchdata is imported here.
"""

from __future__ import annotations

from typing import Any, Protocol

from trainmon.agent import _hot

MODULE = "torchdata.nodes.loader"
MAX_NODES = 64


class TorchdataHooks(Protocol):
    """What is used of ``_torch_hooks.TorchHooks`` (not imported: that module imports this one)."""

    registry: Any

    def _set(self, owner: Any, name: str, value: Any) -> None: ...


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def loader_config(loader: Any) -> dict[str, Any]:
    """A torchdata Loader's settings, read off its chain of nodes (each node's ``source``, from its root)."""
    node = getattr(loader, "root", None)
    workers = 0
    method = batch = prefetch = None
    pin = False
    seen = 0
    while node is not None and seen < MAX_NODES:
        seen += 1
        kind = type(node).__name__
        if kind in ("ParallelMapper", "_ParallelMapperImpl") and _int(getattr(node, "num_workers", None)):
            workers = max(workers, int(node.num_workers))
            method = str(getattr(node, "method", "") or "")[:20] or method
        elif kind == "Batcher" and batch is None:
            batch = _int(getattr(node, "batch_size", None))
        elif kind == "Prefetcher" and prefetch is None:
            prefetch = _int(getattr(node, "prefetch_factor", None))
        elif kind == "PinMemory":
            pin = True
        node = getattr(node, "source", None)
    root = getattr(loader, "root", None)
    return {
        "kind": "torchdata",
        "dataset": type(root).__name__ if root is not None else None,
        "batch_size": batch,
        "num_workers": workers,
        "pin_memory": pin,
        "prefetch_factor": prefetch,
        "persistent_workers": False,
        "multiprocessing_context": method,  # "thread" or "process" for a ParallelMapper's workers
    }


def install(hooks: TorchdataHooks, module: Any, lazy_tag: Any) -> None:
    """Patch ``torchdata.nodes.loader`` (``module``): the iterator's ``__next__``, and ``Loader.__iter__``.
    ``lazy_tag``: the registering default of ``_trainmon_tag`` DataLoader iterators have (``_torch_hooks.LazyTag``)."""
    registry = hooks.registry
    it_cls, loader_cls = module.LoaderIterator, module.Loader
    hooks._set(it_cls, "_trainmon_tag", lazy_tag)
    hooks._set(it_cls, "__next__", _hot.wrap_next(it_cls.__next__))
    orig_iter = loader_cls.__iter__

    def __iter__(loader: Any) -> Any:
        t0 = _hot._pc()
        it = orig_iter(loader)
        try:
            lid = loader.__dict__.get("_trainmon_id")
            if lid is None:
                lid = registry.register_loader(loader_config(loader))
                loader.__dict__["_trainmon_id"] = lid
            registry.iter_started(lid, it, t0)
        except Exception:
            pass
        return it

    __iter__.__wrapped__ = orig_iter  # type: ignore[attr-defined]
    hooks._set(loader_cls, "__iter__", __iter__)
