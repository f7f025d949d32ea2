"""Reading a store's archive on an executor: the partitions the driver plans from a manifest, and their rows.

* :class:`ArchiveLogSlice` — every record of one archived commit-log file (a read of every topic);
* :class:`ArchiveQueueSlice` — queue offsets ``[start, end)`` of one queue. The driver gives it the manifest
  records it needs: the archived queue files holding the first offsets (``covered`` tells how far) and the
  commit-log files whose tally says they hold offsets of the range. Each commit-log file is read for the
  offsets it holds: through the queue's archived units where they are (the compiled queue reader, which
  jumps to each record and checks it against its unit), else by walking the file's records, keeping the
  queue's records of the range that enter a queue (not prepared or rolled-back transaction records), as
  dispatch would have made units of them. Either way the rows are those a read of the local files gives.

Objects are fetched into a per-process cache (``pystore.archive.cache``: a ``file://`` object is mapped where it
lies; others are fetched by parallel ranged reads and checked against the manifest's CRC32) of ``CACHE_BYTES``,
whole copies and ranges counted together. The read through a queue's archived units fetches only the ranges of
the commit-log file its records lie in when the file's manifest record has per-range CRCs (``range_size``,
``range_crc32``; ``pystore.archive.ranges``): its units are planned as the store's own reads plan them
(``pystore.archive.plan``: ``plan_units``, then ``extend`` for a record whose own size field says more), in
pieces whose ranges stay within ``_span_bytes``, each piece's ranges fetched, checked against their CRC32s and
held while the compiled reader scans it (the parts of the sparse copy not fetched read as zeros: the plan covers
every byte the reader touches). A whole file is read where the read may touch any record: the walk of a file
(no archived units for the span), a file of ``ArchiveLogSlice``, a copy without per-range CRCs (fetched whole and
checked against its CRC32), and the archived queue files. Only one commit-log file of a partition is held at a
time. A changed or missing object (or range) is ``StoreCorruptedError`` naming it in the archive.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from pystore.archive.plan import plan_units
from pystore.archive.ranges import need_planned
from pystore.columns._arrow import BatchBuilder
from pystore.columns._arrow_plan import record_size_at
from pystore.columns._arrow_source import QueueReader, scan_file
from pystore.errors import StoreCorruptedError
from pystore.format._codec import RECORD_END
from pystore.spark.fleet import Member, _small

if TYPE_CHECKING:
    from pystore.archive.cache import ArchiveCache
    from pystore.archive.ranges import Held
    from pystore.log._mapped_file import MappedFile

__all__ = ["ArchiveLogSlice", "ArchiveQueueSlice", "archive_queue_slice", "read_archive", "CACHE_BYTES"]

log = logging.getLogger(__name__)

#: How many bytes of fetched objects an executor process keeps (least recently used dropped first).
CACHE_BYTES = 4 << 30
#: The ranges of one commit-log file a queue slice fetches and holds at once, at most (a piece of its offsets).
_SPAN_BYTES = 256 << 20
#: The units one piece of a queue slice plans at once, at most.
_UNITS = 1 << 16
_UNIT = 20
_TRANSACTION_MASK = 0xC
_COMMIT = 0x8


@dataclass
class ArchiveLogSlice(InputPartition):
    """Every record of one archived commit-log file (``record``: its manifest record's name, base, size, CRC)."""

    member: Member
    record: dict[str, Any]


@dataclass
class ArchiveQueueSlice(InputPartition):
    """Queue offsets ``[start, end)`` of one queue of an archive (see the module docstring)."""

    member: Member
    topic: str
    queue_id: int
    start: int
    end: int
    queue_files: list[dict[str, Any]] = field(default_factory=list)
    covered: int = 0
    commitlog: list[dict[str, Any]] = field(default_factory=list)
    spans: list[tuple[int, int] | None] = field(default_factory=list)


def archive_queue_slice(member: Member, manifest: Any, topic: str, queue_id: int, start: int, end: int) -> ArchiveQueueSlice:
    """Plan one queue slice of an archive from its manifest alone."""
    from pystore.archive.manifest import commitlog_for_queue, queue_entry, queue_files_from

    cq, covered = queue_files_from(manifest, topic, queue_id, start, end)
    cl = commitlog_for_queue(manifest, topic, queue_id, start, end)
    key = "%s/%d" % (topic, queue_id)
    spans = [None if r.get("queues") is None else queue_entry(r, key) for r in cl]
    return ArchiveQueueSlice(member, topic, queue_id, start, end, [_small(r) for r in cq], covered,
                             [_small(r, ranges=True) for r in cl], spans)


_caches: dict[tuple[str, str], ArchiveCache] = {}
_caches_lock = threading.Lock()


def _cache(member: Member) -> ArchiveCache:
    """This process's cache of the member's archive (made once per archive and options)."""
    from pystore.archive.cache import ArchiveCache
    from pystore.archive.target import open_target

    assert member.archive is not None
    key = (member.archive, member.archive_options)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            target = open_target(member.archive, json.loads(member.archive_options))
            parent = os.path.join(tempfile.gettempdir(), "pystore-spark-archive", "%08x" % (hash(key) & 0xFFFFFFFF))
            cache = _caches[key] = ArchiveCache(target, parent, CACHE_BYTES)
        return cache


def _shown(member: Member, name: str) -> str:
    return "%s/%s" % (member.archive, name)


def read_archive(part: InputPartition, b: BatchBuilder, filters: Any, schema: pa.Schema,
                 rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """The record batches of an archive partition (``b``: the read's builder, of ``schema``)."""
    if isinstance(part, ArchiveLogSlice):
        yield from _read_log(part, b)
        return
    assert isinstance(part, ArchiveQueueSlice)
    cache = _cache(part.member)
    for record, span in zip(part.commitlog, part.spans or [None] * len(part.commitlog), strict=True):
        lo, hi = part.start, part.end
        if span is not None:
            lo, hi = max(lo, span[0]), min(hi, span[1] + 1)
        if lo >= hi:
            continue
        if span is not None and hi <= part.covered:
            yield from _read_units(part, cache, b, record, lo, hi)
            continue
        h = cache.mapped(record)            # whole: the walk reads every record of the file
        try:
            yield from _read_walk(part, filters, schema, rows_per_batch, h.mf, lo, hi, record)
        finally:
            h.release()


def _read_log(part: ArchiveLogSlice, b: BatchBuilder) -> Iterator[pa.RecordBatch]:
    h = _cache(part.member).mapped(part.record)
    mf = h.mf
    try:
        pos, done = 0, False
        while not done:
            try:
                pos, done = scan_file(b, mf, pos, -1)
            except StoreCorruptedError as e:
                raise StoreCorruptedError(_shown(part.member, part.record["name"]), e.offset, e.reason) from None
            if done and pos < mf.file_size and (pos + 8 > mf.file_size or record_size_at(mf, pos) == RECORD_END):
                # a sealed file ends with its end-of-file record (or exactly at its end): a stop before is damage
                raise StoreCorruptedError(_shown(part.member, part.record["name"]), mf.file_from_offset + pos,
                                          "the archived file's records stop before its end-of-file record")
            rb = b.build()
            if rb is not None:
                yield rb
    finally:
        h.release()


def _read_units(part: ArchiveQueueSlice, cache: ArchiveCache, b: BatchBuilder, record: dict[str, Any],
                lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """Offsets ``[lo, hi)`` through the archived queue units, all pointing into the commit-log file of ``record``:
    in pieces of at most ``_UNITS`` units whose records' ranges stay within ``_span_bytes`` (planned as the
    store's own reads plan them: ``plan_units``, then ``extend``), each piece's ranges fetched, checked and held
    while the compiled reader scans it (a file without per-range CRCs is fetched whole, every piece in one)."""
    wanted = [r for r in part.queue_files if r["base"] // _UNIT <= hi - 1 and (r["base"] + r["size"]) // _UNIT > lo]
    held = []
    try:
        for r in wanted:
            held.append(cache.mapped(r))        # the queue files whole: the reader also reads the unit ahead
        cq_names = [h.mf.file_name for h in held]
        i = lo
        while i < hi:
            piece = cache.open(record)
            try:
                stop = i + _need(piece, _unit_bytes(held, wanted, i, min(hi, i + _UNITS)), min(hi, i + _UNITS) - i)
                mf = piece.mf
                qr = QueueReader(part.topic, part.queue_id, cq_names, [(mf.file_name, mf.file_from_offset)])
                done = False
                while not done:
                    try:
                        i, done = qr.scan(b, i, stop)
                    except StoreCorruptedError as e:
                        names = {h.mf.file_name: r["name"] for h, r in zip(held, wanted, strict=True)}
                        names[mf.file_name] = record["name"]
                        raise StoreCorruptedError(_shown(part.member, names.get(e.path, e.path)), e.offset,
                                                  e.reason) from None
                    rb = b.build()
                    if rb is not None:
                        yield rb
                if qr.lost or i < stop:
                    raise StoreCorruptedError(_shown(part.member, "consumequeue/%s/%d" % (part.topic, part.queue_id)),
                                              lo * _UNIT, "the archived units of offsets [%d, %d) do not all point "
                                              "into %s, which the manifest says holds them"
                                              % (lo, hi, os.path.basename(record["name"])))
            finally:
                piece.release()
    finally:
        for h in held:
            h.release()


def _unit_bytes(held: list[Held], wanted: list[dict[str, Any]], lo: int, hi: int) -> bytes:
    """The archived units of offsets ``[lo, hi)`` (from the held queue files ``wanted``), as far as they hold them."""
    out = []
    for h, r in zip(held, wanted, strict=True):
        a, z = max(lo, r["base"] // _UNIT), min(hi, (r["base"] + r["size"]) // _UNIT)
        if a < z:
            out.append(h.mf.read_any(a * _UNIT - r["base"], (z - a) * _UNIT))
    return b"".join(out)


def _need(h: Held, units: bytes, count: int) -> int:
    """Make readable what the scan of the ``count`` units from ``units``' first reads of ``h``'s commit-log file:
    the ranges their records lie in, and the rest of any whose own size field says more. Returns how many of
    them the scan may take (at least one): those whose ranges stay within ``_span_bytes``."""
    if not h.range_size:
        return count                            # fetched whole: every byte is readable
    if len(units) != count * _UNIT:
        h.need(0, h.mf.file_size)               # units missing from the archived queue files: the reader says so
        return count
    n, ranges = plan_units(units, [h], max(_span_bytes(), h.range_size))
    need_planned([h], units, n, ranges)
    return n


def _span_bytes() -> int:
    """The ranges one piece of a queue slice fetches and holds at most (a task's share of the cache)."""
    return min(_SPAN_BYTES, CACHE_BYTES // 4)


def _read_walk(part: ArchiveQueueSlice, filters: Any, schema: pa.Schema, rows_per_batch: int, mf: MappedFile,
               lo: int, hi: int, record: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """Offsets ``[lo, hi)`` of the queue by walking ``mf``'s records (the queue's units are not archived)."""
    from pystore.spark.batch import decoder_schema

    names = set(schema.names)
    wide = pa.schema(list(schema) + [decoder_schema().field(n) for n in ("queue_offset", "sys_flag") if n not in names])
    b = BatchBuilder(wide, filters.verify_crc, [part.topic], part.queue_id, filters.start_ms, filters.end_ms,
                     rows_per_batch)
    pos, done = 0, False
    while not done:
        try:
            pos, done = scan_file(b, mf, pos, -1)
        except StoreCorruptedError as e:
            raise StoreCorruptedError(_shown(part.member, record["name"]), e.offset, e.reason) from None
        rb = b.build()
        if rb is None:
            continue
        qo = rb.column("queue_offset")
        tran = pc.bit_wise_and(rb.column("sys_flag"), pa.scalar(_TRANSACTION_MASK, pa.int32()))
        keep = pc.and_(pc.and_(pc.greater_equal(qo, lo), pc.less(qo, hi)),
                       pc.or_(pc.equal(tran, 0), pc.equal(tran, _COMMIT)))
        rb = rb.filter(keep)
        if rb.num_rows:
            yield pa.RecordBatch.from_arrays([rb.column(n) for n in schema.names], schema=schema)
