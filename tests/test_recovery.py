"""``pystore.engine.recovery.recover_commit_log`` on its own: where the walk starts (normal: the third-last file;
       abnormal: the newest file not newer than the checkpoint), where it stops, what it cuts, and its guard
against truncating durable data.

The commit log here is a store's, written through the public API with a clock that moves 1 s a message (so
each file's first store time is known), shut down cleanly, then reopened as bare pieces (the file queue, the
commit log, the checkpoint) so the walk runs without the store around it. Recovery through whole stores,
crashes and damage of every kind is in test_crash.py and test_corruption.py."""

from __future__ import annotations

import logging
import os
import struct

import crash_writer as cw
import pytest
from conftest import FakeClock

from pystore import Message
from pystore.config import StoreConfig
from pystore.engine.checkpoint import StoreCheckpoint
from pystore.engine.recovery import recover_commit_log
from pystore.engine.store import MessageStore
from pystore.errors import StoreCorruptedError
from pystore.log.commitlog import CommitLog
from pystore.log.mapped_file_queue import MappedFileQueue

FILE_SIZE = 8192
START = 1_700_000_000_000
STEP = 1000


@pytest.fixture
def log_root(tmp_path):
    """A cleanly shut down store of 250 messages of ~200 bytes over several 8 KiB commit-log files."""
    root = tmp_path / "store"
    clock = FakeClock(START)
    with MessageStore.open(str(root), mapped_file_size_commit_log=FILE_SIZE, clock=clock) as store:
        for i in range(250):
            clock.advance(STEP)
            assert store.put_message(Message("T", b"x" * 100 + b"%04d" % i, queue_id=i % 2)).is_ok()
    return root


def pieces(root, read_only: bool = False, **overrides):
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE_SIZE, **overrides)
    queue = MappedFileQueue(cfg.commit_log_paths(), FILE_SIZE, read_only=read_only)
    assert queue.load()
    checkpoint = StoreCheckpoint(cfg.checkpoint_path(), read_only=read_only, clock=FakeClock(START + 10**9))
    return cfg, CommitLog(cfg, queue), checkpoint


def stored_at(i: int) -> int:
    """The store time of the log's ``i``-th message (the clock moved ``STEP`` before each put)."""
    return START + STEP * (i + 1)


def set_checkpoint(root, physic: int, logics: int, index: int = 0) -> None:
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.write(struct.pack(">qqq", physic, logics, index))


def test_normal_recovery_walks_from_the_third_last_file(log_root):
    w = cw.walk_log(str(log_root))
    names = cw.log_files(str(log_root))
    assert len(names) >= 4
    cfg, cl, cp = pieces(log_root)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=False)
        start = int(names[-3])
        assert (r.abnormal, r.start_file.rsplit("/", 1)[1], r.dispatch_from) == (False, names[-3], start)
        assert r.process_offset == w.end
        assert r.records == sum(1 for rec in w.records if rec.offset >= start)
        assert r.damage is None and r.follows == -1
        assert r.walked == {("T", 0): r.walked[("T", 0)], ("T", 1): r.walked[("T", 1)]}
    finally:
        cl.queue.close()


def test_abnormal_recovery_starts_at_the_newest_file_not_newer_than_the_checkpoint(log_root):
    w = cw.walk_log(str(log_root))
    names = cw.log_files(str(log_root))
    first_times = {n: next(stored_at(i) for i, rec in enumerate(w.records) if rec.offset >= int(n))
                   for n in names}
    target = names[2]
    # min_timestamp = min(physic, logics) - 3000: exactly the target file's first message time
    set_checkpoint(log_root, first_times[target] + 3000, first_times[target] + 5000)
    cfg, cl, cp = pieces(log_root)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=True)
        assert r.start_file.rsplit("/", 1)[1] == target and r.dispatch_from == int(target)
        assert r.process_offset == w.end
    finally:
        cl.queue.close()
    # one millisecond earlier and the file before it is the start
    set_checkpoint(log_root, first_times[target] + 2999, first_times[target] + 5000)
    cfg, cl, cp = pieces(log_root)
    try:
        assert recover_commit_log(cl, cp, cfg, abnormal=True).start_file.rsplit("/", 1)[1] == names[1]
    finally:
        cl.queue.close()


def test_abnormal_recovery_with_a_safe_index_starts_no_later_than_the_index_time(log_root):
    w = cw.walk_log(str(log_root))
    names = cw.log_files(str(log_root))
    late = START + STEP * (len(w.records) + 10)
    set_checkpoint(log_root, late, late, index=0)
    cfg, cl, cp = pieces(log_root, message_index_safe=True)
    try:
        assert recover_commit_log(cl, cp, cfg, abnormal=True).start_file.rsplit("/", 1)[1] == names[0]
    finally:
        cl.queue.close()
    cfg, cl, cp = pieces(log_root)
    try:
        assert recover_commit_log(cl, cp, cfg, abnormal=True).start_file.rsplit("/", 1)[1] == names[-1]
    finally:
        cl.queue.close()


def test_a_zeroed_checkpoint_makes_an_abnormal_walk_start_from_the_first_file(log_root):
    set_checkpoint(log_root, 0, 0)
    cfg, cl, cp = pieces(log_root)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=True)
        assert r.dispatch_from == 0 and r.records == len(cw.walk_log(str(log_root)).records)
    finally:
        cl.queue.close()


def _zero_record(root, rec: cw.RawRecord) -> None:
    path = os.path.join(cw.commitlog_dir(str(root)), "%020d" % (rec.offset - rec.offset % FILE_SIZE))
    with open(path, "r+b") as f:
        f.seek(rec.offset % FILE_SIZE)
        f.write(bytes(rec.size))


def test_torn_tail_is_cut_and_zeroed(log_root):
    w = cw.walk_log(str(log_root))
    last = w.records[-1]
    path = os.path.join(cw.commitlog_dir(str(log_root)), "%020d" % (last.offset - last.offset % FILE_SIZE))
    with open(path, "r+b") as f:
        f.seek(last.offset % FILE_SIZE + last.size // 2)
        f.write(bytes(last.size - last.size // 2))          # its second half never reached the disk
    cfg, cl, cp = pieces(log_root)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=True)
        assert r.process_offset == last.offset and r.follows == -1 and r.damage is not None
    finally:
        cl.queue.close()
    with open(path, "rb") as f:
        f.seek(last.offset % FILE_SIZE)
        assert f.read(last.size) == bytes(last.size)


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "reader"])
def test_damage_before_durable_records_is_refused_not_cut(log_root, read_only):
    w = cw.walk_log(str(log_root))
    victim = w.records[-3]
    _zero_record(log_root, victim)
    before = cw.log_digest(str(log_root))
    cfg, cl, cp = pieces(log_root, read_only=read_only)
    try:
        with pytest.raises(StoreCorruptedError) as ei:
            recover_commit_log(cl, cp, cfg, abnormal=not read_only, read_only=read_only)
        assert ei.value.offset == victim.offset
        assert ei.value.path.endswith("%020d" % (victim.offset - victim.offset % FILE_SIZE))
    finally:
        cl.queue.close()
    assert cw.log_digest(str(log_root)) == before


def test_damage_before_records_newer_than_the_checkpoint_is_a_crash_and_is_cut(log_root, caplog):
    """The records after the damage were never flushed by the checkpoint's account: RocketMQ's cut."""
    w = cw.walk_log(str(log_root))
    victim = w.records[-3]
    _zero_record(log_root, victim)
    set_checkpoint(log_root, stored_at(len(w.records) - 3) - 1, START)
    cfg, cl, cp = pieces(log_root)
    try:
        with caplog.at_level(logging.WARNING, logger="pystore.engine.recovery"):
            r = recover_commit_log(cl, cp, cfg, abnormal=True)
        assert r.process_offset == victim.offset
        assert r.follows == w.records[-2].offset
        assert "dropped" in caplog.text
    finally:
        cl.queue.close()
    assert [rec.offset for rec in cw.walk_log(str(log_root)).records] == [rec.offset for rec in w.records[:-3]]


def test_recover_truncate_corrupted_forces_the_cut(log_root):
    w = cw.walk_log(str(log_root))
    victim = w.records[-3]
    _zero_record(log_root, victim)
    cfg, cl, cp = pieces(log_root, recover_truncate_corrupted=True)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=True)
        assert r.process_offset == victim.offset and r.follows == w.records[-2].offset
    finally:
        cl.queue.close()


def test_a_reader_ends_its_view_at_a_record_in_flight_and_writes_nothing(log_root):
    """A record newer than the checkpoint's flush that is not whole yet, with records after it (a live
    writer's): the reader's view ends before it and keeps a fence there; no byte changes."""
    w = cw.walk_log(str(log_root))
    victim = w.records[-3]
    _zero_record(log_root, victim)
    set_checkpoint(log_root, stored_at(len(w.records) - 3) - 1, START)
    before = cw.log_digest(str(log_root))
    cfg, cl, cp = pieces(log_root, read_only=True)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=False, read_only=True)
        assert r.process_offset == victim.offset and r.follows == w.records[-2].offset
        assert cl.damage_fence == victim.offset
    finally:
        cl.queue.close()
    assert cw.log_digest(str(log_root)) == before


def test_an_empty_log_recovers_to_zero(tmp_path):
    cfg, cl, cp = pieces(tmp_path)
    try:
        r = recover_commit_log(cl, cp, cfg, abnormal=True)
        assert (r.process_offset, r.dispatch_from, r.start_file) == (0, 0, None)
    finally:
        cl.queue.close()


def test_damage_before_records_is_refused_when_the_checkpoint_cannot_tell_if_they_were_flushed(log_root):
    """A garbage checkpoint and damage with valid records after it: nothing tells a crash's unflushed tail
    from corruption in flushed data, so a writer refuses (cutting could drop every acknowledged message after
    the damage); `recover_truncate_corrupted` still forces the cut."""
    w = cw.walk_log(str(log_root))
    victim = w.records[-3]
    _zero_record(log_root, victim)
    set_checkpoint(log_root, -1, -1, -1)
    before = cw.log_digest(str(log_root))
    cfg, cl, cp = pieces(log_root)
    try:
        assert not cp.trusted
        with pytest.raises(StoreCorruptedError) as ei:
            recover_commit_log(cl, cp, cfg, abnormal=True)
        assert ei.value.offset == victim.offset and "cannot be trusted" in str(ei.value)
    finally:
        cl.queue.close()
    assert cw.log_digest(str(log_root)) == before
    cfg, cl, cp = pieces(log_root, recover_truncate_corrupted=True)
    try:
        assert recover_commit_log(cl, cp, cfg, abnormal=True).process_offset == victim.offset
    finally:
        cl.queue.close()


def test_damage_before_a_record_with_holes_in_it_is_refused_not_cut(tmp_path):
    """A store copied with `cp --sparse=always` (its last message's all-zero body becomes holes), then a record
    before it damaged: recovery must refuse to cut durable data, as it does on the original."""
    import subprocess

    import crash_writer as cw
    from conftest import FakeClock

    from pystore import Message
    from pystore.config import StoreConfig
    from pystore.engine.checkpoint import StoreCheckpoint
    from pystore.engine.recovery import recover_commit_log
    from pystore.engine.store import MessageStore
    from pystore.errors import StoreCorruptedError
    from pystore.log.commitlog import CommitLog
    from pystore.log.mapped_file_queue import MappedFileQueue

    TS = 1_700_000_000_000
    FILE = 1 << 20
    src = tmp_path / "src"
    clock = FakeClock(TS)
    with MessageStore.open(str(src), mapped_file_size_commit_log=FILE, clock=clock) as store:
        for i in range(10):
            clock.advance(1000)
            assert store.put_message(Message("T", b"x" * 100 + b"%04d" % i)).is_ok()
        clock.advance(1000)
        assert store.put_message(Message("T", bytes(64 << 10))).is_ok()     # a zero-padded payload
    dst = tmp_path / "dst"
    subprocess.run(["cp", "-r", "--sparse=always", str(src), str(dst)], check=True)
    w = cw.walk_log(str(dst))
    victim = w.records[-2]
    results = {}
    for root in (src, dst):
        path = os.path.join(cw.commitlog_dir(str(root)), "%020d" % 0)
        with open(path, "r+b") as f:
            f.seek(victim.offset + victim.size - 1)
            f.write(b"\xff")                              # the body's last byte: a wrong CRC
        cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE)
        queue = MappedFileQueue(cfg.commit_log_paths(), FILE)
        assert queue.load()
        cp = StoreCheckpoint(cfg.checkpoint_path(), clock=FakeClock(TS + 10**9))
        cl = CommitLog(cfg, queue)
        try:
            recover_commit_log(cl, cp, cfg, abnormal=True)
            results[root.name] = "cut"
        except StoreCorruptedError:
            results[root.name] = "refused"
        finally:
            queue.close()
    assert results == {"src": "refused", "dst": "refused"}
