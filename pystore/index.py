"""The key index: find messages by key or ``UNIQ_KEY`` (docs/format.md §3; RocketMQ ``IndexService``).

Index files live in ``<root>/index/``, named by their creation time in local time (``yyyyMMddHHmmssSSS``),
each ``40 + max_hash_slot_num*4 + max_index_num*20`` bytes (``_index`` draws the layout). Every message
with keys gets an entry ``topic#key`` per key (space-separated ``KEYS``) and one for its ``UNIQ_KEY``;
rolled-back transaction messages are not indexed. Entries are written by compiled code
(``_index.index_message``, which dispatch calls with the stored topic and properties bytes); Python runs only
to make a file (``_new_file``: the first one, or the next when the last is full). A full file is flushed and
the checkpoint's index time moves to its end time; after an abnormal exit, files newer than that time are
dropped and rebuilt by dispatch. ``query_offset`` walks files newest first.

A new file is made on the put path (inline dispatch); its name (and the ``index/`` folder's, the first time)
is made durable by the next ``flush`` or full-file flush, before the checkpoint's index time can cover it
(``pystore.durable``: RocketMQ does not fsync directories, pystore does, once per file). Deleted files are
made durable at once.

Thread-safety: one writer (dispatch); ``query_offset`` may run concurrently (it reads whole entries).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from pystore._index import PREFAULT_WINDOW, IndexFileCore, IndexFilesBase, index_file_size, index_keys
from pystore._mapped_file import MappedFile
from pystore._message_ext import MessageExt
from pystore.durable import PendingDirs, fsync_dir, make_dirs
from pystore.geometry import index_geometry
from pystore.results import QueryMessageResult

__all__ = ["IndexService", "QueryOffsetResult"]

log = logging.getLogger(__name__)


def _file_name(ms: int) -> str:
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + "%03d" % (ms % 1000)


class QueryOffsetResult:
    __slots__ = ("phy_offsets", "index_last_update_timestamp", "index_last_update_phyoffset")

    def __init__(self, phy_offsets: list[int], ts: int, phy: int) -> None:
        self.phy_offsets = phy_offsets
        self.index_last_update_timestamp = ts
        self.index_last_update_phyoffset = phy


class IndexService(IndexFilesBase):
    def __init__(self, path: str, hash_slot_num: int, index_num: int, checkpoint: Any, read_only: bool = False,
                 clock: Callable[[], int] | None = None, max_msgs_num_batch: int = 64) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self.checkpoint = checkpoint
        self.read_only = read_only
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.max_msgs_num_batch = max_msgs_num_batch
        self._files: list[IndexFileCore] = []           # a C field (IndexFilesBase): the compiled writer reads it
        self._lock = threading.RLock()
        #: folders whose new entries are not durable yet; synced by the flushes, before the checkpoint's time
        self.pending_dirs = PendingDirs()
        self._cap_warned = False
        #: the threads flushing files that filled up (one each, as RocketMQ); close() joins them
        self._full_flushes: list[threading.Thread] = []

    @property
    def files(self) -> list[IndexFileCore]:
        return self._files

    def load(self, last_exit_ok: bool) -> bool:
        if not os.path.isdir(self.path):
            return True
        files: list[IndexFileCore] = []
        dropped = False
        for name in sorted(os.listdir(self.path)):
            p = os.path.join(self.path, name)
            if not (name.isdigit() and os.path.isfile(p)):
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
            if not last_exit_ok and not self.read_only and f.end_timestamp > self.checkpoint.index_msg_timestamp:
                log.info("dropping %s: newer than the checkpoint's index time; dispatch rebuilds it", p)
                mf.destroy(0)
                dropped = True
                continue
            mf.set_positions(size)
            files.append(f)
        if dropped:
            fsync_dir(self.path)
        self._files = files
        return True

    def last_end_phy_offset(self) -> int:
        files = self._files
        return files[-1].end_phy_offset if files else 0

    def _new_file(self) -> IndexFileCore | None:
        if self.read_only:
            return None
        with self._lock:
            prev = self._files[-1] if self._files else None
            changed = make_dirs(self.path)
            now = self.clock()
            p = os.path.join(self.path, _file_name(now))
            while os.path.exists(p):
                now += 1
                p = os.path.join(self.path, _file_name(now))
            try:
                # Sparse like RocketMQ's index files; the free-space check stands in for fallocate's
                # guarantee that writes into the mapping cannot hit a full disk (SIGBUS).
                free = shutil.disk_usage(self.path).free
                if free < self.file_size:
                    raise OSError(errno.ENOSPC, "%d bytes free, an index file needs %d" % (free, self.file_size), p)
                mf = MappedFile(p, self.file_size, create=True, from_offset=0, preallocate=False,
                                window=PREFAULT_WINDOW)
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
            mf.set_positions(self.file_size)
            self._files = self._files + [f]
            if prev is not None and prev.is_write_full():
                # off the put lock, as RocketMQ's FlushIndexFileThread; kept so close() can wait for it
                t = threading.Thread(target=self._flush_full, args=(prev,), name="FlushIndexFileThread", daemon=True)
                self._full_flushes = [x for x in self._full_flushes if x.is_alive()] + [t]
                t.start()
            return f

    def _flush_full(self, f: IndexFileCore) -> None:
        try:
            self.pending_dirs.sync()
            f.mapped_file.flushed_position = 0
            f.mapped_file.flush(0)
            self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp, f.end_timestamp)
            self.checkpoint.flush()
        except (OSError, Exception):  # noqa: BLE001 - the store keeps running; the index is rebuilt on recovery
            log.exception("flushing a full index file failed")

    def build_index(self, topic: str, keys: str | None, uniq_key: str | None, phy_offset: int, store_ts: int,
                    sys_flag: int) -> None:
        """Index one message given as strings: ``keys`` space-separated, as the ``KEYS`` property stores them.
        Dispatch does not come here: it hands the stored bytes to ``_index.index_message``, which this calls."""
        props = []
        if uniq_key:
            props.append("UNIQ_KEY\x01" + uniq_key)
        if keys:
            props.append("KEYS\x01" + keys)
        index_keys(self, topic.encode("utf-8", "surrogatepass"), "\x02".join(props).encode("utf-8", "surrogatepass"),
                   phy_offset, store_ts, sys_flag)

    def query_messages(self, commitlog: Any, topic: str, key: str, max_num: int, begin: int,
                       end: int) -> QueryMessageResult:
        """``MessageStore.query_message``: the messages of ``topic`` in ``commitlog`` whose keys (or
        ``UNIQ_KEY``) include ``key``, stored in [begin, end], in offset order; at most
        ``max_msgs_num_batch`` (said once in the log when ``max_num`` asks for more)."""
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
            r = self.query_offset(topic, key, max_num, begin, hi)
            last_ts, last_phy = r.index_last_update_timestamp, r.index_last_update_phyoffset
            for off in sorted(r.phy_offsets):
                if off in seen:
                    continue
                seen.add(off)
                m = commitlog.look_message_by_offset(off)
                # the index compares 32-bit hashes only: keep real matches
                if m is not None and m.topic == topic and (key in m.keys or m.uniq_key == key):
                    found.append(m)
            if found or not r.phy_offsets:
                break
            hi = min(commitlog.pickup_store_timestamp(min(r.phy_offsets)), hi) - 1
            if hi < begin:
                break
        found.sort(key=lambda m: m.commit_log_offset)
        return QueryMessageResult(found[:max_num], last_ts, last_phy)

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        max_num = min(max_num, self.max_msgs_num_batch)
        out: list[int] = []
        files = self._files
        last_ts = last_phy = 0
        full_key = topic + "#" + key
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                last_ts, last_phy = f.end_timestamp, f.end_phy_offset
            if f.is_time_matched(begin, end):
                f.select_phy_offset(out, full_key, max_num, begin, end)
            if f.begin_timestamp < begin or len(out) >= max_num:
                break
        return QueryOffsetResult(out, last_ts, last_phy)

    def delete_expired_file(self, min_offset: int) -> int:
        """Delete files (never the newest) whose entries all point below ``min_offset``."""
        files = self._files
        gone = []
        for f in files[:-1]:
            if f.end_phy_offset < min_offset:
                gone.append(f)
            else:
                break
        for f in gone:
            mf = f.mapped_file
            if not mf.destroy(0):
                mf.destroy(0)
        if gone:
            with self._lock:
                ids = {id(f) for f in gone}
                self._files = [f for f in self._files if id(f) not in ids]
            try:
                fsync_dir(self.path)
            except OSError:
                log.exception("making the deletion of %d index file(s) durable failed", len(gone))
        return len(gone)

    def flush(self) -> None:
        if self.read_only:
            return
        self.pending_dirs.sync()
        files = self._files
        if not files:
            return
        last = files[-1]
        last.mapped_file.flushed_position = 0
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
            if p in known or not name.isdigit() or os.path.getsize(p) != self.file_size:
                continue
            new.append(IndexFileCore(MappedFile(p, self.file_size, read_only=True, from_offset=0),
                                     self.hash_slot_num, self.index_num))
        for f in self._files:
            f.load_header()
        if new:
            self._files = self._files + new

    def _join_full_flushes(self) -> None:
        """Wait for the flushes of full files still running: their files are about to be closed."""
        for t in self._full_flushes:
            t.join()
        self._full_flushes = []

    def close(self) -> None:
        self._join_full_flushes()
        for f in self._files:
            f.mapped_file.close()
        self._files = []

    def destroy(self) -> None:
        self._join_full_flushes()
        for f in self._files:
            mf = f.mapped_file
            if not mf.destroy(0):
                mf.destroy(0)
        self._files = []
        try:
            os.rmdir(self.path)
            fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except FileNotFoundError:
            pass
        except OSError:
            fsync_dir(self.path)        # not empty: its files' removal is what changed
