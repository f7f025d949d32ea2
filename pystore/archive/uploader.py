"""The archiving service: copies each sealed file of the store to the archive and records it in the manifest.

A pass (every ``archive_interval_ms``, when woken, and as soon as the newest sealed commit-log file is flushed
and dispatched: the service looks every 50 ms, so the archive follows a fast writer one file behind) copies,
oldest first:

1. **commit-log files** that are sealed (a later file exists), flushed whole (a power cut cannot take back what
   the archive holds) and dispatched (their consume-queue units exist): ``copy-started``, the object written,
   its size read back, then ``copy-finished`` with the file's CRC32 (and, per ``plan.RANGE_SIZE`` bytes,
   ``range_crc32``: what a ranged read checks), first and last store times and per queue
   the first record's offset, the highest queue offset and the first queue offset of its records. The first file that is not ready
   ends the commit-log part of the pass, so the archive's commit log grows without gaps from its first file.
2. **consume-queue files** that are sealed (a later file of the queue exists), flushed whole, and whose last
   unit's record lies below the end of what the archive's commit log holds.
3. **index files** that are full (not the newest) and flushed, whose last entry points below that end.

Nothing here blocks a put: the service reads the files through their own descriptors, and a failure (the
archive unreachable, a wrong credential, a missing bucket) is logged once per distinct error, kept as
``last_error`` for ``archive_info`` and ``pystore inspect``, and the pass is tried again next time. Local
cleaning deletes a file only once its copy is finished (``Archive.deletable_end``), so a failure never loses
data: the local disk fills instead, which the store's usual disk-full rules handle.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pystore.archive import plan
from pystore.archive.manifest import COPY_FINISHED, COPY_STARTED, LOCAL_DELETED, Manifest
from pystore.archive.target import ArchiveError, ArchiveTarget
from pystore.format._codec import file_crc32
from pystore.log._records import QueueTally, first_store_timestamp, scan_file
from pystore.system.service import ServiceThread

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.index.service import IndexService
    from pystore.log._mapped_file import MappedFile
    from pystore.log.commitlog import CommitLog
    from pystore.queue.queue_store import ConsumeQueueStore

log = logging.getLogger(__name__)

__all__ = ["ArchiveService", "commitlog_object", "index_object", "queue_object"]

_UNIT = 20
_CHUNK = 8 << 20
# how often the service looks for a newly sealed commit-log file between its passes
_SEAL_POLL_MS = 50


def commitlog_object(mf: MappedFile) -> str:
    return "commitlog/" + os.path.basename(mf.file_name)


def index_object(mf: MappedFile) -> str:
    return "index/" + os.path.basename(mf.file_name)


def queue_object(topic: str, queue_id: int, mf: MappedFile) -> str:
    return "consumequeue/%s/%d/%s" % (topic, queue_id, os.path.basename(mf.file_name))


def _crc_of(mf: MappedFile, size: int, range_size: int) -> tuple[int, list[int]]:
    """The CRC32 of the file's first ``size`` bytes and of each ``range_size`` bytes of them (what a ranged read
    checks a range against): over its own mapping, without the GIL (puts go on meanwhile), when the mapping holds
    them all, else read from the file. The whole file's CRC is combined from the ranges' (one pass)."""
    view = mf.select_mapped_buffer(0, size) if size > 0 else None
    if view is None:
        return _crc_of_file(mf.file_name, size, range_size)
    try:
        with memoryview(view) as b:
            crcs = [file_crc32(b[at:at + range_size]) for at in range(0, size, range_size)]
    finally:
        view.release()
    return _combined(crcs, size, range_size), crcs


def _crc_of_file(path: str, size: int, range_size: int) -> tuple[int, list[int]]:
    crcs = []
    with open(path, "rb") as f:
        for at in range(0, size, range_size):
            want = min(range_size, size - at)
            chunk = f.read(want)
            # a sparse or short file reads as zeros past its end, as its mapping does
            crcs.append(zlib.crc32(chunk + bytes(want - len(chunk))))
    return _combined(crcs, size, range_size), crcs


def _combined(crcs: list[int], size: int, range_size: int) -> int:
    crc = 0
    for i, c in enumerate(crcs):
        crc = _gf2_times(_shift(min(range_size, size - i * range_size)), crc) ^ c
    return crc


@functools.lru_cache(maxsize=8)
def _shift(length: int) -> list[int]:
    """The linear map of ``crc32_combine(crc, 0, length)`` (the same for every range of a size): built once."""
    return [crc32_combine(1 << n, 0, length) for n in range(32)]


def _gf2_times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's ``crc32_combine``, which
    Python's zlib does not offer): appending ``len2`` zero bytes to ``a``'s CRC is a linear map over GF(2),
    squared up by powers of two."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]          # one zero bit
    even = [_gf2_times(odd, odd[n]) for n in range(32)]      # two
    odd = [_gf2_times(even, even[n]) for n in range(32)]     # four
    while True:
        even = [_gf2_times(odd, odd[n]) for n in range(32)]
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = [_gf2_times(even, even[n]) for n in range(32)]
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


class ArchiveService(ServiceThread):
    """Copies sealed files to ``target`` and records them in ``manifest``; ``dispatched()`` says where the
    consume queues are built to."""

    def __init__(self, target: ArchiveTarget, manifest: Manifest, commitlog: CommitLog, cq_store: ConsumeQueueStore,
                 config: StoreConfig, dispatched: Callable[[], int], index: IndexService | None = None) -> None:
        super().__init__("ArchiveService")
        self.index = index
        self.target = target
        self.manifest = manifest
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.config = config
        self.dispatched = dispatched
        self.loaded = False
        self.last_error: str | None = None
        self.uploaded = 0                 # files this process copied
        self.uploaded_bytes = 0
        self.last_upload_ms = 0
        self.passes = 0                   # passes ended (done or failed): the first runs as the service starts

    def run(self) -> None:
        interval = self.config.archive_interval_ms
        # the first pass at once (it loads the manifest the seal look needs): not "an interval after the
        # monotonic clock's zero", which is the machine's boot, so a machine up for less than an interval made
        # no pass and no seal look for that long
        last = float("-inf")
        while not self.is_stopped():
            now = time.monotonic()
            if (now - last) * 1000 >= interval or (self.config.archive_on_seal and self._sealed_ready()):
                last = now
                self.run_once()
            self.wait_for_running(min(interval, _SEAL_POLL_MS))

    def _sealed_ready(self) -> bool:
        """The newest sealed commit-log file is flushed and dispatched and not yet copied: a pass now keeps the
        archive one file behind the log (after a failed pass, the interval decides: a broken archive is not
        tried again every few milliseconds)."""
        if self.last_error is not None or not self.loaded:
            return False
        files = self.commitlog.queue.files
        if len(files) < 2:
            return False
        mf = files[-2]
        return (mf.flushed_position >= mf.file_size and mf.file_from_offset + mf.file_size <= self.dispatched()
                and self.manifest.state_of(commitlog_object(mf)) not in (COPY_FINISHED, LOCAL_DELETED))

    def run_once(self) -> int:
        """One pass; returns how many files it copied (errors are kept, logged, and tried again next pass)."""
        try:
            if not self.loaded:
                self.manifest.load()
                self.loaded = True
            n = self._copy_commitlog() + self._copy_queues() + self._copy_index()
        except (ArchiveError, OSError) as e:
            text = str(e)
            if text != self.last_error:
                log.error("%s: archiving to %s failed: %s (tried again every %d ms; local files are kept until "
                          "their copy is finished)", self.config.store_path_root_dir, self.target.shown, text,
                          self.config.archive_interval_ms)
            self.last_error = text
            self.passes += 1
            return 0
        self.passes += 1
        if self.last_error is not None:
            log.info("%s: archiving to %s works again", self.config.store_path_root_dir, self.target.shown)
            self.last_error = None
        return n

    # -- the commit log ---------------------------------------------------------------------------------------

    def _copy_commitlog(self) -> int:
        files = self.commitlog.queue.files
        dispatched = self.dispatched()
        n = 0
        for mf in files[:-1]:
            if self.is_stopped():
                break
            name = commitlog_object(mf)
            if self.manifest.state_of(name) in (COPY_FINISHED, LOCAL_DELETED):
                continue
            end = mf.file_from_offset + mf.file_size
            if mf.flushed_position < mf.file_size or end > dispatched or not mf.hold():
                break
            try:
                fields = self._commitlog_fields(mf)
                self._copy(name, "commitlog", mf, fields)
            finally:
                mf.release()
            n += 1
        return n

    def _commitlog_fields(self, mf: MappedFile) -> dict[str, Any]:
        tally = QueueTally()
        _end, _reason, _count, last_ts = scan_file(mf, 0, False, -1, tally)
        queues: dict[str, list[int]] | None = None      # None: too many queues to tally, any may be in the file
        if not tally.overflow:
            queues = {}
            for (topic, qid), (first_phy, highest) in sorted(tally.queues().items()):
                # the queue offset of the queue's first record here, read from that record (QUEUEOFFSET, byte
                # 20): with the highest, the planner of a read knows which files hold which offsets
                first = int.from_bytes(mf.read_any(first_phy - mf.file_from_offset + 20, 8), "big", signed=True)
                queues["%s/%d" % (topic, qid)] = [first_phy, highest, first]
        return {"min_ts": first_store_timestamp(mf), "max_ts": last_ts, "queues": queues}

    # -- the consume queues -----------------------------------------------------------------------------------

    def _copy_queues(self) -> int:
        archived_end = self.manifest.contiguous_end()
        if archived_end < 0:
            return 0
        n = 0
        for cq in self.cq_store.queues():
            for mf in cq.queue.files[:-1]:
                if self.is_stopped():
                    return n
                name = queue_object(cq.topic, cq.queue_id, mf)
                if self.manifest.state_of(name) in (COPY_FINISHED, LOCAL_DELETED):
                    continue
                if mf.flushed_position < mf.file_size or not mf.hold():
                    break
                try:
                    last = mf.read_any(mf.file_size - _UNIT, _UNIT)
                    phy = int.from_bytes(last[:8], "big", signed=True)
                    size = int.from_bytes(last[8:12], "big", signed=True)
                    if phy + size > archived_end:
                        break
                    first = mf.file_from_offset // _UNIT
                    self._copy(name, "consumequeue", mf, {"topic": cq.topic, "queue_id": cq.queue_id,
                                                          "first": first, "last": first + mf.file_size // _UNIT - 1})
                finally:
                    mf.release()
                n += 1
        return n

    # -- the index --------------------------------------------------------------------------------------------

    def _copy_index(self) -> int:
        """Full index files (not the newest, flushed), oldest first, once every message they point at is in
        the archive: a query below the local data then finds its keys there."""
        index = self.index
        if index is None:
            return 0
        archived_end = self.manifest.contiguous_end()
        n = 0
        pending = {id(f) for f in index._full}          # full, not flushed yet
        for f in index.files[:-1]:
            if self.is_stopped() or id(f) in pending or f.end_phy_offset >= archived_end:
                break
            mf = f.mapped_file
            name = index_object(mf)
            if self.manifest.state_of(name) in (COPY_FINISHED, LOCAL_DELETED):
                continue
            if not mf.hold():
                break
            try:
                self._copy(name, "index", mf, {"begin_ts": f.begin_timestamp, "end_ts": f.end_timestamp,
                                               "begin_phy": f.begin_phy_offset, "end_phy": f.end_phy_offset,
                                               "slots": f.hash_slot_num, "entries": f.index_num}, base=0)
            finally:
                mf.release()
            n += 1
        return n

    # -- one copy ---------------------------------------------------------------------------------------------

    def _copy(self, name: str, kind: str, mf: MappedFile, fields: dict[str, Any], base: int | None = None) -> None:
        size = mf.file_size
        base = mf.file_from_offset if base is None else base
        if self.manifest.state_of(name) is None:
            self.manifest.append(COPY_STARTED, kind, name, base, size)
        wrote = self.target.put_file(name, mf.file_name)
        range_size = plan.RANGE_SIZE
        crc, crcs = _crc_of(mf, size, range_size)
        if wrote != size:
            raise ArchiveError("%s: the copy of %s wrote %d bytes, the file has %d" % (self.target.shown, name, wrote,
                                                                                     size))
        seen = self.target.size(name)
        if seen != size:
            raise ArchiveError("%s: %s reads back as %s bytes after its copy, not %d" % (self.target.shown, name, seen,
                                                                                       size))
        stamp = self.target.local_stamp(name)
        if stamp is not None:
            fields = {**fields, "stamp": stamp}       # a reader of this file:// archive need not read it for its CRC
        if size > 0:
            fields = {**fields, "range_size": range_size, "range_crc32": crcs}   # a reader fetches by ranges
        self.manifest.append(COPY_FINISHED, kind, name, base, size, crc32=crc, **fields)
        self.uploaded += 1
        self.uploaded_bytes += size
        self.last_upload_ms = int(time.time() * 1000)
        log.info("%s: archived %s (%d bytes) to %s", self.config.store_path_root_dir, name, size, self.target.shown)

    def record_deleted(self, names: list[tuple[str, str, int, int]]) -> None:
        """The cleaner deleted these local files (``(object, kind, base, size)``) after their copy finished."""
        for name, kind, base, size in names:
            try:
                self.manifest.append(LOCAL_DELETED, kind, name, base, size)
            except (ArchiveError, OSError) as e:
                # the deletion is only news for readers of the manifest: the copy stays finished either way
                log.warning("%s: could not record the local deletion of %s: %s", self.config.store_path_root_dir,
                            name, e)
