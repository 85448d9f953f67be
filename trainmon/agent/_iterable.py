"""``trainmon.agent.loader(iterable)``: any batch source timed as a DataLoader is.

DALI and FFCV iterators, Ray Data's ``iter_torch_batches``, a generator over a streaming dataset: the agent patches
none of them, so the training wraps the one its loop iterates::

    for batch in trainmon.agent.loader(pipeline):   # or: it = iter(trainmon.agent.loader(gen)); next(it)
        ...

Each ``__next__`` of the wrapper is a ``wait`` record of a loader of kind ``"iterable"`` (registered with the monitor
on its first batch), a new ``iter()`` is an ``iter_start``; the first batches of each iterator are read for their
samples and tokens (agent/_batch.py). Without an agent attached the wrapper only calls through, and it starts
reporting if one is attached later. Any attribute of the wrapped object is reachable through the wrapper.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from trainmon.agent import _hot
from trainmon.agent._batch import FIRST_BATCHES, BatchStats, measure
from trainmon.protocol import K_ITER_END, K_ITER_START, K_WAIT

T = TypeVar("T")
_pc = _hot._pc
# The attached agent's loader registry (agent/_torch_hooks.Registry), or None: set by attach() and detach().
current: list[Any] = [None]


def config(source: Any, name: str | None) -> dict[str, Any]:
    """What the monitor is told of a wrapped source: its kind, its name, and a batch size it declares."""
    batch = getattr(source, "batch_size", None)
    workers = getattr(source, "num_workers", None)
    try:
        size: int | None = len(source)
    except Exception:
        size = None
    return {
        "kind": "iterable",
        "dataset": str(name or type(source).__name__)[:200],
        "dataset_len": size,
        "batch_size": batch if isinstance(batch, int) and not isinstance(batch, bool) else None,
        "num_workers": workers if isinstance(workers, int) and not isinstance(workers, bool) else None,
    }


class LoaderIterator(Iterator[T]):
    """One pass over the source: its ``__next__`` timed."""

    __slots__ = ("_it", "_left", "_lid", "_owner", "_registry", "_t0")

    def __init__(self, owner: Loader[T], it: Iterator[T], t0: int) -> None:
        self._owner = owner
        self._it = it
        self._t0 = t0  # when iter() was called: a new pass (an epoch) starts there
        self._registry: Any = None
        self._lid = 0
        self._left = FIRST_BATCHES

    def __iter__(self) -> LoaderIterator[T]:
        return self

    def _register(self, registry: Any) -> None:
        self._registry = registry
        owner = self._owner
        if owner._registry is not registry:
            owner._lid = registry.register_loader(config(owner._source, owner._name))
            owner._registry = registry
        self._lid = owner._lid
        _hot.span(K_ITER_START, owner._lid, self._t0, _pc(), 0)

    def __next__(self) -> T:
        registry = current[0]
        if registry is None:
            return next(self._it)
        try:
            if registry is not self._registry:
                self._register(registry)
        except Exception:
            return next(self._it)
        t0 = _pc()
        try:
            batch = next(self._it)
        except StopIteration:
            _hot.span(K_ITER_END, self._lid, t0, _pc())
            raise
        _hot.span(K_WAIT, self._lid, t0, _pc())
        if self._left > 0:
            self._left -= 1
            self._owner._measure(batch)
        return batch


class Loader(Generic[T]):
    """The wrapper ``trainmon.agent.loader`` returns: iterable like the source, and an iterator too when the
    source is one (``next(loader(gen))`` works)."""

    def __init__(self, source: Iterable[T], name: str | None = None) -> None:
        self._source = source
        self._name = name
        self._registry: Any = None
        self._lid = 0
        self._stats = BatchStats()
        self._pass: LoaderIterator[T] | None = None

    def __iter__(self) -> LoaderIterator[T]:
        t0 = _pc()
        self._pass = LoaderIterator(self, iter(self._source), t0)
        return self._pass

    def __next__(self) -> T:
        if self._pass is None:
            iter(self)
        assert self._pass is not None
        return next(self._pass)

    def __len__(self) -> int:
        return len(self._source)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._source, name)

    def __repr__(self) -> str:
        return f"trainmon.agent.loader({self._source!r})"

    def _measure(self, batch: Any) -> None:
        """Samples and tokens of one batch, told to the monitor with the loader's config when their means move."""
        try:
            samples, tokens = measure(batch)
            registry = self._registry
            if samples <= 0 or registry is None:
                return
            self._stats.add(samples, tokens)
            if self._stats.changed():
                cfg = dict(config(self._source, self._name), id=self._lid, **self._stats.fields())
                registry.configs[self._lid] = {k: v for k, v in cfg.items() if k != "id"}
                registry.emit({"loader": cfg})
        except Exception:
            pass
