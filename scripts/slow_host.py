"""The scenario tests on a host whose model steps are slower: torch held to its slowest CPU path.

MKL's conditional numerical reproducibility in its compatible mode (``MKL_CBWR=COMPATIBLE``: SSE2 kernels for the
matrix products), oneDNN held to SSE4.1 and ATen's kernels to their default (unvectorised) dispatch make the demo
model's steps about twice as slow, as a host without AVX-512 or with slower cores would; the loaders' time-based
work (a decoding's milliseconds, a sleep) and Python itself are unchanged, as on that host. The script measures
the slowdown at the widths the scenarios were written for, then runs the scenario tests under it:

    python scripts/slow_host.py [-k EXPR]       # the slowdown, then tests/integration/test_scenarios.py

Exit status: pytest's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW_TORCH = {"MKL_CBWR": "COMPATIBLE", "DNNL_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"}
WIDTHS = (1024, 2048, 4096)
PROBE = (
    "import sys, torch; torch.set_num_threads(1); from trainmon.demo.sizing import step_time; "
    "print(' '.join(f'{step_time(w, 256, 32, torch.device(\"cpu\")) * 1e3:.2f}' for w in map(int, sys.argv[1:])))"
)


def step_ms(env: dict[str, str]) -> list[float]:
    """The demo model's step in ms at each of WIDTHS, in a fresh interpreter with ``env``."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, WIDTHS)], env=env, capture_output=True, text=True, check=True
    ).stdout
    return [float(x) for x in out.split()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", default=None, help="pytest -k: the scenarios to run (default: all)")
    args = p.parse_args()
    slow_env = {**os.environ, **SLOW_TORCH}
    fast, slow = step_ms(dict(os.environ)), step_ms(slow_env)
    for w, f, s in zip(WIDTHS, fast, slow, strict=True):
        print(f"width {w}: a step {f:.1f} ms, on the slow path {s:.1f} ms ({s / f:.2f}x)", flush=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s", "tests/integration/test_scenarios.py"]
    if args.k:
        cmd += ["-k", args.k]
    return subprocess.run(cmd, cwd=ROOT, env=slow_env).returncode


if __name__ == "__main__":
    sys.exit(main())
