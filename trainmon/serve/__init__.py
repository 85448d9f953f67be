"""``trainmon serve``'s web side: the page, and one screen process per browser tab under Textual's web driver."""

from trainmon.serve.server import ScreenServer, ServeConfig
from trainmon.serve.tab_screen import TabScreen, screen_environment

__all__ = ["ScreenServer", "ServeConfig", "TabScreen", "screen_environment"]
