# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled part of ``pystore.archive.plan``: which ranges of archived commit-log files a queue read touches,
unit by unit (a page of 8192 units in tens of microseconds: the read itself is compiled too, and a plan in
Python cost as much again as the read).

A unit's record at ``pos`` is read by the checks for ``record_end(pos, size)`` bytes (``plan.record_end``): its
first 8 always, its whole ``size`` when that fits in the file. ``plan`` takes the unit's size; ``extend``,
once those ranges are in, the record's own size field where it says more (a damaged record)."""

from libc.stdint cimport int32_t, int64_t

from array import array

from pystore.format._bytes cimport get_i32, get_i64

cdef enum:
    UNIT = 20
    HEAD = 8


cdef inline int64_t _end(int64_t pos, int64_t total, int64_t size) noexcept nogil:
    cdef int64_t end = pos + total if HEAD <= total <= size - pos else pos + HEAD
    if end > size:
        end = size
    return end if end > pos else pos


def plan(const unsigned char[::1] units, list files, long long budget):
    """``(n, ranges)``: the read is to scan its first ``n`` units (at least one), whose records' ranges stay within
    ``budget`` bytes, and ``ranges[k]`` are the (sorted) ranges of ``files[k]`` they lie in; ``files`` are
    ``(base, size, range_size)`` in offset order (``range_size`` 0: a file fetched whole, nothing to plan)."""
    cdef Py_ssize_t nunits = units.shape[0] // UNIT, nf = len(files), j, k, found
    cdef Py_ssize_t n = nunits
    cdef int64_t phy, pos, end, r, r0, r1, cost, total = 0, base, size, rs
    cdef int32_t usize
    cdef int64_t[::1] bases = array("q", [int(f[0]) for f in files])
    cdef int64_t[::1] sizes = array("q", [int(f[1]) for f in files])
    cdef int64_t[::1] rss = array("q", [int(f[2]) for f in files])
    cdef list maps = [bytearray((int(f[1]) + int(f[2]) - 1) // int(f[2])) if int(f[2]) > 0 else None for f in files]
    cdef unsigned char[::1] bm
    for j in range(nunits):
        phy = get_i64(&units[j * UNIT])
        usize = get_i32(&units[j * UNIT + 8])
        found = -1
        for k in range(nf):
            if bases[k] <= phy < bases[k] + sizes[k]:
                found = k
                break
        if found < 0 or rss[found] == 0:
            continue                       # not in an archived file, or in one fetched whole
        base, size, rs = bases[found], sizes[found], rss[found]
        bm = maps[found]
        pos = phy - base
        end = _end(pos, usize, size)
        r0 = pos // rs
        r1 = (end - 1) // rs
        cost = 0
        for r in range(r0, r1 + 1):
            if not bm[r]:
                cost += rs if (r + 1) * rs <= size else size - r * rs
        if cost and total + cost > budget and j > 0:
            n = j                          # the read ends before this unit; the next read starts at it
            break
        for r in range(r0, r1 + 1):
            bm[r] = 1
        total += cost
    out = []
    for k in range(nf):
        if maps[k] is None:
            out.append([])
        else:
            out.append([r for r, b in enumerate(maps[k]) if b])
    return n, out


def extend(const unsigned char[::1] units, Py_ssize_t n, long long base, long long size, long long range_size,
           const unsigned char[::1] mapped):
    """The ranges of the file at ``base`` (``size`` bytes, mapped as ``mapped``, the ranges ``plan`` gave for it
    fetched) that the records of the first ``n`` units also reach by their own size field, sorted."""
    cdef Py_ssize_t j
    cdef int64_t phy, pos, end, own, r
    cdef int32_t usize
    cdef set extra = set()
    if mapped.shape[0] < size:
        raise ValueError("the mapping is %d bytes, the file %d" % (mapped.shape[0], size))
    for j in range(min(n, units.shape[0] // UNIT)):
        phy = get_i64(&units[j * UNIT])
        if not base <= phy < base + size:
            continue
        usize = get_i32(&units[j * UNIT + 8])
        pos = phy - base
        end = _end(pos, usize, size)
        if pos + 4 > end:
            continue
        own = _end(pos, get_i32(&mapped[pos]), size)
        if own > end:
            for r in range(end // range_size, (own - 1) // range_size + 1):
                extra.add(r)
    return sorted(extra)
