"""`trainmon serve` over its websocket, without a browser: screens that outlive the watchdog, end with the server, or
say why they could not start; loopback only by default. The browser itself: test_serve_browser.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest

from testsupport.browser import Served, start_serve
from testsupport.paths import RECORDINGS
from testsupport.procs import child_env, trainmon_cmd, wait_for
from trainmon.tui.watchdog import CHECK_EVERY_S

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("textual_serve")


@pytest.fixture
def served(tmp_path):
    served = start_serve("serve", "--replay", str(RECORDINGS / "healthy.tmrec"), log_path=str(tmp_path / "serve.log"))
    yield served
    served.stop()


async def _session(port: int, hold_s: float) -> tuple[bytes, bytes, list[str], bool]:
    """Connect as the page does, read until the first screen, then hold ``hold_s`` more: (first screen, bytes
    during the hold, text messages, whether the socket is still open at the end)."""
    first, later, texts = b"", b"", []
    url = f"ws://127.0.0.1:{port}/ws?width=120&height=40"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_str(json.dumps(["resize", {"width": 120, "height": 40}]))
        deadline, shown_at = time.monotonic() + 30, None
        while time.monotonic() < (deadline if shown_at is None else shown_at + hold_s):
            try:
                msg = await ws.receive(timeout=0.5)
            except asyncio.TimeoutError:
                continue
            if msg.type == aiohttp.WSMsgType.TEXT:
                texts.append(msg.data)
            elif msg.type == aiohttp.WSMsgType.BINARY:
                if shown_at is None:
                    first += msg.data
                    if b"CPU" in first and b"REPLAY" in first:
                        shown_at = time.monotonic()
                else:
                    later += msg.data
            else:
                break
        return first, later, texts, not ws.closed


def test_a_websocket_session_outlives_the_watchdog(served: Served):
    """Under the web driver fds 0 and 2 are pipes: the TTY check must not end the screen at its first round."""
    first, later, _, open_ = asyncio.run(_session(served.port, 3 * CHECK_EVERY_S + 1))
    assert b"CPU" in first and b"REPLAY" in first, first[-500:]
    assert open_ and later, "the screen ended while its tab was open"
    assert len(served.screens()) == 1
    assert "terminal lost" not in served.log() and "server lost" not in served.log(), served.log()


def test_a_killed_server_takes_its_screens_with_it(served: Served):
    async def hold() -> list[int]:
        async with aiohttp.ClientSession() as session, session.ws_connect(f"ws://127.0.0.1:{served.port}/ws") as ws:
            assert wait_for(lambda: served.screens(), 20)
            await ws.receive(timeout=20)
            screens = served.screens()
            served.process.send_signal(signal.SIGKILL)  # no quit for anyone: the screens see their parent go
            served.process.wait()
            return screens

    screens = [psutil.Process(pid) for pid in asyncio.run(hold())]
    _, alive = psutil.wait_procs(screens, timeout=2 * CHECK_EVERY_S + 5)
    assert not alive, [p.cmdline() for p in alive]


def test_a_screen_that_cannot_start_says_why_in_the_page(tmp_path):
    """A live screen whose agent address is taken (by another monitor) fails; the page gets its one-line error."""
    address = str(tmp_path / "taken.sock")
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.bind(address)
    holder.listen(1)
    served = start_serve("--listen", address, "serve", log_path=str(tmp_path / "serve.log"))
    try:

        async def texts() -> list[str]:
            got = []
            async with aiohttp.ClientSession() as s, s.ws_connect(f"ws://127.0.0.1:{served.port}/ws") as ws:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        got.append(msg.data)
            return got

        notices = [json.loads(t) for t in asyncio.run(asyncio.wait_for(texts(), 30))]
        assert ["trainmon_notice", f"trainmon: error: another trainmon monitor is already listening on {address}"] in (
            notices
        ), notices
        assert wait_for(lambda: not served.screens(), 5)
    finally:
        served.stop()
        holder.close()


def test_non_loopback_needs_allow_remote():
    res = subprocess.run(
        trainmon_cmd("serve", "--host", "0.0.0.0"), env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "not a loopback address" in res.stderr and "Traceback" not in res.stderr


def test_a_port_in_use_is_one_line():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = str(taken.getsockname()[1])
        res = subprocess.run(
            trainmon_cmd("serve", "--port", port), env=child_env(), capture_output=True, text=True, timeout=60
        )
    finally:
        taken.close()
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        f"trainmon: error: cannot serve on 127.0.0.1:{port}: Address already in use"
    ], res.stderr


def test_max_screens_must_be_positive():
    res = subprocess.run(
        trainmon_cmd("serve", "--max-screens", "0"), env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and "--max-screens must be at least 1" in res.stderr and "Traceback" not in res.stderr


def test_screens_draw_for_a_browser_not_for_the_host_terminal():
    from trainmon.serve import screen_environment

    host = {"TERM": "dumb", "LANG": "C", "TERM_PROGRAM": "iTerm.app", "TERM_PROGRAM_VERSION": "3", "PATH": "/bin"}
    env = screen_environment(host)
    assert env["TEXTUAL_DRIVER"].startswith("textual.drivers.web_driver")
    assert env["TRAINMON_GLYPHS"] == "braille"  # xterm.js draws braille whatever the host's locale says
    assert env["TERM_PROGRAM"] != "iTerm.app" and "TERM_PROGRAM_VERSION" not in env and env["PATH"] == "/bin"
    assert screen_environment({**host, "TRAINMON_GLYPHS": "ascii"})["TRAINMON_GLYPHS"] == "ascii"
    assert env["TRAINMON_SERVER_PID"] == str(os.getpid())  # the screens' watchdog watches this process
