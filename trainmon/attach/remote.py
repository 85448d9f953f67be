"""CPython 3.14's ``sys.remote_exec`` (PEP 768): the interpreter runs a script file at its next safe point.

No debugger and no ptrace stop: the monitor's interpreter writes the script's path into the target's memory and
the target's main thread runs it where it would run a signal handler. It needs the same major.minor version on
both sides (and the same exact version for pre-releases), ptrace-level permission to write the target's memory,
and remote debugging left enabled in the target (not ``-X disable_remote_debug`` / ``PYTHON_DISABLE_REMOTE_DEBUG``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

SCRIPT_FILE = "script.py"


def usable(target_version: tuple[int, int, int] | None, exact: bool) -> bool:
    """Whether this interpreter can ``sys.remote_exec`` into a target of ``target_version``."""
    if getattr(sys, "remote_exec", None) is None or target_version is None or not exact:
        return False
    if sys.version_info.releaselevel != "final":
        return target_version == tuple(sys.version_info[:3])
    return target_version[:2] == tuple(sys.version_info[:2])


def inject(pid: int, script_path: str) -> tuple[str, str]:
    """``("queued", "")``, or a failure kind (``permission``, ``gone``, ``refused``) and its reason."""
    remote_exec: Callable[[int, str], Any] | None = getattr(sys, "remote_exec", None)
    if remote_exec is None:
        return "refused", "this Python has no sys.remote_exec"
    try:
        remote_exec(pid, script_path)
    except PermissionError as exc:
        return "permission", str(exc)
    except ProcessLookupError as exc:
        return "gone", str(exc)
    except Exception as exc:  # disabled remote debugging, a version mismatch, an unreadable runtime section
        return "refused", f"{type(exc).__name__}: {exc}"
    return "queued", ""
