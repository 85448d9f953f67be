"""``attach_process``: start the trainmon agent in a Python process that is already running, or say why not.

The steps, each in its own module: read the process from /proc (``target``), find the interpreter's functions in
its memory map (``symbols``), queue the code (``remote`` on CPython 3.14+ with ``sys.remote_exec``, else ``gdb``),
then wait for the code's own report (``payload``) until the timeout.
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import tempfile
import time

from trainmon import protocol
from trainmon.attach import gdb, payload, remote
from trainmon.attach.ptrace_message import permission_message
from trainmon.attach.result import (
    ALREADY,
    ATTACHED,
    EXIT_AGENT_FAILED,
    EXIT_EXITED,
    EXIT_FAILED,
    EXIT_NO_INJECTOR,
    EXIT_NO_PROCESS,
    EXIT_NOT_PYTHON,
    EXIT_OK,
    EXIT_PERMISSION,
    EXIT_TIMEOUT,
    EXIT_UNSUPPORTED,
    AttachResult,
    failure,
    one_line,
)
from trainmon.attach.symbols import Runtime, SymbolError, locate
from trainmon.attach.target import alive, preflight, shadow_stack

SAFE_POINT_SHARE = 0.6  # of the timeout, at most, waiting for a thread to borrow; the rest waits for the agent
_RESULT_POLL_S = 0.02
_X86_64 = ("x86_64", "amd64")


def attach_process(pid: int, address: str, *, timeout: float = 15.0, token: str | None = None) -> AttachResult:
    """Start the trainmon agent in the running Python process ``pid``, reporting to ``address`` (with the monitor's
    shared ``token``, default ``$TRAINMON_TOKEN`` of this process, when it asks for one).

    Never raises: every outcome is an ``AttachResult`` (see ``trainmon.attach.result`` for the exit statuses).
    """
    try:
        return _attach(int(pid), str(address), max(0.5, float(timeout)), token or os.environ.get("TRAINMON_TOKEN"))
    except KeyboardInterrupt:
        return failure(pid, EXIT_FAILED, "interrupted")
    except Exception as exc:  # a bug here must not become a traceback in the user's terminal
        return failure(pid, EXIT_FAILED, f"unexpected error while attaching: {type(exc).__name__}: {exc}")


def _attach(pid: int, address: str, timeout: float, token: str | None) -> AttachResult:
    start = time.monotonic()
    deadline = start + timeout
    if not address:
        return failure(pid, EXIT_FAILED, "no monitor address to report to")
    if protocol.parse_tcp(address) is None:
        address = os.path.abspath(address)  # the process resolves a relative path against its own directory
    refused = preflight(pid)
    if refused is not None:
        return refused
    try:
        runtime = locate(pid)
    except SymbolError as exc:
        return _symbol_failure(pid, exc)
    version = runtime.version
    if version is not None and version[:2] < payload.MIN_PYTHON:
        shown = ".".join(map(str, version if runtime.exact_version else version[:2]))
        return failure(
            pid,
            EXIT_UNSUPPORTED,
            f"process {pid} runs Python {shown}; the trainmon agent needs Python 3.10 or newer "
            "(upgrade the job's Python; nothing was changed)",
        )
    result_dir = tempfile.mkdtemp(prefix="trainmon-attach-")
    os.chmod(result_dir, 0o700)
    keep_dir = False
    remote_refusal = ""
    try:
        if remote.usable(version, runtime.exact_version):
            script = os.path.join(result_dir, remote.SCRIPT_FILE)
            with open(script, "w", encoding="utf-8") as fh:
                fh.write(payload.source(address, result_dir, script=script, token=token))
            kind, why = remote.inject(pid, script)
            if kind == "queued":
                res = _wait(pid, address, result_dir, deadline, None)
                # The script may still run later: it must find its file, and it cleans the directory up itself.
                keep_dir = payload.read_result(result_dir) is None and alive(pid)
                if keep_dir:
                    _mark_abandoned(result_dir)
                    keep_dir = payload.read_result(result_dir) is None  # it may have run meanwhile: then clean up
                return res
            if kind == "permission":
                return failure(pid, EXIT_PERMISSION, permission_message(pid))
            if kind == "gone":
                return failure(pid, EXIT_EXITED, f"process {pid} exited during the attach")
            # Remote debugging disabled in the target, or a version mismatch: gdb may still do it.
            remote_refusal = f" (sys.remote_exec refused: {why})"
        res = _with_gdb(pid, address, runtime, result_dir, start, deadline, token)
        if res.exit_code == EXIT_NO_INJECTOR and remote_refusal:
            res.message = one_line(res.message + remote_refusal)
        return res
    finally:
        if not keep_dir:
            shutil.rmtree(result_dir, ignore_errors=True)


def _symbol_failure(pid: int, exc: SymbolError) -> AttachResult:
    if exc.kind == "permission":
        return failure(pid, EXIT_PERMISSION, permission_message(pid))
    if exc.kind == "gone":
        return failure(pid, EXIT_NO_PROCESS if not os.path.exists(f"/proc/{pid}") else EXIT_EXITED, str(exc))
    if exc.kind == "not_python":
        return failure(pid, EXIT_NOT_PYTHON, f"{exc}: nothing to attach to")
    return failure(
        pid,
        EXIT_NOT_PYTHON,
        f"{exc}; start the training with `trainmon run -- python train.py` or add "
        "`import trainmon.agent; trainmon.agent.attach()` to it instead",
    )


def _with_gdb(
    pid: int, address: str, runtime: Runtime, result_dir: str, start: float, deadline: float, token: str | None
) -> AttachResult:
    binary = gdb.find_gdb()
    if binary is None:
        return failure(pid, EXIT_NO_INJECTOR, gdb.NOT_FOUND)
    if platform.machine().lower() not in _X86_64 or runtime.machine != gdb.EM_X86_64:
        return failure(
            pid,
            EXIT_UNSUPPORTED,
            f"the gdb injector supports x86-64 only (this is {platform.machine()}): use Python 3.14+ on both sides "
            "(sys.remote_exec), `trainmon run`, or `trainmon.agent.attach()` in the script",
        )
    if shadow_stack(pid):
        return failure(
            pid,
            EXIT_UNSUPPORTED,
            f"process {pid} runs with CET shadow stacks, which the gdb injector's calls would break: start the "
            "training with `trainmon run`, or add `trainmon.agent.attach()` to it",
        )
    if runtime.entry is None or not runtime.safe_points:
        return failure(pid, EXIT_NOT_PYTHON, f"process {pid}: its executable's entry point could not be found")
    code = payload.source(address, result_dir, token=token).encode("utf-8") + b"\0"
    code_file = os.path.join(result_dir, "code.bin")
    with open(code_file, "wb") as fh:
        fh.write(code)
    plan = gdb.Plan(
        pid=pid,
        exe=f"/proc/{pid}/exe",
        safe_points=runtime.safe_points,
        entry=runtime.entry,
        mmap=runtime.mmap,
        pending_call=runtime.pending_call,
        run_string=runtime.run_string,
        payload_file=code_file,
        payload_size=len(code),
    )
    safe_deadline = start + (deadline - start) * SAFE_POINT_SHARE
    out = gdb.run(binary, plan, os.path.join(result_dir, "inject.gdb"), safe_deadline, deadline)
    stopped = out.stopped_s
    if out.kind == "queued":
        return _wait(pid, address, result_dir, deadline, stopped)
    waited = deadline - start
    if out.kind == "permission":
        return failure(pid, EXIT_PERMISSION, permission_message(pid), stopped)
    if out.kind == "gone" or not alive(pid):
        return failure(pid, EXIT_EXITED, f"process {pid} exited during the attach; nothing to attach to", stopped)
    if out.kind == "no_safe_point":
        return failure(
            pid,
            EXIT_TIMEOUT,
            f"timed out after {waited:.0f} s: no thread of process {pid} ran Python code or allocated memory (all "
            "blocked or in long C calls); nothing was injected and the process is unchanged: try again while it runs",
            stopped,
        )
    if out.kind == "interrupted":
        return failure(pid, EXIT_FAILED, f"the attach was interrupted ({out.detail}); nothing was injected", stopped)
    if out.kind == "queue_full":
        return failure(
            pid, EXIT_FAILED, f"the interpreter's pending-call queue is full in process {pid}: try again", stopped
        )
    if out.kind == "mmap_failed":
        return failure(pid, EXIT_FAILED, f"process {pid}: {out.detail}; nothing was injected", stopped)
    if out.kind == "hung":
        return failure(pid, EXIT_TIMEOUT, f"timed out after {waited:.0f} s: {out.detail}", stopped)
    return failure(pid, EXIT_FAILED, f"gdb could not inject into process {pid}: {out.detail}", stopped)


def _wait(pid: int, address: str, result_dir: str, deadline: float, stopped: float | None) -> AttachResult:
    """The code is queued: wait for its report, or for the process to exit, until the deadline."""
    try:
        return _poll(pid, address, result_dir, deadline, stopped)
    except KeyboardInterrupt:
        return failure(
            pid,
            EXIT_FAILED,
            f"interrupted: the agent is queued in process {pid} and starts when its main thread next runs Python code",
            stopped,
        )


def _poll(pid: int, address: str, result_dir: str, deadline: float, stopped: float | None) -> AttachResult:
    while True:
        res = payload.read_result(result_dir)
        if res is not None:
            return _judge(pid, address, res, stopped)
        if not alive(pid):
            res = payload.read_result(result_dir)  # it may have reported just before exiting
            if res is not None:
                return _judge(pid, address, res, stopped)
            return failure(pid, EXIT_EXITED, f"process {pid} exited before the agent started", stopped)
        if time.monotonic() >= deadline:
            return failure(
                pid,
                EXIT_TIMEOUT,
                f"timed out: the agent is queued in process {pid}, but its main thread has not run Python code "
                "since (blocked or in a long C call); the agent will start when it next does",
                stopped,
            )
        time.sleep(_RESULT_POLL_S)


def _judge(pid: int, address: str, res: dict[str, object], stopped: float | None) -> AttachResult:
    status, detail = str(res.get("status", "")), one_line(str(res.get("detail", "")))
    python = str(res.get("python", "?"))
    held = f"; the process was held {stopped * 1000:.0f} ms" if stopped is not None else ""
    if status == "attached":
        note = _listening_note(address)
        return AttachResult(
            pid,
            ATTACHED,
            one_line(f"attached to process {pid} (Python {python}): its agent reports to {address}{note}{held}"),
            EXIT_OK,
            stopped,
        )
    if status == "already":
        where = f", reporting to {detail}" if detail else ""
        return AttachResult(
            pid,
            ALREADY,
            one_line(f"the trainmon agent already runs in process {pid}{where}: nothing changed"),
            EXIT_OK,
            stopped,
        )
    if status == "exiting":
        return failure(pid, EXIT_EXITED, f"process {pid} is shutting down: nothing was attached", stopped)
    if status == "worker":
        return failure(pid, EXIT_FAILED, f"process {pid}: {detail}; nothing was attached", stopped)
    if status == "unsupported":
        return failure(pid, EXIT_UNSUPPORTED, f"process {pid}: {detail}; nothing was changed", stopped)
    return failure(pid, EXIT_AGENT_FAILED, f"the agent did not start in process {pid}: {detail}", stopped)


def _listening_note(address: str) -> str:
    """A hint when no monitor socket exists at ``address`` yet (the agent keeps retrying in the background)."""
    if protocol.parse_tcp(address) is not None:
        return ""
    try:
        if stat.S_ISSOCK(os.stat(address).st_mode):
            return ""
    except OSError:
        pass
    return f" (no monitor listens there yet: start `trainmon --listen {address}`; the agent keeps retrying)"


def _mark_abandoned(result_dir: str) -> None:
    try:
        with open(os.path.join(result_dir, payload.ABANDONED_FILE), "w"):
            pass
    except OSError:
        pass
