"""Offline reading of store folders: pystore's, or a RocketMQ broker's own ``store/`` (docs/api.md
"Offline reading").

Everything here maps files read-only, takes no lock and writes nothing, so it is safe on a live store:
it sees every whole record the writer has published (a record's size is written last) and stops at the
first zero size, or at a record still being written (a torn tail: damage with nothing valid after it).
File sizes come from the files themselves, never from a configuration. The files are listed when the
iteration starts; one the store's cleaning deletes before the iteration reaches it is passed over while
nothing has been yielded yet (the log simply starts later), and raises
:class:`~pystore.errors.FileCleanedError` after that (going on would skip its records in the middle).

* :func:`iter_commitlog` — every message of a commit-log folder (or one file, or a store root), in offset
  order. With ``verify_crc`` (the default) a record whose body CRC is wrong raises
  :class:`~pystore.errors.StoreCorruptedError` and is never yielded; so does any other damaged record.
* :func:`iter_consume_queue` — the ``(commit_log_offset, size, tags_code)`` units of one consume queue.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence

from pystore.errors import FileCleanedError, StoreCorruptedError
from pystore.format._codec import RECORD_END, decode_record
from pystore.log._file_names import is_file_name
from pystore.log._mapped_file import MappedFile
from pystore.log._records import RecordIterator, find_valid_record_after
from pystore.message._message_ext import MessageExt

__all__ = ["iter_commitlog", "iter_consume_queue", "commit_log_files", "decode_record"]

log = logging.getLogger(__name__)


def _data_files(folder: str) -> list[str]:
    names = sorted(n for n in os.listdir(folder) if is_file_name(n))
    return [os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n))]


def commit_log_files(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The commit-log files at ``path``: a single file, a ``commitlog`` folder, or a store root; or a list of
    folders (a multi-disk commit log, ``store_path_commit_log="a;b"``), merged in offset order."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        merged = [f for one in path for f in commit_log_files(one)]
        return sorted(merged, key=os.path.basename)
    p = os.fspath(path)
    if os.path.isfile(p):
        return [p]
    if not os.path.isdir(p):
        raise FileNotFoundError(p)
    sub = os.path.join(p, "commitlog")
    if os.path.isdir(sub) and not _data_files(p):
        p = sub
    return _data_files(p)


def iter_commitlog(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], start_offset: int = 0, verify_crc: bool = True
) -> Iterator[MessageExt]:
    """Every message stored at or after commit-log offset ``start_offset``, in offset order.

    ``path`` is a file, a commit-log folder, a store root, or a list of the folders of a multi-disk commit
    log. A file missing between two others is a hole, and a file whose end runs into the next file's start
    an overlap: ``StoreCorruptedError`` with ``verify_crc`` (only where they lie at or after
    ``start_offset``). ``start_offset`` must be a record boundary inside the log (or before its first file).
    A file that ends without its end-of-file blank while later files hold data is reported as corrupted
    when ``verify_crc`` is set, and skipped otherwise.

    A damaged record with nothing valid after it, in its file or a later one, is a torn tail (a record a
    writer or a replication transfer has not finished): the iteration ends there, as recovery cuts it.
    Damage followed by valid records raises ``StoreCorruptedError`` at the damaged record, and so does
    damage in a file shorter than the log's others (a truncated file, not one being written).

    Over a live store whose cleaning deletes the log's head meanwhile: a listed file deleted before the first
    message is yielded is passed over, so the iteration starts at the oldest file left (as it does when
    ``start_offset`` lies below the log's first file); one deleted after messages were yielded, when the
    iteration reaches it, raises ``FileCleanedError`` naming the file and its start offset, rather than going
    on with the next file and skipping its records or ending as if the log ended there. Restart from
    ``start_offset`` = the first file left to go on. A file deleted while the iteration reads it is read to its
    end (its mapping stays valid).
    """
    files = commit_log_files(path)
    full_size = _common_size(files)
    expected_next = -1
    yielded = False
    for idx, name in enumerate(files):
        mf = _open_listed(name, yielded)
        if mf is None:
            expected_next = -1  # cleaned, not a hole: the log now starts at a later file
            continue
        try:
            if mf.file_size == 0:
                continue
            if expected_next >= 0 and mf.file_from_offset != expected_next and mf.file_from_offset > start_offset:
                _gap(name, expected_next, mf.file_from_offset, verify_crc, files[idx - 1])
            expected_next = mf.file_from_offset + mf.file_size
            mf.set_positions(mf.file_size)
            end = mf.file_from_offset + mf.file_size
            if idx + 1 < len(files):
                # a grown file's bytes past the next file's start belong to that file's offsets
                end = min(end, max(mf.file_from_offset, int(os.path.basename(files[idx + 1]))))
            if end <= start_offset:
                continue
            pos = max(0, start_offset - mf.file_from_offset)
            while True:
                it = RecordIterator(mf, pos, verify_crc, end - mf.file_from_offset)
                try:
                    for msg in it:
                        yielded = True
                        yield msg
                    break
                except StoreCorruptedError as e:
                    damaged = e.offset - mf.file_from_offset
                    # a writer's file has its full size from the start: one cut short was truncated
                    if mf.file_size >= full_size and not _valid_after(files, idx, mf, damaged):
                        log.info("%s: %s at %d with nothing valid after it: a torn tail, the end of the data",
                                 name, e.reason, e.offset)
                        return
                    if not _whole_now(mf, damaged, verify_crc, end - mf.file_from_offset):
                        raise
                    # a live writer finished the record since: read on from it
                    pos = damaged
                finally:
                    it.close()
            if it.stop_reason == RECORD_END and idx + 1 < len(files) and _has_data(files[idx + 1], missing=False):
                if verify_crc:
                    raise StoreCorruptedError(name, mf.file_from_offset + it.position,
                                              "the file ends without its end-of-file blank, yet later files hold data")
                log.warning("%s ends at %d without its end-of-file blank; continuing with the next file", name,
                            it.position)
        finally:
            mf.close()
    return


def _common_size(files: list[str]) -> int:
    """The size most of the log's files have (0 when it cannot tell: fewer than two files)."""
    if len(files) < 2:
        return 0
    sizes: dict[int, int] = {}
    for f in files:
        try:
            n = os.path.getsize(f)
        except OSError:
            continue
        sizes[n] = sizes.get(n, 0) + 1
    return max(sizes, key=lambda n: (sizes[n], n)) if sizes else 0


def _gap(name: str, expected: int, actual: int, verify_crc: bool, previous: str) -> None:
    if expected < actual:
        # a file is missing between two others: the log has a hole (the store's open refuses it)
        if verify_crc:
            raise StoreCorruptedError(os.path.join(os.path.dirname(name), "%020d" % expected), expected,
                                      "this commit-log file is missing: the log has a hole up to %d" % actual)
        log.warning("commit-log files from %d to %d are missing; continuing at %s", expected, actual, name)
        return
    # the previous file is longer than the distance to this one: grown, or named wrongly
    if verify_crc:
        raise StoreCorruptedError(previous, actual, "the file runs to %d, past the start of the next file %s"
                                  % (expected, os.path.basename(name)))
    log.warning("%s runs to %d, past the start of %s; continuing with it", previous, expected, name)


def _valid_after(files: list[str], idx: int, mf: MappedFile, pos: int) -> bool:
    """Is there a whole valid record after the damage at ``pos`` of ``mf`` (``files[idx]``), in it or a later
    file? (From pos + 1: the record at pos may pass the per-record checks yet be torn.)"""
    if find_valid_record_after(mf, pos + 1) >= 0:
        return True
    return any(_has_data(later, anywhere=True, missing=False) for later in files[idx + 1:])


def _whole_now(mf: MappedFile, pos: int, verify_crc: bool, limit: int) -> bool:
    it = RecordIterator(mf, pos, verify_crc, limit)
    try:
        next(it)
        return True
    except (StopIteration, StoreCorruptedError):
        return False
    finally:
        it.close()


def _open_listed(name: str, yielded: bool) -> MappedFile | None:
    """A listed file mapped read-only; None when cleaning deleted it before anything was yielded (the
    iteration starts at the log's new head, as it does when ``start_offset`` lies below it), and
    ``FileCleanedError`` once records before it were yielded (going on would skip its records)."""
    try:
        return MappedFile(name, -1, read_only=True)
    except FileNotFoundError:
        if yielded:
            raise FileCleanedError(name, _start_offset(name)) from None
        log.info("%s was deleted (cleaned) before the iteration reached it; starting at the next file", name)
        return None


def _start_offset(name: str) -> int:
    base = os.path.basename(name)
    return int(base) if len(base) == 20 and base.isdigit() else 0


def _has_data(path: str, anywhere: bool = False, missing: bool = True) -> bool:
    """Does ``path`` start with a valid record (``anywhere``: hold one)? ``missing`` when it was deleted."""
    try:
        mf = MappedFile(path, -1, read_only=True)
    except FileNotFoundError:  # cleaned meanwhile
        return missing
    try:
        if mf.file_size <= 0:
            return False
        found = find_valid_record_after(mf, 0)
        return found >= 0 if anywhere else found == 0
    finally:
        mf.close()


def iter_consume_queue(path: str | os.PathLike[str]) -> Iterator[tuple[int, int, int]]:
    """The units of one consume queue (its folder ``consumequeue/<topic>/<queue_id>``, or one file):
    ``(commit_log_offset, size, tags_code)``, stopping at the first empty unit. Filler units written before
    a queue's first real unit (size 2**31-1) are skipped. A file cleaned meanwhile is passed over before the
    first unit is yielded and raises ``FileCleanedError`` after, as in :func:`iter_commitlog`."""
    from pystore.queue._units import iter_units  # the compiled consume-queue scan

    p = os.fspath(path)
    files = [p] if os.path.isfile(p) else _data_files(p)
    yielded = False
    for name in files:
        mf = _open_listed(name, yielded)
        if mf is None:
            continue
        try:
            if mf.file_size == 0:
                continue
            mf.set_positions(mf.file_size)
            done = False
            for unit in iter_units(mf):
                if unit is None:
                    done = True
                    break
                yielded = True
                yield unit
            if done:
                return
        finally:
            mf.close()

