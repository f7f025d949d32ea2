"""Corruption tests: damaged store files either recover to the last whole record or raise
``StoreCorruptedError`` naming the file and the absolute offset; never a crash, and nothing before the
damage is lost (docs/architecture.md "What the store promises", docs/format.md §1, §4, §8, §12 ``testRecover``;
``pystore/engine/recovery.py`` for the guard against truncating durable data).

Stores are built in this process with SYNC_FLUSH and small files (16 KiB) so the log rolls often, shut
down cleanly (the checkpoint then says every message is flushed), damaged with plain file writes at
offsets taken from an independent ``struct`` walk of the files (``crash_writer.walk_log``), and reopened.

After each recovery the consume queues must hold exactly the recovered messages
(``crash_writer.check_queues``: every unit points at its whole record, queue offsets gap-free from 0,
``get_message`` in queue order, the topic-queue table the same after a reopen).
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import struct
import sys
import time

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crash_writer as cw  # noqa: E402
from conftest import FakeClock  # noqa: E402

from pystore import Message, MessageBatch, TagFilter  # noqa: E402
from pystore.config import FlushDiskType  # noqa: E402
from pystore.engine.checkpoint import StoreCheckpoint  # noqa: E402
from pystore.engine.store import MessageStore  # noqa: E402
from pystore.errors import StoreCorruptedError  # noqa: E402
from pystore.tools import iter_commitlog  # noqa: E402

FILE_SIZE = 16384
POS_BODY_LENGTH = 84  # docs/format.md §1.2, IPv4 born and store hosts


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def build_store(root, messages: int = 300, seed: int = 0, file_size: int = FILE_SIZE, **kw) -> cw.Walk:
    """A cleanly shut down store of ``messages`` crash-writer messages (singles and batches, three topics,
    four queues); returns the walk of its files.

    Its store times are 1 ms apart (a clock that moves only here), whatever the machine's speed: an abnormal
    recovery starts from the newest file whose first message is at least 3 s older than the checkpoint
    (docs/format.md §8), so with the real clock where it starts depended on how long the build took. Each put is
    a SYNC_FLUSH put, a disk flush: with 10 ms a flush (a slow CI disk) 500 messages span more than 3 s, and
    test_damage_before_normal_recovery_window's abnormal open started past the damage it must report."""
    rng = random.Random(seed)
    clock = FakeClock(int(time.time() * 1000))
    idx = 0
    with cw.open_store(root, file_size, flush_disk_type=FlushDiskType.SYNC_FLUSH, clock=clock, **kw) as store:
        while idx < messages:
            clock.advance(1)
            topic = cw.TOPICS[rng.randrange(3)]
            qid = rng.randrange(cw.QUEUES)
            n = min(rng.choice((1, 1, 1, 3)), messages - idx)
            msgs = []
            for _ in range(n):
                msgs.append(
                    Message(
                        topic,
                        cw.make_body(idx, topic, qid, rng.randint(0, 400)),
                        tags="T",
                        keys="k%d" % idx,
                        queue_id=qid,
                    )
                )
                idx += 1
            r = store.put_message(msgs[0]) if n == 1 else store.put_messages(MessageBatch(msgs))
            assert r.is_ok()
    w = cw.walk_log(str(root))
    cw.check_chain(w)
    assert len(w.records) == messages
    return w


def tree_digest(root) -> dict[str, str]:
    """Every file under ``root`` and a digest of its bytes."""
    out = {}
    for dirpath, _, names in os.walk(str(root)):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, str(root))] = hashlib.sha256(f.read()).hexdigest()
    return out


def file_of(root, offset: int, file_size: int = FILE_SIZE) -> str:
    return os.path.join(cw.commitlog_dir(str(root)), "%020d" % (offset - offset % file_size))


def patch(root, offset: int, data: bytes, file_size: int = FILE_SIZE) -> None:
    """Write ``data`` at absolute commit-log ``offset`` (inside one file)."""
    assert offset % file_size + len(data) <= file_size
    with open(file_of(root, offset, file_size), "r+b") as f:
        f.seek(offset % file_size)
        f.write(data)


def read_at(root, offset: int, n: int, file_size: int = FILE_SIZE) -> bytes:
    with open(file_of(root, offset, file_size), "rb") as f:
        f.seek(offset % file_size)
        return f.read(n)


def flip_bit(root, offset: int, bit: int = 0) -> None:
    b = read_at(root, offset, 1)[0]
    patch(root, offset, bytes([b ^ (1 << bit)]))


def body_offset(rec: cw.RawRecord) -> int:
    return rec.offset + POS_BODY_LENGTH + 4


def make_abnormal(root) -> None:
    """Leave the abort file a killed writer leaves."""
    with open(os.path.join(str(root), "abort"), "wb") as f:
        f.write(b"4242")


def open_store(root, **kw) -> MessageStore:
    return cw.open_store(root, kw.pop("mapped_file_size_commit_log", FILE_SIZE), **kw)


def check_recovered(root, expect: list[cw.RawRecord], touched: int = -1, **kw) -> int:
    """Open, and check the log is exactly ``expect`` (whole, gap-free, readable, zeros after the end);
    reopen once more and check nothing moves. Returns the max offset. A record holding offset ``touched``
    may have damage that no check covers (properties), so its content is not checked."""
    end = expect[-1].offset + expect[-1].size if expect else 0
    with open_store(root, **kw) as store:
        max_off = store.get_max_phy_offset()
        for r in expect:
            m = store.look_message_by_offset(r.offset)
            assert m is not None and m.raw == read_at(root, r.offset, r.size), "record at %d" % r.offset
            if not r.offset <= touched < r.offset + r.size:
                cw.check_message(m, r.idx)
        assert store.look_message_by_offset(max_off) is None
        w = cw.walk_log(str(root))
        table = cw.check_queues(store, w)
        cw.check_index(store, w, touched=touched)
    w = cw.walk_log(str(root))
    cw.check_chain(w)
    assert [(r.offset, r.body) for r in w.records] == [(r.offset, r.body) for r in expect]
    assert max_off == w.end and max_off - end < 8 + FILE_SIZE, (max_off, end)  # end, or past a final blank
    digest = cw.log_digest(str(root))
    with open_store(root, **kw) as store:
        assert store.get_max_phy_offset() == max_off
        assert {k: v for k, v in store.get_topic_queue_table().items() if v > 0} == table
    assert cw.log_digest(str(root)) == digest
    got = [(m.commit_log_offset, m.store_size) for m in iter_commitlog(str(root), verify_crc=True)]
    assert got == [(r.offset, r.size) for r in expect]
    return max_off


def files_with_records(w: cw.Walk) -> list[int]:
    return sorted({r.offset - r.offset % FILE_SIZE for r in w.records})


def victim_in_file(w: cw.Walk, file_start: int, rng: random.Random) -> cw.RawRecord:
    """A record of the file at ``file_start`` that is neither its first nor its last."""
    recs = [r for r in w.records if r.offset - r.offset % FILE_SIZE == file_start]
    assert len(recs) >= 3
    return recs[rng.randrange(1, len(recs) - 1)]


# ----------------------------------------------------------------------------------------------
# wrong file sizes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["last", "middle"])
def test_truncated_file_refuses_to_load(tmp_path, caplog, which):
    """A commit-log file shorter than the store's file size: the store refuses to load (RocketMQ's rule) with
    StoreCorruptedError naming the file and where it ends, logs it, and touches nothing."""
    root = tmp_path / "store"
    w = build_store(root)
    names = cw.log_files(str(root))
    assert len(names) >= 4
    victim = os.path.join(cw.commitlog_dir(str(root)), names[-1] if which == "last" else names[1])
    start = int(os.path.basename(victim))
    straddled = victim_in_file(w, start, random.Random(which))
    os.truncate(victim, straddled.offset - start + 50)  # the file now ends inside a record
    before = tree_digest(root)
    with caplog.at_level(logging.ERROR, logger="pystore"):
        with pytest.raises(StoreCorruptedError) as ei:
            open_store(root)
    cut = straddled.offset + 50  # where the file now ends
    assert (ei.value.path, ei.value.offset) == (victim, cut), ei.value
    assert victim in str(ei.value) and str(cut) in str(ei.value)
    assert any(victim in rec.getMessage() for rec in caplog.records), [r.getMessage() for r in caplog.records]
    assert tree_digest(root) == before
    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root, read_only=True)
    assert ei.value.path == victim
    assert tree_digest(root) == before
    # the offline reader names the file too, at the record the file ends inside
    got = []
    with pytest.raises(StoreCorruptedError) as ei2:
        for m in iter_commitlog(str(root), verify_crc=True):
            got.append(m.commit_log_offset)
    assert (ei2.value.path, ei2.value.offset) == (victim, straddled.offset)
    assert got == [r.offset for r in w.records if r.offset < straddled.offset]


def test_single_cut_short_file_is_not_taken_as_the_geometry(tmp_path):
    """The only commit-log file, cut to 3000 bytes (inside a record). The store does not mistake its size
    for the store's file size (it would then put on a 3000-byte grid RocketMQ cannot read): it refuses,
    naming the file."""
    root = tmp_path / "store"
    with open_store(root) as store:
        for i in range(20):
            assert store.put_message(Message("T", cw.make_body(i, "T", 0, 200), keys="k%d" % i)).is_ok()
    only = file_of(root, 0)
    os.truncate(only, 3000)
    before = tree_digest(root)
    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root)
    assert (ei.value.path, ei.value.offset) == (only, 3000)
    assert tree_digest(root) == before


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_missing_middle_file(tmp_path, abnormal):
    """A commit-log file in the middle of the log is missing (deleted by hand, lost by the file system):
    opening, for writing or reading, raises StoreCorruptedError naming the missing file and its offset, and
    touches nothing; its messages are gone, and nothing may quietly skip them."""
    root = tmp_path / "store"
    w = build_store(root, messages=300)
    names = cw.log_files(str(root))
    gone = os.path.join(cw.commitlog_dir(str(root)), names[-2])
    os.unlink(gone)
    if abnormal:
        make_abnormal(root)
    assert [r for r in w.records if int(names[-2]) <= r.offset < int(names[-2]) + FILE_SIZE]
    before = tree_digest(root)
    for read_only in (False, True):
        with pytest.raises(StoreCorruptedError) as ei:
            open_store(root, read_only=read_only).shutdown()
        assert (ei.value.path, ei.value.offset) == (gone, int(names[-2]))
    assert tree_digest(root) == before


def test_short_tail_files_of_a_power_cut_are_padded(tmp_path):
    """A power cut on a file system that does not journal size changes (tests/powerloss, strict model) can
    leave the newest commit-log files short, or empty before the last: created at full size, but never
    flushed, so their size never reached the disk. A writer's abnormal open extends them with zeros and
    recovers the log as it was (before, it refused to load: "the file is 8192 bytes"); a clean store with a
    short file still refuses (test_truncated_file_refuses_to_load)."""
    root = tmp_path / "store"
    w = build_store(root)
    last = int(cw.log_files(str(root))[-1])
    d = cw.commitlog_dir(str(root))
    short = os.path.join(d, "%020d" % (last + FILE_SIZE))
    empty = os.path.join(d, "%020d" % (last + 2 * FILE_SIZE))
    with open(short, "wb") as f:
        f.write(bytes(8192))            # pages written back, the size change lost
    open(empty, "wb").close()
    make_abnormal(root)
    check_recovered(root, w.records)
    assert not os.path.exists(empty)


def test_short_index_file_after_a_crash_is_deleted(tmp_path):
    """An index file whose creation a power cut took back (0 bytes: its size was never flushed) is deleted
    by a writer's abnormal open; before, it was only ignored, stayed a file of no geometry for good, and
    ``verify_store`` reported the store damaged after every later open."""
    from pystore.engine.verify import verify_store

    root = tmp_path / "store"
    w = build_store(root)
    index_dir = root / "index"
    names = sorted(os.listdir(index_dir))
    stray = index_dir / str(int(names[-1]) + 1000)
    stray.write_bytes(b"")
    make_abnormal(root)
    check_recovered(root, w.records)
    assert not stray.exists()
    report = verify_store(str(root), **cw.SMALL_FILES, mapped_file_size_commit_log=FILE_SIZE)
    assert not [p for p in report.problems if "index" in str(p)], report.problems


def test_read_only_open_with_empty_last_file(tmp_path):
    """A writer killed while the allocate service was creating a file leaves it empty (so does a live writer,
    for a moment, at every file creation): a read-only open ignores it, deletes nothing, and sees every
    message."""
    root = tmp_path / "store"
    w = build_store(root, messages=100)
    empty = os.path.join(
        cw.commitlog_dir(str(root)), "%020d" % (int(cw.log_files(str(root))[-1]) + FILE_SIZE)
    )
    open(empty, "wb").close()
    with open_store(root, read_only=True) as ro:
        assert ro.get_max_phy_offset() == w.end
        for r in w.records:
            cw.check_message(ro.look_message_by_offset(r.offset), r.idx)
    assert os.path.exists(empty)


def test_empty_last_file_is_deleted(tmp_path):
    """An empty last file (a writer killed while creating it) is deleted by a writer's open; nothing else
    changes."""
    root = tmp_path / "store"
    w = build_store(root)
    empty = os.path.join(
        cw.commitlog_dir(str(root)), "%020d" % (int(cw.log_files(str(root))[-1]) + FILE_SIZE)
    )
    open(empty, "wb").close()
    check_recovered(root, w.records)
    assert not os.path.exists(empty)


# ----------------------------------------------------------------------------------------------
# torn tails
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize(
    "kind", ["second-half-zeroed", "prefix-of-next", "size-only", "bit-flip-in-last-body"]
)
def test_torn_last_record_is_cut(tmp_path, kind, abnormal):
    """The last record is torn (or a following one was half-written): recovery cuts the log at the last
    whole record, zeroes the rest of the file, and keeps everything before."""
    root = tmp_path / "store"
    w = build_store(root, seed=3)
    last = w.records[-1]
    end = last.offset + last.size
    expect = w.records[:-1]
    if kind == "second-half-zeroed":
        patch(root, last.offset + last.size // 2, bytes(last.size - last.size // 2))
    elif kind == "bit-flip-in-last-body":
        assert len(last.body) > 0
        flip_bit(root, body_offset(last) + len(last.body) // 2, 5)
    elif kind == "prefix-of-next":
        raw = read_at(root, last.offset, last.size)
        torn = raw[:4] + raw[4:28] + struct.pack(">q", end) + raw[36 : last.size // 2]
        assert (end % FILE_SIZE) + last.size + 8 <= FILE_SIZE, "pick a seed whose last file has room"
        patch(root, end, torn)
        expect = w.records
    else:  # size-only: the TOTALSIZE of a next record, nothing else
        patch(root, end, struct.pack(">i", 200))
        expect = w.records
    if abnormal:
        make_abnormal(root)
    max_off = check_recovered(root, expect)
    assert max_off == (end if expect is w.records else last.offset)


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_lost_last_page_inside_the_properties(tmp_path, abnormal):
    """A power cut lost the page holding the end of the last record, after its body: the header, the body
    (CRC intact) and the length fields all look right, only the properties (or the topic) read as zeros. A
    record never ends in a zero byte, so recovery sees the tear and cuts the record."""
    root = tmp_path / "store"
    w = build_store(root, seed=3)
    file_end = files_with_records(w)[-1] + FILE_SIZE
    last = w.records[-1]
    body_end = body_offset(last) + len(last.body)
    page = body_end + (last.offset + last.size - body_end) // 2  # where the lost page began: after the body
    patch(root, page, bytes(file_end - page))
    if abnormal:
        make_abnormal(root)
    kept = [r for r in w.records if r.offset < last.offset]
    assert check_recovered(root, kept) == last.offset


# ----------------------------------------------------------------------------------------------
# RocketMQ DefaultMessageStoreTest.testRecover
# ----------------------------------------------------------------------------------------------


def _put_foobar(store, n: int) -> None:
    for _ in range(n):
        r = store.put_message(
            Message(
                "FooBar", b"Once, there was a chance for me!", tags="TAG1", keys=str(int(time.time() * 1000))
            )
        )
        assert r.is_ok()


def _damage_last(root, second_last_max: int) -> None:
    """RocketMQ ``damageCommitLog``: 16 zero bytes at the topic-length position of the record at
    ``second_last_max`` (found through the body-length field at +84)."""
    (body_len,) = struct.unpack(">i", read_at(root, second_last_max + POS_BODY_LENGTH, 4))
    patch(root, second_last_max + POS_BODY_LENGTH + 4 + body_len, bytes(16))


def test_rocketmq_test_recover(tmp_path):
    """docs/format.md §12 ``testRecover``: a restart keeps the max offset; zeroing 16 bytes at the topic-length
    position of the last record then a normal, or an abnormal (abort file), restart truncates exactly that
    record; writing goes on after it and survives restarts."""
    root = tmp_path / "store"

    def reboot() -> MessageStore:
        return open_store(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)

    store = reboot()
    _put_foobar(store, 100)
    max_phy = store.get_max_phy_offset()
    # 1. just reboot
    store.shutdown()
    store = reboot()
    assert store.get_max_phy_offset() == max_phy
    # 2. damage the last record, reboot normally
    _put_foobar(store, 100)
    second_last = store.get_max_phy_offset()
    _put_foobar(store, 1)
    store.shutdown()
    _damage_last(root, second_last)
    store = reboot()
    assert store.last_exit_ok
    assert store.get_max_phy_offset() == second_last
    # 3. damage the last record, reboot abnormally
    _put_foobar(store, 100)
    second_last = store.get_max_phy_offset()
    _put_foobar(store, 1)
    store.shutdown()
    _damage_last(root, second_last)
    make_abnormal(root)
    store = reboot()
    assert not store.last_exit_ok
    assert store.get_max_phy_offset() == second_last
    # 4. write again; restarts keep it
    _put_foobar(store, 100)
    final = store.get_max_phy_offset()
    store.shutdown()
    for _ in range(2):
        store = reboot()
        assert store.get_max_phy_offset() == final
        store.shutdown()
    w = cw.walk_log(str(root))
    cw.check_chain(w)
    assert w.end == final and len(w.records) == 400
    assert len(cw.log_files(str(root))) > 2, "the test is meant to roll files"


# ----------------------------------------------------------------------------------------------
# damage in the middle of durable data
# ----------------------------------------------------------------------------------------------

MIDDLE_DAMAGE = [
    "zeroed-region",
    "zeroed-from-record-start",
    "body-bit-flip",
    "size-field",
    "magic",
    "blank-zeroed",
]


def _damage_middle(root, w: cw.Walk, kind: str, rng: random.Random) -> int:
    """Damage a record in the second-last file (inside normal recovery's window of three files); returns
    the absolute offset recovery must name: where the first damaged record (or blank) starts, as the
    independent walk of the damaged files finds it."""
    files = files_with_records(w)
    file_start = files[-2]
    if kind == "blank-zeroed":
        recs = [r for r in w.records if r.offset - r.offset % FILE_SIZE == file_start]
        lo = hi = recs[-1].offset + recs[-1].size
        patch(root, lo, bytes(file_start + FILE_SIZE - lo))
    else:
        v = victim_in_file(w, file_start, rng)
        lo = v.offset
        if kind == "zeroed-region":
            start = v.offset + rng.randrange(8, v.size)
            n = min(300, file_start + FILE_SIZE - start)
            patch(root, start, bytes(n))
            hi = (
                start + n
            )  # zeroing the properties alone goes unnoticed: the next record may be the first hit
        elif kind == "zeroed-from-record-start":
            patch(root, v.offset, bytes(200))
            hi = v.offset
        elif kind == "body-bit-flip":
            if not v.body:
                pytest.skip("an empty body")
            flip_bit(root, body_offset(v) + rng.randrange(len(v.body)), rng.randrange(8))
            hi = v.offset
        elif kind == "size-field":
            patch(root, v.offset, struct.pack(">i", v.size + 1))
            hi = v.offset
        else:  # magic
            patch(root, v.offset + 4, b"\x00")
            hi = v.offset
    damaged = cw.walk_log(str(root))
    assert damaged.stop != "end" or damaged.records[-1].offset < w.records[-1].offset
    assert lo <= damaged.stop_offset <= hi, (kind, lo, hi, damaged.stop, damaged.stop_offset)
    return damaged.stop_offset


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("kind", MIDDLE_DAMAGE)
def test_middle_damage_raises_store_corrupted(tmp_path, kind, abnormal):
    """Damage followed by valid, flushed records is not a torn tail: opening raises StoreCorruptedError
    with the file and the exact absolute offset, and writes nothing. A read-only opener refuses it the same way
    (a view ending at the damage would hide the durable messages after it); with
    ``recover_truncate_corrupted=True`` it sees the log up to the damage, and a writer cuts the log there,
    keeping everything before."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=5)
    assert len(files_with_records(w)) >= 4
    where = _damage_middle(root, w, kind, random.Random(kind))
    if abnormal:
        make_abnormal(root)
    before = tree_digest(root)
    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root)
    e = ei.value
    assert e.path == file_of(root, where), e
    assert e.offset == where, e
    assert e.path in str(e) and str(where) in str(e)
    assert tree_digest(root) == before, "the failed open changed files"
    # a second attempt fails the same way (nothing was half-done by the first)
    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root)
    assert (ei.value.path, ei.value.offset) == (e.path, e.offset)

    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root, read_only=True)
    assert (ei.value.path, ei.value.offset) == (e.path, e.offset)
    kept = [r for r in w.records if r.offset + r.size <= where]
    with open_store(root, read_only=True, recover_truncate_corrupted=True) as ro:
        assert ro.recovery.process_offset == where
        for r in kept[-20:]:
            cw.check_message(ro.look_message_by_offset(r.offset), r.idx)
        # later refreshes (a look at or past the end re-reads the folder) never widen the view past the damage
        assert ro.get_max_phy_offset() == where
        assert ro.look_message_by_offset(where) is None
        assert ro.look_message_by_offset(w.records[-1].offset) is None
        assert ro.get_max_phy_offset() == where
    assert tree_digest(root) == before, "a read-only open changed files"

    max_off = check_recovered(root, kept, recover_truncate_corrupted=True)
    assert max_off == where
    assert all(int(n) <= where for n in cw.log_files(str(root)))


def test_check_crc_on_recover_is_honoured(tmp_path):
    """``check_crc_on_recover=False`` (RocketMQ ``checkCRCOnRecover``): recovery does not compute body CRCs,
    so a record whose body has a flipped bit is kept, as is everything after it, and the log is not cut;
    with the default (True) the same store is refused at that record."""
    root = tmp_path / "store"
    w = build_store(root, messages=300, seed=14)
    v = victim_in_file(w, files_with_records(w)[-2], random.Random(14))
    flip_bit(root, body_offset(v) + len(v.body) // 2, 2)
    for abnormal in (False, True):
        if abnormal:
            make_abnormal(root)
        with open_store(root, check_crc_on_recover=False, check_crc_on_read=False) as store:
            assert store.recovery.process_offset == w.end and store.get_max_phy_offset() == w.end
            assert store.look_message_by_offset(v.offset).body != v.body
            cw.check_message(store.look_message_by_offset(w.records[-1].offset), w.records[-1].idx)
        # reads check the CRC by default (check_crc_on_read): the damaged record is refused, never served
        with open_store(root, check_crc_on_recover=False) as store:
            with pytest.raises(StoreCorruptedError) as ei:
                store.look_message_by_offset(v.offset)
            assert (ei.value.path, ei.value.offset) == (file_of(root, v.offset), v.offset)
            cw.check_message(store.look_message_by_offset(w.records[-1].offset), w.records[-1].idx)
    make_abnormal(root)
    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root)
    assert (ei.value.path, ei.value.offset) == (file_of(root, v.offset), v.offset)


def test_damage_before_normal_recovery_window(tmp_path):
    """Normal recovery walks only the last three files (RocketMQ), so damage in an older file is not seen
    by a clean open: the store opens with everything. The offline reader with CRC checks, and an abnormal
    recovery (which walks from the checkpoint's time), name the file and offset."""
    root = tmp_path / "store"
    w = build_store(root, messages=500, seed=6)
    files = files_with_records(w)
    assert len(files) >= 5
    v = victim_in_file(w, files[0], random.Random(6))
    flip_bit(root, body_offset(v) + len(v.body) // 2, 3)
    with open_store(root) as store:
        assert store.get_max_phy_offset() == w.end
        assert store.recovery.start_file.endswith("%020d" % files[-3])
    with pytest.raises(StoreCorruptedError) as ei:
        for _ in iter_commitlog(str(root), verify_crc=True):
            pass
    assert (ei.value.path, ei.value.offset) == (file_of(root, v.offset), v.offset)
    make_abnormal(root)
    with pytest.raises(StoreCorruptedError) as ei:
        open_store(root)
    assert (ei.value.path, ei.value.offset) == (file_of(root, v.offset), v.offset)


def test_damaged_body_before_the_recovery_window_is_never_served(tmp_path):
    """A clean open does not walk old files, so reads check what they serve (``check_crc_on_read``): the
    messages before the damaged one are served, the damaged one is refused naming its file and offset,
    by queue and by offset; with the check off it is read as stored (RocketMQ)."""
    root = tmp_path / "store"
    w = build_store(root, messages=500, seed=6)
    v = victim_in_file(w, files_with_records(w)[0], random.Random(6))
    flip_bit(root, body_offset(v) + len(v.body) // 2, 3)
    before = [r for r in w.records if (r.topic, r.queue_id) == (v.topic, v.queue_id) and r.offset < v.offset]
    with open_store(root) as store:
        got = []
        offset = 0
        while offset < v.queue_offset:
            r = store.get_message("g", v.topic, v.queue_id, offset, 32)
            assert r.status.name == "FOUND" and r.next_begin_offset == offset + len(r.messages)
            got.extend(r.messages)
            offset = r.next_begin_offset
        assert [m.commit_log_offset for m in got] == [r.offset for r in before]
        with pytest.raises(StoreCorruptedError) as ei:
            store.get_message("g", v.topic, v.queue_id, v.queue_offset, 32)
        assert (ei.value.path, ei.value.offset) == (file_of(root, v.offset), v.offset)
        with pytest.raises(StoreCorruptedError) as ei:
            store.look_message_by_offset(v.offset)
        assert (ei.value.path, ei.value.offset) == (file_of(root, v.offset), v.offset)
    with open_store(root, check_crc_on_read=False) as store:
        m = store.get_message("g", v.topic, v.queue_id, v.queue_offset, 1).messages[0]
        assert m.commit_log_offset == v.offset and m.body != v.body


def test_unit_pointing_at_another_queues_record_is_refused(tmp_path):
    """A consume-queue unit rewritten to point at a record of another queue: the read refuses it, naming the
    consume-queue file and the unit's offset, instead of serving the other queue's message."""
    root = tmp_path / "store"
    w = build_store(root, messages=300, seed=7)
    a = w.records[10]
    b = next(r for r in w.records if (r.topic, r.queue_id) != (a.topic, a.queue_id))
    cq_file = os.path.join(root, "consumequeue", a.topic, str(a.queue_id), "%020d" % 0)
    with open(cq_file, "r+b") as f:
        f.seek(a.queue_offset * 20)
        f.write(struct.pack(">qi", b.offset, b.size))
    with open_store(root) as store:
        with pytest.raises(StoreCorruptedError) as ei:
            store.get_message("g", a.topic, a.queue_id, a.queue_offset, 32)
        assert (ei.value.path, ei.value.offset) == (cq_file, a.queue_offset * 20)
        if a.queue_offset > 0:          # the page before it is served and stops right before it
            r = store.get_message("g", a.topic, a.queue_id, 0, 64)
            assert r.next_begin_offset == a.queue_offset == len(r.messages)
            assert all((m.topic, m.queue_id) == (a.topic, a.queue_id) for m in r.messages)


def test_swapped_commit_log_files_never_serve_a_record_for_another_offset(tmp_path):
    """Two whole commit-log files exchanged: a look by offset never returns a record stored for another
    offset (it finds none there), and a read by queue refuses the mismatch."""
    root = tmp_path / "store"
    w = build_store(root, messages=500, seed=8)
    files = files_with_records(w)
    a, b = files[0], files[1]
    pa, pb = file_of(root, a), file_of(root, b)
    da, db = open(pa, "rb").read(), open(pb, "rb").read()
    with open(pa, "wb") as f:
        f.write(db)
    with open(pb, "wb") as f:
        f.write(da)
    moved = [r for r in w.records if a <= r.offset < b + FILE_SIZE]
    with open_store(root) as store:
        for r in moved:
            m = store.look_message_by_offset(r.offset)
            assert m is None or m.commit_log_offset == r.offset
        r0 = moved[0]
        with pytest.raises(StoreCorruptedError):
            store.get_message("g", r0.topic, r0.queue_id, r0.queue_offset, 1)


# ----------------------------------------------------------------------------------------------
# garbage at the end
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_garbage_to_end_of_last_file(tmp_path, seed):
    """Random bytes from a random offset to the end of the last file: everything before the first
    damaged record is kept, the garbage is zeroed."""
    rng = random.Random(seed)
    root = tmp_path / "store"
    w = build_store(root, messages=250, seed=seed)
    last_file = int(cw.log_files(str(root))[-1])
    # half the time inside the written data, half in the free space after it
    lo, hi = (last_file, w.end) if seed % 2 == 0 else (w.end, last_file + FILE_SIZE - 8)
    g = rng.randrange(lo, hi)
    patch(root, g, rng.randbytes(last_file + FILE_SIZE - g))
    if seed % 3 == 0:
        make_abnormal(root)
    # the record the garbage starts in survives if only its properties were hit (nothing checks them)
    kept = cw.walk_log(str(root)).records
    before = [r.offset for r in w.records if r.offset + r.size <= g]
    offsets = [r.offset for r in kept]
    assert offsets == before or (
        offsets[:-1] == before and kept[-1].offset < g < kept[-1].offset + kept[-1].size
    )
    max_off = check_recovered(root, kept, touched=g)
    assert max_off == max(kept[-1].offset + kept[-1].size, last_file)


@pytest.mark.parametrize("seed", range(3))
def test_garbage_from_a_middle_file_on(tmp_path, seed):
    """Random bytes from a random offset in an older file through every later file (a disk that returned
    garbage from some point on): the store keeps every whole record before that point, deletes the files
    after it and zeroes the rest of its file."""
    rng = random.Random(100 + seed)
    root = tmp_path / "store"
    w = build_store(root, messages=300, seed=seed)
    names = cw.log_files(str(root))
    first_bad = int(names[-3])
    g = rng.randrange(first_bad, first_bad + FILE_SIZE - 8)
    for n in names:
        start = int(n)
        if start + FILE_SIZE <= g:
            continue
        lo = max(g, start)
        patch(root, lo, rng.randbytes(start + FILE_SIZE - lo))
    if seed == 0:
        make_abnormal(root)
    # the record the garbage starts in survives if only its properties were hit (nothing checks them)
    kept = cw.walk_log(str(root)).records
    before = [r.offset for r in w.records if r.offset + r.size <= g]
    offsets = [r.offset for r in kept]
    assert offsets == before or (
        offsets[:-1] == before and kept[-1].offset < g < kept[-1].offset + kept[-1].size
    )
    max_off = check_recovered(root, kept, touched=g)
    assert max_off <= g + FILE_SIZE and all(int(n) <= max_off for n in cw.log_files(str(root)))


# ----------------------------------------------------------------------------------------------
# the checkpoint
# ----------------------------------------------------------------------------------------------


def _checkpoint_bytes(kind: str) -> bytes:
    now = int(time.time() * 1000)
    if kind == "random-4k":
        return random.Random(9).randbytes(4096)
    if kind == "short":
        return b"\x00\x00\x01\x8b\xcf\xe5\x68"
    if kind == "empty":
        return b""
    if kind == "negative":
        return struct.pack(">qqqqq", -1, -5, -(2**63), -1, -1) + bytes(4056)
    if kind == "far-future":
        return struct.pack(">qqqqq", now + 30 * 86_400_000, now + 30 * 86_400_000, now, 0, 0) + bytes(4056)
    if kind == "near-future":  # plausible, so trusted: recovery starts late but still keeps everything
        return struct.pack(">qqqqq", now + 3_600_000, now + 3_600_000, now, 0, 0) + bytes(4056)
    if kind == "zeros":
        return bytes(4096)
    raise AssertionError(kind)


CHECKPOINTS = ["random-4k", "short", "empty", "negative", "far-future", "near-future", "zeros"]


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
@pytest.mark.parametrize("kind", CHECKPOINTS)
def test_garbage_checkpoint_keeps_every_message(tmp_path, kind, abnormal):
    root = tmp_path / "store"
    w = build_store(root, messages=300, seed=8)
    with open(root / "checkpoint", "wb") as f:
        f.write(_checkpoint_bytes(kind))
    cp = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
    assert cp.trusted == (kind in ("near-future", "zeros")), cp
    if abnormal:
        make_abnormal(root)
    check_recovered(root, w.records)
    # after a clean shutdown the checkpoint is whole again
    cp = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
    assert cp.trusted and os.path.getsize(root / "checkpoint") == 4096


def test_abnormal_recovery_rebuilds_the_index(tmp_path):
    """An abnormal restart whose checkpoint says the commit log and the queues were flushed to the end while
    no index file was ever full (index time 0): the index drops its file (its content may be torn) and,
    although the queues are only re-dispatched from the last file, the index is rebuilt from the start:
    every message is found by its key."""
    root = tmp_path / "store"
    w = build_store(root, messages=300, seed=15)
    last_ts = read_at(root, w.records[-1].offset + 56, 8)
    ts = struct.unpack(">q", last_ts)[0] + 10_000
    with open(root / "checkpoint", "wb") as f:
        f.write(struct.pack(">qqqqq", ts, ts, 0, 0, 0) + bytes(4056))
    make_abnormal(root)
    with open_store(root) as store:
        assert store.recovery.start_file == file_of(root, files_with_records(w)[-1])
        cw.check_index(store, w, sample=len(w.records))
    check_recovered(root, w.records)


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_garbage_checkpoint_and_torn_tail(tmp_path, abnormal):
    """An untrusted checkpoint does not stop recovery from cutting a torn tail."""
    root = tmp_path / "store"
    w = build_store(root, messages=200, seed=10)
    last = w.records[-1]
    patch(root, last.offset + last.size - 10, bytes(10))
    flip_bit(root, body_offset(last), 1)
    with open(root / "checkpoint", "wb") as f:
        f.write(_checkpoint_bytes("random-4k"))
    if abnormal:
        make_abnormal(root)
    assert check_recovered(root, w.records[:-1]) == last.offset


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_missing_commitlog_folder_with_checkpoint(tmp_path, abnormal):
    """No commit log at all, a checkpoint present (docs/format.md §8.6): the store opens empty and the next
    put starts at offset 0."""
    root = tmp_path / "store"
    build_store(root, messages=50)
    shutil.rmtree(cw.commitlog_dir(str(root)))
    assert (root / "checkpoint").exists()
    if abnormal:
        make_abnormal(root)
    with open_store(root) as store:
        assert store.get_max_phy_offset() == 0
        assert store.look_message_by_offset(0) is None
        r = store.put_message(Message("AfterLoss", cw.make_body(0, "AfterLoss", 0, 10), keys="k0"))
        assert r.is_ok() and r.wrote_offset == 0
        # the index went with the log: the new message is found by key (the old index's end offset made
        # every new message look indexed already)
        assert [m.commit_log_offset for m in store.query_message("AfterLoss", "k0").messages] == [0]
    w = cw.walk_log(str(root))
    cw.check_chain(w)
    assert [r.offset for r in w.records] == [0]


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_missing_consume_queue_folder(tmp_path, abnormal):
    """The ``consumequeue`` folder is gone (docs/format.md §8.6): the queues are rebuilt from the commit log,
    every unit pointing at its record, and the topic-queue table continues from them."""
    root = tmp_path / "store"
    w = build_store(root, messages=300, seed=13)
    table = {k: len(v) for k, v in cw.queues_of(w).items()}
    shutil.rmtree(root / "consumequeue")
    if abnormal:
        make_abnormal(root)
    check_recovered(root, w.records)
    with open_store(root) as store:
        assert {k: v for k, v in store.get_topic_queue_table().items() if v > 0} == table
        topic, qid = cw.TOPICS[0], 0
        r = store.put_message(
            Message(topic, cw.make_body(10**6, topic, qid, 10), keys="k%d" % 10**6, queue_id=qid)
        )
        assert r.is_ok() and r.append_message_result.logics_offset == table[(topic, qid)]


CQ_UNITS = 8          # consume-queue files of 8 units: every queue spans several files


def _queue_files(root, topic: str, qid: int) -> list[str]:
    d = os.path.join(root, "consumequeue", topic, str(qid))
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def _busiest_queue(w: cw.Walk) -> tuple[str, int]:
    by_queue = cw.queues_of(w)
    return max(by_queue, key=lambda k: len(by_queue[k]))


@pytest.mark.parametrize(
    "damage", ["middle_missing", "cut_to_1_byte", "grown", "last_missing", "folder_missing", "zeroed_middle"]
)
@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_damaged_consume_queue_is_rebuilt_from_the_commit_log(tmp_path, damage, abnormal):
    """A consume queue with a file missing (a hole, or its tail), cut short, grown, or its folder gone: a
    writer's open rebuilds that queue from the commit log, so every message stays readable by queue and new
    puts continue its offsets (before, a hole hid the rest of the queue and later puts were never readable)."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=21, mapped_file_size_consume_queue=CQ_UNITS * 20)
    topic, qid = _busiest_queue(w)
    files = _queue_files(root, topic, qid)
    assert len(files) >= 4
    if damage == "middle_missing":
        os.unlink(files[1])
    elif damage == "cut_to_1_byte":
        os.truncate(files[2], 1)
    elif damage == "grown":
        with open(files[1], "ab") as f:
            f.write(b"\x07" * 33)
    elif damage == "last_missing":
        os.unlink(files[-1])
    elif damage == "folder_missing":
        shutil.rmtree(os.path.dirname(files[0]))
    elif damage == "zeroed_middle":
        with open(files[1], "r+b") as f:
            f.write(bytes(CQ_UNITS * 20))
    if abnormal:
        make_abnormal(root)
    n = len(cw.queues_of(w)[(topic, qid)])
    check_recovered(root, w.records)
    with open_store(root) as store:
        r = store.put_message(Message(topic, cw.make_body(10**6, topic, qid, 10), keys="k%d" % 10**6, queue_id=qid))
        assert r.is_ok() and r.append_message_result.logics_offset == n
        got = store.get_message("g", topic, qid, n, 4)
        assert [m.commit_log_offset for m in got.messages] == [r.append_message_result.wrote_offset]


@pytest.mark.parametrize("damage", ["middle_missing", "cut_to_1_byte", "grown"])
def test_damaged_consume_queue_refuses_a_read_only_open(tmp_path, damage):
    """A read-only opener cannot rebuild: it refuses the store naming the queue's file at fault (before, a
    bare StoreError without a file, or a queue that silently ended at the hole)."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=22, mapped_file_size_consume_queue=CQ_UNITS * 20)
    files = _queue_files(root, *_busiest_queue(w))
    if damage == "middle_missing":
        os.unlink(files[1])
        path, offset = files[1], int(os.path.basename(files[1]))
    elif damage == "cut_to_1_byte":
        os.truncate(files[2], 1)
        path, offset = files[2], int(os.path.basename(files[2])) + 1
    else:
        with open(files[1], "ab") as f:
            f.write(b"\x07" * 33)
        path, offset = files[1], int(os.path.basename(files[1])) + CQ_UNITS * 20
    with pytest.raises(StoreCorruptedError) as ei:
        MessageStore.open(str(root), read_only=True)
    assert (ei.value.path, ei.value.offset) == (path, offset)


@pytest.mark.parametrize("damage", ["first_file_missing", "last_unit_zeroed"])
def test_queue_that_lost_units_is_rebuilt_and_refused_by_a_reader(tmp_path, damage):
    """A queue that lost its first file (nothing marks a hole: the queue just starts later) or its last unit
    (it just ends earlier): a reader of the cleanly shut down store finds records of the queue that no unit
    covers and refuses the store, naming the queue; a writer rebuilds the queue from the commit log. Before,
    both opened and hid those messages (OFFSET_TOO_SMALL past them, or a queue that ended early)."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=24, mapped_file_size_consume_queue=CQ_UNITS * 20)
    topic, qid = _busiest_queue(w)
    files = _queue_files(root, topic, qid)
    if damage == "first_file_missing":
        os.unlink(files[0])
    else:
        n = len(cw.queues_of(w)[(topic, qid)])
        with open(files[-1], "r+b") as f:
            f.seek((n - 1) % CQ_UNITS * 20)
            f.write(bytes(20))
    with pytest.raises(StoreCorruptedError) as ei:
        MessageStore.open(str(root), read_only=True)
    assert ei.value.path == os.path.dirname(files[0])
    check_recovered(root, w.records)


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_unit_whose_record_runs_past_the_log_is_cut_and_new_puts_are_readable(tmp_path, abnormal):
    """A queue's last unit damaged so that its record would run past the log's end (its offset inside the
    log, its size huge): recovery cuts it like a unit past the end (before, it stayed and its end became the
    queue's high-water mark, so the next put to that queue was taken as already built: PUT_OK, never
    readable), and the queue is rebuilt from the record it pointed at."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=25, mapped_file_size_consume_queue=CQ_UNITS * 20)
    topic, qid = _busiest_queue(w)
    n = len(cw.queues_of(w)[(topic, qid)])
    last = _queue_files(root, topic, qid)[-1]
    with open(last, "r+b") as f:
        f.seek((n - 1) % CQ_UNITS * 20 + 8)
        f.write(struct.pack(">i", 131072))
    if abnormal:
        make_abnormal(root)
    with open_store(root) as store:
        r = store.put_message(Message(topic, cw.make_body(10**6, topic, qid, 10), queue_id=qid))
        assert r.is_ok() and r.append_message_result.logics_offset == n
        got = store.get_message("g", topic, qid, n, 4)
        assert [m.commit_log_offset for m in got.messages] == [r.append_message_result.wrote_offset]
        got = store.get_message("g", topic, qid, n - 1, 1)
        assert [(m.queue_offset, m.commit_log_offset) for m in got.messages] == [
            (n - 1, cw.queues_of(w)[(topic, qid)][-1].offset)]


def _quietest_queue(w: cw.Walk) -> tuple[str, int]:
    """The queue whose last record comes first in the log: other queues' units go on past its end."""
    by_queue = cw.queues_of(w)
    return min(by_queue, key=lambda k: by_queue[k][-1].offset)


@pytest.mark.parametrize("lost", [1, 3])
def test_queue_that_lost_its_last_units_while_others_went_on_is_rebuilt(tmp_path, lost):
    """A cleanly shut down store whose queue lost its last units (zeroed, its last file not full) while the
    other queues' units go on past them: the writer's open gives those records their units again and new
    puts continue the queue's offsets. Before, recovery re-dispatched only from the furthest queue end, so
    the lost units stayed lost and the next puts reused their offsets (fuzz cases 2:821 and 2:1799)."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=35, mapped_file_size_consume_queue=CQ_UNITS * 20)
    topic, qid = _quietest_queue(w)
    n = len(cw.queues_of(w)[(topic, qid)])
    # no queue's last file is full (recovery would walk from the last files for it, and find the loss anyway)
    assert all(len(recs) % CQ_UNITS for recs in cw.queues_of(w).values())
    assert n % CQ_UNITS > lost
    last = _queue_files(root, topic, qid)[-1]
    with open(last, "r+b") as f:
        f.seek((n - lost) % CQ_UNITS * 20)
        f.write(bytes(lost * 20))
    check_recovered(root, w.records)
    with open_store(root) as store:
        r = store.put_message(Message(topic, cw.make_body(10**6, topic, qid, 10), queue_id=qid))
        assert r.is_ok() and r.append_message_result.logics_offset == n


@pytest.mark.parametrize("damage", ["tags_zeroed", "files_zeroed"])
def test_power_cut_units_are_rewritten_by_an_abnormal_recovery(tmp_path, damage):
    """What a power cut leaves in a consume queue, in the range an abnormal recovery re-dispatches: a unit
    torn across a sector (offset and size kept, tags code lost) or the queue's files ahead of its flusher
    all zeros. Every unit is rewritten from its record (check_queues compares each unit, tags code
    included), so a consumer filtering on tags gets every message. Before, a unit below the queue's end was
    taken as built whatever it said (RocketMQ's rule), and the torn unit hid its message from a tag filter.
    (The zeroed files were already rebuilt by the load's check of queue files; kept as the power-loss case
    the tags one stands beside.)"""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=27, mapped_file_size_consume_queue=CQ_UNITS * 20)
    topic, qid = _busiest_queue(w)
    files = _queue_files(root, topic, qid)
    if damage == "tags_zeroed":
        with open(files[2], "r+b") as f:
            f.seek(3 * 20 + 12)
            f.write(bytes(8))
    else:
        for path in files[-4:]:
            with open(path, "r+b") as f:
                f.write(bytes(os.path.getsize(path)))
    make_abnormal(root)
    check_recovered(root, w.records)
    with open_store(root) as store:
        served, offset = [], 0
        while True:
            got = store.get_message("g", topic, qid, offset, 32, TagFilter("T"))
            served += [m.commit_log_offset for m in got.messages]
            if got.next_begin_offset == offset:
                break
            offset = got.next_begin_offset
        assert served == [r.offset for r in cw.queues_of(w)[(topic, qid)]]


def test_last_files_of_two_queues_swapped(tmp_path):
    """The last consume-queue files of two queues swapped (each file now holds the other queue's units, under
    another name): a writer's open gives both queues back their own units (one ends past its records: it is
    rebuilt from the log's head; the other lost its end: its units are rewritten from its records), and new
    puts continue each queue's offsets; a reader refuses the store naming the queue whose end lies past its
    records. (Fuzz case 5:364, on the first version of the unit rewrite: the rewritten units kept the foreign
    high-water mark, so the queue's next records looked built and were never served.)"""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=30, mapped_file_size_consume_queue=CQ_UNITS * 20)
    by_queue = cw.queues_of(w)
    ranked = sorted(by_queue, key=lambda k: len(by_queue[k]))
    short, long_ = ranked[0], ranked[-1]
    a, b = _queue_files(root, *short)[-1], _queue_files(root, *long_)[-1]
    assert os.path.basename(a) != os.path.basename(b)
    tmp = a + ".swap"
    os.rename(a, tmp)
    os.rename(b, os.path.join(os.path.dirname(a), os.path.basename(b)))
    os.rename(tmp, os.path.join(os.path.dirname(b), os.path.basename(a)))
    with pytest.raises(StoreCorruptedError):
        MessageStore.open(str(root), read_only=True)
    check_recovered(root, w.records)
    with open_store(root) as store:
        for topic, qid in (short, long_):
            r = store.put_message(Message(topic, cw.make_body(10**6 + qid, topic, qid, 10), queue_id=qid))
            assert r.is_ok() and r.append_message_result.logics_offset == len(by_queue[(topic, qid)])


def test_reader_of_a_crashed_store_with_an_unreadable_checkpoint_refuses_a_queue_that_lost_its_end(tmp_path):
    """A crashed writer's queues may lag its log at their end; the checkpoint says up to when they were
    flushed. When it cannot be read, a reader cannot tell lost units from a lag: it refuses the store
    naming the queue (a writer's open rebuilds it). Before, the reader opened and the queue's last messages
    were not served (fuzz case 4:2334)."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=28, mapped_file_size_consume_queue=CQ_UNITS * 20)
    topic, qid = _busiest_queue(w)
    files = _queue_files(root, topic, qid)
    os.unlink(files[-1])
    make_abnormal(root)
    with open(os.path.join(str(root), "checkpoint"), "wb") as f:
        f.write(b"\xff" * 4096)
    with pytest.raises(StoreCorruptedError) as ei:
        MessageStore.open(str(root), read_only=True)
    assert ei.value.path == os.path.dirname(files[0])
    check_recovered(root, w.records)


def test_reader_of_a_crashed_store_refuses_a_record_its_queue_check_cannot_pass(tmp_path):
    """A crashed store with a damaged record before the last files (which a reader's recovery walks) and a
    queue whose only file is gone: the reader's check for queues that lost units stops at the damaged
    record, so it cannot see the records of that queue after it; it refuses the store at that record, as a
    writer's open does. Before, the reader opened and that queue looked empty (fuzz case 4:2418)."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=29)
    assert len(cw.log_files(str(root))) > 3
    by_queue = cw.queues_of(w)
    victim = w.records[5]
    later = next(k for k, recs in by_queue.items() if recs[0].offset > victim.offset)
    for path in _queue_files(root, *later):
        os.unlink(path)
    patch(root, victim.offset, struct.pack(">i", 32768))
    make_abnormal(root)
    with pytest.raises(StoreCorruptedError) as ei:
        MessageStore.open(str(root), read_only=True)
    assert ei.value.offset == victim.offset


@pytest.mark.parametrize("garbage", [bytes(20), struct.pack(">qi", 123, 0) + bytes(8)], ids=["zeroed", "torn"])
def test_reader_of_a_crashed_store_says_its_last_records_are_not_served(tmp_path, caplog, garbage):
    """A crashed store whose last unit is zeroed or half written: that is what a writer killed before or while
    dispatching leaves too (with SYNC_FLUSH, after the record was acknowledged), so a reader cannot
    call it damage. It serves the queue up to its last whole unit, serves the record by offset, and says in
    the log that records lie after the furthest unit, not in their queues until a writer's open dispatches
    them (fuzz case 10:3846); the writer's open serves every message."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=31, mapped_file_size_consume_queue=CQ_UNITS * 20)
    last = w.records[-1]
    files = _queue_files(root, last.topic, last.queue_id)
    with open(files[-1], "r+b") as f:
        f.seek(last.queue_offset * 20 - int(os.path.basename(files[-1])))
        f.write(garbage)
    make_abnormal(root)
    with caplog.at_level(logging.WARNING, logger="pystore.engine.recovery"):
        with MessageStore.open(str(root), read_only=True) as store:
            assert store.get_max_offset_in_queue(last.topic, last.queue_id) == last.queue_offset
            cw.check_message(store.look_message_by_offset(last.offset), last.idx)
    assert "%d bytes of records after the furthest consume-queue unit" % last.size in caplog.text
    check_recovered(root, w.records)


def test_reader_of_a_crashed_store_refuses_garbage_as_a_queue_end(tmp_path):
    """Bytes that no write of a unit leaves (0xff over the last unit) are damage, not a crash's lag: the
    reader refuses them, naming the queue file; a writer's open rebuilds the queue and serves every message."""
    root = tmp_path / "store"
    w = build_store(root, messages=400, seed=31, mapped_file_size_consume_queue=CQ_UNITS * 20)
    last = w.records[-1]
    files = _queue_files(root, last.topic, last.queue_id)
    with open(files[-1], "r+b") as f:
        f.seek(last.queue_offset * 20 - int(os.path.basename(files[-1])))
        f.write(b"\xff" * 20)
    make_abnormal(root)
    with pytest.raises(StoreCorruptedError) as ei:
        MessageStore.open(str(root), read_only=True)
    assert ei.value.path == files[-1]
    check_recovered(root, w.records)


def test_queue_folder_beyond_32_bits_is_skipped(tmp_path, caplog):
    """``consumequeue/<topic>/<99999999999999999999999>``: not a queue id (RocketMQ's ``Integer.parseInt``
    fails and the folder is skipped); the open succeeds and says so (before: OverflowError)."""
    root = tmp_path / "store"
    w = build_store(root, messages=50, seed=23)
    os.makedirs(root / "consumequeue" / cw.TOPICS[0] / ("9" * 23))
    os.makedirs(root / "consumequeue" / cw.TOPICS[0] / str(2**31))
    with caplog.at_level(logging.WARNING):
        check_recovered(root, w.records)
    assert "beyond 32 bits" in caplog.text
    with MessageStore.open(str(root), read_only=True) as store:
        assert store.get_max_offset_in_queue(cw.TOPICS[0], 2**31 - 1) == 0
        # a reader lists the folders again at each refresh (every query_message): warned about once each
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            for _ in range(5):
                store.query_message(cw.TOPICS[0], "k1")
        assert caplog.text.count("beyond 32 bits") == 0


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_oldest_files_gone(tmp_path, abnormal):
    """The oldest files are gone, as cleanup leaves a store: it opens with the first file left as its min
    offset and every record from there on. (A file missing in the middle: test_missing_middle_file.)"""
    root = tmp_path / "store"
    w = build_store(root, messages=300)
    names = cw.log_files(str(root))
    for n in names[:2]:
        os.unlink(os.path.join(cw.commitlog_dir(str(root)), n))
    if abnormal:
        make_abnormal(root)
    first = int(names[2])
    kept = [r for r in w.records if r.offset >= first]
    assert kept[0].offset == first
    with open_store(root) as store:
        assert store.get_min_phy_offset() == first
        assert store.get_max_phy_offset() == w.end
        assert store.look_message_by_offset(0) is None
        for r in kept:
            cw.check_message(store.look_message_by_offset(r.offset), r.idx)
    assert [m.commit_log_offset for m in iter_commitlog(str(root), verify_crc=True)] == [
        r.offset for r in kept
    ]


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
@pytest.mark.parametrize("where", ["inside", "first-of-file"])
def test_unit_pointing_into_a_removed_file_after_a_later_unit_is_refused(tmp_path, where, read_only):
    """The oldest log files are gone and a unit in the middle of a queue points into them (fuzz case 8:582):
    a cleaner removes only a queue's oldest records, so that unit is damage, not a removed message. Reads stop
    right before it, and a read starting at it refuses, naming the unit, instead of passing over it and
    never serving the intact record it stood for. Also when it is its file's first unit (the unit ahead of
    it is in the queue's file before)."""
    root = tmp_path / "store"
    cq_units = 8
    w = build_store(root, messages=300, seed=3, mapped_file_size_consume_queue=cq_units * 20)
    names = cw.log_files(str(root))
    os.unlink(os.path.join(cw.commitlog_dir(str(root)), names[0]))
    first = int(names[1])
    by_queue: dict = {}
    for r in w.records:
        by_queue.setdefault((r.topic, r.queue_id), []).append(r)
    want_first = where == "first-of-file"
    victim = next(
        r for recs in by_queue.values() for prev, r in zip(recs, recs[1:])
        if prev.offset >= first and (r.queue_offset % cq_units == 0) == want_first
    )
    queue = by_queue[(victim.topic, victim.queue_id)]
    kept = [r for r in queue if r.offset >= first]
    cq_dir = os.path.join(root, "consumequeue", victim.topic, str(victim.queue_id))
    at = victim.queue_offset * 20
    cq_file = os.path.join(cq_dir, "%020d" % (at - at % (cq_units * 20)))
    with open(cq_file, "r+b") as f:
        f.seek(at % (cq_units * 20))
        f.write(struct.pack(">q", 0))
    with open_store(root, read_only=read_only, mapped_file_size_consume_queue=cq_units * 20) as store:
        r = store.get_message("g", victim.topic, victim.queue_id, kept[0].queue_offset, 64)
        assert r.next_begin_offset == victim.queue_offset
        assert [m.commit_log_offset for m in r.messages] == [
            k.offset for k in kept if k.queue_offset < victim.queue_offset
        ]
        with pytest.raises(StoreCorruptedError) as ei:
            store.get_message("g", victim.topic, victim.queue_id, victim.queue_offset, 64)
        assert (ei.value.path, ei.value.offset) == (cq_file, at)


# ----------------------------------------------------------------------------------------------
# the CRC recovery computes
# ----------------------------------------------------------------------------------------------


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(data=st.binary(max_size=3000), skip=st.integers(0, 15))
@example(data=bytes(64), skip=0)
@example(data=b"\xff" * 4096, skip=3)
def test_recovery_crc_is_zlibs(data, skip):
    """Recovery checks body CRCs with a carry-less-multiplication CRC where the CPU has it: it is zlib's
    CRC-32 (masked to 31 bits) for every length and alignment."""
    import zlib

    from pystore.format._codec import fast_body_crc

    view = memoryview(bytes(skip) + data)[skip:]
    assert fast_body_crc(view) == zlib.crc32(data) & 0x7FFFFFFF


# ----------------------------------------------------------------------------------------------
# any single byte
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """Three files (normal recovery walks them all) and the walk of the intact log."""
    root = tmp_path_factory.mktemp("single-byte") / "store"
    w = build_store(root, messages=110, seed=12)
    assert len(cw.log_files(str(root))) == 3, cw.log_files(str(root))
    return root, w


def _boundaries(w: cw.Walk) -> set[int]:
    """Every place a record or an end-of-file blank starts, and the end of the log."""
    out = {r.offset for r in w.records}
    recs_by_file: dict[int, int] = {}
    for r in w.records:
        recs_by_file[r.offset - r.offset % FILE_SIZE] = r.offset + r.size
    out.update(recs_by_file.values())
    out.add(w.end)
    return out


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    where=st.one_of(
        st.tuples(st.just("anywhere"), st.integers(0, 3 * FILE_SIZE - 1)),
        st.tuples(st.just("near the end"), st.integers(-700, 40)),
    ),
    value=st.integers(0, 255),
    abnormal=st.booleans(),
)
@example(where=("anywhere", FILE_SIZE + 3), value=0, abnormal=False)  # TOTALSIZE, first record of file 1
@example(where=("anywhere", 3 * FILE_SIZE - 1), value=1, abnormal=True)  # the last byte of the last file
@example(where=("near the end", 0), value=7, abnormal=False)  # TOTALSIZE of the free space
def test_any_single_byte_corruption(tmp_path_factory, small_store, where, value, abnormal):
    """Whatever byte is changed, the open either raises StoreCorruptedError at a record boundary no later
    than the damage, without writing, or gives a gap-free log of whole records that keeps every record
    before the damage; the interpreter never crashes."""
    base, w = small_store
    pos = where[1] if where[0] == "anywhere" else min(max(w.end + where[1], 0), 3 * FILE_SIZE - 1)
    root = tmp_path_factory.mktemp("case") / "store"
    shutil.copytree(base, root)
    old = read_at(root, pos, 1)[0]
    if old == value:
        value ^= 0xFF
    patch(root, pos, bytes([value]))
    if abnormal:
        make_abnormal(root)
    bounds = _boundaries(w)
    hit = max(b for b in bounds if b <= pos)  # start of the record (or blank, or free space) hit
    before = tree_digest(root)
    try:
        store = open_store(root)
    except StoreCorruptedError as e:
        event("StoreCorruptedError")
        assert e.offset in bounds and e.offset <= pos, (e, pos)
        assert e.path == file_of(root, e.offset)
        assert tree_digest(root) == before
        shutil.rmtree(root.parent)
        return
    try:
        max_off = store.get_max_phy_offset()
        event("opened, log cut" if max_off < w.end else "opened, log whole")
        assert max_off in bounds and max_off >= min(hit, w.end), (max_off, pos, hit)
        for r in w.records:
            if r.offset + r.size > min(pos, max_off):
                break
            m = store.look_message_by_offset(r.offset)
            assert m is not None and m.raw == read_at(base, r.offset, r.size)
        assert store.look_message_by_offset(max_off) is None
    finally:
        store.shutdown()
    after = cw.walk_log(str(root))
    assert after.end == max_off and after.stop == "end" and not after.data_after_end
    for r in after.records:  # records the damage did not touch are byte-identical
        if not r.offset <= pos < r.offset + r.size:
            assert read_at(root, r.offset, r.size) == read_at(base, r.offset, r.size)
    shutil.rmtree(root.parent)


@pytest.mark.parametrize("bad", [0, ord("/")])
def test_a_nul_or_slash_in_the_last_topic_is_a_torn_record(tmp_path, bad):
    """A zeroed byte inside the topic of the last record (the body CRC cannot see it) must not become a
    consume-queue folder name (``os.makedirs`` refuses NUL; '/' would leave ``consumequeue/``): recovery
    cuts that record and keeps the ones before."""
    root = str(tmp_path / "store")
    with MessageStore.open(root, **cw.SMALL_FILES) as s:
        results = [s.put_message(Message("TopicTest", b"body%d" % i)) for i in range(5)]
    last = results[-1].append_message_result
    body_len = len(b"body4")
    topic_at = last.wrote_offset + 88 + body_len + 1          # V1, IPv4 hosts: body at 88, then topic length
    path = os.path.join(root, "commitlog", "%020d" % 0)
    with open(path, "r+b") as fh:
        fh.seek(topic_at + 2)
        assert fh.read(1) == b"p"
        fh.seek(topic_at + 2)
        fh.write(bytes([bad]))
    open(os.path.join(root, "abort"), "wb").close()          # as if the writer had been killed
    with MessageStore.open(root, **cw.SMALL_FILES) as s:
        assert s.get_max_phy_offset() == last.wrote_offset
        assert s.get_max_offset_in_queue("TopicTest", 0) == 4
        assert sorted(os.listdir(os.path.join(root, "consumequeue"))) == ["TopicTest"]


def test_iter_commitlog_reports_a_missing_middle_file(tmp_path):
    """A commit-log file in the middle of the log is missing: ``iter_commitlog(verify_crc=True)`` raises
    StoreCorruptedError at the missing file's offset, as the store's open does."""
    root = tmp_path / "store"
    build_store(root, messages=300)
    names = cw.log_files(str(root))
    os.unlink(os.path.join(cw.commitlog_dir(str(root)), names[-2]))
    with pytest.raises(StoreCorruptedError) as ei:
        for _ in iter_commitlog(str(root), verify_crc=True):
            pass
    assert ei.value.offset == int(names[-2])
