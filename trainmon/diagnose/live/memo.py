"""The memo of each run's latest windows and judgement, for a caller that asks for the same ones every tick (the
Monitor, a replay): a hit while the run has sent nothing that changes them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from trainmon.store.run import Run

T = TypeVar("T")


class LatestByRun(Generic[T]):
    """The latest value computed for each run, with the key it was computed under: a hit while the key holds."""

    def __init__(self) -> None:
        self._latest: dict[Run, tuple[tuple[Any, ...], T]] = {}

    def get(self, run: Run, key: tuple[Any, ...]) -> T | None:
        """The run's latest value if it was computed under ``key``."""
        hit = self._latest.get(run)
        return hit[1] if hit is not None and hit[0] == key else None

    def put(self, run: Run, key: tuple[Any, ...], value: T) -> None:
        """Make ``value``, computed under ``key``, the run's latest."""
        self._latest[run] = (key, value)

    def retain(self, runs: set[Run]) -> None:
        """Forget the values of every run not in ``runs``."""
        for run in [r for r in self._latest if r not in runs]:
            del self._latest[run]

    def __len__(self) -> int:
        return len(self._latest)


class WindowMemo:
    """Each run's latest window, for a caller that asks for the same windows every tick: it owns one and passes it
    to ``engine.evaluate`` and ``run_window``. The Monitor's is shared by its engine and ``Monitor.run_statuses``, so
    the status line reads the window the engine took.

    ``windows``: the latest window ``run_window`` took of each run, a hit while the run has the same steps and
    checkpoints and the same window is asked for. ``live``: the latest live window (and change) of
    ``change.live_window``, likewise. ``judged``: the engine's judgement of each run, a hit while the run has sent
    nothing new (``engine._unchanged_key``). A window holds its run, so the memo cannot hold runs weakly: ``retain``
    (which ``evaluate`` calls with the store's runs) forgets a run the store has forgotten, and with it its windows
    and step table."""

    def __init__(self) -> None:
        # window.RunWindow of each run: typed loosely, since the window module builds on this one
        self.windows: LatestByRun[Any] = LatestByRun()
        # (window, its change.Change or None): typed loosely, since both modules build on this one
        self.live: LatestByRun[tuple[Any, Any]] = LatestByRun()
        # The engine's judgement of each run (engine.RunJudgement), kept while the run sends nothing new
        self.judged: LatestByRun[Any] = LatestByRun()

    def retain(self, runs: Iterable[Run]) -> None:
        """Forget every run not among ``runs`` (the store's)."""
        keep = set(runs)
        self.windows.retain(keep)
        self.live.retain(keep)
        self.judged.retain(keep)
