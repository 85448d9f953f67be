"""The demo training's command line: ``python -m trainmon.demo.train --help`` (``trainmon.demo.lit`` takes the same).

The options set the per-sample cost of the data (``trainmon.demo.data``), the model's compute, the loop's length and
what happens during it (checkpoints, evaluation, a switch of loader, a deadlock, cached trees), and the
self-report the tests compare trainmon's figures against.
"""

from __future__ import annotations

import argparse


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options of ``argv`` (None: the process's); one add_argument per option, hence the length."""
    p = argparse.ArgumentParser(prog="python -m trainmon.demo.train")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seconds", type=float, default=0.0, help="stop after this long instead (0: use --steps)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--cpu-ms", type=float, default=0.0, help="CPU work per sample in the loader")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="latency per sample (a slow service)")
    p.add_argument("--io-reads", type=int, default=0, help="uncached random reads per sample (O_DIRECT)")
    p.add_argument("--io-kb", type=int, default=4, help="size of each read")
    p.add_argument("--io-mb", type=int, default=256, help="size of the data file the reads hit")
    p.add_argument("--io-file", default=None, help=argparse.SUPPRESS)
    p.add_argument("--remote-latency-ms", type=float, default=0.0, help="GET each sample from a slow loopback store")
    p.add_argument("--remote-kb", type=int, default=256)
    p.add_argument("--remote", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--manifest",
        action="store_true",
        help="with --remote-latency-ms: fetch only a manifest per worker, over a connection kept open",
    )
    p.add_argument("--rate-limit", type=float, default=0.0, help="samples per second per worker (a token bucket)")
    p.add_argument("--width", type=int, default=512, help="hidden width: sets compute per step")
    p.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="size --width so that a model step takes about this long on this host (timed at start-up; one rank)",
    )
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--persistent", action="store_true")
    p.add_argument(
        "--cache-samples",
        action="store_true",
        help="each process keeps the samples it loaded in a dict: a miss costs what the options ask, a hit nothing",
    )
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--checkpoint-mb", type=float, default=64.0)
    p.add_argument("--eval-every", type=int, default=0, help="run an evaluation pass every N steps")
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument(
        "--switch-at",
        type=float,
        default=0.0,
        help="after this share of the run, switch to --switch-workers workers with --switch-cpu-ms per sample "
        "(and no other per-sample cost); the switch is marked on the run's timeline as 'switch'",
    )
    p.add_argument("--switch-workers", type=int, default=2, help="(--switch-at) workers after the switch")
    p.add_argument("--switch-cpu-ms", type=float, default=0.0, help="(--switch-at) CPU work per sample after it")
    p.add_argument(
        "--switch-in-place",
        action="store_true",
        help="(--switch-at, --workers 0) keep the DataLoader: only its samples' CPU work becomes --switch-cpu-ms",
    )
    p.add_argument("--slow-rank", type=int, default=None, help="(distributed) this rank's data is slower")
    p.add_argument("--slow-sleep-ms", type=float, default=0.0)
    p.add_argument(
        "--extra-matmuls",
        type=int,
        default=0,
        help="each forward multiplies the hidden activations by a fixed width×width matrix this many times more "
        "(compute without parameters)",
    )
    p.add_argument(
        "--extra-rank",
        type=int,
        default=None,
        help="(distributed) only this rank does --extra-matmuls: a slower or throttled device",
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-attach", action="store_true")
    p.add_argument("--warmup", type=int, default=5, help="steps excluded from the self-report")
    p.add_argument("--self-report", default=None)
    p.add_argument("--mp-context", default=None, choices=[None, "fork", "spawn", "forkserver"])
    p.add_argument(
        "--hang-after", type=float, default=0.0, help="rotate the metrics log after this long: a deadlock (0: never)"
    )
    p.add_argument("--watchdog-s", type=float, default=0.0, help="exit (faulthandler) after this long without a step")
    p.add_argument(
        "--upload-stall-after",
        type=float,
        default=0.0,
        help="ship metrics to a loopback collector that stops answering after this long: a freeze (0: no upload)",
    )
    p.add_argument("--upload-timeout-s", type=float, default=12.0, help="the metrics upload's socket timeout")
    p.add_argument("--trace-nodes", type=int, default=0, help="a Python tree of this many nodes per step, cached")
    p.add_argument("--trace-keep", type=int, default=60, help="steps whose trees the cache keeps")
    p.add_argument("--epoch-batches", type=int, default=0, help="batches per epoch (0: one epoch for the whole run)")
    p.add_argument(
        "--worker-setup-ms", type=float, default=0.0, help="CPU time each worker spends building the dataset's index"
    )
    p.add_argument(
        "--feed",
        default="dataloader",
        choices=["dataloader", "prefetch", "threadpool"],
        help="how batches reach the loop: a DataLoader, a DataLoaderX (a BackgroundGenerator's thread), a custom "
        "iterator decoding on a thread pool (trainmon.demo.feeds)",
    )
    p.add_argument("--max-prefetch", type=int, default=1, help="(--feed prefetch) the BackgroundGenerator's queue")
    p.add_argument("--decode-threads", type=int, default=4, help="(--feed threadpool) the pool's threads")
    p.add_argument("--decode-kb", type=int, default=64, help="(--feed threadpool) decoded KiB per sample")
    p.add_argument("--metrics-window", type=int, default=0, help="per-step Python metrics over this many batches")
    p.add_argument("--progress", action="store_true", help="tqdm over the batches, its postfix set every step")
    p.add_argument("--epochs", type=int, default=0, help="(python -m trainmon.demo.lit) stop after this many epochs")
    return p.parse_args(argv)
