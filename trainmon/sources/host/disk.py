"""Per block device I/O rates with `iostat -x` semantics, from /proc/diskstats deltas. Never raises.

Columns of /proc/diskstats (Documentation/admin-guide/iostats.rst), after major, minor, name:
rd_ios rd_merges rd_sectors rd_ticks wr_ios wr_merges wr_sectors wr_ticks in_flight io_ticks rq_ticks
[discard and flush columns follow on newer kernels; iostat's columns here do not use them].
Sectors are always 512 bytes there, whatever the device's real sector size.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainmon.metrics import DISK
from trainmon.sources.base import Source

log = logging.getLogger("trainmon.disk")

SECTOR_BYTES = 512
MB = 2**20
_NFIELDS = 11  # the classic columns we use, after major/minor/name
_MIN_DT_S = 1e-3  # shorter intervals only add noise: keep the older baseline

# Fallback when sys_block is unavailable: names that look like partitions.
_PARTITION_RE = re.compile(r"^(?:(?:[hsv]|xv)d[a-z]+\d+|.*\dp\d+)$")


@dataclass(frozen=True)
class _Stat:
    devno: tuple[int, int]
    rd_ios: int
    rd_sectors: int
    rd_ticks: int
    wr_ios: int
    wr_sectors: int
    wr_ticks: int
    io_ticks: int
    rq_ticks: int

    @property
    def any_io(self) -> bool:
        return bool(self.rd_ios or self.wr_ios or self.io_ticks)


def _parse_line(parts: list[str]) -> _Stat:
    v = [int(x) for x in parts[3 : 3 + _NFIELDS]]
    return _Stat(
        devno=(int(parts[0]), int(parts[1])),
        rd_ios=v[0],
        rd_sectors=v[2],
        rd_ticks=v[3],
        wr_ios=v[4],
        wr_sectors=v[6],
        wr_ticks=v[7],
        io_ticks=v[9],
        rq_ticks=v[10],
    )


def _delta(new: int, old: int) -> int | None:
    """Counter delta with wrap handling; None when the counter was reset (device re-created).

    Tick columns are 32-bit in the kernel (and every column on 32-bit kernels); the rest are 64-bit.
    A 64-bit counter never wraps in practice, so going backwards from above 2**32 means a reset.
    """
    d = new - old
    if d >= 0:
        return d
    if old < 2**32 and new < 2**32:
        wrapped = d + 2**32
        # A real wrap leaves a small delta; a huge one means the device restarted from zero.
        return wrapped if wrapped < 2**31 else None
    return None


class DiskSource(Source):
    name = "disk"
    logger = log

    def __init__(
        self,
        diskstats_path: str = "/proc/diskstats",
        sys_block: str = "/sys/block",
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.diskstats_path = diskstats_path
        self.sys_block = sys_block
        self.clock = clock
        self.error: str | None = None
        self._prev: dict[str, _Stat] = {}
        self._prev_t: float | None = None
        self._whole_cache: dict[str, bool] = {}
        self._devices: list[str] = []

    def devices(self) -> list[str]:
        """Whole block devices with I/O since boot, as of the last successful read."""
        return list(self._devices)

    def sample(self, now: float | None = None) -> dict[str, float]:
        """iostat -x columns per device since the previous call; {} on the first call or on error.

        `now` is the caller's timestamp and is not used: rates use the monotonic time of the read itself.
        """
        try:
            return self._sample()
        except Exception as exc:  # last resort: a source must never break the monitor
            self._fail(f"unexpected error: {exc!r}")
            return {}

    def _sample(self) -> dict[str, float]:
        read = self._read()
        if read is None:
            return {}
        stats, t = read
        self._devices = sorted(stats)
        prev, prev_t = self._prev, self._prev_t
        if prev_t is not None and t - prev_t < _MIN_DT_S:
            return {}
        self._prev, self._prev_t = stats, t
        if prev_t is None:
            return {}
        elapsed_s = t - prev_t
        out: dict[str, float] = {}
        for dev, cur in stats.items():
            old = prev.get(dev)
            if old is None or old.devno != cur.devno:
                continue  # new or re-created device: primed now, reported next time
            out.update(_rates(dev, cur, old, elapsed_s))
        return out

    def _read(self) -> tuple[dict[str, _Stat], float] | None:
        try:
            with open(self.diskstats_path, encoding="ascii", errors="replace") as f:
                text = f.read()
            t = self.clock()  # the counters' time, not the caller's
        except OSError as exc:
            self._fail(f"cannot read {self.diskstats_path}: {exc.strerror or exc}")
            return None
        if self.error is not None:
            log.info("disk stats readable again: %s", self.diskstats_path)
            self.error = None
        stats: dict[str, _Stat] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 3 + _NFIELDS:
                continue
            try:
                st = _parse_line(parts)
            except ValueError:
                continue
            name = parts[2]
            if st.any_io and self._is_whole(name):
                stats[name] = st
        return stats, t

    def _is_whole(self, name: str) -> bool:
        cached = self._whole_cache.get(name)
        if cached is None:
            cached = self._probe_whole(name)
            if len(self._whole_cache) > 4096:  # bound the cache on hosts with device churn
                self._whole_cache.clear()
            self._whole_cache[name] = cached
        return cached

    def _probe_whole(self, name: str) -> bool:
        # Whole disks (and dm/md) have a /sys/block entry; partitions do not. '/' in names becomes '!' there.
        if os.path.isdir(self.sys_block):
            return os.path.exists(os.path.join(self.sys_block, name.replace("/", "!")))
        return not _PARTITION_RE.match(name)

    def _fail(self, message: str) -> None:
        self.error = message
        self.log_once(message, "disk source: %s", message)


def _rates(dev: str, cur: _Stat, old: _Stat, elapsed_s: float) -> dict[str, float]:
    deltas = {}
    for field in ("rd_ios", "rd_sectors", "rd_ticks", "wr_ios", "wr_sectors", "wr_ticks", "io_ticks", "rq_ticks"):
        d = _delta(getattr(cur, field), getattr(old, field))
        if d is None:
            log.debug("disk %s: counters reset, skipping one interval", dev)
            return {}
        deltas[field] = d
    elapsed_ms = elapsed_s * 1000.0
    rd_ios, wr_ios = deltas["rd_ios"], deltas["wr_ios"]
    p = DISK.id_prefix(dev)
    return {
        p + "r_s": rd_ios / elapsed_s,
        p + "w_s": wr_ios / elapsed_s,
        p + "read_mb_s": deltas["rd_sectors"] * SECTOR_BYTES / MB / elapsed_s,
        p + "write_mb_s": deltas["wr_sectors"] * SECTOR_BYTES / MB / elapsed_s,
        p + "util_pct": min(100.0, deltas["io_ticks"] / elapsed_ms * 100.0),
        p + "r_await_ms": deltas["rd_ticks"] / rd_ios if rd_ios else 0.0,
        p + "w_await_ms": deltas["wr_ticks"] / wr_ios if wr_ios else 0.0,
        p + "aqu_sz": deltas["rq_ticks"] / elapsed_ms,
    }
