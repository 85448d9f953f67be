"""Where the Python runtime and libc functions the injection calls live in a running process.

Resolved from ``/proc/PID/maps`` and the ELF symbol tables of the mapped files, without stopping the process and
without a debugger reading any symbols: gdb then only calls raw addresses, so libtorch's hundreds of MiB of symbols
are never loaded while the training is held. Works for an interpreter whose runtime is in a shared ``libpython``
and for one linked statically into the executable (symbols in the executable itself).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass

from trainmon.attach.elf import STT_FUNC, STT_OBJECT, ElfError, ElfImage, read_image

PENDING_CALL = "Py_AddPendingCall"
RUN_STRING = "PyRun_SimpleString"  # the exported function, not the macro over PyRun_SimpleStringFlags
VERSION = "Py_Version"  # 3.11+: const unsigned long, PY_VERSION_HEX
MMAP = "mmap"
# Function entries where a thread holds no lock the injected calls need and no live floating-point argument: a thread
# stopped there can make a call without its vector state being saved (gdb cannot write it on every kernel). Only the
# interpreter's own: a thread calls them while running Python or entering or leaving a C call, so the interpreter is
# initialised (a process that merely maps libpython, or one whose only busy threads run C, is never borrowed).
PY_SAFE_POINTS = ("PyObject_Malloc", "PyObject_Free", "PyMem_Malloc", "PyMem_Free", "PyEval_SaveThread",
                  "PyEval_RestoreThread")  # fmt: skip
_PY_NAME = re.compile(r"python(\d+)\.(\d+)")
_LIBPYTHON = re.compile(r"^libpython\d")
_LIBC = re.compile(r"^(libc[.-].*\.so.*|libc\.so.*|ld-musl-.*\.so.*|libc\.musl-.*\.so.*)$")


class SymbolError(Exception):
    """Why the runtime could not be located; ``kind`` is ``permission``, ``gone``, ``not_python`` or ``no_symbols``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    path: str


@dataclass(frozen=True)
class Runtime:
    """The addresses the injection calls, in the target's address space, and what they were found in."""

    python_file: str  # libpython (shared build) or the executable (static build)
    static: bool
    pending_call: int
    run_string: int
    mmap: int
    libc_file: str
    safe_points: tuple[int, ...]  # where a thread may be borrowed for the calls (entries of the functions above)
    entry: int | None  # the executable's entry point: the return address of the calls (nothing else runs it)
    machine: int  # ELF e_machine of the runtime's file (62: x86-64)
    version: tuple[int, int, int] | None  # from Py_Version (3.11+) or the file name (micro 0 then: unknown)
    exact_version: bool  # version read from the process's memory, not guessed from a file name


def read_maps(pid: int) -> list[Mapping]:
    """The file-backed mappings of ``pid``; raises PermissionError, FileNotFoundError/ProcessLookupError."""
    out = []
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            lo, _, hi = parts[0].partition("-")
            out.append(Mapping(int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), parts[5].rstrip("\n")))
    return out


def _open_path(pid: int, m: Mapping) -> str:
    """A path this process can open for the file behind ``m``, as the target sees it (its root, a deleted file)."""
    if m.path.endswith(" (deleted)"):
        return f"/proc/{pid}/map_files/{m.start:x}-{m.end:x}"
    return f"/proc/{pid}/root{m.path}"


def _version_from_name(path: str) -> tuple[int, int, int] | None:
    found = _PY_NAME.search(os.path.basename(path))
    return (int(found.group(1)), int(found.group(2)), 0) if found else None


def _image(pid: int, m: Mapping, wanted: tuple[str, ...]) -> ElfImage | None:
    try:
        return read_image(_open_path(pid, m), wanted)
    except (OSError, ElfError):
        return None


def _address(image: ElfImage, maps: list[Mapping], path: str, name: str, kinds: tuple[int, ...]) -> int | None:
    sym = image.symbols.get(name)
    if sym is None or sym.kind not in kinds:
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    for m in maps:
        if m.path == path:
            bias = image.load_bias(m.start, m.offset, page)
            if bias is not None:
                return bias + sym.value
    return None


def _read_word(pid: int, address: int) -> int | None:
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(address)
            data = mem.read(8)
    except (OSError, OverflowError, ValueError):
        return None
    return struct.unpack("<Q" if _little() else ">Q", data)[0] if len(data) == 8 else None


def _little() -> bool:
    import sys

    return sys.byteorder == "little"


def _candidates(pid: int, maps: list[Mapping]) -> list[str]:
    """libpython first (shared builds), then the executable (static builds); each file once."""
    paths = [m.path for m in maps if _LIBPYTHON.match(os.path.basename(m.path))]
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    if exe:
        paths.append(exe)
    return list(dict.fromkeys(paths))


def locate(pid: int) -> Runtime:
    """The runtime's injection addresses in ``pid``; raises SymbolError with the reason."""
    try:
        maps = read_maps(pid)
    except PermissionError:
        raise SymbolError("permission", f"cannot read /proc/{pid}/maps") from None
    except (FileNotFoundError, ProcessLookupError):
        raise SymbolError("gone", f"process {pid} has exited") from None
    except OSError as exc:
        raise SymbolError("permission", f"cannot read /proc/{pid}/maps: {exc.strerror or exc}") from None
    mapped = {m.path: m for m in maps}
    looks_python = False
    for path in _candidates(pid, maps):
        name_version = _version_from_name(path)
        looks_python = looks_python or name_version is not None
        m = mapped.get(path)
        if m is None:
            continue
        image = _image(pid, m, (PENDING_CALL, RUN_STRING, VERSION, *PY_SAFE_POINTS))
        if image is None:
            continue
        pending = _address(image, maps, path, PENDING_CALL, (STT_FUNC,))
        run = _address(image, maps, path, RUN_STRING, (STT_FUNC,))
        if pending is None or run is None:
            continue
        version, exact = name_version, False
        version_at = _address(image, maps, path, VERSION, (STT_OBJECT,))
        word = _read_word(pid, version_at) if version_at is not None else None
        if word is not None and word >> 24 == 3:
            version, exact = (word >> 24 & 0xFF, word >> 16 & 0xFF, word >> 8 & 0xFF), True
        safe = [_address(image, maps, path, name, (STT_FUNC,)) for name in PY_SAFE_POINTS]
        libc, libc_image = _libc(pid, maps)
        mmap_at = _address(libc_image, maps, libc, MMAP, (STT_FUNC,))
        if mmap_at is None:
            raise SymbolError("no_symbols", f"process {pid}: {libc} exports no {MMAP}")
        return Runtime(
            python_file=path,
            static=not _LIBPYTHON.match(os.path.basename(path)),
            pending_call=pending,
            run_string=run,
            mmap=mmap_at,
            libc_file=libc,
            safe_points=tuple(a for a in dict.fromkeys(safe) if a is not None),
            entry=_entry(pid, maps),
            machine=image.machine,
            version=version,
            exact_version=exact,
        )
    if looks_python:
        raise SymbolError(
            "no_symbols",
            f"process {pid} looks like Python, but its interpreter exports no {PENDING_CALL}/{RUN_STRING} "
            "(a stripped or fully static build)",
        )
    raise SymbolError(
        "not_python", f"process {pid} is not a Python process (no libpython and no Python runtime symbols)"
    )


def _libc(pid: int, maps: list[Mapping]) -> tuple[str, ElfImage]:
    """The C library mapped in ``pid`` (glibc or musl) and its image."""
    seen: set[str] = set()
    for m in maps:
        if m.path in seen or not _LIBC.match(os.path.basename(m.path)):
            continue
        seen.add(m.path)
        image = _image(pid, m, (MMAP,))
        if image is not None and MMAP in image.symbols:
            return m.path, image
    raise SymbolError("no_symbols", f"process {pid}: no C library exporting {MMAP} is mapped (not glibc or musl?)")


def _entry(pid: int, maps: list[Mapping]) -> int | None:
    """The executable's entry point in ``pid``."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    mine = [m for m in maps if m.path == exe]
    if not mine:
        return None
    first = min(mine, key=lambda m: m.offset)
    image = _image(pid, first, ())
    if image is None:
        return None
    bias = image.load_bias(first.start, first.offset, os.sysconf("SC_PAGE_SIZE"))
    return None if bias is None else bias + image.entry
