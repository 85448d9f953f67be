"""Named demo scenarios: real small trainings, each with one known bottleneck."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str  # the verdict code trainmon should name
    description: str
    args: tuple[str, ...]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("main-process", "input.main_process",
             "num_workers=0 and 1.5 ms of decoding per sample: the loop loads every batch itself",
             ("--workers", "0", "--cpu-ms", "1.5", "--steps", "400")),
    Scenario("few-workers", "input.too_few_workers",
             "one worker waits 4 ms per sample on a slow read: more workers would hide it",
             ("--workers", "1", "--sleep-ms", "4", "--persistent", "--steps", "150")),
    Scenario("healthy", "ok.compute_bound",
             "two workers keep ahead of a compute-heavy model",
             ("--workers", "2", "--cpu-ms", "0.05", "--width", "1536", "--persistent", "--steps", "250")),
    Scenario("checkpoint", "stall.checkpoint",
             "a 96 MB checkpoint written and fsynced every 10 steps",
             ("--workers", "2", "--persistent", "--width", "1024", "--checkpoint-every", "10",
              "--checkpoint-mb", "96", "--steps", "200")),
)}
DEFAULT = "main-process"
