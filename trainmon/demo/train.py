"""A small real PyTorch training with a known bottleneck; run as ``python -m trainmon.demo.train``.

The dataset's per-sample cost (CPU work, or a sleep standing for a slow read) and the loader
settings decide what starves the loop. ``--self-report FILE`` writes the script's own
measurement of steps and data wait, which the tests compare against trainmon's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def build_dataset(size: int, features: int, cpu_ms: float, sleep_ms: float):
    import torch
    from torch.utils.data import Dataset

    class SyntheticDataset(Dataset):
        """Items cost ``cpu_ms`` of CPU work (decode/augment) and ``sleep_ms`` of waiting (slow read)."""

        def __len__(self) -> int:
            return size

        def __getitem__(self, index: int):
            if cpu_ms:
                _spin(cpu_ms / 1e3)
            if sleep_ms:
                time.sleep(sleep_ms / 1e3)
            g = torch.Generator().manual_seed(index)
            x = torch.randn(features, generator=g)
            return x, int(index % 10)

    return SyntheticDataset()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainmon.demo.train")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--cpu-ms", type=float, default=0.0, help="CPU work per sample in the loader")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="blocking wait per sample (slow storage)")
    p.add_argument("--width", type=int, default=512, help="hidden width: sets compute per step")
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--checkpoint-mb", type=float, default=64.0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--no-attach", action="store_true")
    p.add_argument("--warmup", type=int, default=5, help="steps excluded from the self-report")
    p.add_argument("--self-report", default=None)
    p.add_argument("--mp-context", default=None, choices=[None, "fork", "spawn", "forkserver"])
    args = p.parse_args(argv)

    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    if not args.no_attach:
        import trainmon.agent

        trainmon.agent.attach(name=os.environ.get("TRAINMON_DEMO_NAME") or "demo-train")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dataset = build_dataset(args.steps * args.batch_size + args.batch_size, args.features, args.cpu_ms,
                            args.sleep_ms)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.persistent and args.workers > 0, pin_memory=args.pin_memory,
                        multiprocessing_context=args.mp_context if args.workers > 0 else None)
    model = nn.Sequential(nn.Linear(args.features, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                          nn.ReLU(), nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    ckpt_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"trainmon-demo-ckpt-{os.getpid()}.pt")
    ballast = torch.zeros(int(args.checkpoint_mb * 2**20 / 4)) if args.checkpoint_every else None

    waits: list[float] = []
    step_ends: list[float] = [time.perf_counter()]
    step = 0
    while step < args.steps:
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                torch.save({"model": model.state_dict(), "ballast": ballast}, ckpt_path)
                with open(ckpt_path, "rb+") as fh:
                    os.fsync(fh.fileno())
            step_ends.append(time.perf_counter())
        del it
    if ballast is not None and os.path.exists(ckpt_path):
        os.unlink(ckpt_path)

    if args.self_report:
        w = args.warmup
        durations = [b - a for a, b in zip(step_ends[w:-1], step_ends[w + 1 :], strict=False)]
        report = {
            "steps": step,
            "data_wait_fraction": sum(waits[w:]) / sum(durations) if durations else None,
            "step_time_ms_p50": sorted(durations)[len(durations) // 2] * 1e3 if durations else None,
            "pid": os.getpid(),
        }
        with open(args.self_report, "w") as fh:
            json.dump(report, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
