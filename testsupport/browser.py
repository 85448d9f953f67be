"""Headless Chromium for the HTML report, ``trainmon serve`` and the README's screenshots.

``Browser`` drives the system Chromium over the DevTools protocol (a websocket, through aiohttp): tabs that open a
page, click, type keys, resize their window, and close, as a user does. Every tab logs the page's requests and its
websocket's frames, so a test reads the screen the browser drew (``Tab.screen``, rebuilt by ``testsupport.vt``) and
checks that nothing left the serving address.

    python -m testsupport.browser screenshot URL OUT.png [WIDTH HEIGHT SECONDS [KEYS]]
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from testsupport.vt import Screen


def find_chromium(*names: str) -> str | None:
    """The first of ``chromium``, ``chromium-browser`` and then ``names`` on PATH."""
    for name in ("chromium", "chromium-browser", *names):
        if found := shutil.which(name):
            return found
    return None


def headless_flags(profile: str) -> list[str]:
    """A headless Chromium that talks to no one and keeps its profile in ``profile``."""
    return [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ]


CHROMIUM = find_chromium()

# Chromium's own names for the keys the screen binds: (key, code, virtual key code, text, modifiers).
_KEYS: dict[str, tuple[str, str, int, str, int]] = {
    "left": ("ArrowLeft", "ArrowLeft", 37, "", 0),
    "right": ("ArrowRight", "ArrowRight", 39, "", 0),
    "escape": ("Escape", "Escape", 27, "", 0),
    "?": ("?", "Slash", 191, "?", 8),
    "+": ("+", "Equal", 187, "+", 8),
    "-": ("-", "Minus", 189, "-", 0),
    " ": (" ", "Space", 32, " ", 0),
}


@dataclass
class Frame:
    t: float
    socket: str  # the websocket's request id
    data: bytes | str


@dataclass
class Tab:
    """One page: its DevTools session, the requests it made, the frames of its websockets."""

    browser: Browser
    target_id: str
    session_id: str
    requests: list[str] = field(default_factory=list)
    websockets: list[tuple[str, str]] = field(default_factory=list)  # (request id, URL), oldest first
    received: list[Frame] = field(default_factory=list)
    sent: list[Frame] = field(default_factory=list)
    closed_sockets: int = 0

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.send(method, params, session=self.session_id)

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        reply = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    async def wait(self, predicate: Callable[[], Any], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            await asyncio.sleep(0.1)
        return bool(predicate())

    async def wait_js(self, expression: str, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):
                if await self.evaluate(expression):
                    return True
            await asyncio.sleep(0.1)
        return False

    async def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element ``selector``."""
        box = await self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    async def press(self, *keys: str) -> None:
        """Keys as typed on the page's terminal: a character, or left/right/escape."""
        await self.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        for name in keys:
            key, code, vk, text, modifiers = _KEYS.get(name) or (name, f"Key{name.upper()}", ord(name.upper()), name, 0)
            down: dict[str, Any] = {"key": key, "code": code, "windowsVirtualKeyCode": vk, "modifiers": modifiers}
            await self.send("Input.dispatchKeyEvent", type="keyDown" if text else "rawKeyDown", text=text, **down)
            await self.send("Input.dispatchKeyEvent", type="keyUp", **down)

    async def resize(self, width: int, height: int) -> None:
        """Resize the browser window that holds this tab."""
        window = await self.browser.send("Browser.getWindowForTarget", {"targetId": self.target_id})
        bounds = {"width": width, "height": height, "windowState": "normal"}
        await self.browser.send("Browser.setWindowBounds", {"windowId": window["windowId"], "bounds": bounds})

    async def screenshot(self, path: str) -> None:
        shot = await self.send("Page.captureScreenshot", format="png")
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        await self.browser.send("Target.closeTarget", {"targetId": self.target_id})

    # ---- what the page's terminal shows

    def terminal_bytes(self, since: float = 0.0) -> int:
        return sum(len(f.data) for f in self.received if f.t >= since and isinstance(f.data, bytes))

    def resizes(self) -> list[tuple[float, int, int]]:
        """The sizes in cells the page told the server (the websocket's URL, then each resize), with their times."""
        if not self.websockets:
            return []
        socket, url = self.websockets[-1]
        query = parse_qs(urlsplit(url).query)
        sizes = [(0.0, int(query.get("width", ["80"])[0]), int(query.get("height", ["24"])[0]))]
        for f in self.sent:
            message = json.loads(f.data) if f.socket == socket and isinstance(f.data, str) else None
            if isinstance(message, list) and message and message[0] == "resize":
                sizes.append((f.t, message[1]["width"], message[1]["height"]))
        return sizes

    def screen(self) -> Screen:
        """The terminal as the page shows it now, from every byte its (latest) websocket received."""
        sizes = self.resizes()
        if not sizes:
            return Screen()
        socket = self.websockets[-1][0]
        events: list[tuple[float, int, bytes | tuple[int, int]]] = [(t, 0, (w, h)) for t, w, h in sizes[1:]]
        events += [(f.t, 1, f.data) for f in self.received if f.socket == socket and isinstance(f.data, bytes)]
        events.sort(key=lambda e: (e[0], e[1]))
        screen = Screen(sizes[0][1], sizes[0][2])
        decoder_pending = b""
        for _, _, data in events:
            if isinstance(data, tuple):
                screen.resize(*data)
                continue
            raw = decoder_pending + data
            try:
                text, decoder_pending = raw.decode("utf-8"), b""
            except UnicodeDecodeError as exc:
                text, decoder_pending = raw[: exc.start].decode("utf-8"), raw[exc.start :]
            screen.feed(text)
        return screen

    def text(self) -> str:
        return self.screen().text()

    async def wait_text(self, *needles: str, since: float = 0.0, timeout: float = 20.0) -> bool:
        """Until every needle shows on the screen (and, with ``since``, bytes arrived after that moment)."""
        return await self.wait(
            lambda: (not since or self.terminal_bytes(since)) and all(n in self.text() for n in needles), timeout
        )


class Browser:
    """A headless Chromium under the DevTools protocol. ``async with Browser.launch() as browser``."""

    def __init__(self, process: subprocess.Popen[bytes], ws: Any, profile: str) -> None:
        self.process = process
        self.ws = ws
        self.profile = profile
        self.tabs: dict[str, Tab] = {}
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def launch(cls, width: int = 1600, height: int = 1000, *, allow: str = "127.0.0.1") -> AsyncIterator[Browser]:
        """Chromium whose host resolver knows only ``allow``: a page that reaches out fails, and its request shows
        in the tab's log all the same."""
        import aiohttp

        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed")
        profile = tempfile.mkdtemp(prefix="tm-chromium-")
        process = subprocess.Popen(
            [
                CHROMIUM,
                *headless_flags(profile),
                "--remote-debugging-port=0",
                f"--window-size={width},{height}",
                f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {allow}",
                "--hide-scrollbars",
                "--mute-audio",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        session = aiohttp.ClientSession()
        try:
            endpoint = await _devtools_endpoint(profile, process)
            ws = await session.ws_connect(endpoint, max_msg_size=0)
            browser = cls(process, ws, profile)
            browser._reader = asyncio.create_task(browser._read())
            try:
                yield browser
            finally:
                await browser.close()
        finally:
            await session.close()
            if process.poll() is None:
                process.kill()
            process.wait()
            shutil.rmtree(profile, ignore_errors=True)

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict:
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self.ws.send_str(json.dumps(message))
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def new_tab(self, url: str) -> Tab:
        """A tab in a window of its own, logging from before the page loads, then opening ``url``."""
        target = await self.send("Target.createTarget", {"url": "about:blank", "newWindow": True})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        tab = Tab(self, target["targetId"], attached["sessionId"])
        self.tabs[tab.session_id] = tab
        for domain in ("Network.enable", "Page.enable", "Runtime.enable"):
            await tab.send(domain)
        await tab.goto(url)
        return tab

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.send("Browser.close")
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        await self.ws.close()

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            tab = self.tabs.get(data.get("sessionId", ""))
            if tab is not None:
                _log_event(tab, data["method"], data.get("params", {}))


def _log_event(tab: Tab, method: str, params: dict[str, Any]) -> None:
    now = time.monotonic()
    if method == "Network.requestWillBeSent":
        tab.requests.append(params["request"]["url"])
    elif method == "Network.webSocketCreated":
        tab.websockets.append((params["requestId"], params["url"]))
        tab.requests.append(params["url"])
    elif method in ("Network.webSocketFrameReceived", "Network.webSocketFrameSent"):
        response = params["response"]
        payload = response["payloadData"]
        data: bytes | str = base64.b64decode(payload) if response["opcode"] == 2 else payload
        frame = Frame(now, params["requestId"], data)
        (tab.received if method.endswith("Received") else tab.sent).append(frame)
    elif method == "Network.webSocketClosed":
        tab.closed_sockets += 1


class BrowserThread:
    """A ``Browser`` on an event loop of its own thread, for synchronous tests: tabs keep logging between calls.

    ``with BrowserThread() as bt: tab = bt.run(bt.browser.new_tab(url))``.
    """

    def __init__(self, width: int = 1600, height: int = 1000) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="browser", daemon=True)
        self._launch = Browser.launch(width, height)
        self.browser: Browser

    def run(self, coro: Awaitable[Any], timeout: float = 60.0) -> Any:
        async def call() -> Any:
            return await coro

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def __enter__(self) -> BrowserThread:
        self._thread.start()
        self.browser = self.run(self._launch.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self._launch.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


@dataclass
class Served:
    """A running ``trainmon serve``: its process, port, and the log it writes (stdout and stderr)."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def screens(self) -> list[int]:
        """The pids of the screen processes it runs now."""
        import psutil

        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return []
        return [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (as Ctrl-C would), then SIGKILL for it and any screen left."""
        import psutil

        screens = [psutil.Process(pid) for pid in self.screens()]
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _, alive = psutil.wait_procs(screens, timeout=5)
        for p in alive:
            p.kill()


def start_serve(*args: str, log_path: str, env: dict[str, str] | None = None, timeout: float = 30.0) -> Served:
    """``trainmon ARGS`` (a ``serve`` command line without --port), once its page answers."""
    import urllib.request

    from testsupport.procs import child_env, free_port, trainmon_cmd

    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            trainmon_cmd(*args, "--port", str(port)), env=env or child_env(), stdout=log, stderr=subprocess.STDOUT
        )
    served = Served(process, port, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"trainmon serve exited with status {process.returncode}: {served.log()}")
        with contextlib.suppress(OSError), urllib.request.urlopen(served.url, timeout=2) as reply:
            if reply.status == 200:
                return served
        time.sleep(0.1)
    served.stop()
    raise RuntimeError(f"trainmon serve did not answer: {served.log()}")


async def _devtools_endpoint(profile: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> str:
    """The browser's DevTools websocket, from the DevToolsActivePort file Chromium writes into its profile."""
    path = os.path.join(profile, "DevToolsActivePort")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with status {process.returncode}")
        with contextlib.suppress(OSError, ValueError):
            with open(path) as fh:
                port, ws_path = fh.read().split("\n")[:2]
            if port and ws_path:
                return f"ws://127.0.0.1:{int(port)}{ws_path}"
        await asyncio.sleep(0.1)
    raise RuntimeError("chromium did not open its DevTools port")


async def _screenshot(url: str, out: str, width: int, height: int, seconds: float, keys: str) -> None:
    async with Browser.launch(width, height) as browser:
        tab = await browser.new_tab(url)
        await tab.wait_js("document.body && document.body.classList.contains('-first-byte')")
        await tab.click("#terminal")  # focused, as after a click: the footer shows the keys
        await asyncio.sleep(seconds)
        if keys:
            await tab.press(*keys)
            await asyncio.sleep(1.5)
        await tab.screenshot(out)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "screenshot":
        print(__doc__, file=sys.stderr)
        return 2
    url, out = argv[1], argv[2]
    width, height = (int(argv[3]), int(argv[4])) if len(argv) > 4 else (1600, 1000)
    seconds = float(argv[5]) if len(argv) > 5 else 5.0
    keys = argv[6] if len(argv) > 6 else ""
    asyncio.run(_screenshot(url, out, width, height, seconds, keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
