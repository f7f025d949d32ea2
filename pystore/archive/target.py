"""The archive tier's one door to object storage: put, read back by ranges, list and delete named objects
under a root given as a URI that ``pyarrow.fs`` opens (``s3://bucket/prefix``, ``file:///abs/path``, ...).

Names are ``/``-separated paths relative to the root (``commitlog/00000000001073741824``); every pyarrow error
becomes an :class:`ArchiveError` that names the archive, the object and the cause.

Atomic visibility: a reader never sees a partial object under its final name (but for a moment in one case).

* Local targets (``file://``) are written with plain ``os`` calls to ``<name>.part-<pid>-<random>`` beside the
  final name, fsynced, renamed over the final name and the folder fsynced (pyarrow syncs neither the file nor
  its folder). A failed write removes its ``.part`` file; one left by a crash is never listed.
* Object stores make an upload visible only when it completes, but pyarrow has no abort: a stream completes
  whatever it holds when it is closed, even by the garbage collector. So a failed upload is closed at once:
  after a failed part upload (pyarrow keeps that error for the close, as it does with its default background
  writes: ``background_writes=False`` and ``allow_delayed_open=True`` are refused) the close fails and nothing
  appears; after a failure of ours (the local file unreadable, an interrupt) the close completes a partial
  object, which is deleted at once (an older object of that name is gone too): visible for that moment only,
  so a reader trusts an object only once the manifest says its copy finished.
* Large uploads are flushed every ``_IN_FLIGHT`` bytes: pyarrow queues each 10 MiB part without waiting, and
  would otherwise hold most of a file in memory when the disk reads faster than the network sends.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from pystore.errors import StoreError
from pystore.system.durable import fsync_dir, make_dirs_durable

__all__ = ["ArchiveError", "ArchiveTarget", "ObjectReader", "open_target"]

log = logging.getLogger(__name__)

_PYARROW_ERRORS = (OSError, pa.ArrowException)
_PART = re.compile(r"\.part-\d+-[0-9a-f]+$")
# the bytes an upload may have queued in pyarrow before it waits for them (see the module doc)
_IN_FLIGHT = 64 << 20
# the bytes of one ranged read of a download: an object of up to this size is one GET (a server that reads
# the whole object for every range, as moto does, pays it once), a larger one several, ``parallel`` at a time
_RANGE = 64 << 20
# one in-kernel copy of a local put: large (the GIL is released for its length), bounded (a shutdown waits for one)
_KERNEL_COPY = 64 << 20
# copy_file_range's answers meaning "not here": copied by reads and writes instead
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF})
# see the module doc: these would let a failed or collected stream complete a partial object
_UNSAFE_S3 = {"background_writes": False, "allow_delayed_open": True}


class ArchiveError(StoreError):
    """The archive could not be opened, reached or written, or an object could not be read as asked."""


def _cause(e: BaseException) -> str:
    lines = str(e).strip().splitlines()   # some (hdfs's JVM search) run to dozens of lines
    return lines[0] if lines else type(e).__name__


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError("archive object name must be a non-empty string, not %r" % (name,))
    if name.startswith("/"):
        raise ValueError("archive object name %r is absolute: names are relative to the archive's root" % name)
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError("archive object name %r has an empty, '.' or '..' component" % name)
    return name


def _write_all(fd: int, data: bytes | memoryview) -> int:
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])
    return done


class ArchiveTarget:
    """Named objects under one root of one file system; made by :func:`open_target`."""

    def __init__(self, uri: str, fs: pafs.FileSystem, root: str, local: bool) -> None:
        self.uri = uri
        self.fs = fs
        self.root = root            # in the file system's own terms: "/abs/path", "bucket/prefix"
        self._local = local
        self._shown = re.sub(r"//[^/@]*@", "//***@", uri)   # credentials may ride in the URI's user part

    def __repr__(self) -> str:
        return "ArchiveTarget(%r)" % self._shown

    def local_path(self, name: str) -> str | None:
        """Where object ``name`` lies on this machine's file system (a ``file://`` archive), else None: a reader
        maps such an object where it is instead of copying it."""
        return self._path(name) if self._local else None

    @property
    def shown(self) -> str:
        """The URI as logs and errors show it: credentials in its user part masked."""
        return self._shown

    def _path(self, name: str) -> str:
        return "%s/%s" % (self.root.rstrip("/"), _check_name(name)) if self.root else _check_name(name)

    def _error(self, name: str | None, what: str, cause: BaseException | str) -> ArchiveError:
        where = "archive %s" % self._shown if name is None else "archive %s, object %s" % (self._shown, name)
        return ArchiveError("%s: %s: %s" % (where, what, cause if isinstance(cause, str) else _cause(cause)))

    def put(self, name: str, data: bytes | memoryview) -> None:
        """Write ``data`` as object ``name`` (replacing it), visible only once whole."""
        path = self._path(name)
        if self._local:
            self._put_local(name, path, lambda fd: _write_all(fd, data))
        else:
            # a buffer pyarrow refuses must fail before the stream opens, not leave it to complete empty
            self._upload(name, path, [pa.py_buffer(data)])
        log.debug("%s: put %s (%d bytes)", self._shown, name, memoryview(data).nbytes)

    def put_file(self, name: str, path: str, chunk: int = 8 << 20) -> int:
        """Copy the local file ``path`` as object ``name``, ``chunk`` bytes a read; returns its size."""
        target = self._path(name)
        try:
            src = open(path, "rb", buffering=0)
        except OSError as e:
            raise self._error(name, "cannot read local file %s" % path, e) from e
        with src:
            if self._local:
                size = self._put_local(name, target, lambda fd: self._copy_local(name, src, fd, chunk))
            else:
                size = self._upload(name, target, self._chunks(name, src, chunk))
        log.debug("%s: put %s from %s (%d bytes)", self._shown, name, path, size)
        return size

    def _copy_local(self, name: str, src: Any, fd: int, chunk: int) -> int:
        """Copy the open file ``src`` whole into ``fd``: in the kernel (``copy_file_range``: no bytes through this
        process, no GIL held meanwhile), or by reads and writes where the kernel cannot (another file system on
        an older kernel, a file system without it)."""
        size = 0
        if hasattr(os, "copy_file_range"):
            try:
                while True:
                    n = os.copy_file_range(src.fileno(), fd, _KERNEL_COPY)
                    if n == 0:
                        return size
                    size += n
            except OSError as e:
                if e.errno not in _NO_KERNEL_COPY or size:
                    raise self._error(name, "cannot copy local file %s" % src.name, e) from e
        return sum(_write_all(fd, c) for c in self._chunks(name, src, chunk))

    def _chunks(self, name: str, src: Any, chunk: int) -> Iterator[bytes]:
        while True:
            try:
                data = src.read(chunk)
            except OSError as e:    # ours, not the stream's: _upload must not take it for a pyarrow error
                raise self._error(name, "cannot read local file %s" % src.name, e) from e
            if not data:
                return
            yield data

    def _put_local(self, name: str, path: str, fill: Any) -> int:
        folder = os.path.dirname(path)
        part = "%s.part-%d-%s" % (path, os.getpid(), secrets.token_hex(4))
        try:
            self._makedirs(folder)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                size: int = fill(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(part, path)
            fsync_dir(folder)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(part)
            if isinstance(e, OSError):
                raise self._error(name, "cannot write", e) from e
            raise
        return size

    def _makedirs(self, folder: str) -> None:
        if not os.path.isdir(folder):
            parent = os.path.dirname(folder)
            self._makedirs(parent)
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
            fsync_dir(parent)      # the new folder's entry must survive a power cut with the file in it

    def _upload(self, name: str, path: str, chunks: Iterable[Any]) -> int:
        try:
            stream = self.fs.open_output_stream(path)
        except _PYARROW_ERRORS as e:
            raise self._error(name, "cannot write", e) from e
        size = unflushed = 0
        try:
            for data in chunks:
                stream.write(data)
                size += len(data)
                unflushed += len(data)
                if unflushed >= _IN_FLIGHT:
                    stream.flush()
                    unflushed = 0
            stream.close()
        except BaseException as e:
            self._discard(name, path, stream)
            if isinstance(e, _PYARROW_ERRORS):
                raise self._error(name, "cannot write", e) from e
            raise
        return size

    def _discard(self, name: str, path: str, stream: Any) -> None:
        # pyarrow has no abort, and a stream left to the collector would close (complete) itself there: close it
        # now. After a failed part upload the close fails too and nothing appears; after any other failure
        # (ours) it completes a partial object, which must go
        if stream.closed:
            return                  # its own close failed: it completed nothing
        try:
            stream.close()
        except _PYARROW_ERRORS:
            return
        log.warning("%s: the upload of %s failed midway: deleting the partial object its close completed",
                    self._shown, name)
        try:
            self.fs.delete_file(path)
        except _PYARROW_ERRORS as e:
            log.error("%s: the partial object %s stays: cannot delete it: %s", self._shown, name, _cause(e))

    def read(self, name: str, offset: int = 0, length: int = -1) -> bytes:
        """Bytes ``[offset, offset + length)`` of object ``name`` (to its end when ``length`` is -1)."""
        if offset < 0 or length < -1:
            raise ValueError("bad range: offset %d, length %d" % (offset, length))
        path = self._path(name)
        try:
            with self.fs.open_input_file(path) as f:
                size = f.size()
                end = offset + length if length >= 0 else max(size, offset)
                if end > size or offset > size:
                    want = "[%d, %d)" % (offset, end) if length >= 0 else "[%d, end)" % offset
                    raise self._error(name, "short read", "object %s is %d bytes, asked for %s" % (name, size, want))
                data: bytes = f.read_at(end - offset, offset)
        except FileNotFoundError as e:
            raise self._error(name, "cannot read", "no such object") from e
        except _PYARROW_ERRORS as e:
            raise self._error(name, "cannot read", e) from e
        if len(data) != end - offset:   # it shrank between the size and the read
            raise self._error(name, "short read", "object %s gave %d bytes at %d, asked for [%d, %d)" % (
                name, len(data), offset, offset, end))
        return data

    def reader(self, name: str) -> ObjectReader:
        """Object ``name`` opened for ranged reads (one stat now, one ranged GET per ``read_at``); raises
        ``FileNotFoundError`` when there is no such object."""
        path = self._path(name)
        try:
            f = self.fs.open_input_file(path)
            size = int(f.size())
        except FileNotFoundError:
            raise
        except _PYARROW_ERRORS as e:
            raise self._error(name, "cannot read", e) from e
        return ObjectReader(self, name, f, size)

    def download(self, name: str, path: str, chunk: int = _RANGE, parallel: int = 4) -> int:
        """Write object ``name`` whole into the local file ``path``: ranged reads of ``chunk`` bytes, ``parallel``
        at a time (each on its own stream), each read straight into a shared mapping of the file at its place, so
        the bytes are copied once, from pyarrow's buffer into the file's pages. The file's blocks are allocated
        before (a full disk is an error here, never a fault of the mapping). Returns the object's size."""
        try:
            with self.fs.open_input_file(self._path(name)) as src:
                size = int(src.size())
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    if size:
                        os.posix_fallocate(fd, 0, size)
                        with mmap.mmap(fd, size) as m:
                            view = memoryview(m)
                            try:
                                self._ranges_into(name, src, view, chunk, parallel)
                            finally:
                                view.release()
                finally:
                    os.close(fd)
        except FileNotFoundError as e:
            raise self._error(name, "cannot read", "no such object") from e
        except _PYARROW_ERRORS as e:
            raise self._error(name, "cannot read", e) from e
        return size

    def _ranges_into(self, name: str, src: Any, view: memoryview, chunk: int, parallel: int) -> None:
        size = len(view)
        starts = range(0, size, max(1, chunk))

        def one(at: int, stream: Any) -> None:
            want = min(chunk, size - at)
            stream.seek(at)
            got = 0
            while got < want:                     # a stream may hand a range over in several reads
                n = stream.readinto(view[at + got:at + want])
                if not n:
                    raise self._error(name, "short read", "object %s gave %d bytes at %d, asked for %d" % (
                        name, got, at, want))
                got += n

        def own(at: int) -> None:
            with self.fs.open_input_file(self._path(name)) as stream:
                one(at, stream)

        if len(starts) == 1 or parallel <= 1:
            for at in starts:
                one(at, src)
            return
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            for f in [pool.submit(own, at) for at in starts]:
                f.result()

    def local_stamp(self, name: str) -> list[int] | None:
        """For a ``file://`` archive, what says the object is still the file it was: its inode, size, modification
        and change times (no one can set a change time back: any write, rename or ``utime`` moves it); None for
        other archives or when the object is missing."""
        local = self.local_path(name)
        if local is None:
            return None
        try:
            st = os.stat(local)
        except FileNotFoundError:
            return None
        return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]

    def size(self, name: str) -> int | None:
        """The object's size, or None when there is no such object."""
        try:
            info = self.fs.get_file_info(self._path(name))
        except _PYARROW_ERRORS as e:
            raise self._error(name, "cannot stat", e) from e
        return info.size if info.type == pafs.FileType.File else None

    def list(self, folder: str) -> list[str]:
        """Names of the objects under ``folder`` (``""``: the whole archive), sorted; [] when none."""
        folder = folder.strip("/")
        base = self._path(folder) if folder else self.root
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except _PYARROW_ERRORS as e:
            raise self._error(folder or None, "cannot list", e) from e
        skip = len(self.root.rstrip("/")) + 1 if self.root else 0
        return sorted(i.path[skip:] for i in infos if i.type == pafs.FileType.File and not _PART.search(i.path))

    def delete(self, name: str) -> None:
        """Remove object ``name``; nothing happens when it does not exist."""
        try:
            self.fs.delete_file(self._path(name))
        except FileNotFoundError:
            return
        except _PYARROW_ERRORS as e:
            raise self._error(name, "cannot delete", e) from e

    def check(self) -> None:
        """Raise ArchiveError unless a probe object can be written, seen and deleted."""
        probe = ".pystore-probe-%d" % os.getpid()
        body = b"pystore archive probe\n"
        try:
            self.put(probe, body)
            seen = self.size(probe)
            self.delete(probe)
        except ArchiveError as e:
            why = "not usable"
            if isinstance(self.fs, pafs.S3FileSystem):
                # asked only now: credentials that may write need not be allowed to look at the bucket
                bucket = self.root.split("/", 1)[0]
                with contextlib.suppress(*_PYARROW_ERRORS):
                    if self.fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                        why += " (bucket %r does not exist)" % bucket
            raise self._error(None, why, str(e)) from e
        if seen != len(body):
            raise self._error(probe, "not usable", "the probe object reads back as %s bytes, not %d" % (seen, len(body)))


class ObjectReader:
    """One object open for ranged reads (``ArchiveTarget.reader``): ``size`` as it was when opened, and
    ``read_at``, safe from several threads at once (each call is its own ranged request)."""

    def __init__(self, target: ArchiveTarget, name: str, f: Any, size: int) -> None:
        self._target = target
        self.name = name
        self._f = f
        self.size = size

    def read_at(self, offset: int, length: int) -> bytes | memoryview:
        """Bytes ``[offset, offset + length)``: all of them, else ``ArchiveError`` (``FileNotFoundError`` when the
        object is gone)."""
        try:
            data = self._f.read_at(length, offset)
        except FileNotFoundError:
            raise
        except _PYARROW_ERRORS as e:
            raise self._target._error(self.name, "cannot read", e) from e
        if len(data) != length:
            raise self._target._error(self.name, "short read", "gave %d bytes at %d, asked for %d"
                                      % (len(data), offset, length))
        return memoryview(data)

    def read_into(self, offset: int, view: memoryview) -> None:
        """Fill ``view`` with the bytes from ``offset`` straight from the stream (no buffer of pyarrow's in
        between): on a stream of its own (a shared one's seek and read are not safe from several threads)."""
        path = self._target._path(self.name)
        try:
            with self._target.fs.open_input_file(path) as stream:
                stream.seek(offset)
                got = 0
                while got < len(view):            # a stream may hand a range over in several reads
                    n = stream.readinto(view[got:])
                    if not n:
                        raise self._target._error(self.name, "short read", "gave %d bytes at %d, asked for %d"
                                                  % (got, offset, len(view)))
                    got += n
        except FileNotFoundError:
            raise
        except _PYARROW_ERRORS as e:
            raise self._target._error(self.name, "cannot read", e) from e

    def close(self) -> None:
        with contextlib.suppress(*_PYARROW_ERRORS):
            self._f.close()


def _construct(uri: str, cls: Any, options: dict[str, Any]) -> pafs.FileSystem:
    if cls is pafs.S3FileSystem:
        unsafe = sorted(k for k, v in _UNSAFE_S3.items() if k in options and bool(options[k]) == v)
        if unsafe:
            raise ArchiveError("archive %s: options %s are not supported: a failed upload could then complete "
                               "a partial object" % (uri, ", ".join("%s=%r" % (k, options[k]) for k in unsafe)))
    unknown: list[str] = []
    known = dict(options)
    while True:
        try:
            fs = cls(**known)
            break
        except TypeError as e:
            # pyarrow's classes are compiled (no signature): each try names one unknown keyword
            m = re.search(r"unexpected keyword argument '(\w+)'", str(e))
            if m is None or m.group(1) not in known:
                raise ArchiveError("archive %s: bad options for %s: %s" % (uri, cls.__name__, e)) from e
            unknown.append(m.group(1))
            del known[m.group(1)]
        except (ValueError, pa.ArrowException) as e:
            raise ArchiveError("archive %s: bad options for %s: %s" % (uri, cls.__name__, _cause(e))) from e
    if unknown:
        raise ArchiveError("archive %s: unknown option(s) for %s: %s" % (uri, cls.__name__, ", ".join(sorted(unknown))))
    return fs


def open_target(uri: str, options: dict[str, Any] | None = None) -> ArchiveTarget:
    """The archive at ``uri``: ``file:///abs/path`` (created if missing), ``s3://bucket/prefix`` (``options``
    are ``pyarrow.fs.S3FileSystem``'s keywords, else the URI and the environment configure it), or any other
    scheme ``pyarrow.fs.FileSystem.from_uri`` knows (``options`` then go to its file system's class)."""
    uri = uri.rstrip("/")
    shown = re.sub(r"//[^/@]*@", "//***@", uri)
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.lower()
    if not scheme:
        raise ArchiveError("archive %r: not a URI (no scheme): use file:///absolute/path or s3://bucket/prefix" % shown)
    if scheme in ("file", "local"):
        path = urllib.parse.unquote(parts.path)
        if parts.netloc not in ("", "localhost") or not path.startswith("/"):
            raise ArchiveError("archive %s: a %s URI needs an absolute local path (file:///absolute/path)" % (shown, scheme))
        fs = _construct(shown, pafs.LocalFileSystem, options) if options else pafs.LocalFileSystem()
        root = os.path.normpath(path)
        try:
            # its folders synced into their parents: under bare POSIX metadata (no journal) a power cut otherwise
            # takes back a new archive folder with every object and manifest record in it, while cleaning has
            # deleted the local copies (the power-cut round of issue 37: every archived message lost)
            make_dirs_durable(root)
        except OSError as e:
            raise ArchiveError("archive %s: cannot create its folder %s: %s" % (shown, root, _cause(e))) from e
        return ArchiveTarget(uri, fs, root, local=True)
    if scheme == "s3" and options:
        bucket = parts.netloc.rpartition("@")[2]
        if parts.query or "@" in parts.netloc:
            raise ArchiveError("archive %s: give settings in the URI or in options, not both" % shown)
        if not bucket:
            raise ArchiveError("archive %s: no bucket (s3://bucket/prefix)" % shown)
        return ArchiveTarget(uri, _construct(shown, pafs.S3FileSystem, options), (bucket + parts.path).rstrip("/"),
                             local=False)
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError, pa.ArrowException) as e:
        raise ArchiveError("archive %s: cannot open: %s" % (shown, _cause(e))) from e
    if options:
        fs = _construct(shown, type(fs), options)
    if isinstance(fs, pafs.S3FileSystem) and not root:
        raise ArchiveError("archive %s: no bucket (s3://bucket/prefix)" % shown)
    return ArchiveTarget(uri, fs, root.rstrip("/"), local=False)
