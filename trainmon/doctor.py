"""`trainmon doctor`: what works on this machine (NVML, py-spy and ptrace, the attach injector, socket directory,
torch) and why not.

Every check is one or more rows ``(check, status, detail)`` with status ``ok``, ``warn`` or ``fail``. Checks never
raise and never change the system (the socket directory is inspected, not created). Textual is located, not
imported: nothing below the TUI layer may import it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from trainmon import protocol as P
from trainmon.sources.pyspy import py_spy as pyspy

Row = tuple[str, str, str]
OK, WARN, FAIL = "ok", "warn", "fail"
TORCH_PROBE_TIMEOUT_S = 60.0


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------- python and packages


def check_python() -> list[Row]:
    impl = platform.python_implementation()
    detail = f"{impl} {platform.python_version()} ({sys.executable})"
    return [("python", OK, detail)]


def check_psutil() -> list[Row]:
    try:
        import psutil

        psutil.cpu_times()
        psutil.Process(os.getpid()).memory_info()
    except Exception as exc:
        return [("psutil", FAIL, f"not usable: {_one_line(exc)}; pip install psutil")]
    return [("psutil", OK, psutil.__version__)]


def check_textual() -> list[Row]:
    if importlib.util.find_spec("textual") is None:
        return [("textual", FAIL, "not installed: pip install textual (the TUI needs it; record/report do not)")]
    return [("textual", OK, _dist_version("textual") or "installed")]


def check_torch() -> list[Row]:
    if importlib.util.find_spec("torch") is None:
        return [("torch", WARN, "not installed here: only `trainmon demo` needs it (jobs use their own torch)")]
    # Import in a child: a broken torch install can crash the interpreter, and the monitor never needs torch.
    code = "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.device_count())"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=TORCH_PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return [("torch", WARN, f"`import torch` took over {TORCH_PROBE_TIMEOUT_S:g} s")]
    except OSError as exc:
        return [("torch", WARN, f"cannot start {sys.executable}: {_one_line(exc)}")]
    fields = out.stdout.split()
    if out.returncode != 0 or len(fields) != 3:
        lines = out.stderr.strip().splitlines()
        return [
            (
                "torch",
                WARN,
                f"import fails: {lines[-1] if lines else f'exit {out.returncode}'} (only `trainmon demo` needs it)",
            )
        ]
    version, cuda, count = fields
    detail = f"{version}, CUDA available, {count} device(s)" if cuda == "True" else f"{version}, no CUDA"
    return [("torch", OK, detail)]


# ---------------------------------------------------------------- NVML


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_call(fn: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
    try:
        return fn(*args), None
    except Exception as exc:
        return None, _one_line(exc)


def _gpm_support(nvml: Any, handle: Any) -> str:
    query = getattr(nvml, "nvmlGpmQueryDeviceSupport", None)
    if query is None:
        return "GPM unknown (nvidia-ml-py too old)"
    support, err = _nvml_call(query, handle)
    if err is not None:
        return f"GPM unavailable ({err})"
    return "GPM supported" if getattr(support, "isSupportedDevice", 0) else "GPM not supported (pre-Hopper)"


def check_nvml() -> list[Row]:
    """NVML found, its versions and devices; without it the monitor still runs, so failures are warnings."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except Exception as exc:
        return [
            (
                "nvml",
                WARN,
                f"pynvml not importable ({_one_line(exc)}): pip install nvidia-ml-py; running without GPU data",
            )
        ]
    _, err = _nvml_call(nvml.nvmlInit)
    if err is not None:
        return [("nvml", WARN, f"NVML unavailable: {err} (no NVIDIA driver here?); running without GPU data")]
    try:
        return _nvml_rows(nvml)
    finally:
        _nvml_call(nvml.nvmlShutdown)


def _nvml_rows(nvml: Any) -> list[Row]:
    driver, _ = _nvml_call(nvml.nvmlSystemGetDriverVersion)
    version, _ = _nvml_call(nvml.nvmlSystemGetNVMLVersion)
    count, err = _nvml_call(nvml.nvmlDeviceGetCount)
    head = f"driver {_text(driver) if driver else 'n/a'}, NVML {_text(version) if version else 'n/a'}"
    if err is not None:
        return [("nvml", WARN, f"{head}; cannot count devices: {err}")]
    rows: list[Row] = [("nvml", OK if count else WARN, f"{head}, {count} device(s)")]
    for index in range(count):
        handle, err = _nvml_call(nvml.nvmlDeviceGetHandleByIndex, index)
        if err is not None:
            rows.append((f"gpu {index}", WARN, f"no handle: {err}"))
            continue
        name, _ = _nvml_call(nvml.nvmlDeviceGetName, handle)
        rows.append((f"gpu {index}", OK, f"{_text(name) if name else 'unknown'}, {_gpm_support(nvml, handle)}"))
    return rows


# ---------------------------------------------------------------- py-spy and ptrace


def check_pyspy() -> list[Row]:
    binary = pyspy.find_pyspy()
    if binary is None:
        return [("py-spy", WARN, f"{pyspy.NOT_FOUND} (stack dumps and agentless sampling are off)")]
    version = pyspy.pyspy_version(binary)
    if version is None:
        return [("py-spy", WARN, f"{binary} does not run (`py-spy --version` failed)")]
    return [("py-spy", OK, f"{version} ({binary})")]


def check_ptrace() -> list[Row]:
    ok, why = pyspy.ptrace_status()
    return [("ptrace", OK if ok else WARN, why)]


def check_injector() -> list[Row]:
    """What ``trainmon attach`` injects with: ``sys.remote_exec`` (3.14+ targets of this Python's version) and gdb
    (any other CPython 3.10+ target, x86-64), and whether ptrace lets it in."""
    from trainmon.attach import gdb
    from trainmon.attach import ptrace_message as attach_ptrace

    remote = getattr(sys, "remote_exec", None) is not None
    same = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
    binary = gdb.find_gdb()
    ptrace_ok, ptrace_why = attach_ptrace.status()
    ptrace_txt = f"ptrace: {ptrace_why}"
    machine = platform.machine().lower()
    if binary is None:
        if remote:
            return [("injector", WARN, f"sys.remote_exec for {same} targets only; {gdb.NOT_FOUND}; {ptrace_txt}")]
        return [("injector", WARN, f"`trainmon attach` is off: {gdb.NOT_FOUND}; {ptrace_txt}")]
    version = gdb.gdb_version(binary) or "version unknown"
    head = f"gdb {version} ({binary})"
    if remote:
        head = f"sys.remote_exec for {same} targets, {head} for the others"
    if machine not in ("x86_64", "amd64"):
        detail = f"{head}: the gdb injector supports x86-64 only, not {machine}; {ptrace_txt}"
        return [("injector", WARN if not remote else OK, detail)]
    return [("injector", OK if ptrace_ok else WARN, f"{head}; {ptrace_txt}")]


# ---------------------------------------------------------------- socket directory and listening monitor


def _socket_dir_row(directory: str) -> Row:
    check = "socket dir"
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return _missing_dir_row(directory)
    except OSError as exc:
        return (check, FAIL, f"{directory}: cannot stat: {exc.strerror or exc}")
    if not stat.S_ISDIR(st.st_mode):
        return (check, FAIL, f"{directory} exists and is not a directory: remove it or set TRAINMON_ADDR")
    if st.st_uid != os.getuid():
        return (
            check,
            FAIL,
            f"{directory} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): remove it or set TRAINMON_ADDR",
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        return (check, FAIL, f"{directory} is not writable by you: chmod 700 {directory}")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (check, WARN, f"{directory} has mode {mode:04o}; the monitor tightens it to 0700 when it starts")
    return (check, OK, f"{directory} (yours, mode 0700)")


def _missing_dir_row(directory: str) -> Row:
    parent = os.path.dirname(directory.rstrip("/")) or "."
    while parent and not os.path.exists(parent):  # makedirs creates the missing parents too
        parent = os.path.dirname(parent)
    if parent and os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
        return ("socket dir", OK, f"{directory} (created with mode 0700 when the monitor starts)")
    return ("socket dir", FAIL, f"{directory} cannot be created: {parent or '/'} is not writable by you")


def _probe(address: str) -> tuple[bool, str]:
    """Whether something accepts connections at ``address`` (a Unix socket path or HOST:PORT)."""
    tcp = P.parse_tcp(address)
    if tcp is None:
        if not os.path.exists(address):
            return False, "no socket file"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target: Any = address
    else:
        sock = socket.socket(socket.AF_INET6 if ":" in tcp[0] else socket.AF_INET, socket.SOCK_STREAM)
        target = tcp
    sock.settimeout(0.5)
    try:
        sock.connect(target)
    except OSError as exc:
        return False, "stale socket file (replaced when a monitor starts)" if tcp is None else _one_line(exc)
    finally:
        sock.close()
    return True, "listening"


def check_socket() -> list[Row]:
    directory = P.default_socket_dir()
    rows = [_socket_dir_row(directory)]
    address = P.resolve_address(None)
    source = " (from TRAINMON_ADDR)" if os.environ.get("TRAINMON_ADDR") else ""
    try:
        listening, why = _probe(address)
    except OSError as exc:
        listening, why = False, _one_line(exc)
    if listening:
        rows.append(("monitor", OK, f"a monitor is listening on {address}{source}"))
    else:
        rows.append(("monitor", OK, f"none listening on {address}{source}: {why}"))
    return rows


# ---------------------------------------------------------------- all together


def _checks() -> tuple[Callable[[], list[Row]], ...]:
    # Resolved at call time, so a test can replace one check (e.g. skip the slow torch import).
    return (
        check_python,
        check_psutil,
        check_textual,
        check_torch,
        check_nvml,
        check_pyspy,
        check_ptrace,
        check_injector,
        check_socket,
    )


def _run_check(check: Callable[[], list[Row]]) -> list[Row]:
    try:
        return check()
    except Exception as exc:  # a doctor that crashes diagnoses nothing
        name = check.__name__.removeprefix("check_")
        return [(name, FAIL, f"check crashed: {type(exc).__name__}: {_one_line(exc)}")]


def run_doctor() -> tuple[list[Row], bool]:
    """All checks, and whether the monitor can run here (psutil works and the socket directory is usable)."""
    rows = [row for check in _checks() for row in _run_check(check)]
    status = {check: st for check, st, _ in rows}
    can_run = status.get("psutil") == OK and status.get("socket dir") in (OK, WARN)
    return rows, can_run


def format_doctor(rows: list[Row], can_run: bool | None = None) -> str:
    """Aligned plain-text table; with ``can_run`` a closing verdict line."""
    width = max((len(check) for check, _, _ in rows), default=5)
    lines = [f"{check:<{width}}  {status:<4}  {detail}" for check, status, detail in rows]
    if can_run is not None:
        lines.append("")
        lines.append("the monitor can run here" if can_run else "the monitor cannot run here: fix the 'fail' rows")
    return "\n".join(lines)


def main() -> int:
    """Print the table; exit status 0 when the monitor can run, 1 otherwise."""
    rows, can_run = run_doctor()
    print(format_doctor(rows, can_run))
    return 0 if can_run else 1


if __name__ == "__main__":
    raise SystemExit(main())
