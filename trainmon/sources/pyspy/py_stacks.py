"""Python stacks as py-spy reports them: the data model, the parsers of ``dump --json`` and of ``record --format
raw``, and what a main-thread sample was doing.

py-spy's ``dump --json`` reports idle threads too (a main thread blocked in the DataLoader's ``queue.get`` is
idle), and ignores ``--subprocesses``: each pid is parsed on its own. ``record`` reports idle threads only with
``--idle``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DATALOADER_FILE = "torch/utils/data/dataloader.py"
DATA_WAIT_FUNCS = frozenset({"__next__", "_next_data", "_get_data", "_try_get_data"})
CHECKPOINT_FILES = ("torch/serialization.py", "torch/distributed/checkpoint/")
CHECKPOINT_FUNCS = frozenset({"save", "_save", "_legacy_save", "save_state_dict", "async_save"})

DATA_WAIT = "data_wait"
CHECKPOINT = "checkpoint"
COMPUTE = "compute"


# ---------------------------------------------------------------- data


@dataclass
class StackFrame:
    name: str
    filename: str
    line: int
    short: str  # package-relative path, e.g. "torch/utils/data/dataloader.py", or the basename

    def label(self) -> str:
        return f"{self.name} ({self.short}:{self.line})"


@dataclass
class ThreadStack:
    thread_id: int
    os_thread_id: int | None
    name: str
    is_main: bool
    active: bool
    owns_gil: bool
    frames: list[StackFrame]  # innermost first

    @property
    def idle(self) -> bool:
        return not self.active


@dataclass
class StackDump:
    pid: int
    threads: list[ThreadStack] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0  # wall time of the py-spy call

    @property
    def ok(self) -> bool:
        return self.error is None

    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.is_main), None)

    def to_dict(self, role: str, max_frames: int = 64) -> dict[str, Any]:
        """This dump as one process of a stored stack dump (the format of ``trainmon.store.stacks``)."""
        return {
            "pid": self.pid,
            "role": role,
            "error": self.error,
            "elapsed_ms": round(self.elapsed_s * 1e3, 1),
            "threads": [
                {
                    "tid": t.os_thread_id if t.os_thread_id is not None else t.thread_id,
                    "name": t.name,
                    "main": t.is_main,
                    "idle": t.idle,
                    "gil": t.owns_gil,
                    "frames": [[f.name, f.short, f.line] for f in t.frames[:max_frames]],
                }
                for t in self.threads
            ],
        }

    def summary(self, max_frames: int = 8) -> list[str]:
        """Readable lines: the main thread first, then the others; innermost frame first, idle threads marked."""
        if self.error is not None:
            return [f"pid {self.pid}: {self.error}"]
        if not self.threads:
            return [f"pid {self.pid}: no Python threads"]
        lines = [f"pid {self.pid}: {len(self.threads)} Python thread{'s' if len(self.threads) != 1 else ''}"]
        for thread in sorted(self.threads, key=lambda t: not t.is_main):
            tags = (["main"] if thread.is_main else []) + ["idle" if thread.idle else "active"]
            if thread.owns_gil:
                tags.append("gil")
            tid = thread.os_thread_id if thread.os_thread_id is not None else thread.thread_id
            lines.append(f"thread {tid} {thread.name!r} ({', '.join(tags)})")
            lines.extend(f"    {frame.label()}" for frame in thread.frames[:max_frames])
            if len(thread.frames) > max_frames:
                lines.append(f"    ... {len(thread.frames) - max_frames} more")
        return lines


def _short_path(filename: str) -> str:
    path = filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    return path.rsplit("/", 1)[-1]


def _parse_frame(raw: dict[str, Any]) -> StackFrame:
    filename = str(raw.get("filename") or "?")
    short = raw.get("short_filename") or _short_path(filename)
    line = raw.get("line")
    return StackFrame(
        name=str(raw.get("name") or "?"),
        filename=filename,
        line=int(line) if isinstance(line, int) else 0,
        short=str(short),
    )


def _parse_thread(pid: int, raw: dict[str, Any]) -> ThreadStack:
    os_tid = raw.get("os_thread_id")
    os_tid = int(os_tid) if isinstance(os_tid, int) else None
    name = str(raw.get("thread_name") or "")
    if os_tid is not None:
        is_main = os_tid == pid
    else:
        is_main = name == "MainThread"
    return ThreadStack(
        thread_id=int(raw.get("thread_id") or 0),
        os_thread_id=os_tid,
        name=name or "?",
        is_main=is_main,
        active=bool(raw.get("active", True)),
        owns_gil=bool(raw.get("owns_gil", False)),
        frames=[_parse_frame(f) for f in raw.get("frames") or [] if isinstance(f, dict)],
    )


def parse_dump(pid: int, text: str) -> StackDump:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return StackDump(pid, error=f"could not parse py-spy output for pid {pid}: {exc}")
    if not isinstance(raw, list):
        return StackDump(pid, error=f"unexpected py-spy output for pid {pid}: {type(raw).__name__}")
    # Threads of other processes only appear with --subprocesses, which dump --json ignores; filter anyway.
    threads = [_parse_thread(pid, t) for t in raw if isinstance(t, dict) and t.get("pid", pid) == pid]
    return StackDump(pid, threads=threads)


def _parse_collapsed_frame(text: str) -> StackFrame:
    """``name (path:line)``, as ``record --format raw`` writes a frame."""
    name, sep, where = text.rpartition(" (")
    if not sep or not where.endswith(")"):
        return StackFrame(name=text or "?", filename="?", line=0, short="?")
    filename, _, line = where[:-1].rpartition(":")
    if not filename:
        filename, line = line, ""
    return StackFrame(
        name=name or "?",
        filename=filename or "?",
        line=int(line) if line.isdigit() else 0,
        short=_short_path(filename) if filename.startswith("/") else filename or "?",  # py-spy's short name as is
    )


def _parse_collapsed_thread(pid: int, header: str) -> tuple[int | None, str, bool]:
    """``thread (TID): NAME`` (``--threads``): the native thread id where py-spy knows it (else a hex Python id),
    the name, and whether it is the main thread."""
    ident, _, name = header.removeprefix("thread (").partition(")")
    name = name.removeprefix(":").strip()
    tid = int(ident) if ident.isdigit() else None
    return tid, name or "?", tid == pid if tid is not None else name == "MainThread"


def parse_collapsed(pid: int, text: str) -> list[tuple[ThreadStack, int]]:
    """Each distinct stack of ``py-spy record --format raw --threads`` output with its count; lines that are not
    stacks (py-spy's own messages) are skipped. A thread's frames come innermost first, as from ``dump``."""
    out: list[tuple[ThreadStack, int]] = []
    for line in text.splitlines():
        if not line.startswith("thread ("):
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        header, *frames = stack.split(";")
        tid, name, is_main = _parse_collapsed_thread(pid, header)
        thread = ThreadStack(
            thread_id=tid or 0,
            os_thread_id=tid,
            name=name,
            is_main=is_main,
            active=True,  # raw output does not say; --idle keeps idle threads in
            owns_gil=False,
            frames=[_parse_collapsed_frame(f) for f in reversed(frames)],
        )
        out.append((thread, int(count)))
    return out


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]  # py-spy names methods by qualified name, "Class.method"


def classify(thread: ThreadStack) -> str:
    """What one sample of the main thread says it was doing: data_wait, checkpoint or compute."""
    for frame in thread.frames:
        path = frame.filename.replace("\\", "/")
        leaf = _leaf(frame.name)
        if path.endswith(DATALOADER_FILE) and leaf in DATA_WAIT_FUNCS:
            return DATA_WAIT
        if leaf in CHECKPOINT_FUNCS and any(marker in path for marker in CHECKPOINT_FILES):
            return CHECKPOINT
    return COMPUTE
