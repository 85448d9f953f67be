"""`trainmon serve`: the screen in a browser through textual-serve, loopback only by default."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import urllib.request

import psutil
import pytest

from testsupport.browser import CHROMIUM, headless_flags
from testsupport.paths import RECORDINGS
from testsupport.procs import child_env, free_port, trainmon_cmd, wait_for

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("textual_serve")


@pytest.fixture
def served():
    recording = next(iter(sorted(RECORDINGS.glob("*.tmrec"))), None)
    if recording is None:
        pytest.skip("no recording under screenshots/recordings")
    port = free_port()
    server = subprocess.Popen(
        trainmon_cmd("serve", "--port", str(port), "--replay", str(recording)),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    assert wait_for(up, 30), server.stderr.read() if server.poll() is not None else "server did not answer"
    yield server, port
    for child in psutil.Process(server.pid).children(recursive=True):
        child.kill()
    server.kill()
    server.communicate()


def test_a_browser_session_gets_the_screen_over_the_websocket(served):
    _, port = served

    async def read_screen() -> bytes:
        buf = b""
        async with aiohttp.ClientSession() as session, session.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send_str(json.dumps(["resize", {"width": 120, "height": 40}]))
            try:
                async with asyncio.timeout(30):
                    async for msg in ws:
                        buf += msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
                        if b"CPU" in buf and (b"insufficient_data" in buf or b"input." in buf):
                            break
            except TimeoutError:
                pass
        return buf

    screen = asyncio.run(read_screen())
    assert b"CPU" in screen and (b"insufficient_data" in screen or b"input." in screen), screen[-500:]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_headless_chromium_loads_the_page_and_starts_a_screen(served):
    server, port = served
    profile = tempfile.mkdtemp(prefix="tm-chromium-")
    try:
        res = subprocess.run(
            [
                CHROMIUM,
                *headless_flags(profile),
                "--virtual-time-budget=8000",
                "--dump-dom",
                f"http://127.0.0.1:{port}/",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert res.returncode == 0 and "textual" in res.stdout.lower()
    # The page's websocket made the server start a trainmon screen for this browser.
    assert wait_for(
        lambda: any("replay" in " ".join(c.cmdline()) for c in psutil.Process(server.pid).children(recursive=True)), 20
    )


def test_non_loopback_needs_allow_remote():
    res = subprocess.run(
        trainmon_cmd("serve", "--host", "0.0.0.0"), env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "not a loopback address" in res.stderr and "Traceback" not in res.stderr
