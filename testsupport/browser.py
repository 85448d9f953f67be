"""Headless Chromium for the HTML report, ``trainmon serve`` and the README's screenshots."""

from __future__ import annotations

import shutil


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
