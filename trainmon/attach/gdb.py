"""Queue the agent's start-up in a running interpreter with gdb in batch mode, holding the process for milliseconds.

What the gdb script does (x86-64 Linux):

1. ``attach``, with no library symbols read: the addresses come from ``trainmon.attach.symbols``
   (``auto-solib-add off``, a sysroot where no library is found, no libthread_db, no debuginfod, no init files; the
   executable is read before the attach), so gdb opens none of the shared libraries while it holds the process
   (libtorch's alone would hold it for a second or more).
2. Breakpoints on the entries of a few interpreter functions every busy Python thread calls (``PyObject_Malloc``,
   ``PyEval_SaveThread`` before a C call, ...), then ``continue``: the process runs again until a thread reaches one.
   A thread stopped at a function entry holds no lock the calls below take and has no live floating-point
   argument, so the calls need only its general registers saved and restored. (gdb's own ``call`` saves and writes
   back the whole vector state, which fails on some kernels and then leaves a thread stopped inside a system call
   with a broken restart: the process dies. And a thread borrowed inside a system call needs its restart
   replayed exactly; one at a function entry needs nothing.)
3. On that thread, two plain calls by hand (stack pointer, argument registers, a return address at the
   executable's entry point where a breakpoint waits, program counter): ``mmap`` for one private page, the code is
   written there (``restore``), then ``Py_AddPendingCall(PyRun_SimpleString, page)``. The other threads run during
   the calls. Then the thread's registers are put back exactly and gdb detaches.
4. The interpreter runs the pending call in its main thread at its next safe point (as it runs Python signal
   handlers), never inside a signal handler or a C call; see ``trainmon.attach.payload`` for what the code does.

The process is held stopped only while gdb attaches, while it takes a thread, and at the end of each call and of the
detach: milliseconds (see benchmarks/attach_stop.py); the wait for a thread and the calls themselves run it.

If no thread reaches one of those entries in time (every thread blocked or in a long C call), the attaching process
sends the target SIGWINCH, which gdb intercepts and never delivers: the wait ends, nothing is changed, gdb detaches.
That signal is only sent while gdb waits, and ignored (not delivered either) once a thread has been borrowed. gdb is
never interrupted while a thread's registers are changed; it runs in its own process group, killed whole at the hard
deadline (``KILL_GRACE_S`` later while it has breakpoints in the process or a thread borrowed; their code bytes are
then put back through /proc/PID/mem), after which a process left in a stop is resumed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from trainmon.attach.stopwatch import StopWatch
from trainmon.attach.target import alive, resume_if_left_stopped

EM_X86_64 = 62
MAP_FAILED = (1 << 64) - 1
# The x86-64 general registers saved and restored around the calls.
_REGISTERS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
              "r15", "rip", "eflags")  # fmt: skip
_ARGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
KILL_GRACE_S = 10.0  # beyond the hard deadline, while gdb has breakpoints in the process or a thread borrowed
_RED_ZONE = 512  # bytes left untouched below the borrowed thread's stack pointer (the ABI's red zone is 128)
_SETTINGS = (
    "set pagination off",
    "set confirm off",
    "set width 0",
    "set auto-load off",
    "set auto-solib-add off",
    "set libthread-db-search-path /nonexistent-trainmon",
    "set sysroot /nonexistent-trainmon",  # no shared library is opened: gdb would read every one (libtorch...)
    "set debuginfod enabled off",
    "set print thread-events off",
    "handle all nostop noprint pass",
    "handle SIGINT nostop noprint pass",  # a Ctrl-C meant for the training reaches it
)
NOT_FOUND = (
    "gdb not found: install it (Debian/Ubuntu: sudo apt-get install gdb; Fedora/RHEL: sudo dnf install gdb; "
    "Alpine: apk add gdb), or use Python 3.14+ on both sides (sys.remote_exec)"
)


def find_gdb() -> str | None:
    return shutil.which("gdb")


def gdb_version(binary: str, timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(
            [binary, "-nx", "--version"], capture_output=True, text=True, timeout=timeout, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.splitlines()[0] if out else ""
    found = re.search(r"(\d+\.\d+(?:\.\d+)?)\s*$", first)
    return found.group(1) if found else (first.strip() or None)


@dataclass(frozen=True)
class Plan:
    """What the gdb script needs: addresses in the target, and the file holding the code to copy there."""

    pid: int
    exe: str
    safe_points: tuple[int, ...]
    entry: int
    mmap: int
    pending_call: int
    run_string: int
    payload_file: str
    payload_size: int


def build_script(plan: Plan) -> str:
    """The gdb command file (see the module docstring)."""
    entry = f"{plan.entry:#x}"
    n = len(plan.safe_points)
    lines = [
        f"attach {plan.pid}",
        'printf "TM:ATTACHED\\n"',
        "handle SIGWINCH stop print nopass",  # ("noprint" would imply "nostop")
        *(f"break *{a:#x}" for a in plan.safe_points),
        f"break *{entry}",
        'printf "TM:WAITING\\n"',
        "continue",
        # From here on a SIGWINCH is swallowed: a late abort must not cut a call short.
        "handle SIGWINCH nostop noprint nopass",
        f"delete 1-{n}",
        "if " + " || ".join(f"$pc == {a:#x}" for a in plan.safe_points),
        '  printf "TM:SAFEPOINT %d\\n", $_thread',
        *(f"  set $tm_{r} = ${r}" for r in _REGISTERS),
        f"  set $tm_sp = (((unsigned long) $tm_rsp - {_RED_ZONE}) & -16) - 8",
        # The return address is written before any register changes: if this fails, nothing was changed.
        f"  set *(unsigned long *) $tm_sp = {entry}",
        *_call(plan.mmap, ("0", str(plan.payload_size), "3", "0x22", "-1", "0")),  # PROT_RW, MAP_PRIVATE|ANON
        f"  if $pc == {entry}",
        "    set $tm_buf = (unsigned long) $rax",
        '    printf "TM:BUF %lu\\n", $tm_buf',
        f"    if $tm_buf != {MAP_FAILED:#x} && $tm_buf != 0",
        f"      restore {plan.payload_file} binary $tm_buf",
        *("    " + line for line in _call(plan.pending_call, (f"{plan.run_string:#x}", "$tm_buf"))),
        f"      if $pc == {entry}",
        '        printf "TM:QUEUED %d\\n", (int) $rax',
        "      end",
        "    end",
        "  end",
        *(f"  set ${r} = $tm_{r}" for r in _REGISTERS),
        '  printf "TM:RESTORED\\n"',
        "else",
        '  printf "TM:NOSAFEPOINT\\n"',
        "end",
        "delete",
        "detach",
        'printf "TM:DETACHED\\n"',
    ]
    return "\n".join(lines) + "\n"


def _call(function: int, args: tuple[str, ...]) -> list[str]:
    """One call on the borrowed thread: it returns to the entry point's breakpoint."""
    return [
        "  set $rsp = $tm_sp",
        *(f"  set ${reg} = {value}" for reg, value in zip(_ARGS, args, strict=False)),
        "  set $rax = 0",
        f"  set $pc = {function:#x}",
        "  continue",
    ]


def command(gdb: str, script_path: str, exe: str) -> list[str]:
    argv = [gdb, "-nx", "-q", "-batch"]
    for setting in _SETTINGS:
        argv += ["-iex", setting]
    return [*argv, "-x", script_path, exe]


@dataclass
class Outcome:
    """``kind``: queued, queue_full, no_safe_point, interrupted, mmap_failed, permission, gone, hung, error."""

    kind: str
    detail: str = ""
    stopped_s: float | None = None
    longest_stop_s: float | None = None
    safe_point_s: float | None = None  # how long the wait for a borrowed thread took
    lines: list[str] = field(default_factory=list)


class _Reader(threading.Thread):
    """gdb's output, line by line as it comes (the markers tell which phase the script is in)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(name="trainmon-attach-gdb-output", daemon=True)
        self.proc = proc
        self.lines: list[str] = []
        self.marks: dict[str, float] = {}

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("TM:"):
                self.marks.setdefault(line[3:].split()[0], time.monotonic())

    def phase(self) -> str:
        marks = self.marks
        if "DETACHED" in marks or "RESTORED" in marks or "NOSAFEPOINT" in marks:
            return "leaving"
        if "SAFEPOINT" in marks:
            return "calling"  # a thread's registers are (or are about to be) changed: never interrupt
        if "WAITING" in marks:
            return "waiting"
        return "starting"


def run(gdb: str, plan: Plan, script_path: str, safe_deadline: float, hard_deadline: float) -> Outcome:
    """Run the script; gives up waiting for a borrowed thread at ``safe_deadline`` (monotonic), kills gdb at
    ``hard_deadline``. Never raises for what gdb or the target do; a Ctrl-C here ends the wait like a deadline."""
    with open(script_path, "w") as fh:
        fh.write(build_script(plan))
    env = dict(os.environ, LC_ALL="C", LANG="C", DEBUGINFOD_URLS="")
    try:
        proc = subprocess.Popen(
            command(gdb, script_path, plan.exe),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,  # its own process group: killed whole, and no terminal Ctrl-C reaches it
        )
    except OSError as exc:
        return Outcome("error", f"cannot run {gdb}: {exc.strerror or exc}")
    reader = _Reader(proc)
    reader.start()
    original = _read_bytes(plan.pid, (*plan.safe_points, plan.entry))
    aborted = interrupted = killed = False
    last_abort = 0.0
    with StopWatch(plan.pid) as watch:
        while proc.poll() is None:
            try:
                now = time.monotonic()
                phase = reader.phase()
                if phase == "waiting" and now >= safe_deadline and now - last_abort >= 1.0:
                    aborted = _abort_wait(plan.pid) or aborted
                    last_abort = now
                # Breakpoints are in the process's code while it runs (waiting, calling): gdb is killed then only
                # after a long grace, and the code bytes are put back behind it.
                limit = hard_deadline if phase in ("starting", "leaving") else hard_deadline + KILL_GRACE_S
                if now >= limit:
                    _kill_group(proc)
                    killed = True
                    break
                time.sleep(0.005)
            except KeyboardInterrupt:
                interrupted = True
                safe_deadline = time.monotonic()
        proc.wait()
    reader.join(timeout=2.0)
    if killed and alive(plan.pid):
        _restore_bytes(plan.pid, original)
        resume_if_left_stopped(plan.pid)
    outcome = _judge(reader, plan.pid, aborted=aborted, killed=killed)
    if interrupted and outcome.kind in ("no_safe_point", "interrupted"):
        outcome.kind, outcome.detail = "interrupted", "interrupted by Ctrl-C before anything was changed"
    outcome.stopped_s = watch.total_s if watch.stops else 0.0
    outcome.longest_stop_s = watch.longest_s
    if "WAITING" in reader.marks:
        end = reader.marks.get("SAFEPOINT", reader.marks.get("NOSAFEPOINT"))
        outcome.safe_point_s = end - reader.marks["WAITING"] if end is not None else None
    return outcome


def _read_bytes(pid: int, addresses: tuple[int, ...]) -> dict[int, bytes]:
    """The first code byte at each address where gdb will put a breakpoint (to undo them if gdb must be killed)."""
    out: dict[int, bytes] = {}
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            for address in addresses:
                mem.seek(address)
                out[address] = mem.read(1)
    except (OSError, ValueError, OverflowError):
        pass
    return out


def _restore_bytes(pid: int, original: dict[int, bytes]) -> None:
    """Put back code bytes that a killed gdb left as breakpoints (0xCC) in the process."""
    try:
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
            for address, byte in original.items():
                mem.seek(address)
                if len(byte) == 1 and mem.read(1) == b"\xcc" and byte != b"\xcc":
                    mem.seek(address)
                    mem.write(byte)
    except (OSError, ValueError, OverflowError):
        pass


def _abort_wait(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGWINCH)  # intercepted by gdb (stop, nopass): the target never receives it
    except OSError:
        return False
    return True


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


_PERMISSION = ("operation not permitted", "permission denied")
_GONE = ("no such process", "exited normally", "exited with code", "terminated with signal", "the program is not")


def _judge(reader: _Reader, pid: int, *, aborted: bool, killed: bool) -> Outcome:
    marks, lines = reader.marks, reader.lines
    text = "\n".join(lines).lower()
    queued = next((line for line in lines if line.startswith("TM:QUEUED ")), None)
    if queued is not None:
        if "RESTORED" not in marks:
            return Outcome("error", "gdb stopped before restoring the borrowed thread", lines=lines)
        value = queued.split()[-1]
        if value == "0":
            return Outcome("queued", lines=lines)
        return Outcome("queue_full", f"Py_AddPendingCall returned {value}", lines=lines)
    if killed:
        where = {"calling": "while a thread was borrowed", "waiting": "while waiting for a thread"}.get(
            reader.phase(), "while attaching"
        )
        return Outcome("hung", f"gdb did not finish and was killed {where}", lines=lines)
    if "NOSAFEPOINT" in marks:
        return Outcome("no_safe_point" if aborted else "interrupted", "a signal ended the wait", lines=lines)
    buf = next((line for line in lines if line.startswith("TM:BUF ")), None)
    if buf is not None and buf.split()[-1] in (str(MAP_FAILED), "0"):
        got = "MAP_FAILED" if buf.split()[-1] == str(MAP_FAILED) else "0"
        return Outcome(
            "mmap_failed", f"mmap returned {got} in the process (out of memory or address space?)", lines=lines
        )
    if "ATTACHED" not in marks and any(p in text for p in _PERMISSION):
        return Outcome("permission", _last_error(lines), lines=lines)
    if not alive(pid) or any(g in text for g in _GONE):
        return Outcome("gone", _last_error(lines), lines=lines)
    return Outcome("error", _last_error(lines) or "gdb ended without a result", lines=lines)


def _last_error(lines: list[str]) -> str:
    interesting = [
        line
        for line in lines
        if line.strip() and not line.startswith(("TM:", "Breakpoint ", "warning: Unable to find libthread_db"))
    ]
    return interesting[-1].strip() if interesting else ""
