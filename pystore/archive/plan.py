"""Which bytes of an archived file a read will touch: the plans of ranged reads (``pystore.archive.ranges``).

An archived object whose manifest record has ``range_size`` and ``range_crc32`` is fetched by ranges into a
sparse local copy; the parts not fetched read as zeros there. So before a compiled scan runs over the copy,
every byte it may read must have been fetched: these functions say which, from what the scan itself would read
first (a record's size field, a queue's units). They only compute spans; ``Held.need`` fetches them.

The rules follow the compiled checks (``pystore.format._codec.check_record``): a record at ``pos`` is read
for its first 8 bytes (size and magic) whatever they say, and for ``total`` bytes when ``total`` is a record's
size that fits in the file; any other ``total`` is refused on those 8 bytes alone.
"""

from __future__ import annotations

from typing import Any

from pystore.archive import _plan

__all__ = ["MAX_RANGES", "RANGE_SIZE", "extend", "plan_units", "range_fields", "ranges_of", "record_end"]

#: the range of a new copy's per-range CRCs (written into its manifest record as ``range_size``): one GET of
#: an object store takes about as long for 4 MiB as for a few KiB, and a lookup fetches about this much
RANGE_SIZE = 4 << 20
#: the ranges one object may have (a record claiming more is not trusted: the object is fetched whole)
MAX_RANGES = 1 << 20
#: the smallest record (``MIN_RECORD_SIZE`` of the codec is larger; 8 is what ``check_record`` reads first)
_HEAD = 8


def record_end(pos: int, total: int, size: int) -> int:
    """Where the bytes end that the record checks read for a record at ``pos`` of a file of ``size`` bytes whose
    size field says ``total``: ``pos + total`` for a size that fits, else its first 8 bytes (the checks refuse
    it on those); never past the file."""
    end = pos + total if _HEAD <= total <= size - pos else pos + _HEAD
    return min(max(end, pos), size)


def ranges_of(lo: int, hi: int, range_size: int, size: int) -> range:
    """The indices of the ranges holding bytes ``[lo, hi)`` of a file of ``size`` bytes (clamped to it)."""
    lo, hi = max(lo, 0), min(hi, size)
    if hi <= lo:
        return range(0)
    return range(lo // range_size, (hi - 1) // range_size + 1)


def range_fields(record: dict[str, Any]) -> tuple[int, list[int]] | None:
    """``(range_size, crcs)`` of a finished copy's record when it can be read by ranges, else None (a record
    written before ranged reads, or one whose fields do not describe its size: fetched whole, as before)."""
    rs, crcs, size = record.get("range_size"), record.get("range_crc32"), record.get("size")
    if not isinstance(rs, int) or not isinstance(crcs, list) or not isinstance(size, int) or size <= 0:
        return None
    # whole pages (a hole is punched by whole blocks), and as many CRCs as the size has ranges
    if rs < 4096 or rs % 4096 or len(crcs) != (size + rs - 1) // rs or len(crcs) > MAX_RANGES:
        return None
    if not all(isinstance(c, int) and 0 <= c < 1 << 32 for c in crcs):
        return None
    return rs, crcs


def plan_units(units: bytes, files: list[Any], budget: int) -> tuple[int, list[list[int]]]:
    """The ranges a queue read will touch, from its ``units`` (20 bytes each, in order) and the archived
    commit-log ``files`` it is given (``Held`` handles in offset order): ``(n, ranges)``, where the read is to be
    cut after its first ``n`` units (at least one) so that the ranges they need stay within ``budget`` bytes, and
    ``ranges[k]`` are those of ``files[k]`` (sorted; none for a file fetched whole). Once they are fetched,
    ``extend`` gives those the records' own size fields reach further (compiled: ``_plan``)."""
    return _plan.plan(units, [(h.mf.file_from_offset, h.mf.file_size, h.range_size) for h in files], budget)


def extend(units: bytes, n: int, h: Any) -> list[int]:
    """The ranges of the archived file ``h`` (a ``Held`` whose ``plan_units`` ranges are fetched) that the records
    of the first ``n`` units reach by their own size field beyond their unit's: the checks read those too."""
    mf = h.mf
    buf = mf.select_mapped_buffer(0, mf.file_size)
    if buf is None:
        raise ValueError("%s: not readable" % mf.file_name)
    try:
        with memoryview(buf) as view:
            return _plan.extend(units, n, mf.file_from_offset, mf.file_size, h.range_size, view)
    finally:
        buf.release()
