"""TTY-loss watchdog: a dropped SSH session must not leave a monitor spinning on a dead terminal.

Textual's input thread keeps polling after the terminal goes away unless SIGHUP arrives (and under some
multiplexers and nohup it does not), so the app checks every few seconds that its terminal still answers.
After a hang-up the kernel fails terminal ioctls with EIO, which makes ``isatty`` false.
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
