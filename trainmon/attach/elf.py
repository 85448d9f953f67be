"""A minimal ELF reader: the load segments and the defined symbols of one shared object or executable.

Only what the injector needs to turn a symbol into an address in another process: 64-bit and 32-bit ELF, either
byte order, the dynamic symbol table first (exported symbols: what a stripped libpython or a static interpreter
built with ``-Xlinker -export-dynamic`` keeps) and the full symbol table when there is one. Never imports anything
beyond the standard library, never raises anything but ``ElfError`` (and ``OSError`` from opening the file).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

ET_EXEC = 2
ET_DYN = 3
PT_LOAD = 1
SHT_SYMTAB = 2
SHT_DYNSYM = 11
SHN_UNDEF = 0
STT_OBJECT = 1
STT_FUNC = 2
_MAX_TABLE = 64 << 20  # a symbol or string table larger than this is not an ELF file we want to read


class ElfError(ValueError):
    """The file is not an ELF object this reader understands (or is truncated)."""


@dataclass(frozen=True)
class Segment:
    offset: int
    vaddr: int
    filesz: int
    memsz: int


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    kind: int  # STT_FUNC, STT_OBJECT, ...


@dataclass(frozen=True)
class ElfImage:
    path: str
    elf_type: int  # ET_EXEC (fixed addresses) or ET_DYN (relocated by the load bias)
    machine: int
    entry: int  # the entry point (``_start``), before the load bias
    segments: tuple[Segment, ...]
    symbols: dict[str, Symbol]

    def load_bias(self, map_start: int, map_offset: int, page_size: int) -> int | None:
        """The bias the loader added to this image's addresses, from one of its mappings (start address and file
        offset, as /proc/PID/maps shows them); None when no load segment covers that file offset."""
        if self.elf_type == ET_EXEC:
            return 0
        mask = ~(page_size - 1)
        for seg in self.segments:
            if seg.offset & mask == map_offset:
                return map_start - (seg.vaddr & mask)
        return None


def read_image(path: str, wanted: Iterable[str]) -> ElfImage:
    """The load segments and the defined symbols among ``wanted`` (function or data) of the ELF file at ``path``."""
    names = set(wanted)
    with open(path, "rb") as fh:
        return _Reader(fh, path).image(names)


class _Reader:
    def __init__(self, fh: BinaryIO, path: str) -> None:
        self.fh = fh
        self.path = path
        ident = self._read(0, 16)
        if ident[:4] != b"\x7fELF":
            raise ElfError(f"{path}: not an ELF file")
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError(f"{path}: unknown ELF class or byte order")
        self.is64 = ident[4] == 2
        self.end = "<" if ident[5] == 1 else ">"
        if self.is64:
            fields = struct.unpack(self.end + "HHIQQQIHHHHHH", self._read(16, 48))
        else:
            fields = struct.unpack(self.end + "HHIIIIIHHHHHH", self._read(16, 36))
        (self.e_type, self.machine, _, self.entry, self.phoff, self.shoff, _, _, self.phentsize, self.phnum,
         self.shentsize, self.shnum, _) = fields  # fmt: skip

    def _read(self, offset: int, size: int) -> bytes:
        if size < 0 or size > _MAX_TABLE:
            raise ElfError(f"{self.path}: implausible table size {size}")
        self.fh.seek(offset)
        data = self.fh.read(size)
        if len(data) != size:
            raise ElfError(f"{self.path}: truncated")
        return data

    def image(self, wanted: set[str]) -> ElfImage:
        if self.e_type not in (ET_EXEC, ET_DYN):
            raise ElfError(f"{self.path}: neither an executable nor a shared object")
        return ElfImage(
            self.path, self.e_type, self.machine, self.entry, tuple(self._segments()), self._symbols(wanted)
        )

    def _segments(self) -> list[Segment]:
        out = []
        fmt = self.end + ("IIQQQQQQ" if self.is64 else "IIIIIIII")
        size = struct.calcsize(fmt)
        if self.phnum and self.phentsize < size:
            raise ElfError(f"{self.path}: bad program header size")
        for i in range(self.phnum):
            raw = self._read(self.phoff + i * self.phentsize, size)
            if self.is64:
                p_type, _, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack(fmt, raw)
            else:
                p_type, p_offset, p_vaddr, _, p_filesz, p_memsz, _, _ = struct.unpack(fmt, raw)
            if p_type == PT_LOAD:
                out.append(Segment(p_offset, p_vaddr, p_filesz, p_memsz))
        return out

    def _sections(self) -> list[tuple[int, int, int, int, int]]:
        """(type, offset, size, link, entsize) of every section."""
        fmt = self.end + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")
        size = struct.calcsize(fmt)
        if self.shnum and self.shentsize < size:
            raise ElfError(f"{self.path}: bad section header size")
        out = []
        for i in range(self.shnum):
            _, sh_type, _, _, sh_offset, sh_size, sh_link, _, _, sh_entsize = struct.unpack(
                fmt, self._read(self.shoff + i * self.shentsize, size)
            )
            out.append((sh_type, sh_offset, sh_size, sh_link, sh_entsize))
        return out

    def _symbols(self, wanted: set[str]) -> dict[str, Symbol]:
        found: dict[str, Symbol] = {}
        sections = self._sections()
        # The dynamic table first: exported symbols are what the running interpreter's callers use.
        for table_type in (SHT_DYNSYM, SHT_SYMTAB):
            for sh_type, offset, size, link, entsize in sections:
                if sh_type != table_type or not 0 <= link < len(sections):
                    continue
                _, str_offset, str_size, _, _ = sections[link]
                strings = self._read(str_offset, str_size)
                for sym in self._table(offset, size, entsize, strings, wanted):
                    found.setdefault(sym.name, sym)
            if wanted <= found.keys():
                break
        return found

    def _table(self, offset: int, size: int, entsize: int, strings: bytes, wanted: set[str]) -> list[Symbol]:
        fmt = self.end + ("IBBHQQ" if self.is64 else "IIIBBH")
        entry_size = struct.calcsize(fmt)
        if entsize < entry_size:
            raise ElfError(f"{self.path}: bad symbol entry size")
        data = self._read(offset, size)
        encoded = {name.encode(): name for name in wanted}
        out = []
        for pos in range(0, len(data) - entry_size + 1, entsize):
            if self.is64:
                st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from(fmt, data, pos)
            else:
                st_name, st_value, st_size, st_info, _, st_shndx = struct.unpack_from(fmt, data, pos)
            if st_shndx == SHN_UNDEF or st_name >= len(strings):
                continue
            end = strings.find(b"\0", st_name)
            name = encoded.get(strings[st_name : end if end >= 0 else len(strings)])
            if name is not None:
                out.append(Symbol(name, st_value, st_size, st_info & 0xF))
        return out
