"""``trainmon serve``'s web side: the page, and one screen process per browser tab under Textual's web driver."""

from trainmon.serve.screens import Screen, screen_environment
from trainmon.serve.server import ScreenServer, ServeConfig

__all__ = ["Screen", "ScreenServer", "ServeConfig", "screen_environment"]
