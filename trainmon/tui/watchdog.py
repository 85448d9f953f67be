"""Watchdogs for a screen whose viewer went away without saying so, one per kind of Textual driver.

On a terminal: a dropped SSH session must not leave a monitor spinning on a dead terminal. Textual's input thread
keeps polling after the terminal goes away unless SIGHUP arrives (and under some multiplexers and nohup it does not),
so the app checks every few seconds that its terminal still answers. After a hang-up the kernel fails terminal
ioctls with EIO, which makes ``isatty`` false.

In a browser (Textual's web driver under ``trainmon serve``): descriptors 0 and 2 are pipes to the server, never
terminals. A closed tab ends the screen through the driver (the server sends ``quit``); what is left to watch is the
server itself, which, killed outright, says nothing: the screen then finds itself re-parented.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

CHECK_EVERY_S = 2.0


def tty_alive(fds: Iterable[int] = (0, 2)) -> bool:
    """True while every given descriptor is still a working terminal."""
    for fd in fds:
        try:
            if not os.isatty(fd):
                return False
        except (OSError, ValueError):
            return False
    return True


SERVER_PID_ENV = "TRAINMON_SERVER_PID"  # set by `trainmon serve` for its screens (trainmon/serve/tab_screen.py)


class ServerWatch:
    """Under the web driver: alive while the server that started this screen is still its parent.

    The server names itself in the environment: a server killed before the screen looked would otherwise leave the
    screen taking its new parent for the server.
    """

    def __init__(self, parent: int | None = None) -> None:
        if parent is None:
            named = os.environ.get(SERVER_PID_ENV, "")
            parent = int(named) if named.isdigit() else os.getppid()
        self.parent = parent

    def alive(self) -> bool:
        return os.getppid() == self.parent
