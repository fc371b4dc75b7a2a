"""The GPU architectures compiled into torch's CUDA library, read from its fat binary.

Only the ELF section headers of ``torch/lib/libtorch_cuda.so`` and, in its ``.nv_fatbin``
section, the fatbin container and entry headers are read; payloads are skipped, so the scan stays
cheap on a library of a gigabyte or more. Container header (16 bytes, little-endian): u32 magic
0xBA55ED50, u16 version, u16 header size, u64 size of the entries that follow. Entry header: u16
kind (1 PTX, 2 ELF cubin), u16 version, u32 header size, u32 padded payload size, ..., u32 SM
number at offset 28; the next entry follows the header and the padded payload. An arch is listed
when at least half of the containers (about one per source file) carry code for it, which matches
``torch.cuda.get_arch_list()``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ..facts import Unavailable
from .files import unavailable_from_oserror

# What to do when the library cannot say: ask the imported torch instead.
IMPORT_HINT = "run with --torch-import"

FATBIN_MAGIC = 0xBA55ED50
_ELF_MAGIC = b"\x7fELF"
_SHT_NOBITS = 8


class FatbinError(Exception):
    """The library is not laid out as expected; the caller falls back to --torch-import."""


def _pread(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise FatbinError(f"short read at offset {offset}")
    return data


def _find_section(fd: int, name: bytes) -> tuple[int, int] | None:
    """(offset, size) of an ELF64 little-endian section by name, from the section headers."""
    ehdr = _pread(fd, 64, 0)
    if ehdr[:4] != _ELF_MAGIC:
        raise FatbinError("not an ELF file")
    if ehdr[4] != 2 or ehdr[5] != 1:
        raise FatbinError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", ehdr, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ehdr, 0x3A)
    if shoff == 0 or shentsize < 64:
        raise FatbinError("no section headers")
    if shnum == 0 or shstrndx == 0xFFFF:
        # Extended numbering: the real counts live in section header 0.
        first = _pread(fd, shentsize, shoff)
        if shnum == 0:
            (shnum,) = struct.unpack_from("<Q", first, 32)
        if shstrndx == 0xFFFF:
            (shstrndx,) = struct.unpack_from("<I", first, 40)
    if shnum > 1 << 20 or shstrndx >= shnum:
        raise FatbinError("implausible section header table")
    table = _pread(fd, shnum * shentsize, shoff)
    str_off, str_size = struct.unpack_from("<QQ", table, shstrndx * shentsize + 24)
    strtab = _pread(fd, min(str_size, 1 << 22), str_off)
    for i in range(shnum):
        base = i * shentsize
        name_off, sh_type = struct.unpack_from("<II", table, base)
        end = strtab.find(b"\0", name_off)
        if strtab[name_off:end] == name and sh_type != _SHT_NOBITS:
            offset, size = struct.unpack_from("<QQ", table, base + 24)
            return offset, size
    return None


def _scan_containers(fd: int, start: int, end: int) -> tuple[dict[int, int], dict[int, int], int]:
    """For cubins and for PTX: in how many fatbin containers each SM number appears."""
    cubins: dict[int, int] = {}
    ptx: dict[int, int] = {}
    containers = 0
    pos = start
    while pos + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack("<IHHQ", _pread(fd, 16, pos))
        if magic != FATBIN_MAGIC:
            # Containers are 8-byte aligned; the section may end with zero padding.
            tail = os.pread(fd, min(end - pos, 4096), pos)
            index = tail.find(struct.pack("<I", FATBIN_MAGIC))
            if index < 0 or tail[:index].strip(b"\0"):
                if not tail.strip(b"\0") and pos + len(tail) >= end:
                    break
                raise FatbinError(f"no fatbin container at offset {pos}")
            pos += index
            continue
        entry = pos + header_size
        stop = entry + fat_size
        if header_size < 16 or stop > end:
            raise FatbinError(f"fatbin container at offset {pos} overruns its section")
        here_cubin: set[int] = set()
        here_ptx: set[int] = set()
        while entry + 32 <= stop:
            head = _pread(fd, 32, entry)
            kind, _ev, entry_header, padded = struct.unpack_from("<HHII", head, 0)
            (arch,) = struct.unpack_from("<I", head, 28)
            if entry_header < 32 or entry + entry_header + padded > stop:
                raise FatbinError(f"fatbin entry at offset {entry} overruns its container")
            if not 10 <= arch < 1000:
                raise FatbinError(f"fatbin entry at offset {entry} names SM {arch}")
            if kind == 2 or kind == 0x10:
                here_cubin.add(arch)
            elif kind == 1:
                here_ptx.add(arch)
            entry += entry_header + padded
        if here_cubin or here_ptx:
            containers += 1
        for arch in here_cubin:
            cubins[arch] = cubins.get(arch, 0) + 1
        for arch in here_ptx:
            ptx[arch] = ptx.get(arch, 0) + 1
        pos = stop
    return cubins, ptx, containers


def scan_fatbin_archs(path: str) -> list[str] | Unavailable:
    """sm_XX (cubins) and compute_XX (PTX) compiled into a CUDA library, from headers only."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return unavailable_from_oserror(Path(path), exc)
    try:
        # Only scattered headers are read: read-ahead would pull in payloads for nothing.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    except (AttributeError, OSError):
        pass
    try:
        section = _find_section(fd, b".nv_fatbin")
        if section is None:
            return Unavailable("not_supported", f"{path} has no .nv_fatbin section; {IMPORT_HINT}")
        cubins, ptx, containers = _scan_containers(fd, section[0], section[0] + section[1])
    except (FatbinError, OSError, struct.error) as exc:
        return Unavailable("not_supported", f"cannot read the CUDA fat binary of {path} ({exc}); {IMPORT_HINT}")
    finally:
        os.close(fd)
    if containers == 0 or not (cubins or ptx):
        return Unavailable("not_supported", f"no GPU code found in the fat binary of {path}; {IMPORT_HINT}")
    # TORCH_CUDA_ARCH_LIST applies to nearly every kernel; a few kernels are built for
    # extra targets (sm_89 FP8 kernels, sm_103) that most of the library lacks, so an
    # arch counts only when at least half of the containers carry code for it.
    # Checked against torch.cuda.get_arch_list() of torch 2.11.0+cu130.
    floor = (containers + 1) // 2
    return [f"sm_{a}" for a in sorted(cubins) if cubins[a] >= floor] + [
        f"compute_{a}" for a in sorted(ptx) if ptx[a] >= floor
    ]
