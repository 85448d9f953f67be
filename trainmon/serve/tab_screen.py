"""One browser tab's screen: a ``trainmon`` process under Textual's web driver, its packets relayed to the websocket.

The process speaks the web driver's framing on its pipes (``D`` terminal bytes, ``M`` JSON meta, ``P`` packed data,
each a type byte, a 4-byte big-endian length and the payload), after a ``__GANGLION__`` line on stdout. It is
started without a shell, so the server is its parent: the screen's watchdog ends it if the server dies unannounced.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

log = logging.getLogger("trainmon.serve")
_T = TypeVar("_T", bytes, str)

READY_LINE = b"__GANGLION__\n"
QUIT_GRACE_S = 2.5  # after "quit", the screen's own exit (the live monitor stops its sources) before SIGTERM
TERM_GRACE_S = 1.0  # after SIGTERM, before SIGKILL: the tab's process is gone within 4 s of the tab closing
STDERR_LINES = 20
SERVER_PID_ENV = "TRAINMON_SERVER_PID"  # read by the screen's watchdog (trainmon/tui/watchdog.py)


class TabScreen:
    """A screen process for one websocket; ``relay`` copies its output to the browser until it exits."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        send_bytes: Callable[[bytes], Awaitable[None]],
        send_text: Callable[[str], Awaitable[None]],
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self._send_bytes = send_bytes
        self._send_text = send_text
        self.process: asyncio.subprocess.Process | None = None
        self.shown = False  # the screen drew something: a start failure has only its stderr to say why
        self.closing = False
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.ended = asyncio.Event()
        self._stdin_lock = asyncio.Lock()
        self._browser_gone = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    async def start(self, width: int, height: int) -> None:
        env = {**self.env, "COLUMNS": str(width), "ROWS": str(height)}
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )

    # ---- browser → screen

    async def send_input(self, text: str) -> None:
        await self._write(b"D", text.encode("utf-8"))

    async def send_meta(self, meta: Mapping[str, object]) -> None:
        await self._write(b"M", json.dumps(meta).encode("utf-8"))

    async def _write(self, kind: bytes, payload: bytes) -> None:
        proc = self.process
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return
        async with self._stdin_lock:
            try:
                proc.stdin.write(kind + len(payload).to_bytes(4, "big") + payload)
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError, RuntimeError):
                pass  # the screen is exiting: its relay will see the end of its output

    # ---- screen → browser

    async def relay(self, on_exit: Callable[[], Awaitable[None]]) -> None:
        """Copy the screen's output to the browser until the process ends, then call ``on_exit``."""
        proc = self.process
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        stderr = asyncio.create_task(self._read_stderr(proc.stderr))
        try:
            if await self._wait_ready(proc.stdout):
                await self._read_packets(proc.stdout)
        except asyncio.IncompleteReadError:
            pass  # the process ended
        finally:
            await proc.wait()
            await stderr
            self.ended.set()
            log.info("screen %d ended (exit status %s)", proc.pid, proc.returncode)
            await on_exit()

    async def _wait_ready(self, stdout: asyncio.StreamReader) -> bool:
        for _ in range(50):  # anything printed before the driver starts (a warning) comes first
            line = await stdout.readline()
            if not line:
                return False
            if line == READY_LINE:
                return True
        return False

    async def _read_packets(self, stdout: asyncio.StreamReader) -> None:
        while True:
            kind = await stdout.readexactly(1)
            size = int.from_bytes(await stdout.readexactly(4), "big")
            payload = await stdout.readexactly(size)
            if kind == b"D":
                self.shown = True
                await self._to_browser(self._send_bytes, payload)
            elif kind == b"M":
                meta = _json_object(payload)
                if meta.get("type") == "open_url" and "url" in meta:
                    message = json.dumps(["open_url", {"url": meta["url"], "new_tab": meta.get("new_tab", True)}])
                    await self._to_browser(self._send_text, message)
            # b"P" carries file deliveries, which the screen never makes

    async def _to_browser(self, send: Callable[[_T], Awaitable[None]], payload: _T) -> None:
        """Send unless the tab is gone; its output is still read to the end, or a full pipe would stall the screen
        before it could act on "quit"."""
        if self._browser_gone:
            return
        try:
            await send(payload)
        except (ConnectionResetError, RuntimeError):
            self._browser_gone = True

    async def _read_stderr(self, stderr: asyncio.StreamReader) -> None:
        """The screen's log lines (a traceback, ``trainmon: error: ...``) into the server's log, the last kept."""
        pending = b""
        while chunk := await stderr.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._log_line(line)
            pending = pending[-65536:]
        self._log_line(pending)

    def _log_line(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            self.stderr_tail.append(text)
            print(f"screen {self.pid}: {text}", file=sys.stderr, flush=True)

    # ---- ending

    async def stop(self) -> None:
        """End the screen: ask it to quit, then SIGTERM, then SIGKILL; returns once the process is gone."""
        proc = self.process
        if proc is None:
            return
        self.closing = True
        if proc.returncode is None:
            await self.send_meta({"type": "quit"})
        for grace, then in ((QUIT_GRACE_S, proc.terminate), (TERM_GRACE_S, proc.kill)):
            try:
                await asyncio.wait_for(self.ended.wait(), grace)
                return
            except asyncio.TimeoutError:
                if proc.returncode is None:
                    log.warning("screen %d did not exit in %.1f s: %s", proc.pid, grace, then.__name__)
                    try:
                        then()
                    except ProcessLookupError:
                        pass
        await self.ended.wait()

    def failure(self) -> str | None:
        """Why a screen that never drew ended: its last line on stderr (a one-line ``trainmon: error: ...``)."""
        if self.shown or not self.stderr_tail:
            return None
        return self.stderr_tail[-1]


def _json_object(payload: bytes) -> dict[str, object]:
    try:
        value = json.loads(payload)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def screen_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a screen process: Textual's web driver, and glyphs chosen for a browser, not the host.

    xterm.js in the page draws braille and true colour whatever the host terminal's locale or ``TERM`` say;
    ``TRAINMON_GLYPHS`` set by the user still wins.
    """
    env = dict(os.environ if base is None else base)
    env["TEXTUAL_DRIVER"] = "textual.drivers.web_driver:WebDriver"
    env["TEXTUAL_FPS"] = "60"
    env["TEXTUAL_COLOR_SYSTEM"] = "truecolor"
    env["TERM_PROGRAM"] = "trainmon-serve"  # not the host terminal's: Textual reads key sequences by it
    env.pop("TERM_PROGRAM_VERSION", None)
    env.setdefault("TRAINMON_GLYPHS", "braille")
    env[SERVER_PID_ENV] = str(os.getpid())  # the screen's watchdog ends it when this process is no longer its parent
    return env
