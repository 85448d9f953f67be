"""A run's CUDA memory as its agent read the caching allocator each sender tick (``memory`` records): per read, the
peak allocated and reserved bytes (since the job last reset them) and the allocated and reserved bytes at the read."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right

from trainmon.protocol import MEMORY_FIELDS

NS = 1e-9
MB = 1024 * 1024


MAX_READS = 20_000  # per field in a live store: when full, every two reads are merged into one


def _halve(times: array[float], values: array[float]) -> None:
    """Merges the reads two by two (the later time, the higher value): a creep over hours stays in view at a coarser
    step, in bounded memory."""
    even = len(times) & ~1
    merged_t = times[1:even:2]
    merged_v = array("d", map(max, values[0:even:2], values[1:even:2]))
    times[:even] = merged_t
    values[:even] = merged_v


class CudaMemory:
    """One column of (time, bytes) per field of ``MEMORY_FIELDS``, bounded by ``cap`` (at most ``MAX_READS``: merged
    pairwise when full); ``device`` and ``total`` (bytes; 0: not known) from the agent's
    ``cuda_memory`` message."""

    def __init__(self, cap: int | None) -> None:
        self.cap = min(cap, MAX_READS) if cap is not None else None
        self.t: dict[str, array[float]] = {f: array("d") for f in MEMORY_FIELDS}
        self.v: dict[str, array[float]] = {f: array("d") for f in MEMORY_FIELDS}
        self.device: int | None = None
        self.total = 0
        self.reads = 0

    def __bool__(self) -> bool:
        return self.reads > 0

    def add_records(self, records: array[int]) -> None:
        """The agent's ``memory`` records (flat int64: tag, t0 ns, t1 ns, bytes)."""
        for k in range(0, len(records), 4):
            field, t1, value = records[k] >> 8, records[k + 2], records[k + 3]
            if not 0 <= field < len(MEMORY_FIELDS) or value < 0:
                continue
            name = MEMORY_FIELDS[field]
            times, values = self.t[name], self.v[name]
            if times and t1 * NS < times[-1]:
                continue  # out of order (re-sent after a reconnect): the reads already held cover it
            times.append(t1 * NS)
            values.append(float(value))
            if name == MEMORY_FIELDS[0]:
                self.reads += 1
            if self.cap is not None and len(times) > self.cap:
                _halve(times, values)

    def set_device(self, index: int, total: int) -> None:
        if index != self.device:
            for col in (*self.t.values(), *self.v.values()):
                del col[:]
        self.device, self.total = index, total

    def between(self, name: str, t0: float, t1: float) -> tuple[array[float], array[float]]:
        """(times, bytes) of ``name``'s reads within ``[t0, t1]`` (C-level slices)."""
        times, values = self.t[name], self.v[name]
        i, j = bisect_left(times, t0), bisect_right(times, t1)
        return times[i:j], values[i:j]

    def latest(self, name: str) -> float | None:
        values = self.v[name]
        return values[-1] if values else None
