"""The web server of ``trainmon serve``: the page, one screen process per websocket, a cap on screens at once.

The page is trainmon's own (``templates/index.html``): textual-serve's terminal script and stylesheet, and its
bundled Roboto Mono, all from this server, so the page asks nothing of any other address. The websocket carries
textual-serve's protocol (``["stdin", text]``, ``["resize", {width, height}]``, ``["ping", t]``, ``focus``,
``blur`` from the browser; terminal bytes back). A closed websocket ends its screen (``tab_screen.TabScreen.stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import textual_serve
from aiohttp import WSMsgType, web

from trainmon.serve.tab_screen import QUIT_GRACE_S, TERM_GRACE_S, TabScreen

log = logging.getLogger("trainmon.serve")

NOTICE = "trainmon_notice"  # a text message the page shows where the session ended (textual.js ignores it)
REFUSED = 4001  # websocket close code: no screen was started for this tab


@dataclass(frozen=True)
class ServeConfig:
    argv: Sequence[str]  # the screen command
    env: Mapping[str, str]  # its environment
    max_screens: int
    cap_reason: str  # why there is a cap, for the message past it
    title: str = "trainmon"


def textual_serve_static() -> Path:
    """textual-serve's static files: the terminal script (textual.js), xterm.css and the Roboto Mono font."""
    return Path(textual_serve.__file__).resolve().parent / "static"


def _page(config: ServeConfig, font_size: int) -> str:
    template = string.Template(resources.files("trainmon.serve").joinpath("templates/index.html").read_text("utf-8"))
    return template.substitute(title=config.title, font_size=font_size)


class ScreenServer:
    """The aiohttp application: ``/`` the page, ``/ws`` one screen per connection, ``/static`` textual-serve's."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.screens: set[TabScreen] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/", self.handle_index),
                web.get("/ws", self.handle_websocket),
                web.static("/static", textual_serve_static()),
            ]
        )
        app.on_shutdown.append(self._on_shutdown)
        return app

    def serve(self, host: str, port: int, ready: Callable[[], None] = lambda: None) -> None:
        """Serve until SIGINT or SIGTERM; ``ready`` once the address is bound."""
        web.run_app(self.app(), host=host, port=port, print=lambda _: ready(), access_log=None, shutdown_timeout=10)

    async def handle_index(self, request: web.Request) -> web.Response:
        font_size = _int(request.query.get("fontsize"), 16, 6, 64)
        return web.Response(text=_page(self.config, font_size), content_type="text/html")

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=15)
        await ws.prepare(request)
        refusal = await self._admit()
        if refusal is not None:
            log.warning("refused a screen for %s: %s", request.remote, refusal)
            with contextlib.suppress(ConnectionResetError):
                await ws.send_str(json.dumps([NOTICE, refusal]))
            await ws.close(code=REFUSED, message=b"screen cap")
            return ws
        width = _int(request.query.get("width"), 80, 20, 1000)
        height = _int(request.query.get("height"), 24, 5, 500)
        screen = TabScreen(self.config.argv, self.config.env, send_bytes=ws.send_bytes, send_text=ws.send_str)
        self.screens.add(screen)
        relay: asyncio.Task[None] | None = None
        try:
            await screen.start(width, height)
            log.info("screen %d started for %s (%d open)", screen.pid, request.remote, len(self.screens))
            relay = asyncio.create_task(screen.relay(lambda: self._screen_ended(ws, screen)))
            await self._from_browser(ws, screen)
        except ConnectionResetError:
            pass  # the tab went away mid-message
        except OSError as exc:
            log.error("cannot start a screen: %s", exc)
            with contextlib.suppress(ConnectionResetError):
                await ws.send_str(json.dumps([NOTICE, f"trainmon could not start a screen: {exc}"]))
        finally:
            try:
                await screen.stop()
                if relay is not None:
                    await relay
            finally:
                self.screens.discard(screen)  # whatever happened, the place is free again
                if not ws.closed:
                    await ws.close()
        return ws

    async def _from_browser(self, ws: web.WebSocketResponse, screen: TabScreen) -> None:
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                envelope = json.loads(message.data)
                kind, data = envelope[0], envelope[1] if len(envelope) > 1 else None
            except (ValueError, TypeError, IndexError, KeyError):
                continue
            if kind == "stdin" and isinstance(data, str):
                await screen.send_input(data)
            elif kind == "resize" and isinstance(data, dict):
                width, height = _int(data.get("width"), 80, 20, 1000), _int(data.get("height"), 24, 5, 500)
                await screen.send_meta({"type": "resize", "width": width, "height": height})
            elif kind == "ping":
                await ws.send_json(["pong", data])
            elif kind in ("focus", "blur"):
                await screen.send_meta({"type": kind})

    async def _screen_ended(self, ws: web.WebSocketResponse, screen: TabScreen) -> None:
        """The screen's process ended (q, an error, or the tab closed): say why if it never drew, close the tab's
        socket so the page shows that the session ended."""
        if ws.closed:
            return
        failure = screen.failure()
        with contextlib.suppress(ConnectionResetError):
            if failure is not None:
                await ws.send_str(json.dumps([NOTICE, failure]))
            await ws.close()

    async def _admit(self) -> str | None:
        """None when a new screen may start; else the message for the page. Screens whose tab closed are still
        ending: wait for them first, so a reload (or Restart) gets the place its old screen held."""
        cap = self.config.max_screens
        if len(self.screens) >= cap:
            ending = [asyncio.ensure_future(s.ended.wait()) for s in self.screens if s.closing]
            if ending:
                await asyncio.wait(ending, timeout=QUIT_GRACE_S + TERM_GRACE_S + 0.5)
                for waiter in ending:
                    waiter.cancel()
        if len(self.screens) < cap:
            return None
        return self.config.cap_reason

    async def _on_shutdown(self, app: web.Application) -> None:
        screens = list(self.screens)
        await asyncio.gather(*(s.stop() for s in screens), return_exceptions=True)


def _int(value: object, default: int, low: int, high: int) -> int:
    try:
        number = int(str(value))
    except ValueError:
        return default
    return min(max(number, low), high)
