"""A store's archive tier: the target, its manifest, the local cache, and the reads served below the local minimum.

``Archive`` is made by ``pystore.engine.parts.open_parts`` when ``archive_uri`` is set (for writers and read-only
stores alike); a writer also runs its ``ArchiveService`` (``service``) and cleans only what it copied
(``deletable_end``, ``queue_file_archived``). Reads go to it only below the local data:

- ``look_message``: a commit-log offset below the local minimum, in an archived commit-log file.
- ``get_message``: a queue offset whose unit (in an archived consume-queue file, or in a local one whose record
  is archived) points below the local minimum. The read runs the store's compiled scan (``_read.read_queue``)
  over a view of that queue file cut after a span of units whose records were all fetched (archived commit-log
  files from the cache, local files for what is still local), so every status, offset and message is what the
  same read of local files gives; a read that reaches the cut ends there, and the next starts from it.
- ``select_index``: ``query_message``'s keys in the archived index files no longer local (their messages
  then read through ``look_message``). A file copied by ranges is read where the key's chain walk goes: the
  compiled walk (``IndexFileCore.walk``, the local lookup's own) stops at the first byte not fetched yet (the
  header's, the key's slot's, an entry's range) and this fetches it and resumes, so a lookup fetches a few
  ranges a file, never the file.
- ``queue_min_offset`` / ``min_phy_offset``: where the archive's data begins.

And one write: ``index_below``, recovery's re-index of archived records after a crash (the index files it dropped
also held keys of messages no longer local), read by ranges as the reads are.

What RocketMQ 5's tiered store does differently and pystore does not copy: it serves a queue from a separate
index of its own; here the archive holds RocketMQ's own files, so a broker could read a restored folder as is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pystore.archive.cache import ArchiveCache, Held
from pystore.archive.manifest import VISIBLE, Manifest
from pystore.archive.plan import plan_units, record_end
from pystore.archive.ranges import need_planned
from pystore.archive.target import open_target
from pystore.archive.uploader import ArchiveService, commitlog_object, index_object, queue_object
from pystore.errors import StoreCorruptedError, StoreError
from pystore.index._index import HEADER_SIZE, IndexFileCore, index_file_size, key_hash
from pystore.index._index_walk import index_log
from pystore.log._mapped_file import MappedFile
from pystore.log._records import message_at
from pystore.queue._units import ConsumeQueueCore
from pystore.read._read import read_queue

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.index.service import IndexService
    from pystore.log.commitlog import CommitLog
    from pystore.message._message_ext import MessageExt
    from pystore.queue.consume_queue import ConsumeQueue
    from pystore.queue.queue_store import ConsumeQueueStore
    from pystore.read._read import GetMessageResult, ReadLimits
    from pystore.read._sink import RecordSink

log = logging.getLogger(__name__)

__all__ = ["Archive", "CACHE_FOLDER"]

CACHE_FOLDER = "archive.cache"
_UNIT = 20
_SPAN_MIN = 32          # units a read below the local minimum fetches the records of, at least
_SPAN_BYTES = 64 << 20  # the ranges one queue read below the local minimum may fetch and hold, at most
_REINDEX_BYTES = 64 << 20   # the ranges recovery's re-index of archived records holds at once, at most


class _View:
    """A consume queue of one file, cut at a unit: what ``read_queue`` reads a queue through (``_files`` and
    ``mapped_file_size``, as a ``MappedFileQueue`` has them)."""

    def __init__(self, mf: MappedFile, file_size: int) -> None:
        self._files = [mf]
        self.mapped_file_size = file_size


class Archive:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.target = open_target(config.archive_uri, config.archive_options)
        self.manifest = Manifest(self.target)
        self.cache = ArchiveCache(self.target, os.path.join(config.store_path_root_dir, CACHE_FOLDER),
                                  config.archive_cache_bytes)
        self.service: ArchiveService | None = None
        self.loaded = False
        self.last_error: str | None = None
        self._broken_warned: set[str] = set()     # archived index files whose broken chain was logged

    def serve(self, commitlog: CommitLog, cq_store: ConsumeQueueStore, dispatched: Callable[[], int],
              index: IndexService | None = None) -> ArchiveService:
        """A writer's archiving service for this archive (the store starts and stops it with its others)."""
        self.service = ArchiveService(self.target, self.manifest, commitlog, cq_store, self.config, dispatched, index)
        return self.service

    def ensure_loaded(self) -> None:
        """The manifest read once (a writer's service reads it on its first pass; a reader on its first read)."""
        if not self.loaded:
            self.manifest.load()
            self.loaded = True

    def refresh(self) -> None:
        if self.service is None:        # a reader follows the writer's records; a writer made them
            self.manifest.refresh()

    # -- cleaning ---------------------------------------------------------------------------------------------

    def deletable_end(self) -> int:
        """Local commit-log files that end at or below this offset may be deleted: their copy is finished, and the
        consume-queue units pointing into them are durable (flushed here when a local file is about to qualify)."""
        end = max(0, self.manifest.contiguous_end())
        service = self.service
        if service is not None:
            files = service.commitlog.queue.files
            if len(files) > 1 and files[0].file_from_offset + files[0].file_size <= end:
                # The units of these files' messages were only dispatched (the queues' flush service may be many
                # files behind); after a power cut, recovery could rebuild lost units only from the local commit
                # log, which will not hold these files: the messages would be in the archive but in no queue.
                # Flush every queue to its end before the cleaner deletes (the power-cut round of issue 37); queue by
                # queue (each flush is serialised with the flush service's), not ConsumeQueueStore.flush, whose
                # making of ready files is the flush service's alone. A failed flush raises: nothing is deleted.
                for cq in service.cq_store.queues():
                    for _ in range(len(cq.queue.files) + 1):
                        if cq.flush(0):
                            break
        return end

    def queue_file_archived(self, topic: str, queue_id: int, mf: MappedFile) -> bool:
        return self.manifest.state_of(queue_object(topic, queue_id, mf)) in VISIBLE

    def record_deleted(self, before: list[MappedFile], after: list[MappedFile]) -> None:
        """Cleaning deleted the commit-log files of ``before`` not in ``after``: their records say so."""
        if self.service is None:
            return
        kept = {id(f) for f in after}
        self.service.record_deleted([(commitlog_object(f), "commitlog", f.file_from_offset, f.file_size)
                                     for f in before if id(f) not in kept])

    def index_file_archived(self, f: IndexFileCore) -> bool:
        return self.manifest.state_of(index_object(f.mapped_file)) in VISIBLE

    def record_index_deleted(self, before: list[IndexFileCore], after: list[IndexFileCore]) -> None:
        """Cleaning deleted the index files of ``before`` not in ``after``: their records say so."""
        if self.service is None:
            return
        kept = {id(f) for f in after}
        self.service.record_deleted([(index_object(f.mapped_file), "index", 0, f.mapped_file.file_size)
                                     for f in before if id(f) not in kept])

    # -- where the archive begins -----------------------------------------------------------------------------

    def min_phy_offset(self) -> int:
        self.ensure_loaded()
        return self.manifest.min_phy_offset()

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        self.ensure_loaded()
        return self.manifest.queue_min_offset(topic, queue_id)

    # -- reads ------------------------------------------------------------------------------------------------

    def look_message(self, offset: int) -> MessageExt | None:
        """The message at commit-log ``offset`` from the archive, None when no message starts there (or the
        archive does not hold it)."""
        self.ensure_loaded()
        record = self.manifest.commitlog_file_for(offset)
        if record is None:
            self.refresh()
            record = self.manifest.commitlog_file_for(offset)
            if record is None:
                return None
        h = self.cache.open(record)
        try:
            mf = h.mf
            pos = offset - mf.file_from_offset
            if h.range_size and 0 <= pos < mf.file_size:
                # the record's size field first, then what the checks read of a record that size
                h.need(pos, pos + 8)
                total = int.from_bytes(mf.read_any(pos, 4), "big", signed=True) if pos + 4 <= mf.file_size else 0
                h.need(pos, record_end(pos, total, mf.file_size))
            return message_at([mf], mf.file_size, offset, self.config.check_crc_on_read)
        finally:
            h.release()

    def select_index(self, full_key: str, max_num: int, begin: int, end: int, out: list[int],
                     local_names: set[str]) -> None:
        """Append to ``out`` up to ``max_num`` commit-log offsets of ``full_key``'s entries (``topic#key``) stored in
        [begin, end] from the archived index files that are no longer local (newest first): ``query_message``
        below the local index. Each file is read only where the walk goes (``_select_archived``)."""
        self.ensure_loaded()
        self.refresh()
        want = len(out) + max_num
        h = key_hash(full_key)
        for r in reversed(self.manifest.index_files()):
            if len(out) >= want:
                break
            if r["name"].rsplit("/", 1)[-1] in local_names or "slots" not in r:
                continue
            if r["end_ts"] < begin:
                break                             # older files end earlier still
            if r["begin_ts"] > end:
                continue
            self._select_archived(r, h, want, begin, end, out)

    def _select_archived(self, r: dict[str, Any], key_h: int, want: int, begin: int, end: int, out: list[int]) -> None:
        """The chain walk of one archived index file for the key whose ``key_hash`` is ``key_h``, appending to
        ``out`` until it holds ``want`` offsets. A file copied by ranges is fetched as the walk reaches it: the
        header's range, the key's slot's, then each chain entry's (the compiled walk, ``IndexFileCore.walk``, stops
        at a byte not fetched yet and says which), so a lookup fetches a few ranges, not the file; a whole copy (or a
        ``file://`` object) is walked in one call.

        What is read is bounded by the manifest record: its geometry (``slots``, ``entries``) must make the object's
        size, and the header must name the range the record does and at most ``entries`` entries, else
        :class:`StoreCorruptedError` names the object (the header read is checked as every range is). A range that
        fails its CRC, or an object gone, raises the same, from ``need``. A broken chain in a copy that passes its
        checks (a link forward, a slot past the entries: the file was so when copied, docs/format.md §3.4) ends the
        walk there, as it does in a local file, logged once per object: the index is a lossy accelerator, and
        ``pystore verify --archive`` reports the break."""
        shown = self.target.shown + "/" + r["name"]
        slots, entries, size = int(r["slots"]), int(r["entries"]), int(r["size"])
        if slots <= 0 or entries <= 0 or size != index_file_size(slots, entries):
            raise StoreCorruptedError(shown, 0, "the manifest says %d bytes for an index of %d slots and %d entries"
                                      % (size, slots, entries))
        held = self.cache.open(r)
        try:
            held.need(0, HEADER_SIZE)
            core = IndexFileCore(held.mf, slots, entries)
            self._check_index_header(core, held.mf.read_any(0, HEADER_SIZE), r, shown)
            core.warned = True              # breaks are logged below, naming the object, once
            ready: bytearray | None = None
            if held.range_size:
                ready = bytearray(len(held.ranges(0, size)))
                for i in held.ranges(0, HEADER_SIZE):
                    ready[i] = 1
            cur, asked = -1, -1
            while cur:
                cur, lo, hi = core.walk(out, key_h, want, begin, end, cur, ready, held.range_size)
                if cur:
                    if ready is None or lo == asked:    # a whole file is walked in one call; each leg moves on
                        raise RuntimeError("%s: the index walk asked again for bytes %d..%d" % (shown, lo, hi))
                    asked = lo
                    held.need(lo, hi)
                    for i in held.ranges(lo, hi):
                        ready[i] = 1
            if core.broken is not None and r["name"] not in self._broken_warned:
                self._broken_warned.add(r["name"])
                log.warning("%s: broken index chain at offset %d (%s); lookups stop there, messages behind it are "
                            "not found by key", shown, *core.broken)
        finally:
            held.release()

    @staticmethod
    def _check_index_header(core: IndexFileCore, header: bytes, r: dict[str, Any], shown: str) -> None:
        """The archived index file's header against its manifest record (the bounds of everything read after)."""
        have = (core.begin_timestamp, core.end_timestamp, core.begin_phy_offset, core.end_phy_offset)
        want = (int(r["begin_ts"]), int(r["end_ts"]), int(r["begin_phy"]), int(r["end_phy"]))
        if have != want:
            raise StoreCorruptedError(shown, 0, "the index file's header says %s, the manifest %s" % (have, want))
        count = int.from_bytes(header[36:40], "big", signed=True)
        if not 1 <= count <= int(r["entries"]):
            raise StoreCorruptedError(shown, 36, "the index file's header counts %d entries, outside 1..%d"
                                      % (count, int(r["entries"])))

    def index_below(self, index: IndexService, start: int, end: int) -> int:
        """Recovery after a crash: index the archived commit log's records in ``[start, end)`` (``start`` a record's
        offset, ``end`` the local log's head) into ``index``, as dispatch indexes local ones (the compiled walk,
        ``index_log``), before the re-dispatch indexes the local log. Each archived file is read by ranges, at most
        ``_REINDEX_BYTES`` held at a time (each range checked against its CRC as it comes); the walk only moves
        forward, and a file that cannot be read whole (a range changed, an object gone, a record that cannot be
        read) raises :class:`StoreCorruptedError` naming it, as a read does. Returns the entries written."""
        self.ensure_loaded()
        before = sum(f.index_count - 1 for f in index.files)
        at = start
        while at < end:
            record = self.manifest.commitlog_file_for(at)
            if record is None:
                raise StoreCorruptedError(self.target.shown, at, "no finished copy of the commit log at offset %d: "
                                          "the keys of the archived messages from there to %d cannot be indexed "
                                          "again" % (at, end))
            at = self._index_file(index, record, at, min(end, int(record["base"]) + int(record["size"])))
        return sum(f.index_count - 1 for f in index.files) - before

    def _index_file(self, index: IndexService, record: dict[str, Any], at: int, stop: int) -> int:
        """``index_below`` over one archived file, from ``at`` to ``stop``; returns where the next file starts."""
        base, size = int(record["base"]), int(record["size"])
        while at < stop:
            h = self.cache.open(record)
            try:
                lo = at - base
                chunk = max(_REINDEX_BYTES // h.range_size, 1) * h.range_size if h.range_size else size
                hi = min(stop - base, (lo // chunk + 1) * chunk) if h.range_size else stop - base
                h.need(lo, hi)
                dropped = index.core.dropped
                reached = index_log(index.core, [h.mf], size, at, base + hi)
                if reached == at:
                    # a record crossing the chunk's end: the bytes its size field says it takes, then again
                    h.need(lo, lo + 8)
                    total = int.from_bytes(h.mf.read_any(lo, 4), "big", signed=True) if lo + 4 <= size else 0
                    whole = record_end(lo, total, size)
                    if whole > hi:
                        h.need(lo, whole)
                        reached = index_log(index.core, [h.mf], size, at, base + whole)
                if index.core.dropped > dropped:
                    # the walk went on without an index file to write into: refused, so that the next open (still
                    # after a crash) indexes them again, rather than opening without those keys for good
                    raise StoreError("%s: the keys of the archived messages from offset %d cannot be indexed "
                                     "again: no index file could be made (see the log; is the disk full?); "
                                     "free space and open the store again" % (index.path, at))
                if reached <= at:
                    raise StoreCorruptedError(self.target.shown + "/" + record["name"], lo,
                                              "a record the re-index of archived keys cannot read (offset %d)" % at)
            finally:
                h.release()
            at = reached
        return at

    def get_message(self, cq: ConsumeQueue | None, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    local_min: int, cl: CommitLog, limits: ReadLimits, tag_codes: Any, tag_names: Any, filt: Any,
                    slave: bool, sink: RecordSink | None,
                    fix: Callable[[GetMessageResult], GetMessageResult]) -> GetMessageResult | None:
        """``get_message`` from ``offset`` when its unit points below ``local_min`` (the local commit log's
        first offset), else None (the local read serves it). ``fix`` sets the result's bounds as the queue's."""
        self.ensure_loaded()
        held: list[Held] = []
        cut_mf: MappedFile | None = None
        try:
            view = self._queue_view(cq, topic, queue_id, offset, held)
            if view is None and self.service is None:
                self.refresh()                  # a reader: the writer may have archived more since
                view = self._queue_view(cq, topic, queue_id, offset, held)
            if view is None:
                return None
            hq, file_size, first_unit = view
            mf = hq.mf
            units = mf.read_position // _UNIT
            pos = offset - first_unit
            span = max(_SPAN_MIN, min(max_msg_nums, 1 << 16))
            cut = min(units, pos + span)
            # the units the scan reads: the span, and the one before it (a removed record's unit is compared with it)
            hq.need(max(pos - 1, 0) * _UNIT, cut * _UNIT)
            first_phy = int.from_bytes(mf.read_any(pos * _UNIT, 8), "big", signed=True)
            if first_phy >= local_min:
                return None
            last = mf.read_any((cut - 1) * _UNIT, 12)
            last_end = int.from_bytes(last[:8], "big", signed=True) + int.from_bytes(last[8:12], "big", signed=True)
            archived = self._commitlog_between(first_phy, min(last_end, local_min), held)
            if archived is None:
                return None
            cut = pos + self._fetch_records(mf.read_any(pos * _UNIT, (cut - pos) * _UNIT), archived)
            # a second mapping of the same file (named by its first unit's byte offset), read only up to the cut
            cut_mf = MappedFile(mf.file_name, file_size, read_only=True, from_offset=mf.file_from_offset)
            cut_mf.set_positions(cut * _UNIT)
            core = ConsumeQueueCore(topic, queue_id, file_size, _View(cut_mf, file_size))
            core.min_logic_offset = first_unit * _UNIT
            cl_files = [h.mf for h in archived] + [f for f in cl.queue.files
                                                     if f.file_from_offset + f.file_size > local_min]
            r = read_queue(core, offset, max_msg_nums, cl_files, cl.queue.mapped_file_size, limits, tag_codes,
                           tag_names, filt, slave, None, sink)
            return fix(r)
        finally:
            for f in held:
                f.release()
            if cut_mf is not None:
                cut_mf.close()

    def _fetch_records(self, units: bytes, archived: list[Held]) -> int:
        """Make readable every byte of the archived commit-log files (``archived``) that the scan of ``units``
        reads: the records the units point at (planned by ``plan_units``, cut to ``_SPAN_BYTES`` of ranges),
        then the rest of any whose own size says more. Returns the units the read may scan. A sequential reader's
        next ranges are fetched meanwhile."""
        if not any(h.range_size for h in archived):
            return len(units) // _UNIT          # every file fetched whole: nothing to plan
        n, ranges = plan_units(units, archived, max(_SPAN_BYTES, max(h.range_size for h in archived)))
        for k in range(len(archived) - 1, -1, -1):
            if ranges[k]:
                # the read's last file: what follows its ranges, asked for first (its GET queued while this read
                # fetches or waits), then into the next file past its end
                h = archived[k]
                past = h.read_ranges(ranges[k][0] if k == 0 else 0, ranges[k][-1])
                following = self.manifest.commitlog_file_for(h.mf.file_from_offset + h.mf.file_size)
                if past and following is not None:
                    self.cache.read_ahead(following, past)
                break
        need_planned(archived, units, n, ranges)
        return n

    def queue_end(self, topic: str, queue_id: int) -> int:
        """One past the last queue offset the archive holds for the queue, 0 when it holds none."""
        self.ensure_loaded()
        files = self.manifest.queue_files(topic, queue_id)
        return int(files[-1]["last"]) + 1 if files else 0

    def unit(self, cq: ConsumeQueue | None, topic: str, queue_id: int, offset: int) -> tuple[int, int] | None:
        """``(commit_log_offset, size)`` of queue ``offset``'s unit from a local queue file that still has it,
        else the archive's copy; None when neither holds it."""
        self.ensure_loaded()
        held: list[Held] = []
        try:
            view = self._queue_view(cq, topic, queue_id, offset, held)
            if view is None:
                return None
            h, _, first_unit = view
            h.need((offset - first_unit) * _UNIT, (offset - first_unit) * _UNIT + 12)
            raw = h.mf.read_any((offset - first_unit) * _UNIT, 12)
            return int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:12], "big", signed=True)
        finally:
            for f in held:
                f.release()

    def store_time(self, commit_log_offset: int) -> int:
        """Store time of the archived record at ``commit_log_offset``; -1 when the archive holds none there."""
        m = self.look_message(commit_log_offset)
        return -1 if m is None else m.store_timestamp

    def first_store_time(self) -> int:
        """Store time of the archive's first record (its manifest's, no object read); -1 when it holds none."""
        self.ensure_loaded()
        files = self.manifest.commitlog_files()
        return int(files[0]["min_ts"]) if files else -1

    def queue_offset_by_time(self, cq: ConsumeQueue | None, topic: str, queue_id: int, low: int, high: int,
                             timestamp: int, lower: bool) -> int:
        """A binary search of the queue's offsets ``[low, high)`` (records in the archive): with ``lower`` the
        first stored at or after ``timestamp`` (``high`` when none is), else the last stored at or before it
        (``low - 1`` when none is). A probe compares with the store-time range its commit-log file's manifest
        record gives, and reads the record (fetching its file) only when ``timestamp`` falls inside that range:
        a search fetches the queue files it probes and at most the commit-log files holding ``timestamp``."""
        self.ensure_loaded()

        def after(offset: int) -> bool:
            """Whether the message at ``offset`` was stored after ``timestamp`` (``lower``: at or after)."""
            u = self.unit(cq, topic, queue_id, offset)
            if u is None:
                raise StoreCorruptedError(self.target.shown, offset, "queue %s/%d: no unit of offset %d in the "
                                          "archive or the local queue" % (topic, queue_id, offset))
            record = self.manifest.commitlog_file_for(u[0])
            if record is not None and "min_ts" in record:
                if int(record["max_ts"]) < timestamp or (not lower and int(record["max_ts"]) == timestamp):
                    return False
                if int(record["min_ts"]) > timestamp or (lower and int(record["min_ts"]) == timestamp):
                    return True
            ts = self.store_time(u[0])
            if ts < 0:
                raise StoreCorruptedError(self.target.shown, u[0], "queue %s/%d: offset %d points at no archived "
                                          "record" % (topic, queue_id, offset))
            return ts >= timestamp if lower else ts > timestamp

        lo, hi = low, high          # the first offset for which ``after`` holds lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if after(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo if lower else lo - 1

    def unit_bytes(self, topic: str, queue_id: int, offset: int, count: int) -> bytes | None:
        """Up to ``count`` units of the queue from ``offset`` (to the end of the file holding it) as bytes, from
        the archive's copy of that queue file; None when the archive holds no copy of it. For sizing a page's
        buffers before a read below the local data (``get_columns``), as the local units size a local read."""
        self.ensure_loaded()
        for record in self.manifest.queue_files(topic, queue_id):
            if record["first"] <= offset <= record["last"]:
                h = self.cache.open(record)
                try:
                    pos = (offset - int(record["first"])) * _UNIT
                    n = min(max(count, 0) * _UNIT, int(record["size"]) - pos)
                    h.need(pos, pos + n)
                    return h.mf.read_any(pos, n) if n > 0 else b""
                finally:
                    h.release()
        return None

    def _queue_view(self, cq: ConsumeQueue | None, topic: str, queue_id: int, offset: int,
                    held: list[Held]) -> tuple[Held, int, int] | None:
        """The file holding queue ``offset``'s unit, held: a local one if the queue still has it, else the
        archived one (whose bytes the caller ``need``s before it reads them); with its size and its first
        unit's queue offset."""
        if cq is not None:
            local = cq.queue.find_mapped_file_by_offset(offset * _UNIT)
            if local is not None and local.hold():
                held.append(Held(local))
                if offset * _UNIT - local.file_from_offset < local.read_position:
                    return held[-1], cq.queue.mapped_file_size, local.file_from_offset // _UNIT
        for record in self.manifest.queue_files(topic, queue_id):
            if record["first"] <= offset <= record["last"]:
                h = self.cache.open(record)
                held.append(h)
                return h, int(record["size"]), int(record["first"])
        return None

    def _commitlog_between(self, start: int, end: int, held: list[Held]) -> list[Held] | None:
        """The archived commit-log files covering [start, end), held (a ranged one with nothing fetched yet),
        in offset order; None if one is missing."""
        out: list[Held] = []
        at = start
        while at < end:
            record = self.manifest.commitlog_file_for(at)
            if record is None:
                return None
            h = self.cache.open(record)
            held.append(h)
            out.append(h)
            at = int(record["base"]) + int(record["size"])
        following = self.manifest.commitlog_file_for(at)
        if following is not None and not any(h.range_size for h in out):
            self.cache.read_ahead(following)    # whole files: the next one (ranged: ``_fetch_records``)
        return out

    def info(self, local_max: int) -> dict[str, object]:
        """``MessageStore.archive_info``: what the archive holds, how far it lags ``local_max`` (the local commit
        log's end), the last error of the copies (None when the last pass worked), and the read cache."""
        error = self.last_error
        service = self.service
        if service is not None:
            error = service.last_error
        else:
            try:
                self.ensure_loaded()
            except Exception as e:           # a reader shows why, as the writer's service does
                error = str(e)
        files = self.manifest.commitlog_files()
        end = self.manifest.contiguous_end()
        return {"uri": self.target.shown, "uploaded_files": len(files) + sum(
                    len(self.manifest.queue_files(*q)) for q in self.manifest.queues()),
                "commitlog_files": len(files), "min_phy_offset": self.manifest.min_phy_offset(),
                "end_phy_offset": end, "lag_bytes": max(0, local_max - max(end, 0)), "last_error": error,
                "uploaded_by_this_process": 0 if service is None else service.uploaded,
                "cache_bytes": self.cache.total_bytes, "cache_fetches": self.cache.fetched + self.cache.ranges.requests,
                "cache_hits": self.cache.hits + self.cache.ranges.hits}

    def close(self) -> None:
        self.cache.close()
