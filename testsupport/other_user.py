"""Running code as another user (nobody) from a checkout that user may not be able to enter.

A checkout in a 0700 folder (``mktemp -d``, a 0700 or 0750 home) is closed to nobody, and so is an interpreter under
root's home (pyenv's). What the other user runs is staged where it can read it: the system Python, and a copy of the
``trainmon`` package and of psutil in a 0755 folder of its own under the system's temporary directory.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from testsupport.paths import ROOT

SYSTEM_PY = "/usr/bin/python3.11"  # a statically linked interpreter on Debian (its runtime is in the executable)
AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")


@functools.cache
def staged_path() -> str | None:
    """A folder nobody can read holding copies of ``trainmon`` and psutil (for PYTHONPATH), or None where they
    cannot be copied."""
    try:
        import psutil

        folder = Path(tempfile.mkdtemp(prefix="tm-other-user-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "trainmon", folder / "trainmon", ignore=ignore)
        shutil.copytree(Path(psutil.__file__).parent, folder / "psutil", ignore=ignore)
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644 if path.suffix != ".so" else 0o755)
    except (ImportError, OSError):
        return None
    return str(folder)


@functools.cache
def nobody() -> tuple[tuple[str, ...], str] | None:
    """(the command prefix that runs as nobody, the interpreter it runs) where this test run can switch to nobody and
    nobody can run the staged code; else None."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists(SYSTEM_PY):
        return None
    staged = staged_path()
    if staged is None:
        return None
    probe = subprocess.run(
        [*AS_NOBODY, SYSTEM_PY, "-c", "import os, psutil, trainmon; print(os.geteuid())"],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=staged),
        cwd="/",
    )
    return (AS_NOBODY, SYSTEM_PY) if probe.returncode == 0 and probe.stdout.strip() not in ("", "0") else None


SKIP_REASON = "needs root, setpriv and /usr/bin/python3.11 to run as user nobody"
