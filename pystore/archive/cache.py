"""The local cache of archived files: whole objects fetched by ranged reads, checked, and mapped read-only.

Reads below the local minimum run the store's own compiled scans over archived data, so an archived file is
served as what the scans read: a ``MappedFile``. ``mapped(record)`` fetches the object named by a manifest record
into ``<root>/archive.cache/<object name>`` in chunks (``read_at`` ranges, never the whole object in memory),
checks its size and CRC32 against the manifest (an object deleted or changed behind the store's back is a
``StoreCorruptedError`` naming it: never a wrong answer), renames it into place and maps it read-only.

The cache holds at most ``archive_cache_bytes`` of files, least recently used first out; a file some read
holds (``hold``) stays until it is let go, and the file asked for last is kept even when it alone is larger
(a commit-log file of 1 GiB with the default 256 MiB cache: the cache then holds that one file). Each process
has its own folder, ``archive.cache/<pid>``, emptied when it opens the store and when it closes it (nothing in
it is trusted across processes); folders of processes no longer alive are removed at open.

Thread-safety: one lock around fetching and eviction; a mapped file handed out is held by the caller's read.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import zlib
from collections import OrderedDict
from typing import Any

from pystore.archive.target import ArchiveError, ArchiveTarget
from pystore.errors import StoreCorruptedError
from pystore.log._mapped_file import MappedFile

log = logging.getLogger(__name__)

__all__ = ["ArchiveCache"]

_CHUNK = 8 << 20


class ArchiveCache:
    def __init__(self, target: ArchiveTarget, parent: str, capacity: int) -> None:
        self.target = target
        _remove_dead(parent)
        self.folder = os.path.join(parent, str(os.getpid()))
        self.capacity = capacity
        self._lock = threading.Lock()
        self._files: OrderedDict[str, MappedFile] = OrderedDict()
        self.bytes = 0
        self.fetched = 0               # objects fetched (misses)
        self.hits = 0
        shutil.rmtree(self.folder, ignore_errors=True)

    def mapped(self, record: dict[str, Any]) -> MappedFile:
        """The archived file of ``record`` (a visible manifest record), mapped and held: the caller releases it
        (``mf.release()``) when its read is done."""
        name = record["name"]
        with self._lock:
            mf = self._files.get(name)
            if mf is not None and mf.hold():
                self._files.move_to_end(name)
                self.hits += 1
                return mf
            mf = self._fetch(record)
            mf.hold()
            self._files[name] = mf
            self.bytes += mf.file_size
            self._evict(keep=name)
            return mf

    def _fetch(self, record: dict[str, Any]) -> MappedFile:
        name, size = record["name"], int(record["size"])
        path = os.path.join(self.folder, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = path + ".part"
        crc = 0
        try:
            with open(part, "wb") as f:
                pos = 0
                while pos < size:
                    n = min(_CHUNK, size - pos)
                    data = self.target.read(name, pos, n)
                    crc = zlib.crc32(data, crc)
                    f.write(data)
                    pos += n
        except ArchiveError as e:
            os.unlink(part)
            if self.target.size(name) is None:
                raise StoreCorruptedError(self.target.shown + "/" + name, 0,
                                          "the archived object the manifest lists is missing") from e
            if "asked for" in str(e):
                raise StoreCorruptedError(self.target.shown + "/" + name, 0,
                                          "the archived object is shorter than the manifest says") from e
            raise
        if "crc32" in record and crc != record["crc32"]:
            os.unlink(part)
            raise StoreCorruptedError(self.target.shown + "/" + name, 0, "the archived object changed behind the store's "
                                      "back (CRC32 %08x, the manifest says %08x)" % (crc, record["crc32"]))
        os.replace(part, path)
        mf = MappedFile(path, size, read_only=True)
        mf.set_positions(size)
        self.fetched += 1
        log.debug("fetched %s (%d bytes) from %s", name, size, self.target.shown)
        return mf

    def _evict(self, keep: str) -> None:
        for name in list(self._files):
            if self.bytes <= self.capacity:
                return
            mf = self._files[name]
            if name == keep or mf.ref_count > 1:
                continue                       # in use by a read: later
            del self._files[name]
            self.bytes -= mf.file_size
            mf.destroy(0, int(time.time() * 1000))

    def close(self) -> None:
        with self._lock:
            for mf in self._files.values():
                mf.close()
            self._files.clear()
            self.bytes = 0
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
