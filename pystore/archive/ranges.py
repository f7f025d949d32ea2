"""Ranged reads of archived objects: sparse local copies filled range by range, and an LRU of the ranges.

An object whose manifest record carries per-range CRCs (``range_size``, ``range_crc32``: see
``pystore.archive.plan``) on an archive that is not ``file://`` is not fetched whole. Its local copy,
``<cache folder>/<object name>.<key>.r``, is a sparse file of the object's full size, mapped read-only once
(``RangedCopy.mf``: what the compiled scans read). A read holds the copy (``Held``), says which bytes it will
touch (``Held.need``: planned by ``pystore.archive.plan`` from what the scan reads first), and only then reads
the mapping. ``need`` fetches the missing ranges (consecutive ones in one ranged GET of up to ``_RUN`` ranges,
several GETs at once), checks each against its CRC32 before a byte of it is written (a mismatch is a
``StoreCorruptedError`` naming the object and the range's offset: an object changed behind the store's back is
never served), writes it into the copy with ``pwrite`` (a full disk is an error of the read, never a fault of
the mapping) and holds it for the read. A range another read is fetching is waited for, not fetched twice.

Unfetched parts of a copy read as zeros: they must never reach a reader. Hence: a read touches only ranges it
holds (its plan covers every byte the compiled checks read), a held range is never evicted, and an evicted
range's hole is punched only over whole blocks of its own (``plan.range_fields`` admits only ranges of whole
pages), so no neighbour's bytes are zeroed.

The present ranges of every copy form one LRU (``RangeStore``), counted in ``archive_cache_bytes`` with the
cache's whole copies: beyond it the least recently used unheld ranges are punched out of their copies
(``fallocate(FALLOC_FL_PUNCH_HOLE)``: their disk blocks are freed) and a copy left with no range and no reader
is unmapped and deleted. A sequential reader's next ranges are fetched in the background (``ahead``).

Thread-safety: the cache's one lock guards every table here; fetches and CRCs run outside it.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pystore.archive.plan import extend, ranges_of
from pystore.archive.target import ArchiveError, ArchiveTarget, ObjectReader
from pystore.errors import StoreCorruptedError
from pystore.format._codec import file_crc32
from pystore.log._mapped_file import MappedFile, punch_hole

log = logging.getLogger(__name__)

__all__ = ["Held", "RangeStore", "RangedCopy", "need_planned"]

#: ranges one GET may fetch together (consecutive missing ranges of one read: 64 MiB with 4 MiB ranges)
_RUN = 16
#: GETs of one read running at once
_PARALLEL = 4
#: ranges fetched ahead of a read that jumped (a read that follows on from the one before takes whole runs)
_AHEAD_MIN = 2


class RangedCopy:
    """The sparse local copy of one object (see the module doc). Its tables are guarded by the store's lock."""

    def __init__(self, key: str, name: str, shown: str, size: int, base: int, range_size: int, crcs: list[int],
                 path: str) -> None:
        self.key, self.name, self.shown, self.size = key, name, shown, size
        self.range_size, self.crcs, self.path = range_size, crcs, path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(self._fd, size)          # a hole of the object's size: no disk used until a range is in
            # a hole is punched by whole blocks: a range must be a whole number of them (else it is kept whole)
            self.punchable = range_size % max(4096, os.fstat(self._fd).st_blksize) == 0
            # its offset is the object's (the copy's own name would not say it)
            self.mf = MappedFile(path, size, read_only=True, from_offset=base)
        except BaseException:
            os.close(self._fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self.mf.set_positions(size)
        self.present: set[int] = set()
        self.holds: dict[int, int] = {}
        self.pending: dict[int, Future[None]] = {}
        self.users = 0                      # Held handles open on it
        self.next_read = -1                 # the range after the last read's (a read starting there is sequential)
        self.window = _AHEAD_MIN
        self._reader: ObjectReader | None = None
        self._reader_lock = threading.Lock()

    def length(self, i: int) -> int:
        return min(self.range_size, self.size - i * self.range_size)

    def idle(self) -> bool:
        return not self.present and not self.pending and not self.users

    def fetch(self, target: ArchiveTarget, first: int, count: int) -> int:
        """Fetch ranges ``[first, first + count)`` in one ranged read, check each against its CRC32 and write it
        into the copy; returns the bytes fetched. A range that fails its check is never present (nor readable)."""
        reader = self._open_reader(target)
        lo = first * self.range_size
        hi = min(self.size, (first + count) * self.range_size)
        try:
            if count == 1:
                data: Any = reader.read_at(lo, hi - lo)
                self._check(first, count, lo, data)
                view = memoryview(data).cast("B")
                done = 0
                while done < len(view):
                    done += os.pwrite(self._fd, view[done:], lo + done)
            else:
                self._fetch_mapped(reader, first, count, lo, hi)
        except FileNotFoundError:
            self._forget_reader()
            raise self._missing() from None
        except ArchiveError:
            if target.size(self.name) is None:
                self._forget_reader()
                raise self._missing() from None
            raise
        return hi - lo

    def _fetch_mapped(self, reader: ObjectReader, first: int, count: int, lo: int, hi: int) -> None:
        """A run of ranges read straight into the copy's pages (one copy of the bytes, as a whole download makes),
        their blocks allocated first (a full disk is an error here, never a fault of the mapping). Nothing reads
        them before they are checked: they are not present until then, and a failed check punches them out."""
        os.posix_fallocate(self._fd, lo, hi - lo)
        try:
            with mmap.mmap(self._fd, hi - lo, offset=lo) as m:
                view = memoryview(m)
                try:
                    reader.read_into(lo, view)
                    self._check(first, count, lo, view)
                finally:
                    view.release()
        except BaseException:
            self.punch_span(lo, hi - lo)
            raise

    def _check(self, first: int, count: int, lo: int, data: Any) -> None:
        for i in range(first, first + count):
            at = i * self.range_size - lo
            got = file_crc32(data[at:at + self.length(i)])
            if got != self.crcs[i]:
                raise StoreCorruptedError(self.shown, i * self.range_size,
                                          "the archived object changed behind the store's back (range of %d bytes "
                                          "at %d: CRC32 %08x, the manifest says %08x)"
                                          % (self.length(i), i * self.range_size, got, self.crcs[i]))

    def _open_reader(self, target: ArchiveTarget) -> ObjectReader:
        with self._reader_lock:
            if self._reader is None:
                try:
                    reader = target.reader(self.name)
                except FileNotFoundError:
                    raise self._missing() from None
                if reader.size != self.size:
                    reader.close()
                    raise StoreCorruptedError(self.shown, 0, "the archived object is %d bytes, the manifest says %d"
                                              % (reader.size, self.size))
                self._reader = reader
            return self._reader

    def _forget_reader(self) -> None:
        with self._reader_lock:
            if self._reader is not None:      # opened again next time (the object may come back, restored)
                self._reader.close()
                self._reader = None

    def _missing(self) -> StoreCorruptedError:
        return StoreCorruptedError(self.shown, 0, "the archived object the manifest lists is missing")

    def punch(self, i: int) -> None:
        """Give range ``i``'s blocks back (it is no longer present and no one holds it)."""
        self.punch_span(i * self.range_size, self.length(i))

    def punch_span(self, lo: int, n: int) -> None:
        if not self.punchable:
            return
        try:
            punch_hole(self._fd, lo, n)
        except OSError as e:
            # the bytes stay on disk until the copy is deleted; the read answers are unaffected
            log.warning("%s: cannot free an evicted range of the local copy: %s", self.path, e)

    def close(self) -> None:
        self.mf.close()
        os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None


class Held:
    """One read's hold on an archived file: ``mf`` is its mapping; ``need(lo, hi)`` makes bytes ``[lo, hi)`` of
    it readable (fetched, checked, held) until ``release``. For a file fetched whole (or a ``file://`` object)
    every byte is readable already and ``need`` does nothing."""

    def __init__(self, mf: MappedFile, store: RangeStore | None = None, copy: RangedCopy | None = None) -> None:
        self.mf = mf
        self._store = store
        self.copy = copy
        self.held: set[int] = set()
        self._released = False

    @property
    def range_size(self) -> int:
        """The range of a ranged copy, 0 for a whole one."""
        return 0 if self.copy is None else self.copy.range_size

    def ranges(self, lo: int, hi: int) -> range:
        """The ranges ``need(lo, hi)`` would hold (none for a whole copy)."""
        c = self.copy
        return range(0) if c is None else ranges_of(lo, hi, c.range_size, c.size)

    def need(self, lo: int, hi: int) -> None:
        if self._store is not None and self.copy is not None:
            self._store.need(self, ranges_of(lo, hi, self.copy.range_size, self.copy.size))

    def need_ranges(self, idxs: list[int] | range) -> None:
        """``need`` by range indices (in ascending order), as ``ranges`` gives them."""
        if self._store is not None and self.copy is not None and idxs:
            self._store.need(self, idxs)

    def ahead(self, first: int, count: int) -> None:
        """Fetch ranges ``[first, first + count)`` in the background (a sequential reader wants them next)."""
        if self._store is not None and self.copy is not None:
            self._store.ahead(self.copy, first, count)

    def read_ranges(self, first: int, last: int) -> int:
        """A read used ranges ``[first, last]``: fetch the ones after it in the background, as many as the
        copy's reads so far say (a sequential reader gets a growing window); returns how many were asked for
        past the copy's end (what the next file's read-ahead may take)."""
        if self._store is None or self.copy is None:
            return 0
        return self._store.read_ranges(self.copy, first, last)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._store is not None and self.copy is not None:
            self._store.release(self)
        else:
            self.mf.release()


def need_planned(files: list[Held], units: bytes, n: int, ranges: list[list[int]]) -> None:
    """Make readable what a scan of the first ``n`` of ``units`` reads of the archived commit-log ``files``, given
    the ranges ``pystore.archive.plan.plan_units`` planned for them: those ranges first, then the ones the records'
    own size fields reach beyond them (``extend``, which reads the ranges just fetched)."""
    for h, idxs in zip(files, ranges, strict=True):
        if idxs:
            h.need_ranges(idxs)
    for h, idxs in zip(files, ranges, strict=True):
        more = extend(units, n, h) if idxs else []
        if more:
            h.need_ranges(more)


class RangeStore:
    """The ranged copies of one cache and the LRU of their present ranges (see the module doc)."""

    def __init__(self, target: ArchiveTarget, folder: str, lock: threading.Lock,
                 evict: Callable[[], None], capacity: Callable[[], int]) -> None:
        self.target = target
        self.capacity = capacity         # the cache's bound (read-ahead stays within a quarter of it)
        self.folder = folder
        self._lock = lock
        self._evict_all = evict          # the cache's eviction (whole copies and ranges, one capacity)
        self._copies: dict[str, RangedCopy] = {}
        self._lru: OrderedDict[tuple[str, int], int] = OrderedDict()    # (copy key, range) -> bytes
        self._pool = ThreadPoolExecutor(max_workers=_PARALLEL, thread_name_prefix="pystore-archive-range")
        # one: read-aheads are fetched in the order asked for (the chunk a reader needs first comes first), the
        # GET of the next chunk while the reader decodes the one before
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pystore-archive-range-ahead")
        self._closed = False
        self.bytes = 0                   # of present ranges
        self.fetched_bytes = 0
        self.fetched_ranges = 0
        self.requests = 0                # ranged GETs made
        self.hits = 0                    # ranges a read found present

    def open(self, record: dict[str, Any], range_size: int, crcs: list[int]) -> Held:
        name, size = record["name"], int(record["size"])
        # the same name with other contents (a copy redone) is another copy: never a range of one read as the other's
        key = "%s.%08x" % (name, zlib.crc32(repr((size, range_size, crcs)).encode()))
        with self._lock:
            copy = self._copies.get(key)
            if copy is None:
                copy = RangedCopy(key, name, self.target.shown + "/" + name, size, int(record["base"]), range_size, crcs,
                                  os.path.join(self.folder, *key.split("/")) + ".r")
                self._copies[key] = copy
            copy.users += 1
        return Held(copy.mf, self, copy)

    def need(self, h: Held, idxs: list[int] | range) -> None:
        """Make ranges ``idxs`` of ``h``'s copy present and held by ``h``; returns only once every one of them
        is (else raises): what the read then touches is never a hole."""
        copy = h.copy
        assert copy is not None
        waited: BaseException | None = None
        for _ in range(3):                # a range another fetch failed to bring (a read-ahead's hiccup): again
            mine: list[int] = []
            waits: list[Future[None]] = []
            with self._lock:
                for i in idxs:
                    if not 0 <= i < len(copy.crcs):
                        raise ValueError("%s: no range %d (the object has %d)" % (copy.shown, i, len(copy.crcs)))
                    if i not in h.held:
                        h.held.add(i)
                        copy.holds[i] = copy.holds.get(i, 0) + 1  # held first: once present, never evicted under it
                    if i in copy.present:
                        self._lru.move_to_end((copy.key, i))
                        self.hits += 1
                    elif i in copy.pending:
                        waits.append(copy.pending[i])
                    else:
                        copy.pending[i] = Future()
                        mine.append(i)
            errors = self._fetch(copy, mine)
            waited = None
            for f in waits:
                try:
                    f.result()
                except BaseException as e:
                    waited = e
            if errors:
                raise errors[0]
            if mine:
                self._evict_all()
            if waited is None:
                with self._lock:
                    missing = [i for i in idxs if i not in copy.present]
                if missing:           # cannot be (held ranges stay): never let a read touch a hole
                    raise ArchiveError("%s: ranges %s not fetched" % (copy.shown, missing[:8]))
                return
        assert waited is not None
        raise waited

    def _fetch(self, copy: RangedCopy, idxs: list[int]) -> list[BaseException]:
        """Fetch ranges ``idxs`` (sorted, marked pending by the caller): runs of consecutive ranges, one GET
        each, several at once. Returns the errors (each run's ranges are settled either way)."""
        runs: list[tuple[int, int]] = []
        for i in idxs:
            if runs and runs[-1][0] + runs[-1][1] == i and runs[-1][1] < _RUN:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
        if len(runs) <= 1:
            return [e for e in (self._run(copy, *r) for r in runs) if e is not None]
        futures = [self._pool.submit(self._run, copy, *r) for r in runs]
        return [e for e in (f.result() for f in futures) if e is not None]

    def _run(self, copy: RangedCopy, first: int, count: int) -> BaseException | None:
        try:
            n = copy.fetch(self.target, first, count)
        except BaseException as e:
            with self._lock:
                futures = [copy.pending.pop(i) for i in range(first, first + count)]
            for f in futures:
                f.set_exception(e)
            return e
        with self._lock:
            self.requests += 1
            self.fetched_bytes += n
            self.fetched_ranges += count
            futures = []
            for i in range(first, first + count):
                copy.present.add(i)
                self._lru[(copy.key, i)] = copy.length(i)
                self.bytes += copy.length(i)
                futures.append(copy.pending.pop(i))
        for f in futures:
            f.set_result(None)
        log.debug("fetched ranges [%d, %d) of %s (%d bytes)", first, first + count, copy.shown, n)
        return None

    def read_ranges(self, copy: RangedCopy, first: int, last: int) -> int:
        with self._lock:
            # following on from the read before, or the first read of a copy starting at its start (a reader
            # going through a queue from its archived beginning; a lookup there fetches a chunk more)
            sequential = first in (copy.next_read - 1, copy.next_read) or (first == 0 and copy.next_read < 0)
            copy.next_read = last + 1
        if not sequential:
            self.ahead(copy, last + 1, _AHEAD_MIN)
            return max(0, last + 1 + _AHEAD_MIN - len(copy.crcs))
        # A sequential reader: the file in aligned chunks of ``run`` ranges, each one GET; what the read needs of
        # its chunk, the chunk's rest and the whole next one fetched in the background (asked for before the read
        # fetches: the read then waits for that one GET instead of making its own)
        run = max(1, min(_RUN, self.capacity() // 4 // copy.range_size))
        end = (last // run + 2) * run
        self.ahead(copy, first, end - first)
        return min(run, max(0, end - len(copy.crcs)))

    def ahead(self, copy: RangedCopy, first: int, count: int) -> None:
        with self._lock:
            if self._closed:
                return
            if first == 0 and copy.next_read < 0:
                copy.next_read = 0        # the next file of a sequential reader: its read from the start follows on
            want = range(max(first, 0), min(first + count, len(copy.crcs)))
            idxs = [i for i in want if i not in copy.present and i not in copy.pending]
            for i in idxs:
                copy.pending[i] = Future()
            if idxs:
                copy.users += 1           # kept open until the fetch is in
        if idxs:
            self._ahead.submit(self._ahead_run, copy, idxs)

    def _ahead_run(self, copy: RangedCopy, idxs: list[int]) -> None:
        try:
            for e in self._fetch(copy, idxs):
                log.debug("read-ahead of %s failed: %s", copy.shown, e)   # the read that wants it will say why
            self._evict_all()
        finally:
            with self._lock:
                copy.users -= 1
                self._drop_if_idle(copy)

    def release(self, h: Held) -> None:
        copy = h.copy
        assert copy is not None
        with self._lock:
            for i in h.held:
                left = copy.holds[i] - 1
                if left:
                    copy.holds[i] = left
                else:
                    del copy.holds[i]
            h.held.clear()
            copy.users -= 1
            self._drop_if_idle(copy)

    def evict(self, over: int) -> int:
        """Punch out least recently used unheld ranges until ``over`` bytes are freed (or none is left to free);
        returns the bytes freed. Called with the lock held."""
        freed = 0
        for key in list(self._lru):
            if freed >= over:
                break
            copy = self._copies[key[0]]
            i = key[1]
            if copy.holds.get(i, 0):
                continue                  # in a read's hands: later
            n = self._lru.pop(key)
            copy.present.discard(i)
            copy.punch(i)
            self.bytes -= n
            freed += n
            self._drop_if_idle(copy)
        return freed

    def _drop_if_idle(self, copy: RangedCopy) -> None:
        if copy.idle() and self._copies.get(copy.key) is copy:
            del self._copies[copy.key]
            copy.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._ahead.shutdown(wait=True, cancel_futures=True)
        self._pool.shutdown(wait=True)
        with self._lock:
            for copy in self._copies.values():
                for f in copy.pending.values():     # read-aheads cancelled: no one may wait for them
                    if not f.done():
                        f.set_exception(ArchiveError("%s: the archive cache was closed" % copy.shown))
                copy.pending.clear()
                copy.close()
            self._copies.clear()
            self._lru.clear()
            self.bytes = 0
