"""Zero-code attach: a ``sitecustomize`` on ``PYTHONPATH`` that chains any existing one, then attaches."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator

import trainmon
from trainmon.protocol import TRAINMON_JOB

_SITECUSTOMIZE = """\
# Written by `trainmon run`: attach the trainmon agent, then run any sitecustomize this one shadows.
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
_saved_path = list(_sys.path)
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
_this = _sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401 - the user's own, if any
except ImportError:
    pass
except Exception as _exc:
    _sys.stderr.write(f"sitecustomize failed: {_exc!r}\\n")
finally:
    _sys.path[:] = _saved_path
    if _this is not None:  # the import system reads a module back from sys.modules once its body has run
        _sys.modules.setdefault("sitecustomize", _this)
try:
    import trainmon.agent as _agent

    _agent.attach()
except Exception:
    pass
"""


@contextlib.contextmanager
def agent_env(address: str, base: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """Environment for a child command whose Python processes all attach to ``address``."""
    env = dict(os.environ if base is None else base)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(trainmon.__file__)))
    with tempfile.TemporaryDirectory(prefix="trainmon-site-") as site_dir:
        with open(os.path.join(site_dir, "sitecustomize.py"), "w") as fh:
            fh.write(_SITECUSTOMIZE)
        paths = [site_dir, package_parent, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        env["TRAINMON_ADDR"] = address
        env.setdefault(TRAINMON_JOB, secrets.token_hex(6))
        yield env
