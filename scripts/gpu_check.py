"""GPU validation of trainmon on real CUDA trainings (needs a CUDA GPU; without one: one line, exit status 2).

Each case is a real PyTorch training with one known bottleneck, run twice:

1. under a real ``trainmon record`` with the agent attached; ``trainmon report --format json`` gives the
   verdict, the data-wait share and trainmon's exposed GPU idle (``runs[].exposed_wait_fraction``);
2. without the agent (``TRAINMON_DISABLE=1``) under ``torch.profiler`` (CUPTI kernel, copy and memset
   timestamps) over steady steps: the ground truth. The GPU is busy where any of those ran; the exposed idle of
   a data wait is the part of the wait with nothing running; both are shares of the steps' wall time.

The verdict must be the case's code (or, for the hidden wait, must not be an input verdict); the exposed idle
must match the ground truth within ``EXPOSED_TOLERANCE`` where the case's waits matter. Cases that need GPM
(Hopper or newer) say "n/a" on a GPU without it. The agent's cost per step is measured separately (``COST``).

Energy (``ENERGY_SECONDS`` of steady load under ``trainmon record``): the report's joules per step
(``runs[].energy``) against NVML's energy counter read by the training itself over its own steps, and against
``nvidia-smi``'s power.draw sampled every 100 ms and integrated over the same span (``ENERGY_TOLERANCE``).

CUDA memory (``MEMORY_SECONDS`` of the steady load keeping ``MEMORY_LEAK_MB`` more each step, a leak): the peaks the
agent read from the caching allocator (the recording's ``memory`` records) against ``torch.cuda.max_memory_allocated()``
read by the training itself each step (each of the agent's reads lies between the training's reads around it; the
last equals the training's last), and memory.creep's MB per 1000 steps against the leak's (``MEMORY_TOLERANCE``).

    python scripts/gpu_check.py [--seconds 25] [--cases a,b] [--markdown [FILE]] [--no-cost] [--no-energy]
                                [--no-memory]
    python scripts/gpu_check.py --energy-only     # the energy check alone (under a minute)

``--markdown`` writes the results, with the device's name, into docs/gpu-validation.md between its result
markers. Exit status: 0 all checks passed, 1 a check failed, 2 no CUDA GPU (or no torch).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "gpu-validation.md"
BEGIN, END = "<!-- gpu_check results: begin -->", "<!-- gpu_check results: end -->"

WARMUP_STEPS = 15  # steps before the ground truth is profiled (trainmon leaves its own warm-up out too)
PROFILE_STEPS = 60
EXPOSED_TOLERANCE = (0.05, 0.15)  # |trainmon - truth| ≤ 0.05 + 0.15 × truth (shares of step time)
WAIT_LABEL = "gpu_check.wait"
STEP_LABEL = "gpu_check.step"


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # the training, in a few words
    expect: tuple[str, ...]  # headline codes that pass (empty: any code not forbidden)
    forbid: tuple[str, ...] = ()  # code prefixes the headline must not have
    needs_gpm: bool = False  # the verdict rests on GPM (Hopper or newer)
    judge_exposed: bool = False  # its waits matter: exposed idle is compared with the ground truth


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case(
            "input-starved",
            "num_workers=0, each sample decoded and resized on the CPU in the main process, a small convnet",
            ("input.main_process",),
            judge_exposed=True,
        ),
        Case(
            "gpu-bound",
            "8 × Linear(4096) in bf16 autocast over 8192 tokens per step, 2 pinned workers",
            ("ok.compute_bound",),
            judge_exposed=True,
        ),
        Case(
            "hidden-wait",
            "num_workers=0 decoding each batch while 1.5× the decode time of GPU work is queued: the GPU never drains",
            (),
            forbid=("input.",),
            judge_exposed=True,
        ),
        Case(
            "pageable-h2d",
            "32 × 3×320×320 float32 per batch from 6 workers, pin_memory=False, blocking .to(device), light model",
            ("input.host_to_device",),
        ),
        Case(
            "item-sync",
            "a 4-layer MLP that logs loss.item() and accuracy.item() every step",
            ("host.sync",),
        ),
        Case(
            "tiny-mlp",
            "an 8-layer MLP of width 1024 on batches of 8, SGD",
            ("gpu.small_work",),
            needs_gpm=True,
        ),
        Case(
            "fp32-matmul",
            "6 × Linear(4096) in float32 (TF32 off, PyTorch's default) over batches of 2048",
            ("gpu.no_tensor_cores",),
            needs_gpm=True,
        ),
    )
}

# The agent's cost per step: one loop, three ways (agent off; agent on, probe off; agent and exposed probe on).
COST = {
    "no agent": {"TRAINMON_DISABLE": "1"},
    "agent, no probe": {"TRAINMON_EXPOSED_EVERY": "0"},
    "agent + exposed probe": {"TRAINMON_EXPOSED_EVERY": "1"},
}
COST_STEPS, COST_REPEATS = 3000, 5

# The energy check: trainmon against the counter (the same counter, read by trainmon's GPU source: only the span
# differs), and the counter against nvidia-smi (power.draw is an average, sampled: looser).
ENERGY_SECONDS = 10.0
ENERGY_TOLERANCE = {"counter": 0.03, "nvidia-smi": 0.10}  # |a - b| ≤ tolerance × b
SMI = ("nvidia-smi", "--query-gpu=uuid,power.draw", "--format=csv,noheader,nounits", "-lms", "100")
MEMORY_SECONDS, MEMORY_LEAK_MB, MEMORY_TOLERANCE = 12.0, 1, 0.15


# ---------------------------------------------------------------- judging (pure: tested on CPU)


def check_verdict(case: Case, row: dict[str, Any]) -> tuple[str, str]:
    """("pass" | "fail" | "n/a", why) for the headline verdict of one case's report."""
    if row.get("error"):
        return "fail", str(row["error"]).splitlines()[0]
    code = str(row.get("verdict") or "")
    if case.needs_gpm and not row.get("gpm"):
        return "n/a", "needs GPM (Hopper or newer): this GPU or driver has none"
    bad = [p for p in case.forbid if code.startswith(p)]
    if bad:
        return "fail", f"{code} is {bad[0]}* (must not be)"
    if case.expect and code not in case.expect:
        return "fail", f"{code or 'no verdict'}, expected {' or '.join(case.expect)}"
    return "pass", code


def check_exposed(case: Case, row: dict[str, Any]) -> tuple[str, str]:
    """("pass" | "fail" | "n/a", why) comparing trainmon's exposed idle with the profiler's."""
    if not case.judge_exposed:
        return "n/a", "not judged: this case's waits are negligible"
    if row.get("error"):
        return "fail", "no run"
    ours, truth = row.get("exposed"), row.get("truth_exposed")
    if truth is None:
        return "fail", "no ground truth"
    if ours is None:
        return "fail", "trainmon measured no exposed idle"
    limit = EXPOSED_TOLERANCE[0] + EXPOSED_TOLERANCE[1] * truth
    diff = abs(ours - truth)
    return ("pass" if diff <= limit else "fail"), f"|{ours:.3f} - {truth:.3f}| = {diff:.3f} (limit {limit:.3f})"


def merge(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping intervals merged, in order."""
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def overlap(busy: list[tuple[float, float]], s: float, e: float) -> float:
    """How much of [s, e] the merged ``busy`` intervals cover."""
    return sum(max(0.0, min(e, b1) - max(s, b0)) for b0, b1 in busy)


def ground_truth(
    gpu: Iterable[tuple[float, float]], waits: Sequence[tuple[float, float]], steps: Sequence[tuple[float, float]]
) -> dict[str, float]:
    """From profiler intervals (any unit): the GPU's idle share of the steps' span, and the exposed share: the
    part of each data wait with nothing running on the GPU, summed, over the same span."""
    busy = merge(gpu)
    t0, t1 = min(s for s, _ in steps), max(e for _, e in steps)
    span = t1 - t0
    idle_in_waits = sum((e - s) - overlap(busy, s, e) for s, e in waits)
    return {
        "idle": 1.0 - overlap(busy, t0, t1) / span,
        "exposed": idle_in_waits / span,
        "wait": sum(e - s for s, e in waits) / span,
    }


def integrate(samples: Sequence[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Joules from (time s, W) samples over [t0, t1]: trapezoids, each end held from the nearest sample inside;
    None with fewer than two samples inside."""
    inside = [(t, w) for t, w in samples if t0 <= t <= t1]
    if len(inside) < 2:
        return None
    points = [(t0, inside[0][1]), *inside, (t1, inside[-1][1])]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(points))


def check_energy(row: dict[str, Any]) -> tuple[str, str]:
    """("pass" | "fail", why): trainmon's joules per step against NVML's counter as the training read it, and the
    counter against nvidia-smi's integrated power.draw (n/a without nvidia-smi)."""
    if row.get("error"):
        return "fail", str(row["error"]).splitlines()[0]
    ours, counter, smi = row.get("trainmon_j_step"), row.get("counter_j_step"), row.get("smi_j_step")
    if ours is None:
        return "fail", "the report has no joules per step (runs[].energy)"
    if not counter:
        return "fail", "the training read no energy from NVML's counter"
    off = {"counter": ours / counter - 1}
    why = f"trainmon {ours:.2f} J/step ({row.get('method')}), NVML counter {counter:.2f} ({off['counter']:+.1%})"
    if smi:
        off["nvidia-smi"] = counter / smi - 1
        why += f", nvidia-smi power.draw × time {smi:.2f} (counter {off['nvidia-smi']:+.1%})"
    else:
        why += f", nvidia-smi: {row.get('smi_error') or 'no samples'}"
    bad = [k for k, v in off.items() if abs(v) > ENERGY_TOLERANCE[k]]
    return ("fail" if bad else "pass"), why


def check_memory(row: dict[str, Any]) -> tuple[str, str]:
    """("pass" | "fail", why): the agent's peaks against the training's own reads, and the creep's rate."""
    if row.get("error"):
        return "fail", str(row["error"]).splitlines()[0]
    own, agent = row.get("own") or [], row.get("agent") or []
    if not own or not agent:
        return "fail", f"reads: {len(own)} by the training, {len(agent)} by the agent"
    times = [t for t, _ in own]
    outside = 0
    for t, peak in agent:  # a running peak: between the training's last read before it and its first after
        k = next((i for i, x in enumerate(times) if x > t), len(own))
        lo, hi = own[k - 1][1] if k else 0, own[k][1] if k < len(own) else own[-1][1]
        outside += not lo <= peak <= hi
    rate, leak = row.get("creep_mb_per_1000_steps"), MEMORY_LEAK_MB * 1000
    why = (
        f"{len(agent)} agent reads, {outside} outside the training's own; last {agent[-1][1] / 2**20:.0f} MB, the "
        f"training's {own[-1][1] / 2**20:.0f} MB; memory.creep {fmt(rate, 0)} MB per 1000 steps (leak {leak} MB)"
    )
    ok = not outside and agent[-1][1] == own[-1][1] and rate is not None and abs(rate - leak) <= MEMORY_TOLERANCE * leak
    return ("pass" if ok else "fail"), why


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


TABLE_HEADER = ("case", "verdict", "check", "wait", "exposed", "truth exp.", "truth idle", "exposed check")


def table_rows(rows: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    for row in rows:
        case = CASES[row["case"]]
        verdict, _ = check_verdict(case, row)
        exposed, why = check_exposed(case, row)
        out.append(
            (
                case.name,
                str(row.get("verdict") or "-"),
                verdict,
                fmt(row.get("wait")),
                fmt(row.get("exposed")),
                fmt(row.get("truth_exposed")),
                fmt(row.get("truth_idle")),
                exposed if exposed == "n/a" else f"{exposed}: {why}",
            )
        )
    return out


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    cells = [TABLE_HEADER, *table_rows(rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(TABLE_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_cost(cost: dict[str, float]) -> str:
    base = cost.get("no agent")
    lines = []
    for name, us in cost.items():
        added = "" if base is None or name == "no agent" else f"  (+{us - base:.1f} µs)"
        lines.append(f"{name:<24} {us:8.1f} µs/step{added}")
    return "\n".join(lines)


def markdown(
    device: str,
    rows: Sequence[dict[str, Any]],
    cost: dict[str, float],
    when: str,
    energy: dict[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
) -> str:
    out = [f"Run on **{device}**, {when}, with `python scripts/gpu_check.py`.", ""]
    if rows:
        out.append("| " + " | ".join(TABLE_HEADER) + " |")
        out.append("|" + "---|" * len(TABLE_HEADER))
        out += ["| " + " | ".join(r) + " |" for r in table_rows(rows)]
    if energy is not None:
        status, why = check_energy(energy)
        out += ["", f"Energy over {ENERGY_SECONDS:.0f} s of steady load: **{status}**: {why}."]
    if memory is not None:
        out += ["", "CUDA memory, a {} MB-a-step leak: **{}**: {}.".format(MEMORY_LEAK_MB, *check_memory(memory))]
    if cost:
        out += ["", "Agent cost per step (median of repeats, same loop and machine):", "", "```", format_cost(cost)]
        out.append("```")
    return "\n".join(out)


def write_markdown(path: Path, block: str) -> None:
    """Replace what lies between the result markers of ``path`` with ``block`` (the rest is kept)."""
    text = path.read_text()
    head, found, rest = text.partition(BEGIN)
    _, found_end, tail = rest.partition(END)
    if not found or not found_end:
        raise SystemExit(f"gpu_check: {path} has no '{BEGIN}' … '{END}' markers")
    path.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


def passed(rows: Sequence[dict[str, Any]], energy: dict[str, Any] | None = None) -> bool:
    return all(
        check_verdict(CASES[r["case"]], r)[0] != "fail" and check_exposed(CASES[r["case"]], r)[0] != "fail"
        for r in rows
    ) and (energy is None or check_energy(energy)[0] != "fail")


# ---------------------------------------------------------------- the trainings (run in a child process)


def _workload(case: str, dev: Any) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """(fetch a batch, one training step on that batch) for a case, written the way training code does it."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Decoded(Dataset):
        """Images decoded on the CPU: random bytes (seeded by index), to float, resized with antialiasing."""

        def __init__(self, side: int = 320, out: int = 224) -> None:
            self.side, self.out = side, out

        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            g = torch.Generator().manual_seed(i)
            raw = torch.randint(0, 256, (3, self.side, self.side), dtype=torch.uint8, generator=g)
            img = F.interpolate(raw.float().div_(255)[None], size=(self.out, self.out), mode="bilinear", antialias=True)
            return (img[0] - 0.45) / 0.225, i % 1000

    class Tokens(Dataset):
        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.randint(0, 32000, (512,), generator=torch.Generator().manual_seed(i))

    class Pool(Dataset):
        """Large float32 samples from a pool in ordinary (pageable) memory."""

        def __init__(self, shape: tuple[int, ...], n: int = 64) -> None:
            self.pool = torch.randn(n, *shape)

        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return self.pool[i % len(self.pool)], i % 10

    class Features(Pool):
        """Feature vectors, cheap to serve: these cases are not about loading."""

        def __init__(self, width: int) -> None:
            super().__init__((width,), 4096)

    def mlp(widths: list[int]) -> nn.Module:
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers[:-1]).to(dev)

    def convnet() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 1000),
        ).to(dev)  # fmt: skip

    def classify(model: nn.Module, opt: torch.optim.Optimizer, blocking: bool = False) -> Callable[[Any], None]:
        def step(batch: Any) -> None:
            x, y = batch
            x, y = x.to(dev, non_blocking=not blocking), y.to(dev, non_blocking=not blocking)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    def loader(ds: Dataset, bs: int, workers: int, pin: bool, prefetch: int = 4) -> Callable[[], Any]:
        kw = {"persistent_workers": True, "prefetch_factor": prefetch} if workers else {}
        it = iter(DataLoader(ds, batch_size=bs, num_workers=workers, pin_memory=pin, **kw))
        return lambda: next(it)

    if case == "input-starved":
        model = convnet()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return loader(Decoded(), 32, 0, False), classify(model, opt)

    if case == "hidden-wait":
        model = convnet()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        a, b = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
        fetch = loader(Decoded(), 12, 0, False)
        t = time.perf_counter()
        for _ in range(3):
            fetch()
        wait_s = (time.perf_counter() - t) / 3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            a @ b
        end.record()
        end.synchronize()
        mms = max(1, round(1.5 * wait_s * 1e3 / (start.elapsed_time(end) / 10)))
        learn = classify(model, opt)

        def deep(batch: Any) -> None:
            c = a
            for _ in range(mms):  # GPU work queued per step: 1.5 × the wait that follows
                c = c @ b
            learn(batch)

        return fetch, deep

    if case == "gpu-bound":
        emb = nn.Embedding(32000, 4096).to(dev)
        body = mlp([4096] * 9)
        params = [*emb.parameters(), *body.parameters()]
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)

        def lm(tokens: Any) -> None:
            tokens = tokens.to(dev, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = body(emb(tokens))
                loss = h.float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return loader(Tokens(), 16, 2, True), lm

    if case == "pageable-h2d":
        model = nn.Sequential(
            nn.Conv2d(3, 16, 8, 8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)
        ).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return loader(Pool((3, 320, 320)), 32, 6, False, prefetch=2), classify(model, opt, blocking=True)

    if case == "item-sync":
        model = mlp([1024] * 5 + [10])
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        log: list[tuple[float, float]] = []

        def logged(batch: Any) -> None:
            x, y = batch
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            out = model(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            log.append((loss.item(), (out.argmax(1) == y).float().mean().item()))  # the host waits on the GPU

        return loader(Features(1024), 512, 4, True), logged

    if case == "tiny-mlp":
        model = mlp([1024] * 8 + [10])
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        return loader(Features(1024), 8, 2, True), classify(model, opt)

    if case == "fp32-matmul":
        torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, said out loud
        model = mlp([256] + [4096] * 6 + [10])
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        return loader(Features(256), 2048, 2, True), classify(model, opt)

    if case == "cost":
        model = nn.Linear(64, 10).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = torch.randn(4096, 64)
        ds = torch.utils.data.TensorDataset(data, torch.zeros(4096, dtype=torch.long))

        def cycle() -> Any:
            while True:
                yield from DataLoader(ds, batch_size=64, num_workers=0)

        it = cycle()
        return (lambda: next(it)), classify(model, opt)
    raise SystemExit(f"gpu_check: unknown case {case!r}")


def _child(case: str, seconds: float, profile: bool) -> int:
    """One training: ``seconds`` of steps (agent on unless TRAINMON_DISABLE), or warm-up then PROFILE_STEPS
    profiled steps (the ground truth); prints one JSON line."""
    import torch

    import trainmon.agent

    dev = torch.device("cuda")
    torch.cuda.init()  # the job initialises CUDA (the agent never does)
    trainmon.agent.attach()
    fetch, step = _workload("gpu-bound" if case in ("energy", "memory") else case, dev)
    if case == "cost":
        return _cost_child(fetch, step)
    if case == "energy":
        return _energy_child(fetch, step, seconds)
    if case == "memory":
        return _memory_child(fetch, step, seconds)
    if not profile:
        deadline = time.monotonic() + seconds
        n = 0
        while time.monotonic() < deadline:
            step(fetch())
            n += 1
        torch.cuda.synchronize()
        print(json.dumps({"steps": n, **trainmon.agent.stats()}))
        return 0
    for _ in range(WARMUP_STEPS):
        step(fetch())
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(PROFILE_STEPS):
            with torch.profiler.record_function(STEP_LABEL):
                with torch.profiler.record_function(WAIT_LABEL):
                    batch = fetch()
                step(batch)
        torch.cuda.synchronize()
    gpu, waits, steps = profile_intervals(prof.events())
    print(json.dumps({"truth": ground_truth(gpu, waits, steps), "steps": len(steps)}))
    return 0


def profile_intervals(events: Iterable[Any]) -> tuple[list[tuple[float, float]], ...]:
    """(GPU work, data waits, steps) as (start, end) µs from torch.profiler events."""
    import torch

    gpu, waits, steps = [], [], []
    for e in events:
        span = (float(e.time_range.start), float(e.time_range.end))
        if e.name in (WAIT_LABEL, STEP_LABEL):
            if e.device_type == torch.autograd.DeviceType.CPU:  # each range is drawn on the GPU track too
                (waits if e.name == WAIT_LABEL else steps).append(span)
        elif e.device_type == torch.autograd.DeviceType.CUDA:  # kernels, copies, memsets
            gpu.append(span)
    return gpu, waits, steps


def _cost_child(fetch: Callable[[], Any], step: Callable[[Any], None]) -> int:
    import torch

    warm = time.monotonic() + 2.0  # the agent's sender installs the exposed probe within its first ticks
    while time.monotonic() < warm:
        step(fetch())
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(COST_STEPS):
        step(fetch())
    elapsed = time.perf_counter() - t  # host time per step: nothing here waits on the GPU
    torch.cuda.synchronize()
    print(json.dumps({"step_us": elapsed / COST_STEPS * 1e6}))
    return 0


def _energy_child(fetch: Callable[[], Any], step: Callable[[Any], None], seconds: float) -> int:
    """Steady load: after 3 s of warm-up, NVML's energy counter read before and after ``seconds`` of steps."""
    import pynvml
    import torch

    pynvml.nvmlInit()
    uuid = "GPU-" + str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    warm = time.monotonic() + 3.0
    while time.monotonic() < warm:
        step(fetch())
    torch.cuda.synchronize()
    c0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
    n = 0
    while time.monotonic() < t0 + seconds:
        step(fetch())
        n += 1
    torch.cuda.synchronize()
    c1, t1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
    print(json.dumps({"steps": n, "t0": t0, "t1": t1, "counter_j": (c1 - c0) / 1e3, "uuid": uuid}))
    return 0


def _memory_child(fetch: Callable[[], Any], step: Callable[[Any], None], seconds: float) -> int:
    """The steady load keeping MEMORY_LEAK_MB more each step (outputs kept across steps); after each step the
    training reads its own ``max_memory_allocated()`` (monotonic time, bytes)."""
    import torch

    kept, own = [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        step(fetch())
        kept.append(torch.empty(MEMORY_LEAK_MB << 20, dtype=torch.uint8, device="cuda"))
        own.append((time.monotonic(), torch.cuda.max_memory_allocated()))
    torch.cuda.synchronize()
    own.append((time.monotonic(), torch.cuda.max_memory_allocated()))
    print(json.dumps({"steps": len(kept), "own": own}))
    return 0


# ---------------------------------------------------------------- running the cases (the parent)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _run_child(case: str, seconds: float, env: dict[str, str], *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", case, "--seconds", str(seconds), *extra]
    child = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(600.0, 10 * seconds))
    if child.returncode != 0:
        raise RuntimeError(f"{case}: the training failed:\n{child.stderr[-4000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


class Recorder:
    """A real ``trainmon record`` on its own socket; ``report()`` stops it and returns the JSON report."""

    def __init__(self, tmp: str, name: str) -> None:
        self.addr, self.path = os.path.join(tmp, f"{name}.sock"), os.path.join(tmp, f"{name}.tmrec")
        cmd = [sys.executable, "-m", "trainmon", "record", "-o", self.path, "--listen", self.addr, "-q"]
        self.proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.addr):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"trainmon record did not start: {self.stop()}")
            time.sleep(0.05)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        _, err = self.proc.communicate(timeout=60)
        return (err or b"").decode(errors="replace")[-2000:]

    def report(self) -> dict[str, Any]:
        time.sleep(1.5)  # the last batches reach the monitor
        self.stop()
        out = subprocess.run(
            [sys.executable, "-m", "trainmon", "report", self.path, "--format", "json"],
            env=_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)


def run_case(case: Case, seconds: float, tmp: str) -> dict[str, Any]:
    """One case: the recorded run with the agent, then the profiled run without it. A result row."""
    rec = Recorder(tmp, case.name)
    try:
        stats = _run_child(case.name, seconds, dict(_env(), TRAINMON_ADDR=rec.addr))
    except BaseException:
        rec.stop()
        raise
    report = rec.report()
    truth = _run_child(case.name, seconds, dict(_env(), TRAINMON_DISABLE="1"), "--profile")["truth"]
    (run,) = report["runs"]
    gpus = report["system"].get("gpus") or []
    return {
        "case": case.name,
        "verdict": report["verdict"]["code"],
        "summary": report["verdict"]["summary"],
        "findings": [f["code"] for f in report["findings"]],
        "gpm": any(g.get("sm_active_percent_p50") is not None for g in gpus),
        "wait": run.get("data_wait_fraction"),
        "exposed": run.get("exposed_wait_fraction"),
        "truth_exposed": truth["exposed"],
        "truth_idle": truth["idle"],
        "truth_wait": truth["wait"],
        "agent": stats,
        "energy": run.get("energy"),
    }


def measure_cost(tmp: str) -> dict[str, float]:
    """Host time per step of one small CUDA loop (no sync in the loop) with the agent off, on without the
    exposed probe, and on with it; each a fresh process, configurations interleaved, median of COST_REPEATS."""
    rec = Recorder(tmp, "cost")
    times: dict[str, list[float]] = {name: [] for name in COST}
    try:
        for _ in range(COST_REPEATS):
            for name, extra in COST.items():
                env = dict(_env(), TRAINMON_ADDR=rec.addr, **extra)
                times[name].append(_run_child("cost", 0, env)["step_us"])
    finally:
        rec.stop()
    return {name: statistics.median(v) for name, v in times.items()}


class PowerLog:
    """nvidia-smi's power.draw of every GPU every 100 ms, stamped on this process's monotonic clock."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, str, float]] = []  # (t, uuid, W)
        self.error: str | None = None
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                SMI, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
        except OSError as e:
            self.proc, self.error = None, f"not runnable: {e}"
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            uuid, _, watts = line.strip().partition(", ")
            try:
                self.samples.append((time.monotonic(), uuid, float(watts)))
            except ValueError:  # "[N/A]"
                continue

    def stop(self) -> list[tuple[float, str, float]]:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.thread.join(timeout=5)
        return self.samples


def measure_energy(tmp: str, seconds: float = ENERGY_SECONDS) -> dict[str, Any]:
    """One steady load under ``trainmon record`` with nvidia-smi logging: the three joules per step compared."""
    log = PowerLog()
    rec = Recorder(tmp, "energy")
    try:
        child = _run_child("energy", seconds, dict(_env(), TRAINMON_ADDR=rec.addr))
    except BaseException:
        rec.stop()
        log.stop()
        raise
    samples = log.stop()
    (run,) = rec.report()["runs"]
    energy = run.get("energy") or {}
    watts = [(t, w) for t, uuid, w in samples if uuid == child["uuid"]]
    smi_j = integrate(watts, child["t0"], child["t1"])
    steps = max(1, int(child["steps"]))
    return {
        "trainmon_j_step": energy.get("joules_per_step"),
        "method": energy.get("method"),
        "counter_j_step": child["counter_j"] / steps,
        "smi_j_step": None if smi_j is None else smi_j / steps,
        "smi_error": log.error or (None if watts else "no samples for this GPU"),
        "steps": steps,
        "mean_w": child["counter_j"] / max(1e-9, child["t1"] - child["t0"]),
    }


def measure_memory(tmp: str) -> dict[str, Any]:
    """The leaking load under ``trainmon record``: the agent's reads (the recording) and memory.creep (judged over
    seconds, not the default minutes) against the training's own reads."""
    from trainmon.diagnose import Thresholds, evaluate
    from trainmon.record import load_recording

    rec = Recorder(tmp, "memory")
    try:
        child = _run_child("memory", MEMORY_SECONDS, dict(_env(), TRAINMON_ADDR=rec.addr))
    finally:
        time.sleep(1.5)
        rec.stop()
    store, _ = load_recording(rec.path)
    (run,) = [r for r in store.runs.values() if r.measured_by == "agent"]
    th = Thresholds(creep_min_s=5.0, creep_min_mb=64.0)
    creep = [f for f in evaluate(store, run.last_seen, th) if f.code == "memory.creep"]
    memory = run.cuda_memory
    return {
        "own": child["own"],
        "agent": list(zip(memory.t["peak_allocated"], memory.v["peak_allocated"], strict=True)),
        "creep_mb_per_1000_steps": creep[0].evidence["growth_mb_per_1000_steps"] if creep else None,
    }


def device_name() -> str:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{props.name} (CUDA {torch.version.cuda}, torch {torch.__version__})"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=25.0, help="length of each recorded training")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: " + ", ".join(CASES))
    ap.add_argument("--markdown", nargs="?", const=str(DOC), default=None, help="write the results into FILE")
    ap.add_argument("--no-cost", action="store_true", help="skip the agent's cost per step")
    ap.add_argument("--no-energy", action="store_true", help="skip the energy check")
    ap.add_argument("--energy-only", action="store_true", help="only the energy check (no cases, no cost)")
    ap.add_argument("--no-memory", action="store_true", help="skip the CUDA memory check")
    ap.add_argument("--json", default=None, help="also write the result rows to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child, args.seconds, args.profile)
    names = [] if args.energy_only else [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"gpu_check: unknown case {unknown[0]!r} (cases: {', '.join(CASES)})", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed: the GPU validation needs PyTorch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is False): nothing to validate", file=sys.stderr)
        return 2
    device = device_name()
    print(f"gpu_check on {device}", flush=True)
    rows: list[dict[str, Any]] = []
    cost: dict[str, float] = {}
    energy: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="tm-gpu-check-") as tmp:
        for name in names:
            print(f"  {name}: {CASES[name].what}", flush=True)
            try:
                rows.append(run_case(CASES[name], args.seconds, tmp))
            except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError) as e:
                print(f"  {name}: {e}", file=sys.stderr)
                rows.append({"case": name, "error": str(e)})
        if not args.no_cost and not args.energy_only:
            cost = measure_cost(tmp)
        if not args.no_energy:
            print(f"  energy: {ENERGY_SECONDS:.0f} s of steady load against NVML's counter and nvidia-smi", flush=True)
            try:
                energy = measure_energy(tmp)
            except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError) as e:
                energy = {"error": str(e)}
        if not args.no_memory and not args.energy_only:
            print(f"  memory: {MEMORY_SECONDS:.0f} s leaking {MEMORY_LEAK_MB} MB a step", flush=True)
            try:
                memory = measure_memory(tmp)
            except (RuntimeError, subprocess.SubprocessError, ValueError, KeyError) as e:
                memory = {"error": str(e)}
    print()
    if rows:
        print(format_table(rows))
    for r in rows:
        e = r.get("energy") or {}
        joules = f" [{e['joules_per_step']:.2f} J/step, {e['method']}]" if e.get("joules_per_step") else ""
        print(f"  {r['case']}: {r.get('verdict')}: {r.get('summary') or r.get('error', '')}{joules}")
    if cost:
        print()
        print(format_cost(cost))
    if energy is not None:
        print("\nenergy: {}: {}".format(*check_energy(energy)))
    if memory is not None:
        print("memory: {}: {}".format(*check_memory(memory)))
    if args.json:
        out = {"device": device, "rows": rows, "cost": cost, "energy": energy, "memory": memory}
        Path(args.json).write_text(json.dumps(out, indent=2))
    if args.markdown:
        write_markdown(Path(args.markdown), markdown(device, rows, cost, time.strftime("%Y-%m-%d"), energy, memory))
    return 0 if passed(rows, energy) and (memory is None or check_memory(memory)[0] == "pass") else 1


if __name__ == "__main__":
    sys.exit(main())
