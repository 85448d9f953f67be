"""A run's DataLoaders as the monitor sees them: each one's settings, its workers and when each set of them began,
its batch and wait totals; and the bounded table of them a run keeps."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

from trainmon.store.batches import batch_size

NS = 1e-9
MAX_LOADERS = 256  # per run; events of further loader ids count as loader 0 ("unknown")
MAX_GENERATIONS = 64  # per loader: the sets of workers kept with when they began (see LoaderInfo.workers_between)


@dataclass
class LoaderInfo:
    id: int
    config: dict[str, Any] = field(default_factory=dict)
    worker_pids: list[int] = field(default_factory=list)  # as the agent reported them (its pid namespace)
    proc_pids: list[int] | None = None  # the same workers in the monitor's namespace (0: not mapped); None: same
    batches: int = 0
    wait_s: float = 0.0
    iterators: int = 0
    # Iterated by another thread than the training thread (a prefetcher's): its __next__ time is the loader's own
    # wait, evidence of how fast it makes batches, never the loop's data wait.
    fed_by: str | None = None  # that thread's name
    fed_batches: int = 0
    fed_wait_s: float = 0.0
    # Each set of workers in the monitor's namespace with when its iterator began (-inf: not told): what the
    # loader's workers were at any time, since non-persistent workers are new processes every epoch.
    generations: list[tuple[float, list[int]]] = field(default_factory=list)

    def workers_between(self, t0: float, t1: float) -> list[tuple[int, float, float]]:
        """(pid, from, to) of every worker that served this loader within [t0, t1], clipped to the span its
        set served: from its iterator's start to the next one's."""
        out: list[tuple[int, float, float]] = []
        gens = self.generations
        for k, (start, pids) in enumerate(gens):
            end = gens[k + 1][0] if k + 1 < len(gens) else math.inf
            a, b = max(t0, start), min(t1, end)
            if a <= b and end > start:
                out.extend((pid, a, b) for pid in pids if pid)
        return out

    @property
    def batch_size(self) -> int | None:
        """Samples per batch: the loader's own setting, else the mean the agent measured on its batches."""
        return batch_size(self.config)

    def add_generation(self, t_ns: Any, own_namespace: bool) -> None:
        """Keep the workers just reported (as of their iterator's start ``t_ns``, ns) as a new generation."""
        here = self.proc_pids if self.proc_pids is not None else self.worker_pids
        here = here if self.proc_pids is not None or own_namespace else []
        start = t_ns * NS if isinstance(t_ns, int) and not isinstance(t_ns, bool) else -math.inf
        gens = self.generations
        if gens and gens[-1] == (start, here):
            return  # the same message again (re-sent to a new connection)
        gens.append((start, list(here)))
        gens.sort(key=operator.itemgetter(0))
        del gens[:-MAX_GENERATIONS]


def bounded(loaders: dict[int, LoaderInfo], lid: int) -> int:
    """``lid``, or 0 ("unknown") when the run already keeps MAX_LOADERS others."""
    return lid if lid in loaders or len(loaders) < MAX_LOADERS else 0


def loader_of(loaders: dict[int, LoaderInfo], lid: int) -> LoaderInfo:
    """The loader ``lid``, added to the table on first sight."""
    info = loaders.get(lid)
    if info is None:
        info = loaders[lid] = LoaderInfo(lid)
    return info
