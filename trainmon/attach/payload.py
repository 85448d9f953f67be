"""The Python code run inside the target, and how its outcome comes back to the attaching process.

The code is one ``try: eval(compile(...)) except BaseException: pass`` statement (valid Python 2 as well): it runs
through ``PyRun_SimpleString`` (queued by ``Py_AddPendingCall``) in ``__main__``'s namespace, or through
``sys.remote_exec`` in a fresh one, so it binds no name there, and nothing escapes it — a pending call that returns
-1 would raise SystemError into the training's loop. Inside, in a private namespace, it:

- does nothing while the interpreter is shutting down (``sys.is_finalizing()``, or the main thread has finished);
- reports ``already`` when ``trainmon.agent`` is imported there and attached (nothing is patched twice);
- refuses a DataLoader worker (``torch.utils.data.get_worker_info()``): the training's main process is the one;
- imports the monitor's ``trainmon`` package from its own directory (a module spec on its ``__init__.py``; the
  process's ``sys.path`` is never changed, so nothing of the process's own can be shadowed), unless the process
  already imported a ``trainmon`` (then its own is used; a package that is not a directory falls back to putting
  the monitor's on ``sys.path`` for that one import, then restoring it), sets ``_LIVE_ATTACH`` and calls
  ``attach()`` with the monitor's token when it has one;
- writes a JSON result into the attaching process's private 0700 directory, atomically (write, then rename).

The code stays valid Python 3.6 so that an old interpreter reports its version instead of failing to compile it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import trainmon

RESULT_FILE = "result.json"
ABANDONED_FILE = "abandoned"  # the attaching process gave up waiting: the code cleans the directory up itself
MIN_PYTHON = (3, 10)

_BODY = r"""
import os, sys, time
_ran = time.time()

def _write(result):
    try:
        import json
        path = os.path.join(P["dir"], "result.json")
        tmp = "%s.%d.tmp" % (path, os.getpid())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(result))
        os.replace(tmp, path)
        if os.path.exists(os.path.join(P["dir"], "abandoned")):  # nobody waits: leave nothing behind
            for name in ("result.json", "abandoned", "script.py"):
                try:
                    os.unlink(os.path.join(P["dir"], name))
                except OSError:
                    pass
            os.rmdir(P["dir"])
    except BaseException:
        pass

def _attach():
    if sys.version_info < tuple(P["min_python"]):
        return "unsupported", "Python %s is older than %s, the agent's minimum" % (
            sys.version.split()[0], ".".join(map(str, P["min_python"])))
    threading = sys.modules.get("threading")
    if sys.is_finalizing() or (threading is not None and not threading.main_thread().is_alive()):
        return "exiting", "the interpreter is shutting down"
    torch = sys.modules.get("torch")
    try:
        worker = torch is not None and torch.utils.data.get_worker_info() is not None
    except Exception:
        worker = False
    if worker:
        return "worker", "it is a DataLoader worker process: attach to its training's main process (pid %d)" % (
            os.getppid())
    agent = sys.modules.get("trainmon.agent")
    if agent is not None and getattr(agent, "attached", lambda: False)():
        sender = getattr(getattr(agent, "_agent", None), "sender", None)
        return "already", getattr(sender, "address", "") or ""
    if agent is None:
        import importlib
        init = os.path.join(P["parent"], "trainmon", "__init__.py")
        if "trainmon" not in sys.modules and os.path.isfile(init):
            # The monitor's trainmon, loaded from its own directory: sys.path is never touched, so nothing of the
            # process's own (or a stdlib module not imported yet) can be shadowed by what sits beside it.
            import importlib.util
            spec = importlib.util.spec_from_file_location(
                "trainmon", init, submodule_search_locations=[os.path.dirname(init)])
            package = importlib.util.module_from_spec(spec)
            sys.modules["trainmon"] = package
            try:
                spec.loader.exec_module(package)
            except BaseException:
                sys.modules.pop("trainmon", None)
                raise
            agent = importlib.import_module("trainmon.agent")
        else:
            saved = list(sys.path)
            sys.path.insert(0, P["parent"])
            try:
                agent = importlib.import_module("trainmon.agent")
            finally:
                sys.path[:] = saved
    agent._LIVE_ATTACH = True
    try:
        ok = agent.attach(P["address"], token=P["token"]) if P.get("token") else agent.attach(P["address"])
    except TypeError:  # the process's own, older trainmon: its agent reads TRAINMON_TOKEN only
        ok = agent.attach(P["address"])
    if not ok:
        why = "TRAINMON_DISABLE is set there" if os.environ.get("TRAINMON_DISABLE") else "attach() returned False"
        return "failed", why
    return "attached", getattr(agent, "__file__", "")

def _main():
    status, detail = "failed", ""
    try:
        status, detail = _attach()
    except KeyboardInterrupt:
        status, detail = "failed", "interrupted by Ctrl-C"
    except BaseException as exc:
        status, detail = "failed", "%s: %s" % (type(exc).__name__, exc)
    _write({"status": status, "detail": str(detail)[:500], "pid": os.getpid(),
            "python": sys.version.split()[0], "ran_wall": _ran, "done_wall": time.time()})

if P.get("script"):
    try:
        os.unlink(P["script"])
    except OSError:
        pass
_main()
"""


def package_parent() -> str:
    """The directory that holds the ``trainmon`` package this process runs (what the target imports)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(trainmon.__file__)))


def source(address: str, result_dir: str, script: str | None = None, token: str | None = None) -> str:
    """The code to run in the target: one statement, all errors swallowed, no name bound where it runs.

    ``token``, the monitor's shared token, is handed to ``attach()`` (never put in the process's environment, which
    its children would inherit)."""
    params = {
        "address": address,
        "token": token,
        "dir": result_dir,
        "parent": package_parent(),
        "min_python": list(MIN_PYTHON),
        "script": script,
    }
    body = f"P = {params!r}\n{_BODY}"
    return (
        "# trainmon attach: start the trainmon agent in this process\n"
        "try:\n"
        f"    eval(compile({body!r}, '<trainmon attach>', 'exec'), {{'__name__': '__trainmon_attach__'}})\n"
        "except BaseException:\n"
        "    pass\n"
    )


def read_result(result_dir: str) -> dict[str, Any] | None:
    """The result the target wrote, once it is complete (it is renamed into place); None until then."""
    try:
        with open(os.path.join(result_dir, RESULT_FILE)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
