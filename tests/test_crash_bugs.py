"""Failing tests for bugs the crash and corruption suites found (not committed; see the report).

Each test states what it expects and what pystore does instead; run them with

    PYTHONPATH=. python -m pytest -q -p no:cacheprovider tests/test_crash_bugs.py
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crash_writer as cw  # noqa: E402
import test_corruption as tc  # noqa: E402

from pystore import Message  # noqa: E402
from pystore.config import FlushDiskType  # noqa: E402
from pystore.errors import StoreCorruptedError, StoreError  # noqa: E402
from pystore.status import PutMessageStatus  # noqa: E402
from pystore.store import MessageStore  # noqa: E402

FS = tc.FILE_SIZE
WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_writer.py")
WORKTREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# 1 ----------------------------------------------------------------------------------------------
def test_read_only_open_with_empty_last_file(tmp_path):
    """A writer killed while the allocate service was creating a file (O_CREAT done, posix_fallocate not
    yet) leaves an empty last file; so does any live writer for a moment at every file creation.

    Expected: a read-only open ignores the empty file (as ``MappedFileQueue.refresh`` does) and sees every
    message. Actual: ``StoreError: the store at ... cannot be loaded`` — ``MappedFileQueue.load`` deletes
    an empty last file only when it is not read-only, and otherwise refuses the whole store."""
    root = tmp_path / "store"
    w = tc.build_store(root, messages=100)
    last = int(cw.log_files(str(root))[-1])
    open(os.path.join(cw.commitlog_dir(str(root)), "%020d" % (last + FS)), "wb").close()
    with tc.open_store(root, read_only=True) as ro:
        assert ro.get_max_phy_offset() == w.end
        for r in w.records:
            cw.check_message(ro.look_message_by_offset(r.offset), r.idx)


# 2 ----------------------------------------------------------------------------------------------
def test_truncated_file_error_names_the_file(tmp_path):
    """A commit-log file of the wrong size. Expected (DESIGN.md: a clear exception naming what is wrong;
    STYLE.md: messages name the file): the exception names the file, e.g. StoreCorruptedError with
    ``.path`` = the file and ``.offset`` = where it ends. Actual: ``StoreError('the store at <root> cannot
    be loaded (see the log for the file at fault)')`` — ``MappedFileQueue.load`` returns False after
    logging, and ``MessageStore.open`` raises a generic error."""
    root = tmp_path / "store"
    tc.build_store(root)
    victim = os.path.join(cw.commitlog_dir(str(root)), cw.log_files(str(root))[-1])
    os.truncate(victim, 5000)
    with pytest.raises(StoreError) as ei:
        tc.open_store(root)
    assert victim in str(ei.value) or getattr(ei.value, "path", None) == victim, str(ei.value)


# 3 ----------------------------------------------------------------------------------------------
def test_single_truncated_file_is_not_taken_as_the_geometry(tmp_path):
    """The only commit-log file of a store configured for 16 KiB files is cut to 3000 bytes (inside a
    record). Expected: the same refusal as when there are several files (an error naming the file), or
    at least a store that keeps its configured geometry. Actual: ``MessageStore._load`` takes the file's
    size as "the store's geometry" (``detect_file_size``), so the store silently becomes a store of
    3000-byte files: a put of a 5000-byte message returns MESSAGE_ILLEGAL and new files are named on a
    3000-byte grid that RocketMQ cannot read."""
    root = tmp_path / "store"
    with cw.open_store(root, FS) as store:
        for i in range(20):
            assert store.put_message(Message("T", cw.make_body(i, "T", 0, 200), keys="k%d" % i)).is_ok()
    only = os.path.join(cw.commitlog_dir(str(root)), "%020d" % 0)
    os.truncate(only, 3000)
    try:
        store = tc.open_store(root)
    except StoreError as e:
        assert only in str(e) or getattr(e, "path", None) == only, str(e)
        return
    try:
        r = store.put_message(Message("T", b"x" * 5000))
        assert r.status == PutMessageStatus.PUT_OK, "the store now has %d-byte files" % (
            store._commitlog.queue.mapped_file_size
        )
    finally:
        store.shutdown()


# 4 ----------------------------------------------------------------------------------------------
def test_read_only_view_does_not_widen_past_damage(tmp_path):
    """A read-only opener of a store with a bit flip in the body of a middle record: its recovery narrows
    the view to the damaged record (``recovery.process_offset``). Expected: the view stays there (the
    writer refuses this store with StoreCorruptedError; a reader must not serve the damaged record or what
    follows as if the log were whole). Actual: the first refresh (any ``get_max_phy_offset`` or a look at
    or past the end) re-lists the folder — ``MappedFileQueue.refresh`` re-maps the files recovery dropped
    and marks every non-last one full without scanning — and ``CommitLog.refresh_read_only`` rescans the
    damaged file with ``check_crc=False``: the max offset jumps to the end of the log and the record whose
    CRC fails is returned."""
    root = tmp_path / "store"
    w = tc.build_store(root, messages=400, seed=5)
    files = tc.files_with_records(w)
    v = tc.victim_in_file(w, files[-2], random.Random(4))
    tc.flip_bit(root, tc.body_offset(v) + 1, 0)
    with tc.open_store(root, read_only=True) as ro:
        assert ro.recovery.process_offset == v.offset
        assert ro.get_max_phy_offset() == v.offset
        assert ro.look_message_by_offset(v.offset) is None


# 5 ----------------------------------------------------------------------------------------------
def test_read_only_max_offset_of_a_live_writer(tmp_path):
    """A read-only reader follows a live writer. When, between two refreshes, the writer rolls into file N
    and the allocate service pre-creates N+1, ``MappedFileQueue.refresh`` maps N as a new, non-last file
    with every position at its end, and ``CommitLog.refresh_read_only`` skips it (only the last file is
    scanned). Expected: ``get_max_phy_offset()`` of the reader = the end of the whole records the writer
    has written. Actual: the reader claims N is full (max offset = N+1's start); looking at an offset
    between the real end and that max returns None, indistinguishable from a blank."""
    root = tmp_path / "store"
    writer = cw.open_store(root, FS, flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    try:
        for i in range(10):
            assert writer.put_message(Message("T", cw.make_body(i, "T", 0, 300), keys="k%d" % i)).is_ok()
        with tc.open_store(root, read_only=True) as ro:
            assert ro.get_max_phy_offset() == writer.get_max_phy_offset()
            i = 10
            while writer.get_max_phy_offset() < FS + 1000:  # roll into file 1
                assert writer.put_message(Message("T", cw.make_body(i, "T", 0, 300), keys="k%d" % i)).is_ok()
                i += 1
            nxt = os.path.join(cw.commitlog_dir(str(root)), "%020d" % (2 * FS))
            deadline = time.monotonic() + 10
            while not (os.path.exists(nxt) and os.path.getsize(nxt) == FS) and time.monotonic() < deadline:
                time.sleep(0.01)  # the allocate service pre-creates file 2
            assert os.path.getsize(nxt) == FS
            assert ro.get_max_phy_offset() == writer.get_max_phy_offset()
    finally:
        writer.shutdown()


# 6 ----------------------------------------------------------------------------------------------
def test_corruption_guard_after_a_crash(tmp_path):
    """A SYNC_FLUSH writer is SIGKILLed; later a bit flips in the body of a record in the middle of the log
    (inside normal recovery's window), followed by hundreds of messages whose puts returned PUT_OK.

    Expected (recovery.py's guard; issue 5: "Checkpoint ... updated by the flush services"; FORMAT.md §4.1:
    5.x writes it every second): StoreCorruptedError naming the file and offset, nothing dropped. Actual:
    the checkpoint file is written only by ``MessageStore.shutdown``; the flush services
    (``flush.py``: ``GroupCommitService.do_commit``, ``FlushRealTimeService._flush``) only set
    ``checkpoint.physic_msg_timestamp`` in memory and never call ``checkpoint.flush()``. After a kill the
    checkpoint on disk is absent (or as old as the last clean shutdown), the guard judges the following
    messages "not yet flushed when the writer stopped" and recovery silently truncates every acknowledged
    message after the damage."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    env = dict(os.environ, PYTHONPATH=WORKTREE)
    env.pop("PYSTORE_CRASHPOINT", None)
    p = subprocess.Popen(
        [
            sys.executable,
            WRITER,
            "write",
            str(root),
            "--ack",
            str(ack),
            "--file-size",
            str(FS),
            "--sizes",
            "small",
            "--batch-prob",
            "0",
        ],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert p.stdout.readline().startswith(b"READY")
        deadline = time.monotonic() + 30
        while len(cw.read_acks(str(ack))) < 600 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
    acks = cw.read_acks(str(ack))
    w = cw.walk_log(str(root))
    files = tc.files_with_records(w)
    assert len(files) >= 4
    v = tc.victim_in_file(w, files[-2], random.Random(6))
    tc.flip_bit(root, tc.body_offset(v) + 2, 4)
    after = [a for a in acks if a.offset > v.offset]
    assert len(after) > 50
    try:
        store = tc.open_store(root)
    except StoreCorruptedError as e:
        assert (e.path, e.offset) == (tc.file_of(root, v.offset), v.offset)
        return
    kept = store.get_max_phy_offset()
    store.shutdown()
    pytest.fail(
        "the store opened with its log cut at %d: %d acknowledged SYNC_FLUSH messages after the damage "
        "are gone" % (kept, len([a for a in after if a.offset >= kept]))
    )


# 7 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_missing_middle_file(tmp_path, abnormal):
    """A commit-log file in the middle of the log is missing (a gap in the 20-digit names: deleted by hand,
    lost by the file system). Expected: StoreCorruptedError naming the missing range (path of the missing
    file, its offset), from the open and from ``iter_commitlog(verify_crc=True)`` alike — its messages are
    gone. Actual: ``MappedFileQueue.check_self`` only logs "files ... are not N bytes apart"; recovery
    (``recovery.recover_commit_log``) moves from one file's blank to whatever file comes next in the list
    without checking that it starts where the previous one ended, so the store opens with every offset of
    the missing file silently unreadable; ``iter_commitlog`` skips them too."""
    from pystore.tools import iter_commitlog

    root = tmp_path / "store"
    w = tc.build_store(root, messages=300)
    names = cw.log_files(str(root))
    gone = os.path.join(cw.commitlog_dir(str(root)), names[-2])
    os.unlink(gone)
    if abnormal:
        tc.make_abnormal(root)
    lost = [r for r in w.records if int(names[-2]) <= r.offset < int(names[-2]) + FS]
    assert lost
    with pytest.raises(StoreCorruptedError) as ei:
        for _ in iter_commitlog(str(root), verify_crc=True):
            pass
    assert ei.value.offset == int(names[-2])
    with pytest.raises(StoreCorruptedError) as ei:
        tc.open_store(root).shutdown()
    assert ei.value.offset == int(names[-2])
