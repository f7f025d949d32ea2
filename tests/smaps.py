"""What this process's memory map says about a file's mappings: ``/proc/self/smaps`` read into the file
ranges each mapping covers and whether read-ahead is off there (``rr``, ``MADV_RANDOM``), and which of a
mapping's pages are in memory (``mincore``)."""

from __future__ import annotations

import ctypes
import mmap
import os
import re

import pytest

_HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")


def mapped_ranges(path: str) -> list[tuple[int, int, bool]]:
    """``(file start, file end, read-ahead off)`` of every mapping of ``path`` in this process, by file offset.
    A ``madvise`` over part of a mapping splits it, so the ranges show where advice starts and ends."""
    real = os.path.realpath(path)
    out: list[tuple[int, int, bool]] = []
    cur: tuple[int, int] | None = None
    with open("/proc/self/smaps") as f:
        for line in f:
            if _HEADER.match(line):
                # "start-end perms offset dev inode [path]": every mapping's block ends with its VmFlags line
                head = line.split(None, 5)
                cur = None
                if len(head) == 6 and head[5].rstrip("\n") == real:
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    start = int(head[2], 16)
                    cur = (start, start + hi - lo)
            elif line.startswith("VmFlags:") and cur is not None:
                out.append((cur[0], cur[1], "rr" in line.split()[1:]))
                cur = None
    return sorted(out)


def _mapping_address(path: str) -> tuple[int, int]:
    """``(address, length)`` of this process's one whole mapping of ``path`` (from file offset 0)."""
    real = os.path.realpath(path)
    spans: list[tuple[int, int, int]] = []
    with open("/proc/self/maps") as f:
        for line in f:
            head = line.split(None, 5)
            if len(head) == 6 and head[5].rstrip("\n") == real:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                spans.append((lo, hi, int(head[2], 16)))
    spans.sort()
    if not spans or spans[0][2] != 0:
        raise AssertionError("%s is not mapped from its start in this process" % path)
    end = spans[0][1]
    for lo, hi, _ in spans[1:]:                     # a madvise over part of it splits the mapping
        if lo == end:
            end = hi
    return spans[0][0], end - spans[0][0]


def resident_pages(path: str) -> list[bool]:
    """For each page of this process's mapping of ``path``: is it in memory (``mincore``)? A page of a new,
    fallocated file is in memory only once something faulted it in."""
    addr, length = _mapping_address(path)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = ctypes.create_string_buffer(pages)
    if libc.mincore(addr, length, vec) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return [bool(b & 1) for b in vec.raw[:pages]]


def read_ahead_off(path: str, pos: int) -> bool:
    """Is read-ahead off (``MADV_RANDOM``) at file offset ``pos`` of ``path``'s mapping?"""
    for lo, hi, rr in mapped_ranges(path):
        if lo <= pos < hi:
            return rr
    raise AssertionError("%s is not mapped at %d in this process" % (path, pos))


def _advice_visible() -> bool:
    """Does this kernel show ``MADV_RANDOM`` in smaps (``rr`` in VmFlags, Linux 3.8 and later)? Checked on an
    anonymous mapping of this process; a sandbox that ignores madvise or hides VmFlags answers no."""
    if not os.path.exists("/proc/self/smaps") or not hasattr(mmap, "MADV_RANDOM"):
        return False
    m = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    try:
        m.madvise(mmap.MADV_RANDOM)
        buf = ctypes.c_char.from_buffer(m)
        addr = ctypes.addressof(buf)
        del buf                                    # the mmap cannot close while a ctypes view holds it
        inside = False
        with open("/proc/self/smaps") as f:
            for line in f:
                if _HEADER.match(line):
                    lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
                    inside = lo <= addr < hi
                elif inside and line.startswith("VmFlags:"):
                    return "rr" in line.split()[1:]
        return False
    finally:
        m.close()


#: the tests that read the advice back skip where the kernel cannot show it
requires_visible_advice = pytest.mark.skipif(not _advice_visible(), reason="smaps shows no madvise advice here")
