"""Make the README's screenshots from real demo recordings, through the same screen users get.

    python scripts/screenshots.py            # record what is missing, then draw every screenshot
    python scripts/screenshots.py --record   # record the scenarios again first (about 4 minutes)

Recordings are real trainings of the demo scenarios (``trainmon record`` + ``trainmon.demo.train``), kept under
screenshots/recordings/ so the images can be redrawn without training again. Each screenshot replays one at its
end (or with the time cursor moved back) under Textual's ``run_test`` and exports the SVG, then converts it to PNG
with headless Chromium (``apt-get install chromium``) or cairosvg when either is there. The stack-dump image is
taken live: a real Monitor watches a real demo training and py-spy dumps its main process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testsupport.browser import find_chromium, headless_flags  # noqa: E402
from trainmon.demo.scenarios import SCENARIOS, command  # noqa: E402
from trainmon.monitor import Monitor  # noqa: E402
from trainmon.record import load_recording  # noqa: E402
from trainmon.tui import TrainmonApp  # noqa: E402
from trainmon.tui.theme import Glyphs  # noqa: E402
from trainmon.view import LiveFeed, ReplayFeed  # noqa: E402

OUT = ROOT / "screenshots"
RECORDINGS = OUT / "recordings"
RECORD_SECONDS = 75  # more than the 1-minute window, so the plots are full
COLOR = Glyphs("braille", True)


@dataclass(frozen=True)
class Shot:
    name: str
    recording: str
    size: tuple[int, int]
    keys: tuple[str, ...] = ()


SHOTS = (
    Shot("input-starved", "few-workers", (120, 40)),
    Shot("healthy", "healthy", (120, 40)),
    Shot("compact-80x24", "switch", (80, 24)),
    Shot("time-cursor", "switch", (120, 40), ("left", *["shift+left"] * 4)),
)


# ---------------------------------------------------------------- recordings


def record(scenario_name: str, path: Path) -> None:
    scenario = SCENARIOS[scenario_name]
    tmp = tempfile.mkdtemp(prefix="tm-shots-")
    addr = os.path.join(tmp, "m.sock")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRAINMON_ADDR", None)
    recorder = subprocess.Popen(
        [sys.executable, "-m", "trainmon", "record", "-o", str(path), "--listen", addr, "-q"], env=env
    )
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(addr) and time.monotonic() < deadline:
            time.sleep(0.05)
        cmd = command(scenario, ["--seconds", str(RECORD_SECONDS)])
        print(f"recording {scenario_name}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(
            cmd,
            env=dict(env, TRAINMON_ADDR=addr, TRAINMON_DEMO_NAME=f"demo:{scenario_name}"),
            stdout=subprocess.DEVNULL,
            check=True,
        )
        time.sleep(1.5)
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- drawing


async def _settle(app: TrainmonApp, pilot, frames: int = 1, timeout: float = 10.0) -> None:
    target = app.frames_applied + frames
    deadline = time.monotonic() + timeout
    while app.frames_applied < target and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()


async def draw_replay(shot: Shot) -> str:
    store, _ = load_recording(str(RECORDINGS / f"{shot.recording}.tmrec"))
    feed = ReplayFeed(store, name=shot.recording)
    # The moment training ended, not the recorder's last tick a second or two later (processes gone by then).
    ends = [run.steps.end[-1] for run in store.runs.values() if len(run.steps)]
    feed.clock.seek(min(feed.clock.end, max(ends) + 0.5) if ends else feed.clock.end)
    app = TrainmonApp(feed, glyphs=COLOR, watchdog=False)
    async with app.run_test(size=shot.size) as pilot:
        await _settle(app, pilot)
        for key in shot.keys:
            await pilot.press(key)
            await _settle(app, pilot)
        return app.export_screenshot(title=f"trainmon replay {shot.recording}.tmrec")


async def draw_live_stack_dump(size: tuple[int, int] = (120, 40)) -> str:
    """A real Monitor on a real demo training; wait for a verdict, select the main process, press d."""
    tmp = tempfile.mkdtemp(prefix="tm-shots-")
    addr = os.path.join(tmp, "m.sock")
    monitor = Monitor(addr)
    monitor.start()
    scenario = SCENARIOS["main-process"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRAINMON_ADDR=addr, TRAINMON_DEMO_NAME="demo:main-process")
    child = subprocess.Popen(command(scenario, ["--seconds", "60"]), env=env, stdout=subprocess.DEVNULL)
    feed = LiveFeed(monitor)
    try:
        app = TrainmonApp(feed, glyphs=COLOR, watchdog=False)
        async with app.run_test(size=size) as pilot:
            start = time.monotonic()
            while time.monotonic() < start + 58:  # most of the window filled, the verdict named
                await _settle(app, pilot)
                f = app.frame
                named = f is not None and f.verdict is not None and f.verdict.code == "input.main_process"
                if named and f.procs and time.monotonic() > start + 45:
                    break
            await pilot.press("d")
            await app.workers.wait_for_complete()
            await pilot.pause(0.2)
            return app.export_screenshot(title="trainmon — py-spy stack dump of the training's main process")
    finally:
        child.terminate()
        child.wait()
        feed.close()
        monitor.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- SVG → PNG


def svg_size(svg: str) -> tuple[int, int]:
    import re

    m = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg)
    return (int(float(m.group(1))) + 1, int(float(m.group(2))) + 1) if m else (1500, 1000)


def to_png(svg_path: Path, png_path: Path) -> bool:
    svg = svg_path.read_text()
    try:
        import cairosvg  # type: ignore[import-not-found]

        cairosvg.svg2png(bytestring=svg.encode(), write_to=str(png_path))
        return True
    except ImportError:
        pass
    chromium = find_chromium("google-chrome")
    if chromium is None:
        print("no cairosvg and no chromium: SVGs only (apt-get install chromium, or pip install cairosvg)")
        return False
    width, height = svg_size(svg)
    with tempfile.TemporaryDirectory(prefix="tm-png-") as d:
        page = Path(d) / "page.html"
        page.write_text(f'<html><body style="margin:0;background:#0c0c0c">{svg}</body></html>')
        subprocess.run(
            [
                chromium,
                *headless_flags(f"{d}/profile"),
                "--hide-scrollbars",
                f"--window-size={width},{height}",
                f"--screenshot={png_path}",
                page.as_uri(),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
    return png_path.exists()


def save(name: str, svg: str) -> None:
    svg_path = OUT / f"{name}.svg"
    svg_path.write_text(svg)
    png = OUT / f"{name}.png"
    print(f"wrote {svg_path}" + (f" and {png}" if to_png(svg_path, png) else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="record every scenario again first")
    parser.add_argument("--no-live", action="store_true", help="skip the live stack-dump screenshot")
    args = parser.parse_args()
    RECORDINGS.mkdir(parents=True, exist_ok=True)
    for scenario in sorted({s.recording for s in SHOTS}):
        path = RECORDINGS / f"{scenario}.tmrec"
        if args.record or not path.exists():
            record(scenario, path)
    for shot in SHOTS:
        save(shot.name, asyncio.run(draw_replay(shot)))
    if not args.no_live:
        save("stack-dump", asyncio.run(draw_live_stack_dump()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
