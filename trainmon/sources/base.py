"""What every source of the Monitor is: `Source`, the base class, and `LogOnce`, its once-per-key logging.

A source is sampled once a tick by the Monitor through `Source.timed_sample`, which keeps the time the sample took
(`cost_s`) and turns anything the source failed to catch into no figures and one logged error, so that a source
never breaks the monitor. Each source says why a series it writes as NaN has no value (`na`, read back through
`na_reasons`) and logs each trouble once (`log_once`), not once a tick.
"""

from __future__ import annotations

import abc
import logging
import math
import time
from collections.abc import Container, Hashable
from typing import ClassVar


class LogOnce:
    """Logs each key's message once, at its level; a repeat at ``repeat_level``, or not at all (None)."""

    def __init__(self, logger: logging.Logger, repeat_level: int | None = None) -> None:
        self.logger = logger
        self.repeat_level = repeat_level
        self._logged: set[Hashable] = set()

    def __call__(
        self, key: Hashable, msg: str, *args: object, level: int = logging.WARNING, exc_info: bool = False
    ) -> None:
        if key in self._logged:
            if self.repeat_level is not None:
                self.logger.log(self.repeat_level, msg, *args)
            return
        self._logged.add(key)
        self.logger.log(level, msg, *args, exc_info=exc_info)


class Source(abc.ABC):
    """A source of sampled series: `sample(now)` each tick, `close()` at the end.

    Subclasses set `name` (the Monitor's name for it) and `logger` (and `repeat_log_level`, to log the repeats
    of what `log_once` logged once), call ``super().__init__()``, and implement
    `sample`, which returns flat series (``trainmon.metrics``) and never raises: a value it cannot read is NaN,
    with its reason given to `na`.
    """

    name: ClassVar[str] = "source"
    logger: ClassVar[logging.Logger] = logging.getLogger("trainmon.sources")
    repeat_log_level: ClassVar[int | None] = None

    def __init__(self) -> None:
        self.log_once = LogOnce(self.logger, self.repeat_log_level)
        self.cost_s = math.nan  # seconds the last `timed_sample` took (NaN before the first)
        self._na: dict[str, str] = {}  # series → why it is NaN now

    @abc.abstractmethod
    def sample(self, now: float) -> dict[str, float]:
        """Series name → value at ``now`` (the caller's monotonic clock, seconds)."""

    def close(self) -> None:  # noqa: B027 (a source that holds nothing needs no close)
        """Release what the source holds (threads, descriptors, libraries). Default: nothing."""

    def timed_sample(self, now: float) -> dict[str, float]:
        """`sample`, as the Monitor calls it: timed into `cost_s`; a failure it let through costs its figures only."""
        start = time.perf_counter()
        try:
            return self.sample(now)
        except Exception:
            self.log_once(("sample-failed",), "source %s failed; its figures are n/a", self.name, exc_info=True)
            return {}
        finally:
            self.cost_s = time.perf_counter() - start

    # ---- n/a with a reason -------------------------------------------------------------------------------

    @property
    def na_reasons(self) -> dict[str, str]:
        """Series name → why it is NaN now. A copy: safe to read from another thread."""
        return dict(self._na)

    def na(self, key: str, reason: str) -> bool:
        """Record why series ``key`` is NaN; True when it was not n/a for this reason before."""
        new = self._na.get(key) != reason
        self._na[key] = reason
        return new

    def na_reason(self, key: str) -> str | None:
        return self._na.get(key)

    def clear_na(self, key: str) -> str | None:
        """``key`` has a value again: its reason is dropped (and returned)."""
        return self._na.pop(key, None)

    def clear_na_under(self, prefix: str, keep: Container[str] = ()) -> None:
        """Drop the reasons of every series named ``prefix…``, but those in ``keep``."""
        for key in [k for k in self._na if k.startswith(prefix) and k not in keep]:
            del self._na[key]
