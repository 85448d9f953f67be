"""What a run's agent watches beside its steps, taken out of each batch of records and info messages: torch.compile's
compilations (``trainmon.store.compiles``), the CUDA allocator's figures (``trainmon.store.cuda_memory``) and the
agent's own cost (``trainmon.store.agent_cost``). None of their records is a step's."""

from __future__ import annotations

import sys
from array import array
from typing import Any

from trainmon.protocol import K_COMPILE, K_COST, K_MEMORY

NS = 1e-9
_KIND_BYTE = 0 if sys.byteorder == "little" else 7  # where a record's kind (the tag's low byte) lies in memory


def take_records(run: Any, records: array[int]) -> array[int]:
    """The batch without its compile, memory and cost records, each kept on ``run`` (a ``trainmon.store.run.Run``:
    typed loosely, since it imports this module). A compilation is the training's
    own activity (a beat, for the hang rule); the others come from the agent's sender thread."""
    records, compiles = split_kind(records, K_COMPILE)
    records, memory = split_kind(records, K_MEMORY)
    records, cost = split_kind(records, K_COST)
    if compiles is not None:
        run.compiles.add_records(compiles)
        run._beat(max(compiles[2::4]) * NS)
    if memory is not None:
        run.cuda_memory.add_records(memory)
    if cost is not None:
        run.agent_cost.add_records(cost)
    return records


def apply_info(run: Any, info: dict[str, Any]) -> None:
    if isinstance(compiled := info.get("compile"), dict):
        run.compiles.add_info(compiled)
    if isinstance(breaks := info.get("graph_breaks"), dict):
        run.compiles.graph_breaks = breaks
    if isinstance(memory := info.get("cuda_memory"), dict) and isinstance(memory.get("index"), int):
        run.cuda_memory.set_device(memory["index"], int(memory.get("total") or 0))


def kinds_of(records: array[int]) -> bytes:
    """Each record's kind (its tag's low byte), one byte per record."""
    with memoryview(records) as view, view.cast("B") as raw:
        return raw[_KIND_BYTE :: 4 * 8].tobytes()


def split_kind(records: array[int], kind: int) -> tuple[array[int], array[int] | None]:
    """(the batch without its records of ``kind``, those records or None): C-level finds and slices,
    one per such record, never a Python step per record."""
    kinds = kinds_of(records)
    pos = kinds.find(kind)
    if pos < 0:
        return records, None
    rest: array[int] = array("q")
    taken: array[int] = array("q")
    start = 0
    while pos >= 0:
        rest += records[4 * start : 4 * pos]
        taken += records[4 * pos : 4 * pos + 4]
        start = pos + 1
        pos = kinds.find(kind, start)
    rest += records[4 * start :]
    return rest, taken
