"""Durable names (``pystore.system.durable``): every file and folder the store creates, renames or removes is
followed by an fsync of its directory, once per file, never per put.

A power cut under strict POSIX metadata keeps a new file's name only if its directory was fsynced after
the file appeared: a store whose commit-log files were never named durably reopens empty. The recorder
below wraps ``os.fsync`` and, for every fsync of a directory, lists the directory just before the real
fsync: a name in that listing is durable once the fsync returns. That is the strict ordering check: a file
counts as durably named only if a directory fsync *after* its creation saw it.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import make_message

from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.queue.consume_queue import ConsumeQueue
from pystore.system.durable import PendingDirs, fsync_dir, make_dirs, make_dirs_durable, sync_dirs

CQ_UNITS = 50           # units per consume-queue file: a few hundred puts roll it many times


@dataclass
class DirSync:
    path: str
    names: frozenset[str]     # what the directory held when its fsync began
    thread: str


@dataclass
class FsyncRecorder:
    """Every ``os.fsync`` of a directory, in order, with the directory's listing at that moment."""

    syncs: list[DirSync] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mark(self) -> int:
        return len(self.syncs)

    def since(self, mark: int) -> list[DirSync]:
        return self.syncs[mark:]

    def durable(self, path: str | Path, since: int = 0) -> bool:
        """Was ``path``'s name in a listing of its folder synced (after ``since``)?"""
        path = os.path.abspath(path)
        folder, name = os.path.split(path)
        return any(s.path == folder and name in s.names for s in self.syncs[since:])

    def removal_durable(self, path: str | Path, since: int = 0) -> bool:
        """Was ``path``'s folder synced, after ``since``, while the name was gone?"""
        path = os.path.abspath(path)
        folder, name = os.path.split(path)
        return any(s.path == folder and name not in s.names for s in self.syncs[since:])


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[FsyncRecorder]:
    rec = FsyncRecorder()
    real = os.fsync

    def recording_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            path = os.readlink("/proc/self/fd/%d" % fd)
            with rec.lock:
                rec.syncs.append(DirSync(path, frozenset(os.listdir(path)), threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    yield rec


def _tree(root: Path) -> list[Path]:
    """Every file and folder under ``root`` (root excluded)."""
    out = []
    for folder, dirs, files in os.walk(root):
        out.extend(Path(folder) / n for n in dirs + files)
    return out


def _store_kwargs(**kw: object) -> dict[str, object]:
    kw.setdefault("mapped_file_size_consume_queue", CQ_UNITS * 20)
    return kw


# -- the store as a whole ------------------------------------------------------------------------------


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_every_name_in_a_store_is_durable(store_factory, fsyncs, tmp_path, flush):
    """The defect: only ``abort`` was synced into the root; commit-log files, queue folders and files,
    index files and the checkpoint were not, and a power cut left an empty store."""
    store = store_factory(flush_disk_type=flush, **_store_kwargs())
    n = 600
    for i in range(n):
        assert store.put_message(make_message(i, queue_id=i % 2, body_size=200)).is_ok()
    root = tmp_path / "store"
    assert len(os.listdir(root / "commitlog")) >= 3            # the log rolled
    assert len(os.listdir(root / "consumequeue" / "TopicTest" / "0")) >= 3      # and each queue
    store.schedule_message_service.persist()                    # config/delayOffset.json via rename
    store.shutdown()
    store_factory.expect_messages(n)
    assert fsyncs.durable(root)                                 # the root's own name, in tmp_path
    missing = [str(p.relative_to(root)) for p in _tree(root)
               if p.name != "lock" and not fsyncs.durable(p)]
    assert missing == []
    assert not (root / "abort").exists() and fsyncs.removal_durable(root / "abort")


def test_puts_do_no_directory_fsync(store_factory, fsyncs):
    """Puts never fsync a directory on their own thread, not even the ones that create a consume-queue or
    index file (under the put lock): the queue's next flush does; the commit log's next file is made by the
    allocation thread."""
    store = store_factory(flush_disk_type="SYNC_FLUSH", **_store_kwargs())
    store.put_message(make_message(0))
    store.flush()
    mark = fsyncs.mark()
    me = threading.current_thread().name
    for i in range(1, 400):                                     # rolls the log and the queue several times
        assert store.put_message(make_message(i, body_size=200)).is_ok()
    assert [s for s in fsyncs.since(mark) if s.thread == me] == []
    store_factory.expect_messages(400)


def test_puts_that_create_no_file_do_no_directory_fsync(store_factory, fsyncs):
    store = store_factory(**_store_kwargs(mapped_file_size_consume_queue=300 * 20))
    store.put_message(make_message(0))
    store.flush()
    alloc = store._allocate
    assert alloc is not None
    for req in list(alloc._requests.values()):                  # the pre-created next commit-log file
        req.done.wait(5)
    mark = fsyncs.mark()
    for i in range(1, 100):                                     # 100 small records: within the first files
        store.put_message(make_message(i))
    store.flush()
    assert fsyncs.since(mark) == []
    store_factory.expect_messages(100)


def test_a_new_queue_is_durable_after_its_flush_not_before(store_factory, fsyncs, tmp_path):
    """A queue created under the put lock leaves its folders pending; the flush syncs each new folder and
    the folder holding it, with the new file in the listing, before counting the unit flushed."""
    store = store_factory(**_store_kwargs())
    store.put_message(make_message(0))
    store.flush()
    qdir = tmp_path / "store" / "consumequeue" / "NewTopic" / "7"
    mark = fsyncs.mark()
    store.put_message(make_message(1, topic="NewTopic", queue_id=7))
    assert qdir.is_dir()
    cq = store._cq_store.find("NewTopic", 7)
    assert cq.queue.pending_dirs                                # pending, not synced under the put lock
    cq.flush(0)
    assert not cq.queue.pending_dirs
    for p in (qdir.parent, qdir, qdir / "00000000000000000000"):
        assert fsyncs.durable(p, mark), p
    store_factory.expect_messages(2)


def test_checkpoint_names_itself_once(tmp_path, fsyncs):
    from pystore.engine.checkpoint import StoreCheckpoint
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    cp.physic_msg_timestamp = 1
    cp.flush()
    assert fsyncs.durable(tmp_path / "checkpoint")
    mark = fsyncs.mark()
    for t in range(2, 5):
        cp.physic_msg_timestamp = t
        cp.flush()
    assert fsyncs.since(mark) == []
    assert StoreCheckpoint(str(tmp_path / "checkpoint")).physic_msg_timestamp == 4


# -- removals ----------------------------------------------------------------------------------------


def _queue_with_files(folder: Path, n: int, size: int = 4096) -> MappedFileQueue:
    q = MappedFileQueue(str(folder), size)
    for i in range(n):
        mf = q.get_last_mapped_file(0, True)
        assert mf is not None
        mf.set_positions(size)
    assert len(q) == n
    return q


def test_inline_creation_is_pending_until_flush(tmp_path, fsyncs):
    folder = tmp_path / "a" / "b"
    q = _queue_with_files(folder, 2)
    assert fsyncs.syncs == []
    q.flush(0)
    for p in (tmp_path / "a", folder, folder / "00000000000000000000", folder / "00000000000000004096"):
        assert fsyncs.durable(p), p
    q.close()


def test_recovery_truncation_removes_durably(tmp_path, fsyncs):
    q = _queue_with_files(tmp_path / "log", 3)
    q.flush(0)
    mark = fsyncs.mark()
    q.truncate_dirty_files(4096 + 100)
    gone = tmp_path / "log" / "00000000000000008192"
    assert not gone.exists() and fsyncs.removal_durable(gone, mark)
    mark = fsyncs.mark()
    q.delete_last_file()
    gone = tmp_path / "log" / "00000000000000004096"
    assert not gone.exists() and fsyncs.removal_durable(gone, mark)
    q.close()


def test_load_removes_an_empty_last_file_durably(tmp_path, fsyncs):
    q = _queue_with_files(tmp_path / "log", 1)
    q.close()
    empty = tmp_path / "log" / "00000000000000004096"
    empty.touch()
    q = MappedFileQueue(str(tmp_path / "log"), 4096)
    assert q.load()
    assert not empty.exists() and fsyncs.removal_durable(empty)
    q.close()


def test_cleaning_removes_durably(tmp_path, fsyncs):
    q = _queue_with_files(tmp_path / "log", 3)
    q.flush(0)
    mark = fsyncs.mark()
    assert q.delete_expired_file_by_time(0, 0, 0, True, now=1 << 50) == 2
    for name in ("00000000000000000000", "00000000000000004096"):
        assert fsyncs.removal_durable(tmp_path / "log" / name, mark)
    q.close()


def test_a_damaged_queue_is_discarded_durably(tmp_path, fsyncs):
    cq = ConsumeQueue("T", 0, str(tmp_path / "cq"), CQ_UNITS * 20)
    mf = cq.queue.get_last_mapped_file(0, True)
    assert mf is not None
    mark = fsyncs.mark()
    paths = cq.discard_files()
    assert paths
    for p in paths:
        assert fsyncs.removal_durable(p, mark)
    # the folders the discarded file list created but had not synced are synced too
    assert fsyncs.durable(tmp_path / "cq" / "T", mark) and fsyncs.durable(tmp_path / "cq" / "T" / "0", mark)


def test_destroyed_queue_folders_are_removed_durably(tmp_path, fsyncs):
    cq = ConsumeQueue("T", 0, str(tmp_path / "cq"), CQ_UNITS * 20)
    cq.queue.get_last_mapped_file(0, True)
    cq.flush(0)
    mark = fsyncs.mark()
    cq.destroy()
    assert not (tmp_path / "cq" / "T").exists()
    assert fsyncs.removal_durable(tmp_path / "cq" / "T", mark)
    assert fsyncs.removal_durable(tmp_path / "cq" / "T" / "0", mark)


# -- the helper ------------------------------------------------------------------------------------


def test_make_dirs_reports_what_changed(tmp_path):
    assert make_dirs(str(tmp_path)) == []
    changed = make_dirs(str(tmp_path / "a" / "b" / "c"))
    assert changed == [str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path / "a" / "b" / "c")]
    assert make_dirs(str(tmp_path / "a" / "b" / "d")) == [str(tmp_path / "a" / "b"), str(tmp_path / "a" / "b" / "d")]


def test_make_dirs_durable_syncs_new_folders_and_parent(tmp_path, fsyncs):
    make_dirs_durable(str(tmp_path / "x" / "y"))
    assert fsyncs.durable(tmp_path / "x") and fsyncs.durable(tmp_path / "x" / "y")
    assert {s.path for s in fsyncs.syncs} == {str(tmp_path), str(tmp_path / "x"), str(tmp_path / "x" / "y")}


def test_fsync_dir_skips_a_missing_folder_and_raises_io_errors(tmp_path, monkeypatch):
    fsync_dir(str(tmp_path / "missing"))

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        fsync_dir(str(tmp_path))
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(22, "Invalid argument")))
    fsync_dir(str(tmp_path))                    # a file system without directory fsync


def test_pending_dirs_keep_what_failed(tmp_path, monkeypatch):
    pending = PendingDirs()
    pending.add([str(tmp_path)])
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(OSError):
        pending.sync()
    assert pending
    monkeypatch.undo()
    pending.sync()
    assert not pending
    sync_dirs([])


def test_make_dirs_when_another_thread_made_the_folder_between_its_looks(tmp_path, monkeypatch):
    """The consumer-offset and delay-offset services both make config/: when the folder appears between
    make_dirs' first look and its walk up, it still names the parent to sync (it raised IndexError, which
    stopped the consumer-offset service)."""
    import pystore.system.durable as durable

    target = str(tmp_path / "config")
    real_isdir = os.path.isdir
    looks = []

    def isdir(p: str) -> bool:
        looks.append(p)
        if p == target and len(looks) == 1:
            os.mkdir(target)            # the other thread, right after this look
            return False
        return real_isdir(p)

    monkeypatch.setattr(durable.os.path, "isdir", isdir)
    assert make_dirs(target) == [str(tmp_path)]
    assert real_isdir(target)


def test_sync_tree_syncs_every_file_and_folder_under_its_paths(tmp_path, monkeypatch):
    """A takeover's sync (``sync_tree``): every regular file under the folders (and a file given itself) is
    fdatasynced, every folder fsynced; a path that does not exist is skipped."""
    from pystore.system import durable

    (tmp_path / "a" / "b").mkdir(parents=True)
    for p in ("a/1", "a/b/2", "c"):
        (tmp_path / p).write_bytes(b"x")
    synced_files: list[str] = []
    synced_dirs: list[str] = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync

    def fdatasync(fd):
        synced_files.append(os.readlink("/proc/self/fd/%d" % fd))
        real_fdatasync(fd)

    def fsync(fd):
        synced_dirs.append(os.readlink("/proc/self/fd/%d" % fd))
        real_fsync(fd)

    monkeypatch.setattr(durable.os, "fdatasync", fdatasync)
    monkeypatch.setattr(durable.os, "fsync", fsync)
    n = durable.sync_tree([str(tmp_path / "a"), str(tmp_path / "c"), str(tmp_path / "gone")])
    assert n == 3
    assert sorted(synced_files) == sorted(str(tmp_path / p) for p in ("a/1", "a/b/2", "c"))
    assert {str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path)} <= set(synced_dirs)
