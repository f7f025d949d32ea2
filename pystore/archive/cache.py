"""The local cache of archived files: whole objects fetched by ranged reads, checked, and mapped read-only.

Reads below the local minimum run the store's own compiled scans over archived data, so an archived file is
served as what the scans read: a ``MappedFile``. ``mapped(record)`` fetches the object named by a manifest record
into ``<root>/archive.cache/<pid>/<object name>`` in one streamed read (never the whole object in memory),
checks its size and CRC32 against the manifest (an object deleted or changed behind the store's back is a
``StoreCorruptedError`` naming it: never a wrong answer), renames it into place and maps it read-only. An object
of a ``file://`` archive is already a local file: it is checked the same way and mapped where it lies.

The cache holds at most ``archive_cache_bytes`` of fetched files, least recently used first out; a file some
read holds (``hold``) stays until it is let go, and the file asked for last is kept even when it alone is larger
(a commit-log file of 1 GiB with the default 256 MiB cache: the cache then holds that one file). The objects of a
``file://`` archive take no room of the cache (they are not copied: their pages are the kernel's page cache, as
a local store's files are), so they are not counted in ``archive_cache_bytes``; their mappings are bounded
apart, by ``MAP_BUDGET`` bytes of address space. Once checked, such an object is not checked again while its
inode, size, modification and change times stay what they were (a write behind the store's back changes the
change time, which no one can set back): readers of several queues that go through the same files in turn map
each file again without reading it all for its CRC again. The manifest record of a ``file://`` copy carries the
same four figures as the object had when its copy finished (``stamp``): an object that still has them is the
one that was copied and checked then, and is not read for its CRC at all; any other (changed, replaced,
restored from a backup, the archive moved to another disk) is checked in full once. Each process
has its own folder, ``archive.cache/<pid>``, emptied when it opens the store and when it closes it (nothing in
it is trusted across processes); folders of processes no longer alive are removed at open.

A read that maps the commit-log files it needs asks for the next one to be fetched meanwhile (``read_ahead``,
one background thread): a reader going through the archive in order waits for the network once.

Objects whose manifest record has per-range CRCs (copies made since ranged reads, on an archive that is not
``file://``) are not fetched whole: ``open(record)`` gives a ``Held`` on a sparse copy whose ranges a read asks
for (``Held.need``) before it reads them (``pystore.archive.ranges``); their ranges count in the same
``archive_cache_bytes``, and are evicted first. ``mapped(record)`` is ``open`` with every byte needed: the whole
object, as verify and Spark read it.

Thread-safety: one lock around the table and eviction (fetches run outside it, each file fetched once however
many reads want it); a mapped file handed out is held by the caller's read.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import shutil
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pystore.archive.plan import range_fields
from pystore.archive.ranges import Held, RangeStore
from pystore.archive.target import ArchiveError, ArchiveTarget
from pystore.errors import StoreCorruptedError
from pystore.format._codec import file_crc32
from pystore.log._mapped_file import MappedFile

log = logging.getLogger(__name__)

__all__ = ["ArchiveCache", "Held", "MAP_BUDGET"]

#: the address space the mappings of a ``file://`` archive's objects may take together (least recently used
#: unmapped first): far below a 64-bit process's, far above what a read holds at once
MAP_BUDGET = 256 << 30


class ArchiveCache:
    def __init__(self, target: ArchiveTarget, parent: str, capacity: int) -> None:
        self.target = target
        _remove_dead(parent)
        self.folder = os.path.join(parent, str(os.getpid()))
        self.capacity = capacity
        self._lock = threading.Lock()
        self._files: OrderedDict[str, MappedFile] = OrderedDict()
        self._borrowed: set[str] = set()           # mapped where they lie in a file:// archive
        self._verified: dict[str, tuple[int, int, int, int]] = {}   # file:// objects checked: their stat then
        self.borrowed_bytes = 0
        self._pending: dict[str, Future[None]] = {}  # fetches under way
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pystore-archive-ahead")
        self._closed = False
        self.bytes = 0
        self.fetched = 0               # objects fetched (misses)
        self.hits = 0
        shutil.rmtree(self.folder, ignore_errors=True)
        self.ranges = RangeStore(target, self.folder, self._lock, self._evict_now, lambda: self.capacity)

    def open(self, record: dict[str, Any]) -> Held:
        """The archived file of ``record`` (a visible manifest record), held for one read: the caller says which
        bytes it reads (``need``) before reading them, and releases it (``release``) when its read is done."""
        fields = None if self.target.local_path(record["name"]) is not None else range_fields(record)
        if fields is None:
            return Held(self._whole(record))
        return self.ranges.open(record, *fields)

    def mapped(self, record: dict[str, Any]) -> Held:
        """``open`` with every byte of the file needed (checked: for ranges, each against its CRC32)."""
        h = self.open(record)
        try:
            h.need(0, int(record["size"]))
        except BaseException:
            h.release()
            raise
        return h

    @property
    def total_bytes(self) -> int:
        """What the cache holds on the local disk: whole copies and fetched ranges."""
        return self.bytes + self.ranges.bytes

    def _whole(self, record: dict[str, Any]) -> MappedFile:
        """The file of ``record`` fetched whole (or mapped where it lies), mapped and held. A file being fetched
        (by a read-ahead or another read) is waited for, not fetched twice."""
        name = record["name"]
        waited = False
        while True:
            with self._lock:
                mf = self._files.get(name)
                if mf is not None and mf.hold():
                    self._files.move_to_end(name)
                    if not waited:
                        self.hits += 1              # a fetch this read waited for is no hit
                    return mf
                pending = self._pending.get(name)
                if pending is None:
                    pending = self._pending[name] = Future()
                    mine = True
                else:
                    mine = False
            if mine:
                self._load(record, pending)
            pending.result()                    # raises what the fetch raised
            waited = True

    def read_ahead(self, record: dict[str, Any], ranges: int = 1) -> None:
        """Fetch ``record``'s file in the background (a sequential reader will want it next): a whole file, or
        the first ``ranges`` ranges of a ranged one."""
        if self.target.local_path(record["name"]) is None and range_fields(record) is not None:
            h = self.open(record)
            try:
                h.ahead(0, ranges)
            finally:
                h.release()
            return
        with self._lock:
            if self._closed or record["name"] in self._files or record["name"] in self._pending:
                return
            pending = self._pending[record["name"]] = Future()
        self._ahead.submit(self._load, record, pending)

    def _load(self, record: dict[str, Any], pending: Future[None]) -> None:
        name = record["name"]
        try:
            mf = self._fetch(record)
        except BaseException as e:
            with self._lock:
                self._pending.pop(name, None)
            pending.set_exception(e)
            return
        with self._lock:
            self._pending.pop(name, None)
            self._files[name] = mf
            if name in self._borrowed:
                self.borrowed_bytes += mf.file_size
            else:
                self.bytes += mf.file_size
            self._evict(keep=name)
        pending.set_result(None)

    def _fetch(self, record: dict[str, Any]) -> MappedFile:
        name, size = record["name"], int(record["size"])
        shown = self.target.shown + "/" + name
        local = self.target.local_path(name)
        if local is not None:
            # a file:// archive: the object is mapped where it lies (checked as a fetched copy is)
            try:
                st = os.stat(local)
            except FileNotFoundError:
                raise StoreCorruptedError(shown, 0, "the archived object the manifest lists is missing") from None
            if st.st_size != size:
                raise StoreCorruptedError(shown, 0, "the archived object is %d bytes, the manifest says %d"
                                          % (st.st_size, size))
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if self._verified.get(name) != stamp and record.get("stamp") != list(stamp):
                self._check_crc(local, record, shown)
                after = os.stat(local)
                # remembered only when nothing changed it while it was being read
                if (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns) == stamp:
                    self._verified[name] = stamp
            mf = MappedFile(local, size, read_only=True)
            with self._lock:
                self._borrowed.add(name)
        else:
            path = os.path.join(self.folder, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            part = path + ".part"
            try:
                got = self.target.download(name, part)
            except ArchiveError as e:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(part)
                if self.target.size(name) is None:
                    raise StoreCorruptedError(shown, 0, "the archived object the manifest lists is missing") from e
                raise
            if got != size:
                os.unlink(part)
                raise StoreCorruptedError(shown, 0, "the archived object is %d bytes, the manifest says %d"
                                          % (got, size))
            try:
                self._check_crc(part, record, shown)
            except StoreCorruptedError:
                os.unlink(part)
                raise
            os.replace(part, path)
            mf = MappedFile(path, size, read_only=True)
        mf.set_positions(size)
        self.fetched += 1
        log.debug("fetched %s (%d bytes) from %s", name, size, self.target.shown)
        return mf

    @staticmethod
    def _check_crc(path: str, record: dict[str, Any], shown: str) -> None:
        """The object's CRC32 against the manifest's, over a read-only mapping with the compiled CRC (without the
        GIL: a read-ahead checks the next file while the reader decodes this one)."""
        want = record.get("crc32")
        if want is None:
            return
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                got = 0
            else:
                with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                    view = memoryview(m)
                    try:
                        got = file_crc32(view)
                    finally:
                        view.release()
        if got != want:
            raise StoreCorruptedError(shown, 0, "the archived object changed behind the store's back (CRC32 %08x, "
                                      "the manifest says %08x)" % (got, want))

    def _evict_now(self) -> None:
        with self._lock:
            self._evict(keep=None)

    def _evict(self, keep: str | None) -> None:
        over = self.bytes + self.ranges.bytes - self.capacity
        if over > 0:
            self.ranges.evict(over)             # ranges first: the least recently used of them out
        for name in list(self._files):
            if self.bytes + self.ranges.bytes <= self.capacity and self.borrowed_bytes <= MAP_BUDGET:
                return
            mf = self._files[name]
            if name == keep or mf.ref_count > 1:
                continue                       # in use by a read: later
            if name in self._borrowed:
                if self.borrowed_bytes <= MAP_BUDGET:
                    continue                   # the fetched copies are over: these take no room
                del self._files[name]
                self.borrowed_bytes -= mf.file_size
                self._borrowed.discard(name)
                mf.close()                      # the archive's own file: unmapped, never deleted
            else:
                if self.bytes + self.ranges.bytes <= self.capacity:
                    continue
                del self._files[name]
                self.bytes -= mf.file_size
                mf.destroy(0, int(time.time() * 1000))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._ahead.shutdown(wait=True)
        self.ranges.close()
        with self._lock:
            for mf in self._files.values():
                mf.close()
            self._files.clear()
            self._borrowed.clear()
            self.bytes = self.borrowed_bytes = 0
        shutil.rmtree(self.folder, ignore_errors=True)


def _remove_dead(parent: str) -> None:
    """Remove the cache folders of processes that are gone (a killed reader's fetched files)."""
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            os.kill(int(name), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except PermissionError:
            pass                    # alive, another user's
