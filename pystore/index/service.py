"""The key index: find messages by key or ``UNIQ_KEY`` (docs/format.md §3; RocketMQ ``IndexService``).

Index files live in ``<root>/index/``, named by their creation time in local time (``yyyyMMddHHmmssSSS``), each
``40 + max_hash_slot_num*4 + max_index_num*20`` bytes (``_index`` draws the layout). Every message with keys gets
an entry ``topic#key`` per key (space-separated ``KEYS``) and one for its ``UNIQ_KEY``; rolled-back transaction
messages are not indexed. Entries are written by compiled code: with ASYNC_FLUSH (``index_build_async``) by
``IndexBuildService`` (:mod:`pystore.index.builder`), a thread that follows the commit log behind the puts
(``_index.index_log``, GIL released), which lookups, flushes and the shutdown catch up when it is behind;
otherwise by dispatch (``_index.index_message``, called with the stored topic and properties bytes). A store's
``IndexFileService`` keeps the files ahead of that writer: once the newest file is half full it makes the next one
(``prepare_next``) as ``index.spare`` beside the folder, which the writer renames into the folder and starts, in
C, when the newest fills (``_index.take_spare``); and it flushes the files the writer left full (``flush_full``),
after which the checkpoint's index time moves to their end time. Python runs on the put path only to make a file
no spare was made for (``_new_file``, the core's ``new_file`` hook: the first one, or files filling faster than
the service looks). ``IndexService`` holds its compiled core (``core``, an ``_index.IndexFilesBase``: the files,
the spare, the last topic's hash), which it hands to the compiled writers (dispatch, ``index_keys``,
``index_log``); its ``_files``, ``_full`` and ``_spare*`` are the core's fields. After an abnormal exit, files
newer than the index time are dropped and rebuilt by dispatch, as is a file not full (which that time never
covers; RocketMQ keeps one whose header says it is not newer), and an unused spare is deleted. ``query_offset``
walks files newest first (``_index.select_in_files``). A new file's name and every destroy's time come from the
store's clock, and the free-space check before a new (sparse) file from the store's ``disk_usage``
(``pystore.system.service``), as in every other policy.

A new file's name (and ``index/``'s, the first time) is made durable by the next ``flush`` or full-file flush,
before the checkpoint's index time covers it (``pystore.system.durable``; RocketMQ syncs no folder); deletions at once.

Thread-safety: one writer (the builder, or dispatch); lookups run beside it: the writer puts an entry whole
before it links it into its slot (release), and a lookup that finds a slot naming an entry past the count it
knows walks it (acquire). A lookup that finds the builder behind the log's end catches it up first, under
the builder's lock; one that finds it caught up takes no lock.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pystore.index._index import (
    PREFAULT_WINDOW,
    IndexFileCore,
    IndexFilesBase,
    index_file_size,
    index_keys,
    select_in_files,
)
from pystore.log._mapped_file import MappedFile
from pystore.log.geometry import index_geometry, is_index_file_name
from pystore.message._message_ext import MessageExt
from pystore.read.results import QueryMessageResult
from pystore.system.core_field import CoreField
from pystore.system.durable import PendingDirs, fsync_dir, make_dirs
from pystore.system.service import DiskUsage, ServiceThread, disk_free_bytes, real_clock

if TYPE_CHECKING:
    from pystore.index.builder import IndexBuildService

__all__ = ["IndexService", "IndexFileService", "QueryOffsetResult", "SPARE_NAME"]

log = logging.getLogger(__name__)

#: the file made ahead of need, beside the index folder (``IndexService.prepare_next``)
SPARE_NAME = "index.spare"


def _file_name(ms: int) -> str:
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + "%03d" % (ms % 1000)


class QueryOffsetResult:
    __slots__ = ("phy_offsets", "index_last_update_timestamp", "index_last_update_phyoffset")

    def __init__(self, phy_offsets: list[int], ts: int, phy: int) -> None:
        self.phy_offsets = phy_offsets
        self.index_last_update_timestamp = ts
        self.index_last_update_phyoffset = phy


class IndexService:
    #: the core's fields: the files oldest first (a new list on every change; the compiled writer reads it), the
    #: files the writer left full (it adds to it), the spare made ahead and where it lies and is renamed to
    _files: CoreField[list[IndexFileCore]] = CoreField()
    _full: CoreField[list[IndexFileCore]] = CoreField()
    _spare: CoreField[IndexFileCore | None] = CoreField()
    _spare_path: CoreField[str | None] = CoreField()
    _spare_name: CoreField[str | None] = CoreField()

    def __init__(self, path: str, hash_slot_num: int, index_num: int, checkpoint: Any, read_only: bool = False,
                 clock: Callable[[], int] | None = None, max_msgs_num_batch: int = 64,
                 disk_usage: DiskUsage | None = None) -> None:
        #: what the compiled writers take (dispatch, ``index_keys``, ``index_log``); it calls ``_new_file`` back
        #: only when it has neither a file with room nor a spare
        self.core = IndexFilesBase()
        self.core.new_file = self._new_file
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self.checkpoint = checkpoint
        self.read_only = read_only
        #: the store's clock (new files' names, the destroys' forcing time) and disk (the free-space check)
        self.clock = clock or real_clock
        self.disk_usage = disk_usage
        self.max_msgs_num_batch = max_msgs_num_batch
        self._lock = threading.RLock()
        #: folders whose new entries are not durable yet; synced by the flushes, before the checkpoint's time
        self.pending_dirs = PendingDirs()
        self._cap_warned = False
        #: where the next file is made ahead of need (``prepare_next``): beside the folder, not in it, so that a
        #: reader of the folder (RocketMQ's too) sees only files in use
        self.spare_path = os.path.join(os.path.dirname(os.path.abspath(path)), SPARE_NAME)
        self._spare_path = self.spare_path              # the compiled writer renames the file
        #: serialises the flushes of full files: the checkpoint's index time moves in file order
        self._flush_lock = threading.Lock()
        #: ``IndexFileService.wakeup`` while that service runs: a file filled without a spare (see ``_new_file``)
        self.wake: Callable[[], None] | None = None
        #: the ``IndexBuildService`` writing the entries while it runs: lookups catch it up first
        self.builder: IndexBuildService | None = None

    @property
    def files(self) -> list[IndexFileCore]:
        return self._files

    def load(self, last_exit_ok: bool) -> bool:
        if not self.read_only and os.path.exists(self.spare_path):
            # made ahead of need and not taken before the process ended: it holds nothing
            log.info("deleting the unused spare index file %s", self.spare_path)
            self._drop_spare()
        if not os.path.isdir(self.path):
            return True
        files: list[IndexFileCore] = []
        dropped = False
        for name in sorted(os.listdir(self.path)):
            p = os.path.join(self.path, name)
            if not (is_index_file_name(name) and os.path.isfile(p)):
                continue
            size = os.path.getsize(p)
            if size == 0 and not self.read_only:
                # made (sparse, by ftruncate) but cut before any flush made its size durable: strict POSIX
                # metadata keeps the name without the size. It held nothing flushed (the checkpoint's index
                # time moves only after a flush), so dispatch rebuilds its entries, as for a file newer
                # than the checkpoint; left there it would stay an empty file verify reports forever
                log.warning("deleting the empty index file %s (creation interrupted)", p)
                os.unlink(p)
                dropped = True
                continue
            if size != self.file_size:
                geometry = index_geometry(size) if not files else None
                if geometry is None and size < self.file_size and not last_exit_ok and not self.read_only:
                    # created at its full size, which a flush makes durable: short after a crash, its
                    # creation never reached the disk (a power cut); dispatch rebuilds what it held. Left
                    # in place it would stay a file of no geometry for good (``pystore verify`` flags it)
                    log.warning("%s is %d bytes, not %d: its creation was cut by a crash; deleted", p, size,
                                self.file_size)
                    os.unlink(p)
                    dropped = True
                    continue
                if geometry is None:
                    log.warning("%s is %d bytes, not %d: not an index of this geometry; ignored", p, size,
                                self.file_size)
                    continue
                # an existing store keeps its geometry (as its commit log and queues do); the file size
                # tells it under RocketMQ's ratio of four entries per slot
                log.log(logging.INFO if self.read_only else logging.WARNING,
                        "%s is %d bytes: the index keeps its geometry (%d slots, %d entries), not the "
                        "configured one", p, size, *geometry)
                self.hash_slot_num, self.index_num = geometry
                self.file_size = size
            mf = MappedFile(p, size, read_only=self.read_only, from_offset=0, window=PREFAULT_WINDOW)
            f = IndexFileCore(mf, self.hash_slot_num, self.index_num)
            if not last_exit_ok and not self.read_only and (
                    f.end_timestamp > self.checkpoint.index_msg_timestamp or not f.is_write_full()):
                # RocketMQ drops only files whose end time is past the checkpoint's index time. That time moves
                # only when a FULL file is flushed, so a file not full is never covered by it, even when its
                # header says otherwise: its entries can share the last full file's millisecond (end times
                # equal), or a torn cut can leave its header older than its slots and entries. Kept, such a
                # file has entries on no chain (keys not found); dropped, dispatch rebuilds it from the log
                log.info("dropping %s: not covered by the checkpoint's index time (end %d, %d of %d entries); "
                         "dispatch rebuilds it", p, f.end_timestamp, f.index_count - 1, self.index_num)
                mf.destroy(0, self.clock())
                dropped = True
                continue
            mf.set_positions(size)
            files.append(f)
        if dropped:
            fsync_dir(self.path)
        self._files = files
        return True

    def _drop_spare(self) -> None:
        """Delete the file made ahead of need, unused (its name was never in the folder)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.mapped_file.close()
        try:
            os.unlink(self.spare_path)
        except FileNotFoundError:
            pass

    def last_end_phy_offset(self) -> int:
        files = self._files
        return files[-1].end_phy_offset if files else 0

    def _create(self, p: str) -> MappedFile:
        """A new sparse file of the index's size at ``p``, mapped (``OSError`` when it cannot be made)."""
        # Sparse like RocketMQ's index files; the free-space check stands in for fallocate's guarantee that
        # writes into the mapping cannot hit a full disk (SIGBUS).
        free = disk_free_bytes(self.disk_usage, os.path.dirname(p))
        if free is not None and free < self.file_size:
            raise OSError(errno.ENOSPC, "%d bytes free, an index file needs %d" % (free, self.file_size), p)
        mf = MappedFile(p, self.file_size, create=True, from_offset=0, preallocate=False, window=PREFAULT_WINDOW)
        mf.set_positions(self.file_size)
        return mf

    def _next_name(self) -> str:
        """The path of a new file: named by the clock, after any name taken."""
        now = self.clock()
        p = os.path.join(self.path, _file_name(now))
        while os.path.exists(p) or (self._files and p <= self._files[-1].mapped_file.file_name):
            now += 1
            p = os.path.join(self.path, _file_name(now))
        return p

    def _new_file(self) -> IndexFileCore | None:
        """The compiled writer's call when it has no file with room and no spare to take (the first file, or
        files filling faster than ``IndexFileService`` makes spares): a new newest file, or None."""
        if self.read_only:
            return None
        with self._lock:
            f = self.core.take_spare()
            if f is None and self._spare is not None:
                log.warning("cannot take the spare index file %s; making a new one", self.spare_path)
                self._drop_spare()
            if f is None:
                f = self._make_newest()
            if f is not None and len(self._full) and self.wake is not None:
                self.wake()         # the full file's flush
            return f

    def _make_newest(self) -> IndexFileCore | None:
        prev = self._files[-1] if self._files else None
        changed = make_dirs(self.path)
        p = self._next_name()
        try:
            mf = self._create(p)
        except OSError:
            log.exception("cannot create index file %s", p)
            self.pending_dirs.add(changed)
            return None
        # synced by the next flush, off the put lock this runs under (inline dispatch)
        self.pending_dirs.add(changed + [self.path])
        f = IndexFileCore(mf, self.hash_slot_num, self.index_num)
        if prev is None:
            f.init_header(0, 0, 0, 0)
        else:
            f.init_header(prev.end_timestamp, prev.end_timestamp, prev.end_phy_offset, prev.end_phy_offset)
        self._files = self._files + [f]
        if prev is not None and prev.is_write_full():
            self._full.append(prev)
        return f

    def prepare_next(self) -> bool:
        """Make the next file ahead of need once the newest is half full (``IndexFileService``), so that the
        writer switches to it in C when the newest fills (``take_spare``): no file is made on the put path,
        and no Python runs there. True when a spare was made."""
        if self.read_only:
            return False
        with self._lock:
            files = self._files
            if self._spare is not None or not files or files[-1].index_count < self.index_num // 2:
                return False
            changed = make_dirs(self.path)
            self.pending_dirs.add(changed)
            name = self._next_name()
            try:
                if os.path.exists(self.spare_path):
                    os.unlink(self.spare_path)
                mf = self._create(self.spare_path)
            except OSError:
                log.exception("cannot create the spare index file %s", self.spare_path)
                return False
            spare = IndexFileCore(mf, self.hash_slot_num, self.index_num)
            spare.init_header(0, 0, 0, 0)
            self._spare_name = name
            self._spare = spare
            return True

    def flush_full(self) -> int:
        """Flush the files the writer left full, oldest first, each then covered by the checkpoint's index time
        (RocketMQ's ``FlushIndexFileThread``, one a full file; here ``IndexFileService`` and the flushes do
        it, and ``close``). The folder is synced first: a file the writer took from the spare is renamed into
        it. A file whose flush fails stays first in line and stops the pass, so that no later file moves the
        index time past entries that may not be on disk (recovery re-indexes from that time); the next pass
        tries it again. The number of files flushed."""
        done = 0
        with self._flush_lock:
            while self._full:
                f = self._full[0]
                try:
                    self.pending_dirs.sync()
                    fsync_dir(self.path)
                    f.mapped_file.unflush_from(0)
                    f.mapped_file.flush(0)
                except Exception:  # noqa: BLE001 - the store keeps running; the next pass tries again
                    log.exception("flushing the full index file %s failed", f.mapped_file.file_name)
                    break
                self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, f.end_timestamp)
                self.checkpoint.flush()
                del self._full[0]
                done += 1
        return done

    def build_index(self, topic: str, keys: str | None, uniq_key: str | None, phy_offset: int, store_ts: int,
                    sys_flag: int) -> None:
        """Index one message given as strings: ``keys`` space-separated, as the ``KEYS`` property stores them.
        Dispatch does not come here: it hands the stored bytes to ``_index.index_message``, which this calls."""
        props = []
        if uniq_key:
            props.append("UNIQ_KEY\x01" + uniq_key)
        if keys:
            props.append("KEYS\x01" + keys)
        index_keys(self.core, topic.encode("utf-8", "surrogatepass"), "\x02".join(props).encode("utf-8", "surrogatepass"),
                   phy_offset, store_ts, sys_flag)

    def query_messages(self, commitlog: Any, topic: str, key: str, max_num: int, begin: int,
                       end: int, more: Callable[[str, int, int, int, list[int]], None] | None = None
                       ) -> QueryMessageResult:
        """``MessageStore.query_message``: the messages of ``topic`` in ``commitlog`` whose keys (or
        ``UNIQ_KEY``) include ``key``, stored in [begin, end], in offset order; at most
        ``max_msgs_num_batch`` (said once in the log when ``max_num`` asks for more). ``more(full_key, max_num,
        begin, end, out)`` adds the offsets of files beyond these (the archive's)."""
        if max_num > self.max_msgs_num_batch and not self._cap_warned:
            self._cap_warned = True
            log.warning("%s: query_message(max_num=%d) returns at most %d messages (max_msgs_num_batch, RocketMQ's "
                        "maxMsgsNumBatch); raise max_msgs_num_batch for more", self.path, max_num,
                        self.max_msgs_num_batch)
        found: list[MessageExt] = []
        seen: set[int] = set()
        last_ts = last_phy = 0
        hi = end
        for _ in range(3):                       # RocketMQ queries up to three rounds
            offsets: list[int] = []
            last_ts, last_phy = self._select(topic, key, max_num, begin, hi, offsets)
            if more is not None and len(offsets) < min(max_num, self.max_msgs_num_batch):
                more(topic + "#" + key, min(max_num, self.max_msgs_num_batch) - len(offsets), begin, hi, offsets)
            if len(offsets) > 1:
                offsets.sort()
            for off in offsets:
                if off in seen:
                    continue
                seen.add(off)
                m = commitlog.look_message_by_offset(off)
                # the index compares 32-bit hashes only: keep real matches
                if m is not None and m.topic == topic and (key in m.keys or m.uniq_key == key):
                    found.append(m)
            if found or not offsets:
                break
            hi = min(commitlog.pickup_store_timestamp(offsets[0]), hi) - 1
            if hi < begin:
                break
        if len(found) > 1:
            found.sort(key=lambda m: m.commit_log_offset)
        return QueryMessageResult(found[:max_num], last_ts, last_phy)

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """The offsets of ``topic``'s messages with ``key`` stored in [begin, end], newest first."""
        out: list[int] = []
        last_ts, last_phy = self._select(topic, key, max_num, begin, end, out)
        return QueryOffsetResult(out, last_ts, last_phy)

    def _select(self, topic: str, key: str, max_num: int, begin: int, end: int, out: list[int]) -> tuple[int, int]:
        """``query_offset`` into ``out``; returns the newest file's end time and end offset. While an
        ``IndexBuildService`` writes the entries, a key must be found as soon as its put returned: when the
        builder is behind the log's end, the lookup first has it index the rest, under its lock. When it is
        not, the lookup runs beside it: entries it links meanwhile are whole when seen (``_index``)."""
        max_num = min(max_num, self.max_msgs_num_batch)
        full_key = topic + "#" + key
        builder = self.builder
        if builder is None or not builder.behind():
            return select_in_files(self._files, full_key, max_num, begin, end, out)
        with builder.lock:
            builder.build_locked()
            return select_in_files(self._files, full_key, max_num, begin, end, out)

    def delete_expired_file(self, min_offset: int, archived: Callable[[IndexFileCore], bool] | None = None) -> int:
        """Delete files (never the newest) whose entries all point below ``min_offset`` (with ``archived``, a
        store's archive tier: only files whose copy is finished, oldest first)."""
        files = self._files
        gone = []
        for f in files[:-1]:
            if f.end_phy_offset < min_offset and (archived is None or archived(f)):
                gone.append(f)
            else:
                break
        now = self.clock()
        for f in gone:
            mf = f.mapped_file
            if not mf.destroy(0, now):
                mf.destroy(0, now)
        if gone:
            with self._lock:
                # in C, in one step: the writer takes the spare into the list without this lock
                self.core.drop_files(gone)
            try:
                fsync_dir(self.path)
            except OSError:
                log.exception("making the deletion of %d index file(s) durable failed", len(gone))
        return len(gone)

    def flush(self) -> None:
        if self.read_only:
            return
        self.flush_full()
        self.pending_dirs.sync()
        files = self._files
        if not files:
            return
        last = files[-1]
        last.mapped_file.unflush_from(0)
        last.mapped_file.flush(0)
        if last.is_write_full():
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, last.end_timestamp)

    def refresh_read_only(self) -> None:
        if not os.path.isdir(self.path):
            return
        known = {f.mapped_file.file_name for f in self._files}
        new = []
        for name in sorted(os.listdir(self.path)):
            p = os.path.join(self.path, name)
            if p in known or not is_index_file_name(name) or os.path.getsize(p) != self.file_size:
                continue
            new.append(IndexFileCore(MappedFile(p, self.file_size, read_only=True, from_offset=0),
                                     self.hash_slot_num, self.index_num))
        for f in self._files:
            f.load_header()
        if new:
            self._files = self._files + new

    def close(self) -> None:
        if not self.read_only:
            self.flush_full()
            self._drop_spare()
        for f in self._files:
            f.mapped_file.close()
        self._files = []

    def destroy(self) -> None:
        with self._flush_lock:
            self._full = []
        if not self.read_only:
            self._drop_spare()
        now = self.clock()
        for f in self._files:
            mf = f.mapped_file
            if not mf.destroy(0, now):
                mf.destroy(0, now)
        self._files = []
        try:
            os.rmdir(self.path)
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except FileNotFoundError:
            pass
        except OSError:
            fsync_dir(self.path)        # not empty: its files' removal is what changed


class IndexFileService(ServiceThread):
    """Keeps the index's files ahead of its writer, off the put path: makes the next file once the newest is
    half full (``IndexService.prepare_next``) and flushes the files the writer left full
    (``IndexService.flush_full``), every ``interval_ms`` and when woken; one thread for the store's life
    (RocketMQ starts a thread per full file)."""

    def __init__(self, index: IndexService, interval_ms: int = 500, clock: Callable[[], int] | None = None) -> None:
        super().__init__("IndexFileService", clock)
        self.index = index
        self.interval_ms = interval_ms

    def start(self) -> None:
        self.index.wake = self.wakeup
        super().start()

    def shutdown(self, join: bool = True) -> None:
        super().shutdown(join)
        self.index.wake = None

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(self.interval_ms)
            try:
                self.index.flush_full()
                self.index.prepare_next()
            except Exception:  # noqa: BLE001 - a pass that failed is tried again at the next
                log.exception("keeping the index files ahead failed")
        self.index.flush_full()
