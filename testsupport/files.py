"""Data files for I/O tests."""

from __future__ import annotations

import os
from pathlib import Path


def write_random_file(path: Path, mib: int) -> Path:
    """``mib`` MiB of random bytes, synced to disk."""
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return path
