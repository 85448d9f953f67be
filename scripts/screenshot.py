"""The screenshot of docs/images/: trainmon's live screen (120×40) over a real CPU demo training, its GPU pane fed by
the fake NVML of the tests (testsupport/fake_pynvml.py: two GPUs, the training's process on GPU0), since the
machine that makes it has no GPU. The picture's caption in the README says so.

    python scripts/screenshot.py [--out docs/images/screen-fake-gpu.svg] [--seconds 20]

A real GPU recording replaces it whenever one is made (``trainmon replay`` of it, the same 120×40).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testsupport.fake_pynvml import FakeNvml  # noqa: E402
from trainmon.monitor import Monitor  # noqa: E402
from trainmon.tui.app import TrainmonApp  # noqa: E402
from trainmon.view.feeds.live import LiveFeed  # noqa: E402

GIB = 1 << 30
CAPTION = "GPU figures from the fake NVML of the tests (no GPU on the machine that took it); the training is real"


def training(addr: str, seconds: float) -> subprocess.Popen[bytes]:
    """The demo's main-process loader training (its verdict: input.main_process), reporting to ``addr``."""
    env = dict(os.environ, TRAINMON_ADDR=addr, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "trainmon.demo.train", "--workers", "0", "--cpu-ms", "2"]
    cmd += ["--steps", "100000000", "--seconds", str(seconds)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def shoot(out: Path, seconds: float) -> str:
    nvml = FakeNvml(2, clock=time.monotonic)
    nvml.set_power(0, 180_000)
    nvml.set_power(1, 62_000)
    with tempfile.TemporaryDirectory(prefix="tm-shot-") as tmp:
        addr = os.path.join(tmp, "m.sock")
        monitor = Monitor(addr, interval=1.0, nvml_module=nvml)
        monitor.start()
        proc = training(addr, seconds + 30)
        try:
            nvml.devices[0].processes = [(proc.pid, 3 * GIB)]
            app = TrainmonApp(LiveFeed(monitor), watchdog=False)
            async with app.run_test(size=(120, 40)) as pilot:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    await pilot.pause(0.25)
                svg = app.export_screenshot()
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(svg)
                return svg
        finally:
            proc.terminate()
            proc.wait()
            monitor.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "screen-fake-gpu.svg")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the training runs before the picture")
    args = ap.parse_args()
    svg = asyncio.run(shoot(args.out, args.seconds))
    print(f"wrote {args.out} ({len(svg) // 1024} KiB): {CAPTION}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
