"""Python stacks of training processes through py-spy: one-off dumps and agentless sampling of the main thread.

Everything here fails open: a missing binary, denied ptrace, an exited process or a hung py-spy becomes an
``error`` string with the reason and the fix, never an exception.

py-spy notes that shape this module (see docs/architecture.md):
- ``dump`` always reports idle threads; ``record`` only with ``--idle``, and a main thread blocked in the
  DataLoader's ``queue.get`` is idle, so sampling records with ``--idle``.
- Sampling is one ``record`` per chunk of seconds, not one ``dump`` per sample: a dump reads the stack at the end
  of its own start-up, later when the training's threads fill the cores than when it waits on data, which leans
  the samples towards data waits (benchmarks/sampling_accuracy.py).
- ``dump --json`` ignores ``--subprocesses``: each pid is dumped on its own.
- ``--nonblocking`` never pauses the training process; a stack may be slightly torn, which sampling tolerates.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress

import psutil

from trainmon.metrics import PYSPY
from trainmon.ptrace import PTRACE_FIX, has_cap_sys_ptrace, read_ptrace_scope
from trainmon.ptrace import facts as ptrace_facts
from trainmon.ptrace import refusal as ptrace_refusal
from trainmon.sources.pyspy.py_stacks import CHECKPOINT, DATA_WAIT, StackDump, classify, parse_collapsed, parse_dump
from trainmon.sources.pyspy.spy_process import RECORD_FLAGS, SAMPLES_LINE, Recording, read_text, wait_rusage

log = logging.getLogger("trainmon.pyspy")

NOT_FOUND = "py-spy not found: pip install py-spy"
# ---------------------------------------------------------------- binary and permissions


def find_pyspy() -> str | None:
    """The py-spy next to this interpreter (same virtualenv) first, then PATH."""
    bindir = os.path.dirname(sys.executable)
    for name in ("py-spy", "py-spy.exe"):
        candidate = os.path.join(bindir, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("py-spy")


def pyspy_version(binary: str | None = None, timeout: float = 5.0) -> str | None:
    binary = binary or find_pyspy()
    if binary is None:
        return None
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text.split()[-1] if out.returncode == 0 and text else None


def ptrace_status() -> tuple[bool, str]:
    """Whether py-spy can likely attach to the training processes, and why (one line)."""
    if not sys.platform.startswith("linux"):
        return True, f"{sys.platform}: no Yama; py-spy may need sudo"
    scope = read_ptrace_scope()
    cap = has_cap_sys_ptrace()
    where = ptrace_facts(scope, cap)
    if scope == 3:
        return False, f"{where}: ptrace is disabled until reboot; py-spy cannot attach"
    if cap:
        return True, f"{where}: ptrace allowed to any process"
    if scope in (None, 0):
        return True, f"{where}: ptrace allowed to processes of the same user"
    if scope == 1:
        # py-spy is never an ancestor of the job (not even under `trainmon run`: it is the job's sibling).
        return False, (
            f"{where}: py-spy may attach only to its own descendants, which a training job is not, "
            "unless the job calls prctl(PR_SET_PTRACER); fix: sudo sysctl kernel.yama.ptrace_scope=0 "
            "or run trainmon with sudo"
        )
    return False, f"{where}: only CAP_SYS_PTRACE may attach; run with sudo or grant CAP_SYS_PTRACE"


def permission_message(pid: int) -> str:
    """One line: why py-spy was refused by the kernel, and the fix."""
    why, facts = ptrace_refusal(read_ptrace_scope(), has_cap_sys_ptrace())
    try:
        uid = psutil.Process(pid).uids().real
        if uid != os.getuid():
            facts.append(f"process owned by uid {uid}, you are uid {os.getuid()}")
    except (psutil.Error, OSError):
        pass
    return f"py-spy cannot attach to pid {pid}: permission denied, {why} ({', '.join(facts)}); {PTRACE_FIX}"


def process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, OSError):
        return False


# ---------------------------------------------------------------- dump


_PERMISSION_MARKERS = ("permission denied", "operation not permitted", "os error 1)", "os error 13)")


def _explain_failure(pid: int, stderr: str, returncode: int, command: str = "dump") -> str:
    if process_gone(pid):
        return f"process {pid} has exited"
    low = stderr.lower()
    if any(marker in low for marker in _PERMISSION_MARKERS):
        return permission_message(pid)
    first = _first_error_line(stderr)
    if "failed to find python version" in low or "failed to find a python interpreter" in low:
        return f"process {pid} does not look like a Python process (py-spy: {first})"
    return f"py-spy {command} of pid {pid} failed (exit {returncode}): {first}"


def _first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if line and not line.startswith(("Stack backtrace", "Caused by")):
            return line.removeprefix("Error: ")
    return "no message"


DUMP_ATTEMPTS = 3  # a read without pausing the process can meet its stacks mid-change: read again
RETRY_PAUSE_S = 0.05


def dump(pid: int, timeout: float = 5.0) -> StackDump:
    """Stacks of every Python thread of ``pid`` without pausing it; a torn read (py-spy fails on a live stack, or
    finds no thread) is read again, up to DUMP_ATTEMPTS times. Never raises."""
    spent = 0.0
    for attempt in range(DUMP_ATTEMPTS):
        try:
            result = _dump(pid, timeout)
        except Exception as exc:  # fail open: a monitor must survive whatever py-spy does
            log.debug("py-spy dump of %s failed", pid, exc_info=True)
            return StackDump(pid, error=f"py-spy dump of pid {pid} failed: {exc}")
        spent += result.elapsed_s
        result.elapsed_s = spent
        error = result.error
        torn = not result.threads if error is None else error.startswith(f"py-spy dump of pid {pid} failed (exit")
        if not torn or attempt == DUMP_ATTEMPTS - 1:
            return result
        time.sleep(RETRY_PAUSE_S)
    raise AssertionError("unreachable")


def _dump(pid: int, timeout: float) -> StackDump:
    binary = find_pyspy()
    if binary is None:
        return StackDump(pid, error=NOT_FOUND)
    if process_gone(pid):
        return StackDump(pid, error=f"process {pid} has exited")
    env = dict(os.environ, RUST_BACKTRACE="0")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [binary, "dump", "--json", "--nonblocking", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return StackDump(
            pid, error=f"py-spy dump of pid {pid} timed out after {timeout:g} s", elapsed_s=time.monotonic() - t0
        )
    except FileNotFoundError:
        return StackDump(pid, error=NOT_FOUND)
    except OSError as exc:
        return StackDump(pid, error=f"cannot run py-spy ({binary}): {exc.strerror or exc}")
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        return StackDump(pid, error=_explain_failure(pid, proc.stderr, proc.returncode), elapsed_s=elapsed)
    result = parse_dump(pid, proc.stdout)
    result.elapsed_s = elapsed
    return result


# ---------------------------------------------------------------- record: a steady stream of samples


def record(
    pid: int, seconds: int, rate: int, output: str, *, stop: threading.Event | None = None, timeout: float = 5.0
) -> Recording:
    """Sample every thread of ``pid`` ``rate`` times a second for ``seconds`` with one ``py-spy record`` (its
    sampler waits an exponentially distributed time between samples, which cannot alias with a periodic loop),
    writing to ``output``. Setting ``stop`` ends the run early with what it has sampled. Never raises."""
    binary = find_pyspy()
    if binary is None:
        return Recording(pid, error=NOT_FOUND)
    if process_gone(pid):
        return Recording(pid, error=f"process {pid} has exited")
    log_path = output + ".log"
    cmd = [binary, "record", "--pid", str(pid), "--rate", str(rate), "--duration", str(seconds), "-o", output]
    t0 = time.monotonic()
    try:
        with suppress(FileNotFoundError):
            os.unlink(output)
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [*cmd, *RECORD_FLAGS],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, RUST_BACKTRACE="0"),
            )
    except FileNotFoundError:
        return Recording(pid, error=NOT_FOUND)
    except OSError as exc:
        return Recording(pid, error=f"cannot run py-spy ({binary}): {exc.strerror or exc}")
    code, cpu, interrupted = wait_rusage(proc, seconds, seconds + timeout, stop)
    result = Recording(pid, elapsed_s=time.monotonic() - t0, cpu_s=cpu)
    log_text = read_text(log_path)
    if code is None:
        result.error = f"py-spy record of pid {pid} timed out after {seconds + timeout:g} s"
        return result
    if code != 0 and not interrupted:
        result.error = _explain_failure(pid, log_text, code, "record")
        return result
    if m := SAMPLES_LINE.search(log_text):
        result.read_errors = int(m[2])
    result.stacks = parse_collapsed(pid, read_text(output))
    return result


# ---------------------------------------------------------------- sampling


def _is_fatal(error: str) -> bool:
    return error == NOT_FOUND or "has exited" in error or "permission denied" in error


class PySpySampler:
    """Agentless sampling of the main thread of ``pid``: a background thread runs ``py-spy record`` for ``chunk``
    seconds at a time, about one sample every ``interval`` seconds at exponentially distributed moments.

    One long-lived py-spy per chunk, rather than one ``py-spy dump`` per sample, because a dump reads the stack
    only at the end of its own start-up (tens of ms of CPU): on a host whose cores the training fills, that end
    comes later when the training computes than when it waits on data, and the samples lean towards data waits.
    py-spy's sampler thread, once started, wakes and reads within a scheduler slice.

    ``sample()`` turns the samples of the chunks finished since the previous call into shares (each sample stands
    for the same time, 1/rate); ``hot_frames()`` names the hottest innermost frames outside data waits over a
    rolling window of recent samples.
    """

    def __init__(
        self,
        pid: int,
        interval: float = 0.02,
        *,
        timeout: float = 5.0,
        window: int = 3000,  # recent samples hot_frames() counts: a minute at the default rate
        start: bool = True,
        chunk: float = 1.0,
    ) -> None:
        self.pid = pid
        self.interval = max(0.001, interval)
        self.rate_hz = max(1, round(1 / self.interval))
        self.chunk_s = max(1, math.ceil(chunk))  # py-spy's --duration takes whole seconds
        self.timeout = timeout
        self.error: str | None = None
        self.errors = 0
        self.dumps = 0  # py-spy runs
        self.dump_seconds = 0.0  # their wall time
        self.cpu_seconds = 0.0  # py-spy's CPU time plus this sampler thread's, for cost accounting
        self.read_errors = 0  # samples py-spy could not read
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()
        self._recent: collections.deque[tuple[str, str]] = collections.deque(maxlen=max(1, window))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tmpdir: str | None = None
        if start:
            self.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"trainmon-pyspy-{self.pid}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop sampling; the chunk under way ends early and its samples still count."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.timeout + 6.0)

    def __enter__(self) -> PySpySampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> None:
        delay = 0.0
        try:
            while not self._stop.wait(delay):
                t0 = time.monotonic()
                cpu0 = time.thread_time()
                try:
                    fatal = self.sample_once()
                except Exception as exc:  # never let the sampler thread die with a traceback
                    log.debug("py-spy sampler for %s failed", self.pid, exc_info=True)
                    self.error, fatal = f"py-spy sampler failed: {exc}", False
                with self._lock:
                    self.cpu_seconds += time.thread_time() - cpu0
                if fatal:
                    log.info("py-spy sampling of pid %s stopped: %s", self.pid, self.error)
                    return
                spent = time.monotonic() - t0
                delay = max(0.0, min(5.0, self.chunk_s * 2 ** min(self.errors, 5)) - spent) if self.error else 0.0
        finally:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    def sample_once(self) -> bool:
        """Take one chunk of samples now; True when sampling cannot succeed any more (no binary, no permission,
        the process exited)."""
        if self._tmpdir is None:
            self._tmpdir = tempfile.mkdtemp(prefix="trainmon-pyspy-")
        output = os.path.join(self._tmpdir, "stacks.txt")
        result = record(self.pid, self.chunk_s, self.rate_hz, output, stop=self._stop, timeout=self.timeout)
        with self._lock:
            self.dumps += 1
            self.dump_seconds += result.elapsed_s
            self.cpu_seconds += result.cpu_s
            self.read_errors += result.read_errors
        if result.error is not None:
            self.errors += 1
            self.error = result.error
            return _is_fatal(result.error)
        main = result.main_thread_stacks()
        if not main:
            if not self._stop.is_set() and process_gone(self.pid):
                self.error = f"process {self.pid} has exited"
                return True
            return False
        self.error = None
        self.errors = 0
        with self._lock:
            for thread, n in main:
                kind = classify(thread)
                self._counts[kind] += n
                self._recent.extend([(kind, thread.frames[0].label())] * min(n, self._recent.maxlen or n))
        return False

    def sample(self, now: float | None = None) -> dict[str, float]:
        """Shares of the samples gathered since the previous call, and the data-wait share's binomial standard
        error sqrt(p(1-p)/n); NaN shares when there were none."""
        with self._lock:
            counts, self._counts = self._counts, collections.Counter()
        n = sum(counts.values())

        def share(kind: str) -> float:
            return counts[kind] / n if n else math.nan

        wait = share(DATA_WAIT)
        return {
            PYSPY.key(self.pid, "data_wait_share"): wait,
            PYSPY.key(self.pid, "checkpoint_share"): share(CHECKPOINT),
            PYSPY.key(self.pid, "samples"): float(n),
            PYSPY.key(self.pid, "data_wait_se"): math.sqrt(wait * (1 - wait) / n) if n else math.nan,
        }

    def hot_frames(self, n: int = 5) -> list[tuple[str, float]]:
        """The ``n`` most frequent innermost frames outside data waits, with their share of recent samples."""
        with self._lock:
            recent = list(self._recent)
        if not recent:
            return []
        hot = collections.Counter(label for kind, label in recent if kind != DATA_WAIT)
        return [(label, count / len(recent)) for label, count in hot.most_common(n)]
