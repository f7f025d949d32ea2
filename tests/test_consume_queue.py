"""Consume queues byte for byte (docs/format.md §2, §8.1, §8.4, §8.5; RocketMQ ``ConsumeQueueTest``).

* units on disk equal hand-computed ``struct`` bytes (phy i64, size i32, Java ``String.hashCode`` of the
  tags sign-extended to i64), in files of ``mapped_file_size_consume_queue`` bytes with 20-digit names;
* a store folder written by *another* RocketMQ-format writer (built here from docs/format.md with ``struct`` and
  ``tests/reference_codec.py``) is read correctly, and writing continues in its geometry;
* loading: the valid end of each queue, units pointing past the commit log's end dropped, the min offset
  corrected after the commit log's head was deleted (``correctMinOffset``), filler units;
* ``putMessagePositionInfo``: a unit already built is accepted and ignored (``buildCQRepeatedly``);
* ``pystore.tools.iter_consume_queue``.
"""

from __future__ import annotations

import os
import struct

import pytest
import reference_codec as ref
from conftest import BORN_HOST, SMALL_INDEX, make_message

from pystore import GetMessageStatus, MessageStore
from pystore.errors import StoreCorruptedError
from pystore.queue.consume_queue import ConsumeQueue
from pystore.tools import iter_commitlog, iter_consume_queue

UNIT = struct.Struct(">qiq")
FILLER = (0, 0x7FFFFFFF, 0)
TOPIC = "TopicTest"
GROUP = "G"




def cq_dir(root, topic=TOPIC, qid=0):
    return os.path.join(str(root), "consumequeue", topic, str(qid))


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def units_of(data):
    return [UNIT.unpack_from(data, p) for p in range(0, len(data) - 19, 20)]


def tags_code(tags):
    return ref.java_hash(tags) if tags else 0


# ------------------------------------------------------------------------------------------------------
# units written by pystore
# ------------------------------------------------------------------------------------------------------

TAGS = ["TagA", "TagB", None, "polygenelubricants", "hello world!", "标签", "\U0001F600", "Aa", "BB", "a" * 200,
        "TagA||TagB"]


def test_units_on_disk_equal_hand_computed_bytes(store_factory):
    """docs/format.md §2.1/§2.2: big-endian ``(phy i64, size i32, tagsCode i64)``; tagsCode = Java hashCode over
    UTF-16 units (surrogate pairs count twice), 32-bit wrap, sign-extended; 0 without tags."""
    cq_size = 20 * 1000
    store = store_factory(mapped_file_size_consume_queue=cq_size)
    want = b""
    for i, t in enumerate(TAGS):
        r = store.put_message(make_message(i, tags=t))
        a = r.append_message_result
        want += UNIT.pack(a.wrote_offset, a.wrote_bytes, tags_code(t))
    assert any(tags_code(t) < 0 for t in TAGS)            # a negative hash is sign-extended, not masked
    assert tags_code("\U0001F600") == 31 * 0xD83D + 0xDE00
    path = os.path.join(cq_dir(store.root), "%020d" % 0)
    data = read_file(path)
    assert len(data) == cq_size
    assert data[:len(want)] == want
    assert data[len(want):] == bytes(cq_size - len(want))
    # the units point at the records: size and offset agree with the commit log
    records = list(iter_commitlog(os.path.join(store.root, "commitlog")))
    assert [(m.commit_log_offset, m.store_size) for m in records] == [u[:2] for u in units_of(want)]


def test_empty_tags_give_code_zero(store_factory):
    store = store_factory()
    store.put_message(make_message(0, tags=""))
    (u,) = store._cq_store.find(TOPIC, 0).units()
    assert u[2] == 0


def test_files_roll_with_20_digit_names(store_factory):
    units_per_file = 8
    store = store_factory(mapped_file_size_consume_queue=20 * units_per_file)
    rs = [store.put_message(make_message(i, queue_id=3)) for i in range(20)]
    d = cq_dir(store.root, qid=3)
    names = sorted(os.listdir(d))
    assert names == ["%020d" % (20 * units_per_file * k) for k in range(3)]
    assert names[1] == "00000000000000000160"
    data = b"".join(read_file(os.path.join(d, n)) for n in names)
    assert all(os.path.getsize(os.path.join(d, n)) == 160 for n in names)
    want = b"".join(UNIT.pack(r.append_message_result.wrote_offset, r.append_message_result.wrote_bytes,
                              tags_code("TagA")) for r in rs)
    assert data[:len(want)] == want and data[len(want):] == bytes(len(data) - len(want))
    assert store.get_max_offset_in_queue(TOPIC, 3) == 20


def test_consume_queue_size_is_rounded_to_whole_units(store_factory):
    store = store_factory(mapped_file_size_consume_queue=105)      # rounded up to 120
    store.put_message(make_message(0))
    (name,) = os.listdir(cq_dir(store.root))
    assert os.path.getsize(os.path.join(cq_dir(store.root), name)) == 120


def test_iter_consume_queue_of_a_live_store(store_factory):
    store = store_factory(mapped_file_size_consume_queue=20 * 8)
    rs = [store.put_message(make_message(i, tags=TAGS[i % len(TAGS)])) for i in range(30)]
    want = [(r.append_message_result.wrote_offset, r.append_message_result.wrote_bytes,
             tags_code(TAGS[i % len(TAGS)])) for i, r in enumerate(rs)]
    assert list(iter_consume_queue(cq_dir(store.root))) == want
    # one file alone
    first = os.path.join(cq_dir(store.root), "%020d" % 0)
    assert list(iter_consume_queue(first)) == want[:8]
    store.shutdown()
    assert list(iter_consume_queue(cq_dir(store.root))) == want


# ------------------------------------------------------------------------------------------------------
# ConsumeQueue on its own (RocketMQ ConsumeQueueTest)
# ------------------------------------------------------------------------------------------------------


@pytest.fixture
def cq(tmp_path):
    q = ConsumeQueue("T", 0, str(tmp_path / "consumequeue"), 20 * 10)
    yield q
    q.close()


def test_a_queue_times_the_forced_destroy_of_a_held_file_on_its_clock(tmp_path):
    """A file a reader holds is forced out 60 s after the first deletion tried it, on the clock the queue was
    given (the store's), also after its files were discarded to be rebuilt."""
    now = [1_000_000]
    q = ConsumeQueue("T", 0, str(tmp_path / "consumequeue"), 20 * 10, clock=lambda: now[0])
    try:
        for rebuilt in (False, True):
            if rebuilt:
                q.discard_files()
            for i in range(15):                          # two files of 10 units
                q.put_message_position_info(100 * i, 100, 7, i)
            first = q.queue.first()
            held = first.select_mapped_buffer(0)
            assert q.delete_expired_file(1 << 40) == 0 and os.path.exists(first.file_name)
            now[0] += 59_999
            assert q.delete_expired_file(1 << 40) == 0 and os.path.exists(first.file_name)
            now[0] += 1
            assert q.delete_expired_file(1 << 40) == 1 and not os.path.exists(first.file_name)
            held.release()
    finally:
        q.close()


def test_put_message_position_info_build_cq_repeatedly(cq):
    """``testPutMessagePositionInfo_buildCQRepeatedly``: re-putting a unit already there is ignored."""
    cq.put_message_position_info(0, 100, 7, 0)
    cq.put_message_position_info(100, 120, 8, 1)
    before = read_file(os.path.join(cq.folder, "%020d" % 0))
    cq.put_message_position_info(0, 100, 7, 0)          # already built by phy offset
    cq.put_message_position_info(100, 120, 8, 1)
    cq.put_message_position_info(220, 50, 9, 1)         # an offset already taken: ignored too
    assert read_file(os.path.join(cq.folder, "%020d" % 0)) == before
    assert cq.get_max_offset_in_queue() == 2 and list(cq.units()) == [(0, 100, 7), (100, 120, 8)]
    assert cq.max_physic_offset == 220


def test_put_message_position_info_gap_is_appended_in_place(cq):
    """A unit for an offset beyond the end is logged and appended at the end (RocketMQ keeps going)."""
    cq.put_message_position_info(0, 100, 7, 0)
    cq.put_message_position_info(100, 100, 7, 5)
    assert list(cq.units()) == [(0, 100, 7), (100, 100, 7)]


def test_first_file_created_mid_file_is_filled_with_filler_units(cq):
    """``fillPreBlank``: a queue whose first unit is offset 5 gets 5 filler units ``(0, 2**31-1, 0)`` and its
    min offset is 5 (``testFillBankThenCorrectMinOffset``)."""
    cq.put_message_position_info(1000, 100, 3, 5)
    cq.put_message_position_info(1100, 100, 3, 6)
    data = read_file(os.path.join(cq.folder, "%020d" % 0))
    assert units_of(data)[:7] == [FILLER] * 5 + [(1000, 100, 3), (1100, 100, 3)]
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (5, 7)
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 5
    assert list(iter_consume_queue(cq.folder)) == [(1000, 100, 3), (1100, 100, 3)]


def test_first_file_created_at_a_later_file(cq):
    """A queue starting at offset 23 with 10-unit files: the first file is ``…0400`` (byte 400), filled
    from offset 20."""
    cq.put_message_position_info(5000, 100, 0, 23)
    assert os.listdir(cq.folder) == ["%020d" % 400]
    assert (cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()) == (23, 24)
    assert cq.unit(23) == (5000, 100, 0) and cq.unit(20) == FILLER and cq.unit(24) is None


def test_correct_min_offset(cq):
    """``testCorrectMinOffset`` (5.x): binary search for the first unit whose message still exists; a queue
    whose last unit is below the commit log's min is empty from its end."""
    for i in range(25):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.correct_min_offset(0)
    assert cq.get_min_offset_in_queue() == 0
    cq.correct_min_offset(1250)                 # units 13.. start at or above 1300
    assert cq.get_min_offset_in_queue() == 13
    cq.correct_min_offset(1200)                 # never moves back
    assert cq.get_min_offset_in_queue() == 13
    cq.correct_min_offset(2400)
    assert cq.get_min_offset_in_queue() == 24
    cq.correct_min_offset(10**9)
    assert cq.get_min_offset_in_queue() == 25 == cq.get_max_offset_in_queue()


def test_truncate_dirty_logic_files(cq):
    """docs/format.md §8.4: whole files whose first unit is at or past the offset go, then the straddling file's
    tail; max physic offset follows. A unit whose record would run past the offset goes too (recovery cuts at
    a record's end, so only a damaged unit straddles it)."""
    for i in range(25):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.truncate_dirty_logic_files(1550)          # units 0..14 end by 1550; unit 15 (1500..1600) runs past it
    assert cq.get_max_offset_in_queue() == 15 and cq.max_physic_offset == 1500
    assert sorted(os.listdir(cq.folder)) == ["%020d" % 0, "%020d" % 200]
    cq.truncate_dirty_logic_files(1000)
    assert cq.get_max_offset_in_queue() == 10 and cq.max_physic_offset == 1000
    cq.put_message_position_info(1000, 100, 5, 10)
    assert cq.unit(10) == (1000, 100, 5)


# ------------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------------


def test_unit_pointing_past_the_commit_log_end_is_dropped_at_load(store_factory):
    store = store_factory()
    rs = [store.put_message(make_message(i)) for i in range(5)]
    end = store.get_max_phy_offset()
    store.shutdown()
    path = os.path.join(cq_dir(store.root), "%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(5 * 20)
        f.write(UNIT.pack(end, 150, 1) + UNIT.pack(end + 150, 150, 1))
    store = store_factory()
    assert store.get_max_offset_in_queue(TOPIC, 0) == 5
    assert store.get_message(GROUP, TOPIC, 0, 5).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert store.get_topic_queue_table() == {(TOPIC, 0): 5}
    r = store.put_message(make_message(5))
    assert r.append_message_result.logics_offset == 5
    a = r.append_message_result
    assert read_file(path)[100:140] == UNIT.pack(a.wrote_offset, a.wrote_bytes, tags_code("TagA")) + bytes(20)
    assert [m.queue_offset for m in store.get_message(GROUP, TOPIC, 0, 0).messages] == list(range(6))
    store_factory.expect_messages(6)
    del rs


def test_valid_end_of_each_queue_found_at_load(store_factory):
    """Recovery walks units while ``phy >= 0 and size > 0``; files after the end are removed."""
    store = store_factory(mapped_file_size_consume_queue=20 * 4)
    for i in range(10):
        store.put_message(make_message(i, queue_id=i % 2))
    store.shutdown()
    d1 = cq_dir(store.root, qid=1)
    assert sorted(os.listdir(d1)) == ["%020d" % 0, "%020d" % 80]
    store = store_factory(mapped_file_size_consume_queue=20 * 4)
    assert store.get_max_offset_in_queue(TOPIC, 0) == 5 == store.get_max_offset_in_queue(TOPIC, 1)
    assert store.get_topic_queue_table() == {(TOPIC, 0): 5, (TOPIC, 1): 5}
    r = store.put_message(make_message(10, queue_id=1))
    assert r.append_message_result.logics_offset == 5
    store_factory.expect_messages(11)


def test_non_integer_queue_folders_are_skipped(store_factory):
    store = store_factory()
    store.put_message(make_message(0))
    store.shutdown()
    os.makedirs(os.path.join(store.root, "consumequeue", TOPIC, "notaqueue"))
    with open(os.path.join(store.root, "consumequeue", "stray-file"), "wb") as f:
        f.write(b"x")
    store = store_factory()
    assert store.get_topic_queue_table() == {(TOPIC, 0): 1}
    assert store.get_message(GROUP, TOPIC, 0, 0).message_count == 1


# ------------------------------------------------------------------------------------------------------
# a store written by another RocketMQ-format writer
# ------------------------------------------------------------------------------------------------------

FOREIGN_CL = 16 * 1024          # its commit-log files
FOREIGN_CQ = 20 * 10            # its consume-queue files: 10 units each
STORE_HOST = ("192.168.0.1", 10911)
T0 = 1_700_000_000_000


def build_foreign_store(root, plan, first_queue_offset=0):
    """Write a store folder from docs/format.md alone: commit-log records (``reference_codec``), an 8-byte blank at
    each file end, consume-queue units with ``struct``, a 5.x checkpoint. ``plan`` is a list of
    ``(topic, queue_id, tags)``; returns one dict per message with what a reader must see."""
    os.makedirs(os.path.join(root, "commitlog"))
    files: dict[int, bytearray] = {0: bytearray(FOREIGN_CL)}
    file_start, pos = 0, 0
    next_qoff: dict[tuple[str, int], int] = {}
    msgs = []
    for i, (topic, qid, tags) in enumerate(plan):
        props = {}
        if tags is not None:
            props["TAGS"] = tags
        props["KEYS"] = "fk%d" % i
        props["UNIQ_KEY"] = "U%04d" % i
        body = b"foreign body %d " % i + bytes(range(i % 50))
        qoff = next_qoff.get((topic, qid), first_queue_offset)
        store_ts = T0 + 1000 * i
        args = dict(topic=topic, body=body, properties_string=ref.properties_string(props), queue_id=qid, flag=i,
                    queue_offset=qoff, sys_flag=0, born_ts=store_ts - 5, born_host=BORN_HOST, store_ts=store_ts,
                    store_host=STORE_HOST, reconsume_times=0, prepared_tx_offset=0)
        rec = ref.encode(phy_offset=file_start + pos, **args)
        if len(rec) + 8 > FOREIGN_CL - pos:
            files[file_start][pos:pos + 8] = ref.encode_blank(FOREIGN_CL - pos)
            file_start += FOREIGN_CL
            files[file_start] = bytearray(FOREIGN_CL)
            pos = 0
            rec = ref.encode(phy_offset=file_start, **args)
        files[file_start][pos:pos + len(rec)] = rec
        next_qoff[(topic, qid)] = qoff + 1
        msgs.append(dict(topic=topic, queue_id=qid, queue_offset=qoff, phy=file_start + pos, size=len(rec),
                         body=body,
                         tags=tags, store_ts=store_ts, keys=["fk%d" % i], flag=i, uniq="U%04d" % i))
        pos += len(rec)
    for start, data in files.items():
        with open(os.path.join(root, "commitlog", "%020d" % start), "wb") as f:
            f.write(data)
    by_queue: dict[tuple[str, int], list] = {}
    for m in msgs:
        by_queue.setdefault((m["topic"], m["queue_id"]), []).append(m)
    for (topic, qid), ms in by_queue.items():
        d = cq_dir(root, topic, qid)
        os.makedirs(d)
        raw = b"".join(UNIT.pack(m["phy"], m["size"], tags_code(m["tags"])) for m in ms)
        for start in range(0, len(raw), FOREIGN_CQ):
            chunk = raw[start:start + FOREIGN_CQ]
            with open(os.path.join(d, "%020d" % start), "wb") as f:
                f.write(chunk + bytes(FOREIGN_CQ - len(chunk)))
    with open(os.path.join(root, "checkpoint"), "wb") as f:
        last = msgs[-1]["store_ts"]
        f.write(struct.pack(">qqqqq", last, last, 0, 0, 0).ljust(4096, b"\0"))
    return msgs


PLAN = ([("TopicX", 0, "TagA")] * 3 + [("TopicX", 1, "TagB"), ("TopicY", 0, None)] * 20
        + [("TopicX", 0, "\U0001F600"), ("TopicX", 0, "TagA")] * 40)


@pytest.fixture
def foreign(tmp_path):
    root = str(tmp_path / "foreign")
    msgs = build_foreign_store(root, PLAN)
    assert len(os.listdir(os.path.join(root, "commitlog"))) >= 2          # it spans files
    assert len(os.listdir(cq_dir(root, "TopicX", 0))) >= 8
    return root, msgs


def _check_foreign_reads(store, msgs):
    queues: dict[tuple[str, int], list] = {}
    for m in msgs:
        queues.setdefault((m["topic"], m["queue_id"]), []).append(m)
    assert store.get_topic_queue_table() == {k: len(v) for k, v in queues.items()}
    for (topic, qid), ms in queues.items():
        assert store.get_max_offset_in_queue(topic, qid) == len(ms)
        assert store.get_min_offset_in_queue(topic, qid) == 0
        got, off = [], 0
        while off < len(ms):
            r = store.get_message(GROUP, topic, qid, off, 32)
            assert r.status is GetMessageStatus.FOUND
            got += r.messages
            off = r.next_begin_offset
        assert len(got) == len(ms)
        for g, m in zip(got, ms, strict=True):
            assert (g.topic, g.queue_id, g.queue_offset, g.commit_log_offset, g.store_size) == (
                topic, qid, m["queue_offset"], m["phy"], m["size"])
            assert (g.body, g.tags, g.keys, g.store_timestamp, g.flag, g.uniq_key) == (
                m["body"], m["tags"], m["keys"], m["store_ts"], m["flag"], m["uniq"])
            assert g.store_host == STORE_HOST and g.msg_id == ref.msg_id(STORE_HOST, m["phy"])
        for m in ms:
            assert store.get_offset_in_queue_by_time(topic, qid, m["store_ts"]) == m["queue_offset"]
            assert store.get_offset_in_queue_by_time(topic, qid, m["store_ts"] - 1, boundary="upper") == max(
                m["queue_offset"] - 1, 0)
            assert store.get_message_store_timestamp(topic, qid, m["queue_offset"]) == m["store_ts"]
            assert store.get_commit_log_offset_in_queue(topic, qid, m["queue_offset"]) == m["phy"]
    emoji = [m for m in msgs if m["tags"] == "\U0001F600"]
    r = store.get_message(GROUP, "TopicX", 0, 0, 32, "\U0001F600")
    assert [g.queue_offset for g in r.messages] == [m["queue_offset"] for m in emoji[:len(r.messages)]]
    assert r.messages and r.status is GetMessageStatus.FOUND
    assert store.get_earliest_message_time() == T0


def test_foreign_consume_queues_are_read(foreign):
    root, msgs = foreign
    for name in sorted(os.listdir(cq_dir(root, "TopicX", 0))):
        assert os.path.getsize(os.path.join(cq_dir(root, "TopicX", 0), name)) == FOREIGN_CQ
    # the configured geometry (1 GiB / 6 MB files) differs from the folder's: the files' wins
    with MessageStore.open(root, **SMALL_INDEX) as store:
        _check_foreign_reads(store, msgs)
    assert os.listdir(os.path.join(root, "commitlog")) and not os.path.exists(os.path.join(root, "abort"))


def test_foreign_consume_queues_read_only(foreign):
    root, msgs = foreign
    before = {n: read_file(os.path.join(cq_dir(root, "TopicX", 0), n))
              for n in os.listdir(cq_dir(root, "TopicX", 0))}
    with MessageStore.open(root, read_only=True, **SMALL_INDEX) as store:
        _check_foreign_reads(store, msgs)
    after = {n: read_file(os.path.join(cq_dir(root, "TopicX", 0), n))
             for n in os.listdir(cq_dir(root, "TopicX", 0))}
    assert before == after


def test_iter_consume_queue_of_a_foreign_queue(foreign):
    root, msgs = foreign
    want = [(m["phy"], m["size"], tags_code(m["tags"]))
            for m in msgs if (m["topic"], m["queue_id"]) == ("TopicX", 0)]
    assert list(iter_consume_queue(cq_dir(root, "TopicX", 0))) == want
    assert list(iter_consume_queue(cq_dir(root, "TopicY", 0))) == [
        (m["phy"], m["size"], 0) for m in msgs if m["topic"] == "TopicY"]


def test_writing_continues_in_the_foreign_geometry(foreign):
    root, msgs = foreign
    n0 = sum(1 for m in msgs if (m["topic"], m["queue_id"]) == ("TopicX", 0))
    with MessageStore.open(root, **SMALL_INDEX) as store:
        rs = [store.put_message(make_message(i, topic="TopicX", tags="TagZ")) for i in range(12)]
        assert [r.append_message_result.logics_offset for r in rs] == list(range(n0, n0 + 12))
        r = store.get_message(GROUP, "TopicX", 0, n0, 32, "TagZ")
        assert r.message_count == FOREIGN_CQ // 20 - n0 % (FOREIGN_CQ // 20)     # up to the CQ file's end
    d = cq_dir(root, "TopicX", 0)
    assert all(os.path.getsize(os.path.join(d, n)) == FOREIGN_CQ for n in os.listdir(d))
    assert all(os.path.getsize(os.path.join(root, "commitlog", n)) == FOREIGN_CL
               for n in os.listdir(os.path.join(root, "commitlog")))
    units = list(iter_consume_queue(d))
    assert units[n0:] == [(r.append_message_result.wrote_offset, r.append_message_result.wrote_bytes,
                           tags_code("TagZ")) for r in rs]


def test_foreign_queue_whose_head_files_were_deleted(tmp_path):
    """A queue whose first files are gone (RocketMQ deleted them with the commit log's head): the min offset
    is the first file's first unit, and older offsets are OFFSET_TOO_SMALL."""
    root = str(tmp_path / "foreign")
    plan = [("TopicX", 0, "TagA")] * 150
    msgs = build_foreign_store(root, plan)
    d = cq_dir(root, "TopicX", 0)
    cl_files = sorted(os.listdir(os.path.join(root, "commitlog")))
    os.unlink(os.path.join(root, "commitlog", cl_files[0]))
    second = int(cl_files[1])
    alive = [m for m in msgs if m["phy"] >= second]
    for name in sorted(os.listdir(d)):
        last_unit = UNIT.unpack_from(read_file(os.path.join(d, name)), FOREIGN_CQ - 20)
        if last_unit[0] < second and last_unit[1] > 0:
            os.unlink(os.path.join(d, name))          # what RocketMQ's CleanConsumeQueueService removes
    with MessageStore.open(root, **SMALL_INDEX) as store:
        low = alive[0]["queue_offset"]
        assert store.get_min_offset_in_queue("TopicX", 0) == low
        assert store.get_max_offset_in_queue("TopicX", 0) == 150
        r = store.get_message(GROUP, "TopicX", 0, 0)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == low
        r = store.get_message(GROUP, "TopicX", 0, low, 3)
        assert [m.body for m in r.messages] == [m["body"] for m in alive[:3]]
        assert store.get_offset_in_queue_by_time("TopicX", 0, T0) == low
        assert store.get_earliest_message_time("TopicX", 0) == alive[0]["store_ts"]


def _rewrite_with_fillers(d: str, msgs: list[dict], fillers: int) -> None:
    """Replace the queue's files by ``fillers`` filler units followed by one unit per message."""
    units = [UNIT.pack(*FILLER)] * fillers + [UNIT.pack(m["phy"], m["size"], tags_code("TagA")) for m in msgs]
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    raw = b"".join(units)
    for start in range(0, len(raw), FOREIGN_CQ):
        with open(os.path.join(d, "%020d" % start), "wb") as f:
            f.write(raw[start:start + FOREIGN_CQ].ljust(FOREIGN_CQ, b"\0"))


def test_foreign_queue_with_filler_units(tmp_path):
    """A RocketMQ queue created at offset 4 (``fillPreBlank``): fillers are skipped, the min offset is 4."""
    root = str(tmp_path / "foreign")
    msgs = build_foreign_store(root, [("TopicX", 0, "TagA")] * 6, first_queue_offset=4)
    d = cq_dir(root, "TopicX", 0)
    _rewrite_with_fillers(d, msgs, 4)
    with MessageStore.open(root, read_only=True, **SMALL_INDEX) as store:
        assert store.get_min_offset_in_queue("TopicX", 0) == 4
        assert store.get_max_offset_in_queue("TopicX", 0) == 10
        r = store.get_message(GROUP, "TopicX", 0, 0)
        assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 4
        r = store.get_message(GROUP, "TopicX", 0, 4, 32)
        assert [m.body for m in r.messages] == [m["body"] for m in msgs]
        assert r.next_begin_offset == 10
    assert list(iter_consume_queue(d)) == [(m["phy"], m["size"], tags_code("TagA")) for m in msgs]


def test_unit_whose_record_names_another_queue_offset_is_damage(tmp_path):
    """Units at queue offsets 4..9 over records that say 0..5: the queue and the log disagree. The reader's
    open finds the queue's end past its records' highest queue offset and refuses the store naming the
    queue's file; the read's own check (the unit against its record, naming the unit) stays behind it, for a
    live store: with the open's check stepped over, a read refuses the unit instead of serving the record."""
    root = str(tmp_path / "foreign")
    msgs = build_foreign_store(root, [("TopicX", 0, "TagA")] * 6)
    d = cq_dir(root, "TopicX", 0)
    _rewrite_with_fillers(d, msgs, 4)
    with pytest.raises(StoreCorruptedError) as e:
        MessageStore.open(root, read_only=True, **SMALL_INDEX)
    assert e.value.path == os.path.join(d, "%020d" % 0) and "another queue" in str(e.value)
    import pystore.engine.recovery_plan as recovery_plan

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(recovery_plan, "_queues_past_their_records", lambda queues, log: [])
        with MessageStore.open(root, read_only=True, **SMALL_INDEX) as store:
            with pytest.raises(StoreCorruptedError) as e:
                store.get_message(GROUP, "TopicX", 0, 4, 32)
    assert e.value.path == os.path.join(d, "%020d" % 0) and e.value.offset == 4 * 20
    assert "queue offset 0" in str(e.value)


def test_a_full_flush_reaches_the_end_of_every_queue(store_factory):
    """``ConsumeQueueStore.flush(0)`` (the thorough flush before the checkpoint claims the queues, and
    shutdown's) syncs every file of a queue up to its end, not only the file at its flushed position: a
    queue several files ahead of its flusher otherwise had units the checkpoint claimed but no sync wrote
    (zeros after a power cut)."""
    store = store_factory(mapped_file_size_consume_queue=20 * 4, flush_interval_consume_queue=3_600_000,
                          flush_consume_queue_thorough_interval=3_600_000)
    for i in range(30):
        assert store.put_message(make_message(i)).is_ok()
    cq = store._cq_store.find("TopicTest", 0)
    assert len(cq.queue.files) >= 8 and cq.queue.flushed_where < cq.queue.get_max_offset()
    store._cq_store.flush(0)
    assert cq.queue.flushed_where == cq.queue.get_max_offset() == 30 * 20
    assert all(mf.flushed_position == mf.wrote_position for mf in cq.queue.files)


def test_a_readers_walk_on_a_live_file_that_the_writer_fills_to_its_end(tmp_path, monkeypatch):
    """As below, and the units the writer writes meanwhile fill the file: the walk on reaches the file's end, and
    the file is whole (before, the open raised ``ValueError: no unit at <file size>``; a follower of several
    writers hit it in tests/test_shared_writers.py)."""
    import pystore.queue.consume_queue as consume_queue

    root = str(tmp_path / "live")
    geometry = {**SMALL_INDEX, "mapped_file_size_consume_queue": 8 * 20}
    with MessageStore.open(root, **geometry) as w:
        for i in range(8):                          # the queue's one file, full
            assert w.put_message(make_message(i, topic=TOPIC)).is_ok()
    path = os.path.join(cq_dir(root), "%020d" % 0)
    unit = read_file(path)[5 * 20:6 * 20]
    with open(path, "r+b") as f:
        f.seek(5 * 20)
        f.write(b"\0" * 20)
    real = consume_queue.next_valid_unit

    def writer_fills_it(mf, start):
        with open(path, "r+b") as f:
            f.seek(5 * 20)
            f.write(unit)
        return real(mf, start)

    monkeypatch.setattr(consume_queue, "next_valid_unit", writer_fills_it)
    with MessageStore.open(root, read_only=True, **geometry) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == 8
        assert [m.queue_offset for m in store.get_message(GROUP, TOPIC, 0, 0, 32).messages] == list(range(8))


@pytest.mark.parametrize("filled", [True, False])
def test_a_reader_walks_on_over_a_unit_a_live_writer_filled_behind_its_walk(tmp_path, monkeypatch, filled):
    """A reader's open walks a live writer's last queue file: the walk stops at a unit not written yet, and by the
    time it looks for units after it the writer has written that one and the next (in order). The reader walks
    on from the unit (``_walk_on_live``) instead of refusing the store; a unit that stays empty while units
    follow it (``filled`` False) is still damage, refused as before."""
    import pystore.queue.consume_queue as consume_queue

    root = str(tmp_path / "live")
    with MessageStore.open(root, **SMALL_INDEX) as w:
        for i in range(8):
            assert w.put_message(make_message(i, topic=TOPIC)).is_ok()
    path = os.path.join(cq_dir(root), "%020d" % 0)
    unit = read_file(path)[5 * 20:6 * 20]
    with open(path, "r+b") as f:                  # unit 5 not yet written: the walk stops there
        f.seek(5 * 20)
        f.write(b"\0" * 20)
    real = consume_queue.next_valid_unit

    def writer_fills_it(mf, start):
        if filled:
            with open(path, "r+b") as f:           # the writer writes unit 5 meanwhile
                f.seek(5 * 20)
                f.write(unit)
        return real(mf, start)

    monkeypatch.setattr(consume_queue, "next_valid_unit", writer_fills_it)
    if not filled:
        with pytest.raises(StoreCorruptedError, match="an empty or invalid unit with units after it"):
            MessageStore.open(root, read_only=True, **SMALL_INDEX)
        return
    with MessageStore.open(root, read_only=True, **SMALL_INDEX) as store:
        assert store.get_max_offset_in_queue(TOPIC, 0) == 8
        assert [m.queue_offset for m in store.get_message(GROUP, TOPIC, 0, 0, 32).messages] == list(range(8))
