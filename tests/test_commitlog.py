"""The commit log through the store (docs/format.md §1, §6.5, §8; RocketMQ DefaultMessageStoreTest,
BatchPutMessageTest, AppendCallbackTest, ReputMessageServiceTest's record sizes)."""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib

import pytest
from conftest import BORN_BASE, BORN_HOST, SMALL_FILE, make_message
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pystore import Message, MessageBatch, PutMessageStatus
from pystore.engine.store import MessageStore
from pystore.errors import StoreClosedError
from pystore.status import AppendMessageStatus

# Record layout, docs/format.md §1.2 (both hosts IPv4)
POS_TOTALSIZE, POS_MAGIC, POS_BODYCRC, POS_QUEUEID, POS_FLAG = 0, 4, 8, 12, 16
POS_QUEUEOFFSET, POS_PHYSICALOFFSET, POS_SYSFLAG, POS_BORNTIMESTAMP, POS_BORNHOST = 20, 28, 36, 40, 48
POS_STORETIMESTAMP, POS_STOREHOST, POS_RECONSUMETIMES, POS_PREPAREDTX, POS_BODYLENGTH = 56, 64, 72, 76, 84
FIXED_V1 = 91
MAGIC_V1, MAGIC_V2, BLANK_MAGIC = 0xDAA320A7, 0xDAA320AB, 0xCBD43194
STORE_HOST = ("127.0.0.1", 10911)


def props_string(props: dict[str, str]) -> bytes:
    return "".join("%s\x01%s\x02" % kv for kv in props.items()).encode()


def expected_size(topic: str, body: bytes, props: dict[str, str]) -> int:
    t = len(topic.encode())
    return FIXED_V1 + len(body) + t + len(props_string(props)) + (1 if len(topic) > 127 else 0)


def std_props(i: int) -> dict[str, str]:
    return {"TAGS": "TagA", "KEYS": "key%d" % i}


def file_path(store: MessageStore, offset: int) -> str:
    return os.path.join(store.root, "commitlog", "%020d" % offset)


def read_disk(path: str, pos: int, n: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(pos)
        return fh.read(n)


def decode_msg_id(msg_id: str) -> tuple[str, int, int]:
    raw = bytes.fromhex(msg_id)
    assert len(raw) == 16
    return ".".join(str(b) for b in raw[:4]), int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:], "big")


def snapshot(store: MessageStore) -> tuple[int, dict, list[bytes]]:
    """What must survive a refused put: max offset, queue table, every body in order."""
    bodies = []
    off = store.get_min_phy_offset()
    end = store.get_max_phy_offset()
    while 0 <= off < end:
        m = store.look_message_by_offset(off)
        if m is None:                       # the blank at a file end: next file
            off = off - off % SMALL_FILE + SMALL_FILE
            continue
        bodies.append(m.body)
        off += m.store_size
    return end, store.get_topic_queue_table(), bodies


def settles(predicate, timeout=60.0) -> bool:
    """True once ``predicate()`` holds (background services may hold a file for a moment)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture
def store(store_factory):
    return store_factory()


# -- put and look -----------------------------------------------------------------------------------


def test_put_and_look_round_trip(store, store_factory):
    msg = make_message(7, flag=3, properties={"a": "1", "UNIQ_KEY": "UNIQ0"}, reconsume_times=2,
                       prepared_transaction_offset=0)
    t0 = int(time.time() * 1000)
    r = store.put_message(msg)
    t1 = int(time.time() * 1000)
    assert r.status is PutMessageStatus.PUT_OK and r.is_ok()
    a = r.append_message_result
    assert a.status is AppendMessageStatus.PUT_OK
    props = {"TAGS": "TagA", "KEYS": "key7", "a": "1", "UNIQ_KEY": "UNIQ0"}
    size = expected_size("TopicTest", b"Hello RocketMQ 7", props)
    assert (a.wrote_offset, a.wrote_bytes, a.logics_offset, a.msg_num) == (0, size, 0, 1)
    assert t0 <= a.store_timestamp <= t1

    m = store.look_message_by_offset(0)
    assert m.topic == "TopicTest"
    assert m.body == b"Hello RocketMQ 7"
    assert m.tags == "TagA" and m.keys == ["key7"] and m.uniq_key == "UNIQ0"
    assert m.properties == props
    assert m.flag == 3 and m.queue_id == 0 and m.queue_offset == 0
    assert m.commit_log_offset == 0 and m.store_size == size
    assert m.sys_flag == 0 and m.reconsume_times == 2 and m.prepared_transaction_offset == 0
    assert m.born_timestamp == BORN_BASE + 7 and m.born_host == BORN_HOST
    assert m.store_timestamp == a.store_timestamp and m.store_host == STORE_HOST
    assert m.body_crc == zlib.crc32(b"Hello RocketMQ 7") & 0x7FFFFFFF
    assert m.msg_id == a.msg_id
    assert store.get_max_phy_offset() == size
    store_factory.expect_messages(1)


def test_record_bytes_on_disk(store):
    """The record as docs/format.md §1.2 draws it, field by field, read from the file."""
    r = store.put_message(make_message(0, flag=5, queue_id=2))
    store.flush()
    a = r.append_message_result
    raw = read_disk(file_path(store, 0), 0, a.wrote_bytes)
    body, topic = b"Hello RocketMQ 0", b"TopicTest"
    props = props_string(std_props(0))
    assert struct.unpack_from(">iI", raw, POS_TOTALSIZE) == (a.wrote_bytes, MAGIC_V1)
    assert struct.unpack_from(">i", raw, POS_BODYCRC)[0] == zlib.crc32(body) & 0x7FFFFFFF
    assert struct.unpack_from(">iiqqiq", raw, POS_QUEUEID) == (2, 5, 0, 0, 0, BORN_BASE)
    assert raw[POS_BORNHOST:POS_BORNHOST + 8] == bytes([127, 0, 0, 1]) + struct.pack(">i", 50000)
    assert struct.unpack_from(">q", raw, POS_STORETIMESTAMP)[0] == a.store_timestamp
    assert raw[POS_STOREHOST:POS_STOREHOST + 8] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert struct.unpack_from(">iqi", raw, POS_RECONSUMETIMES) == (0, 0, len(body))
    p = POS_BODYLENGTH + 4
    assert raw[p:p + len(body)] == body
    p += len(body)
    assert raw[p] == len(topic) and raw[p + 1:p + 1 + len(topic)] == topic
    p += 1 + len(topic)
    assert struct.unpack_from(">h", raw, p)[0] == len(props)
    assert raw[p + 2:] == props


def test_reput_service_test_sizes(store, store_factory):
    """ReputMessageServiceTest: 10 messages of 158 bytes make max phy offset 1580."""
    for i in range(10):
        m = Message("FooBar", b"Once, there was a chance for me!", tags="TAG1", keys=["%013d" % i])
        r = store.put_message(m)
        assert r.append_message_result.wrote_bytes == 158
    assert store.get_max_phy_offset() == 1580
    store_factory.expect_messages(10)


def test_message_ids(store):
    results = [store.put_message(make_message(i)) for i in range(3)]
    for r in results:
        a = r.append_message_result
        assert len(a.msg_id) == 32
        assert a.msg_id == a.msg_id.upper()
        assert decode_msg_id(a.msg_id) == ("127.0.0.1", 10911, a.wrote_offset)
        assert store.view_message_by_id(a.msg_id).commit_log_offset == a.wrote_offset


def test_store_host_ipv6_gives_56_char_ids(store_factory):
    s = store_factory(store_host=("::1", 10911))
    r = s.put_message(make_message(0, born_host=("2001:db8::1", 1234)))
    a = r.append_message_result
    assert len(a.msg_id) == 56
    raw = bytes.fromhex(a.msg_id)
    assert raw[:16] == bytes(15) + b"\x01" and int.from_bytes(raw[16:20], "big") == 10911
    m = s.look_message_by_offset(0)
    assert m.store_host == ("::1", 10911) and m.born_host == ("2001:db8::1", 1234)
    assert m.sys_flag & 0x30 == 0x30
    assert a.wrote_bytes == expected_size("TopicTest", b"Hello RocketMQ 0", std_props(0)) + 24
    assert s.view_message_by_id(a.msg_id).body == b"Hello RocketMQ 0"


def test_long_topic_uses_v2_records(store, store_factory):
    t127, t128, t255 = "a" * 127, "b" * 128, "c" * 255
    offs = {}
    for t in (t127, t128, t255):
        r = store.put_message(Message(t, b"x"))
        assert r.status is PutMessageStatus.PUT_OK
        assert r.append_message_result.wrote_bytes == expected_size(t, b"x", {})
        offs[t] = r.append_message_result.wrote_offset
    store.flush()
    for t, magic in ((t127, MAGIC_V1), (t128, MAGIC_V2), (t255, MAGIC_V2)):
        assert struct.unpack(">I", read_disk(file_path(store, 0), offs[t] + POS_MAGIC, 4))[0] == magic
        assert store.look_message_by_offset(offs[t]).topic == t
    store_factory.expect_messages(3)


def test_consecutive_queue_offsets_per_topic_and_queue(store, store_factory):
    plan = [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("A", 0), ("B", 0), ("A", 1)]
    seen = {}
    for i, (topic, q) in enumerate(plan):
        r = store.put_message(make_message(i, topic=topic, queue_id=q))
        assert r.append_message_result.logics_offset == seen.get((topic, q), 0)
        seen[(topic, q)] = seen.get((topic, q), 0) + 1
        m = store.look_message_by_offset(r.append_message_result.wrote_offset)
        assert m.queue_offset == r.append_message_result.logics_offset
    assert store.get_topic_queue_table() == {("A", 0): 3, ("A", 1): 2, ("B", 0): 2}
    store_factory.expect_messages(len(plan))


def test_look_message_by_offset_first_last_and_out_of_bound(store):
    """testLookMessageByOffset_OffsetIsFirst / _OffsetIsLast / _OffsetIsOutOfBound."""
    results = [store.put_message(make_message(i)) for i in range(10)]
    first = store.look_message_by_offset(results[0].append_message_result.wrote_offset)
    last = store.look_message_by_offset(results[-1].append_message_result.wrote_offset)
    assert first.body == b"Hello RocketMQ 0"
    assert last.body == b"Hello RocketMQ 9"
    end = store.get_max_phy_offset()
    assert end == results[-1].next_offset
    assert store.look_message_by_offset(end) is None
    assert store.look_message_by_offset(end + 1000) is None
    assert store.look_message_by_offset(SMALL_FILE * 5) is None
    assert store.look_message_by_offset(-1) is None


@pytest.mark.parametrize("delta", [1, 4, 8, 28, 50])
def test_look_message_by_offset_at_a_non_record_offset(store, delta):
    a = store.put_message(make_message(0)).append_message_result
    store.put_message(make_message(1))
    assert store.look_message_by_offset(a.wrote_offset + delta) is None


def test_view_message_by_id(store):
    ids = [store.put_message(make_message(i)).append_message_result.msg_id for i in range(3)]
    for i, mid in enumerate(ids):
        m = store.view_message_by_id(mid)
        assert m.body == b"Hello RocketMQ %d" % i and m.msg_id == mid
    beyond = "7F00000100002A9F" + "%016X" % store.get_max_phy_offset()
    assert store.view_message_by_id(beyond) is None
    with pytest.raises(ValueError):
        store.view_message_by_id("1234")
    with pytest.raises(ValueError):
        store.view_message_by_id("Z" * 32)
    with pytest.raises(TypeError):
        store.view_message_by_id(12)


# -- batches (BatchPutMessageTest, AppendCallbackTest) ---------------------------------------------


def test_batch_put_offsets_are_cumulative_record_lengths(store, store_factory):
    store.put_message(make_message(100, queue_id=1))
    msgs = [make_message(i, queue_id=1, born_timestamp=BORN_BASE + 100 * i, flag=i,
                         born_host=("10.0.0.%d" % (i + 1), 4000 + i)) for i in range(10)]
    r = store.put_messages(MessageBatch(msgs))
    assert r.status is PutMessageStatus.PUT_OK
    a = r.append_message_result
    sizes = [expected_size("TopicTest", m.body, std_props(i)) for i, m in enumerate(msgs)]
    start = expected_size("TopicTest", b"Hello RocketMQ 100", std_props(100))
    assert (a.wrote_offset, a.wrote_bytes, a.msg_num, a.logics_offset) == (start, sum(sizes), 10, 1)
    ids = a.msg_id.split(",")
    assert len(ids) == 10
    off = start
    for i, (m, size, mid) in enumerate(zip(msgs, sizes, ids)):
        assert len(mid) == 32 and decode_msg_id(mid) == ("127.0.0.1", 10911, off)
        got = store.look_message_by_offset(off)
        assert got.body == m.body and got.store_size == size
        assert got.queue_offset == 1 + i
        assert got.store_timestamp == a.store_timestamp          # one lock hold, one store time
        assert got.flag == i and got.born_host == ("10.0.0.%d" % (i + 1), 4000 + i)
        assert got.born_timestamp == BORN_BASE + 100 * i
        off += size
    assert store.get_max_phy_offset() == off
    assert store.get_topic_queue_table() == {("TopicTest", 1): 11}
    store_factory.expect_messages(11)


def test_batch_of_ipv6_born_hosts(store):
    msgs = [make_message(i, born_host=("::ffff:1.2.3.4", 99)) for i in range(3)]
    a = store.put_messages(MessageBatch(msgs)).append_message_result
    sizes = [expected_size("TopicTest", m.body, std_props(i)) + 12 for i, m in enumerate(msgs)]
    assert a.wrote_bytes == sum(sizes)
    m = store.look_message_by_offset(sizes[0])
    assert m.born_host == ("::ffff:102:304", 99) and m.sys_flag & 0x10


def test_batch_never_spans_two_files(store, store_factory):
    n = 0
    while True:       # fill the first file until ~3 KB are left
        r = store.put_message(make_message(n, body_size=1000))
        n += 1
        if SMALL_FILE - r.next_offset < 3000:
            break
    end_of_data = store.get_max_phy_offset()
    msgs = [make_message(1000 + i, body_size=500) for i in range(6)]      # ~3.7 KB together
    a = store.put_messages(MessageBatch(msgs)).append_message_result
    assert a.wrote_offset == SMALL_FILE                                 # moved whole to the next file
    store.flush()
    blank = read_disk(file_path(store, 0), end_of_data, 8)
    assert struct.unpack(">iI", blank) == (SMALL_FILE - end_of_data, BLANK_MAGIC)
    off = SMALL_FILE
    for m in msgs:
        got = store.look_message_by_offset(off)
        assert got.body == m.body
        off += got.store_size
    assert store.look_message_by_offset(end_of_data) is None
    store_factory.expect_messages(n + 6)


def test_batch_that_fits_exactly_leaves_room_for_the_blank(store):
    """A batch is appended only if it and an 8-byte blank fit."""
    m = make_message(0, body_size=100)
    size = expected_size("TopicTest", m.body, std_props(0))
    k = (SMALL_FILE - 8) // size
    pad = SMALL_FILE - 8 - k * size          # bytes the batch is short of filling the file minus 8
    r = store.put_messages(MessageBatch([make_message(0, body_size=100) for _ in range(k)]))
    assert r.append_message_result.wrote_offset == 0
    assert r.next_offset == SMALL_FILE - 8 - pad
    if pad >= FIXED_V1 + len("TopicTest") + 20 + 1:
        last = make_message(1, body_size=pad - (FIXED_V1 + len("TopicTest") + 20))
        r2 = store.put_message(last)
        assert r2.append_message_result.wrote_offset == SMALL_FILE - 8 - pad
        assert r2.next_offset == SMALL_FILE - 8
    r3 = store.put_message(make_message(2))
    assert r3.append_message_result.wrote_offset == SMALL_FILE


# -- files roll ------------------------------------------------------------------------------------


def test_files_roll_with_a_blank_and_offset_names(store, store_factory):
    results = []
    while store.get_max_phy_offset() < 2 * SMALL_FILE + 100:
        results.append(store.put_message(make_message(len(results), body_size=777)))
    store.flush()
    names = sorted(n for n in os.listdir(os.path.join(store.root, "commitlog")))
    assert names[:3] == ["%020d" % 0, "%020d" % SMALL_FILE, "%020d" % (2 * SMALL_FILE)]
    for k in (0, 1):
        start = k * SMALL_FILE
        in_file = [r for r in results if start <= r.append_message_result.wrote_offset < start + SMALL_FILE]
        first_next = next(r for r in results if r.append_message_result.wrote_offset >= start + SMALL_FILE)
        assert first_next.append_message_result.wrote_offset == start + SMALL_FILE
        end = in_file[-1].next_offset - start
        left = SMALL_FILE - end
        assert 8 <= left < in_file[-1].append_message_result.wrote_bytes + 8
        total, magic = struct.unpack(">iI", read_disk(file_path(store, start), end, 8))
        assert (total, magic) == (left, BLANK_MAGIC)
        assert os.path.getsize(file_path(store, start)) == SMALL_FILE
    assert store.get_min_phy_offset() == 0
    store_factory.expect_messages(len(results))


def test_record_filling_the_file_minus_eight_is_accepted(store_factory):
    s = store_factory()
    over = FIXED_V1 + len("TopicTest") + len(props_string(std_props(0)))
    r = s.put_message(make_message(0, body_size=SMALL_FILE - 8 - over))
    assert r.status is PutMessageStatus.PUT_OK
    assert r.next_offset == SMALL_FILE - 8
    r2 = s.put_message(make_message(1))
    assert r2.append_message_result.wrote_offset == SMALL_FILE
    s.flush()
    assert struct.unpack(">iI", read_disk(file_path(s, 0), SMALL_FILE - 8, 8)) == (8, BLANK_MAGIC)
    store_factory.expect_messages(2)


# -- refused puts ----------------------------------------------------------------------------------


@pytest.fixture
def filled(store):
    for i in range(5):
        assert store.put_message(make_message(i, queue_id=i % 2)).is_ok()
    return store


def assert_refused(store, put, status):
    before = snapshot(store)
    r = put()
    assert r.status is status
    assert not r.is_ok()
    assert r.append_message_result is None
    assert snapshot(store) == before
    ok = store.put_message(make_message(99))           # the store still works
    assert ok.append_message_result.wrote_offset == before[0]
    return r


@pytest.mark.parametrize("topic", ["", "a" * 256, "a b", "topic/x", "top.ic", "tópico", "t\x00", "日本"])
def test_illegal_topics(filled, topic):
    assert_refused(filled, lambda: filled.put_message(Message(topic, b"x")), PutMessageStatus.MESSAGE_ILLEGAL)


@pytest.mark.parametrize("topic", ["%RETRY%group-1", "a|b", "A_z-09", "x" * 255])
def test_legal_topics(store, topic):
    assert store.put_message(Message(topic, b"x")).status is PutMessageStatus.PUT_OK


def test_negative_queue_id_is_illegal(filled):
    assert_refused(filled, lambda: filled.put_message(Message("T", b"x", queue_id=-1)),
                   PutMessageStatus.MESSAGE_ILLEGAL)


@pytest.mark.parametrize("props", [{"a": "b\x01c"}, {"a": "b\x02c"}, {"a\x01": "b"}, {"": "v"}, {"a": ""}])
def test_property_with_a_separator_is_refused_by_message(props):
    """A property that RocketMQ's decoder would not read back as given (a separator inside, an empty name or
    value) is refused when the message is made (it was MESSAGE_ILLEGAL at put; an empty value was lost)."""
    with pytest.raises(ValueError):
        Message("T", b"x", properties=props)


def test_tags_or_keys_with_a_separator_are_refused_by_message():
    with pytest.raises(ValueError):
        Message("T", b"x", tags="a\x01b")
    with pytest.raises(ValueError):
        Message("T", b"x", keys=["k\x02"])


def test_put_long_message(store_factory):
    """testPutLongMessage: body == max_message_size is stored, +1 is MESSAGE_ILLEGAL; the limit is on the
    body (5.x), so a record bigger than max_message_size is fine."""
    s = store_factory(max_message_size=1024)
    r = s.put_message(Message("T", b"b" * 1024))
    assert r.status is PutMessageStatus.PUT_OK
    assert r.append_message_result.wrote_bytes > 1024
    assert_refused(s, lambda: s.put_message(Message("T", b"b" * 1025)), PutMessageStatus.MESSAGE_ILLEGAL)
    batch = MessageBatch([Message("T", b"1"), Message("T", b"b" * 1025)])
    assert_refused(s, lambda: s.put_messages(batch), PutMessageStatus.MESSAGE_ILLEGAL)
    assert s.put_messages(MessageBatch([Message("T", b"b" * 1024)] * 3)).is_ok()
    store_factory.expect_messages(6)


def test_put_msg_exceeds_default_max_length(filled):
    """testPutMsgExceedsMaxLength: a 4 MiB + 1 body is MESSAGE_ILLEGAL with the default limit."""
    assert filled.config.max_message_size == 4 * 1024 * 1024
    big = Message("T", bytes(4 * 1024 * 1024 + 1))
    assert_refused(filled, lambda: filled.put_message(big), PutMessageStatus.MESSAGE_ILLEGAL)


def test_record_bigger_than_a_file_is_illegal(filled):
    over = FIXED_V1 + len("TopicTest") + len(props_string(std_props(0)))
    too_big = make_message(0, body_size=SMALL_FILE - 8 - over + 1)
    assert_refused(filled, lambda: filled.put_message(too_big), PutMessageStatus.MESSAGE_ILLEGAL)
    batch = MessageBatch([make_message(i, body_size=SMALL_FILE // 3) for i in range(3)])
    assert_refused(filled, lambda: filled.put_messages(batch), PutMessageStatus.MESSAGE_ILLEGAL)


def test_properties_size_limit(filled, store_factory):
    """testPutLongMessage / testPutMessage_whenMessagePropertyIsTooLong: 32767 bytes of properties are
    stored, 32768 are PROPERTIES_SIZE_EXCEEDED (and no queue offset is used)."""
    ok = Message("T", b"x", properties={"k": "v" * (32767 - 3)})
    r = filled.put_message(ok)
    assert r.status is PutMessageStatus.PUT_OK
    m = filled.look_message_by_offset(r.append_message_result.wrote_offset)
    assert len(m.properties["k"]) == 32764
    raw = m.raw
    assert struct.unpack_from(">h", raw, m.store_size - 32767 - 2)[0] == 32767
    too = Message("T", b"x", properties={"k": "v" * (32768 - 3)})
    assert_refused(filled, lambda: filled.put_message(too), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
    # the limit counts UTF-8 bytes of the stored string, TAGS included: "TAGS\x01" + 20 bytes + "\x02" = 26
    fits = Message("T", b"x", tags="é" * 10, properties={"k": "v" * (32767 - 26 - 3)})
    assert filled.put_message(fits).status is PutMessageStatus.PUT_OK
    multi = Message("T", b"x", tags="é" * 10, properties={"k": "v" * (32768 - 26 - 3)})   # 32758 chars
    assert_refused(filled, lambda: filled.put_message(multi), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
    batch = MessageBatch([Message("T", b"1"), too])
    assert_refused(filled, lambda: filled.put_messages(batch), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
    store_factory.expect_messages(5 + 1 + 1 + 3)


@pytest.mark.parametrize("kw", [{"delay_time_level": 1}, {"sys_flag": 0x4}, {"sys_flag": 0x8},
                                {"sys_flag": 0xC}])
def test_batch_with_delay_or_transaction_is_illegal(filled, kw):
    batch = MessageBatch([make_message(0), make_message(1, **kw)])
    assert_refused(filled, lambda: filled.put_messages(batch), PutMessageStatus.MESSAGE_ILLEGAL)


def test_batch_with_wrong_types_or_mixed_queues_is_refused_at_construction():
    with pytest.raises(ValueError):
        MessageBatch([])
    with pytest.raises(ValueError):
        MessageBatch([Message("A", b"1"), Message("B", b"2")])
    with pytest.raises(ValueError):
        MessageBatch([Message("A", b"1", queue_id=0), Message("A", b"2", queue_id=1)])
    with pytest.raises(TypeError):
        MessageBatch([Message("A", b"1"), b"2"])


def test_non_message_arguments_raise_type_error(filled):
    before = snapshot(filled)
    for bad in ("x", b"x", None, 1, [make_message(0)], {"topic": "T"}):
        with pytest.raises(TypeError):
            filled.put_message(bad)
        with pytest.raises(TypeError):
            filled.put_messages(bad)
        with pytest.raises(TypeError):
            filled.async_put_message(bad)
    with pytest.raises(TypeError):
        filled.put_message(MessageBatch([make_message(0)]))
    with pytest.raises(TypeError):
        filled.put_messages(make_message(0))
    assert snapshot(filled) == before


def test_message_constructor_type_errors():
    with pytest.raises(TypeError):
        Message(b"T", b"x")
    with pytest.raises(TypeError):
        Message("T", "text body")
    with pytest.raises(TypeError):
        Message("T", None)
    with pytest.raises(TypeError):
        Message("T", b"x", properties={"a": 1})
    with pytest.raises(TypeError):
        Message("T", b"x", keys=[1])


def test_service_not_available_before_start(store_factory):
    cfg = store_factory.config()
    bare = MessageStore(cfg)
    assert bare.put_message(make_message(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert bare.put_messages(MessageBatch([make_message(0)])).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert bare.async_put_message(make_message(0)).result(5).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert not os.path.exists(cfg.store_path_root_dir)           # nothing touched
    store_factory.track(bare)
    assert bare.load()
    r = bare.put_message(make_message(0))                        # loaded, not started
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and r.append_message_result is None
    bare.start()
    assert bare.put_message(make_message(0)).is_ok()
    store_factory.expect_messages(1)


def test_service_not_available_after_shutdown(filled, store_factory):
    end = filled.get_max_phy_offset()
    filled.shutdown()
    for put in (lambda: filled.put_message(make_message(9)),
                lambda: filled.put_messages(MessageBatch([make_message(9)])),
                lambda: filled.async_put_message(make_message(9)).result(5),
                lambda: filled.async_put_messages(MessageBatch([make_message(9)])).result(5)):
        r = put()
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and r.append_message_result is None
    with MessageStore.open(filled.root, read_only=True) as ro:
        assert ro.get_max_phy_offset() == end
    store_factory.expect_messages(5)


def test_service_not_available_read_only(filled, store_factory):
    ro = store_factory(read_only=True)
    end = filled.get_max_phy_offset()
    for put in (lambda: ro.put_message(make_message(9)),
                lambda: ro.put_messages(MessageBatch([make_message(9)])),
                lambda: ro.async_put_message(make_message(9)).result(5)):
        assert put().status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert filled.get_max_phy_offset() == end
    assert ro.look_message_by_offset(0).body == b"Hello RocketMQ 0"
    store_factory.expect_messages(5)


def test_service_not_available_slave(store_factory):
    s = store_factory(broker_role="SLAVE")
    assert s.put_message(make_message(0)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert s.put_messages(MessageBatch([make_message(0)])).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert s.get_max_phy_offset() == 0
    store_factory.expect_messages(0)


def test_create_mapped_file_failed(store_factory):
    """A commit-log file that cannot be created: CREATE_MAPPED_FILE_FAILED, nothing lost, and puts resume
    once the obstacle is gone."""
    root = store_factory.path()
    obstacle = root / "commitlog" / ("%020d" % SMALL_FILE)
    obstacle.mkdir(parents=True)                      # a folder where the second file must go
    s = store_factory()
    n = 0
    status = PutMessageStatus.PUT_OK
    while status is PutMessageStatus.PUT_OK:
        r = s.put_message(make_message(n, body_size=2000))
        status = r.status
        n += 1
    assert status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert r.append_message_result is None
    stored = n - 1
    end = s.get_max_phy_offset()
    assert SMALL_FILE - 2200 < end <= SMALL_FILE
    assert s.put_message(make_message(n, body_size=2000)).status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert s.look_message_by_offset(0).body == make_message(0, body_size=2000).body
    obstacle.rmdir()
    r = s.put_message(make_message(n + 1, body_size=2000))
    assert r.status is PutMessageStatus.PUT_OK
    assert r.append_message_result.wrote_offset == SMALL_FILE
    assert r.append_message_result.logics_offset == stored       # no queue offset was burnt
    store_factory.expect_messages(stored + 1)


# -- get_commit_log_data ---------------------------------------------------------------------------


def test_get_commit_log_data(store):
    results = [store.put_message(make_message(i)) for i in range(5)]
    store.flush()
    end = store.get_max_phy_offset()
    start = results[2].append_message_result.wrote_offset
    r = store.get_commit_log_data(start)
    try:
        assert r.start_offset == start
        assert r.size == end - start
        assert bytes(r.buffer) == read_disk(file_path(store, 0), start, end - start)
        assert r.buffer.readonly
        assert r.mapped_file.ref_count >= 2           # it holds its file (the flush thread may too)
    finally:
        r.release()
    assert settles(lambda: r.mapped_file.ref_count == 1)
    with store.get_commit_log_data(0) as whole:
        assert whole.size == end
        assert bytes(whole.buffer[:4]) == struct.pack(">i", results[0].append_message_result.wrote_bytes)
        mf = whole.mapped_file
        assert mf.ref_count >= 2
    assert settles(lambda: mf.ref_count == 1)
    with pytest.raises(StoreClosedError):
        whole.buffer
    assert store.get_commit_log_data(SMALL_FILE * 3) is None


def test_get_commit_log_data_stops_at_the_end_of_its_file(store):
    while store.get_max_phy_offset() < SMALL_FILE + 10:
        store.put_message(make_message(0, body_size=3000))
    with store.get_commit_log_data(100) as r:
        assert r.size == SMALL_FILE - 100             # to the file's end (its blank included)
    with store.get_commit_log_data(SMALL_FILE) as r:
        assert r.start_offset == SMALL_FILE
        assert r.size == store.get_max_phy_offset() - SMALL_FILE


def test_flush_returns_the_max_offset(store):
    for i in range(3):
        store.put_message(make_message(i))
    assert store.flush() == store.get_max_phy_offset()
    while store.get_max_phy_offset() < 2 * SMALL_FILE + 10:
        store.put_message(make_message(0, body_size=5000))
    assert store.flush() == store.get_max_phy_offset()
    assert store.flush() == store.get_max_phy_offset()


# -- restart and recovery (testRecover) -----------------------------------------------------------


def test_reopen_after_clean_shutdown_finds_every_message(store_factory):
    s = store_factory()
    bodies = []
    while s.get_max_phy_offset() < 2 * SMALL_FILE + 500:
        m = make_message(len(bodies), body_size=1500 + len(bodies))
        assert s.put_message(m).is_ok()
        bodies.append(m.body)
    end = s.get_max_phy_offset()
    before = snapshot(s)
    s.shutdown()
    s2 = store_factory()
    assert s2.get_max_phy_offset() == end
    assert s2.get_min_phy_offset() == 0
    after = snapshot(s2)
    assert after[0] == end and after[2] == bodies == before[2]
    r = s2.put_message(make_message(9999))
    assert r.append_message_result.wrote_offset == end
    store_factory.expect_messages(len(bodies) + 1)


def _damage_last_record(root: str, last_offset: int, body_len: int) -> None:
    """testRecover: zero 16 bytes at the topic-length position of the record at ``last_offset``."""
    path = os.path.join(root, "commitlog", "%020d" % (last_offset - last_offset % SMALL_FILE))
    pos = last_offset % SMALL_FILE + POS_BODYLENGTH + 4 + body_len
    with open(path, "r+b") as fh:
        fh.seek(pos - 4 - body_len)
        assert struct.unpack(">i", fh.read(4))[0] == body_len    # really the body-length field
        fh.seek(pos)
        fh.write(bytes(16))


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_recover_truncates_exactly_the_damaged_last_record(store_factory, abnormal):
    s = store_factory()
    results = [s.put_message(make_message(i, body_size=900 + i)) for i in range(100)]  # two files
    assert s.get_max_phy_offset() > SMALL_FILE
    end = s.get_max_phy_offset()
    last = results[-1].append_message_result
    s.shutdown()
    _damage_last_record(s.root, last.wrote_offset, 999)
    if abnormal:
        open(os.path.join(s.root, "abort"), "wb").close()
    s2 = store_factory()
    assert s2.get_max_phy_offset() == end - last.wrote_bytes == last.wrote_offset
    assert s2.look_message_by_offset(last.wrote_offset) is None
    prev = results[-2].append_message_result
    assert s2.look_message_by_offset(prev.wrote_offset).body == make_message(98, body_size=998).body
    assert s2.look_message_by_offset(0).body == make_message(0, body_size=900).body
    r = s2.put_message(make_message(500))
    assert r.append_message_result.wrote_offset == last.wrote_offset   # appends go where it was cut
    s2.flush()
    path = file_path(s2, last.wrote_offset - last.wrote_offset % SMALL_FILE)
    tail_start = r.next_offset % SMALL_FILE
    assert read_disk(path, tail_start, 64) == bytes(64)                  # the damaged bytes are gone
    store_factory.expect_messages(100)


def test_recover_keeps_max_offsets_on_restart(store_factory):
    """testRecover, first part: a plain restart keeps the max phy offset."""
    s = store_factory()
    for i in range(30):
        s.put_message(make_message(i, body_size=3000))
    end = s.get_max_phy_offset()
    s.shutdown()
    for _ in range(3):
        s = store_factory()
        assert s.get_max_phy_offset() == end
        s.shutdown()
    store_factory.expect_messages(30)


def test_abnormal_restart_keeps_every_flushed_message(store_factory):
    s = store_factory()
    for i in range(40):
        s.put_message(make_message(i, body_size=2500))
    end = s.get_max_phy_offset()
    s.shutdown()
    open(os.path.join(s.root, "abort"), "wb").close()
    s2 = store_factory()
    assert s2.get_max_phy_offset() == end
    assert snapshot(s2)[2] == [make_message(i, body_size=2500).body for i in range(40)]
    store_factory.expect_messages(40)


def test_abort_file_while_running(store_factory):
    s = store_factory()
    abort = os.path.join(s.root, "abort")
    assert os.path.exists(abort)
    with open(abort, "rb") as fh:
        assert fh.read() == str(os.getpid()).encode()           # 5.x: the writer's PID
    s.put_message(make_message(0))
    s.shutdown()
    assert not os.path.exists(abort)
    store_factory.expect_messages(1)


# -- SYNC_FLUSH --------------------------------------------------------------------------------------


def test_sync_flush_puts(store_factory):
    s = store_factory(flush_disk_type="SYNC_FLUSH")
    for i in range(20):
        r = s.put_message(make_message(i, body_size=4000))
        assert r.status is PutMessageStatus.PUT_OK
    r = s.put_messages(MessageBatch([make_message(100 + i) for i in range(5)]))
    assert r.status is PutMessageStatus.PUT_OK and r.append_message_result.msg_num == 5
    r = s.put_message(make_message(200, wait_store_msg_ok=False))
    assert r.status is PutMessageStatus.PUT_OK
    store_factory.expect_messages(26)


def test_sync_flush_async_puts_complete_with_put_ok(store_factory):
    s = store_factory(flush_disk_type="SYNC_FLUSH")
    futures = [s.async_put_message(make_message(i, body_size=3000)) for i in range(40)]
    futures.append(s.async_put_messages(MessageBatch([make_message(50 + i) for i in range(4)])))
    results = [f.result(timeout=30) for f in futures]
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    offsets = [r.append_message_result.wrote_offset for r in results]
    assert offsets == sorted(offsets)
    assert s.get_max_phy_offset() == results[-1].next_offset
    assert s.look_message_by_offset(offsets[17]).body == make_message(17, body_size=3000).body
    store_factory.expect_messages(44)


def test_async_flush_async_puts(store):
    futures = [store.async_put_message(make_message(i)) for i in range(10)]
    results = [f.result(timeout=10) for f in futures]
    assert [r.append_message_result.logics_offset for r in results] == list(range(10))
    r = store.async_put_message(Message("", b"x")).result(timeout=10)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL


def test_concurrent_puts_get_distinct_offsets(store, store_factory):
    out: list = []
    lock = threading.Lock()

    def worker(t):
        for i in range(50):
            r = store.put_message(make_message(t * 1000 + i, body_size=300))
            with lock:
                out.append(r)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.is_ok() for r in out)
    assert sorted(r.append_message_result.logics_offset for r in out) == list(range(200))
    spans = sorted((r.append_message_result.wrote_offset, r.next_offset) for r in out)
    for (a0, a1), (b0, _) in zip(spans, spans[1:]):
        assert a1 <= b0
    store_factory.expect_messages(200)


# -- batches of messages built alike or not: every record against the reference encoder --------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(st.tuples(st.binary(max_size=300), st.sampled_from([None, "TagA", "TagB"]),
                                st.sampled_from([None, None, None, "k1"]), st.sampled_from([0, 5]),
                                st.sampled_from([BORN_HOST, ("::1", 7)]), st.integers(0, 2)),
                      min_size=1, max_size=40),
       store_v6=st.booleans())
@example(specs=[(b"a" * 10, None, None, 0, BORN_HOST, 0)] * 33, store_v6=False)        # all alike: one run
@example(specs=[(b"x", "TagA", None, 0, BORN_HOST, 0), (b"y", "TagB", None, 0, BORN_HOST, 1),   # no keys,
                (b"z", None, None, 0, BORN_HOST, 2)], store_v6=False)                          # three tags codes
@example(specs=[(b"x", "TagA", None, 0, BORN_HOST, 0), (b"yy", "TagB", None, 5, ("::1", 7), 1),
                (b"", None, "k1", 0, BORN_HOST, 2), (b"zzz", "TagA", None, 0, BORN_HOST, 0)], store_v6=True)
def test_batch_records_equal_the_reference_encoding(tmp_path_factory, specs, store_v6):
    # a batch's records are encoded in full or copied from its first (messages built alike) and its units
    # written as one run (one tags code, no keys) or one by one: whatever the mix, each record is the
    # reference encoding of its own message and each unit points at it with its own tags code
    import reference_codec as ref
    from conftest import FakeClock

    from pystore.tools import iter_consume_queue

    msgs = [Message("RefBatch", body, tags=tags, keys=keys, flag=flag, born_timestamp=BORN_BASE + dt,
                    born_host=host, queue_id=1) for body, tags, keys, flag, host, dt in specs]
    store_host = ("fe80::2", 10911) if store_v6 else STORE_HOST
    root = tmp_path_factory.mktemp("refbatch")
    store = MessageStore.open(str(root), clock=FakeClock(), mapped_file_size_commit_log=1 << 20,
                              store_host=store_host)
    try:
        assert store.put_message(Message("RefBatch", b"before", queue_id=1)).is_ok()   # queue offset 0
        r = store.put_messages(MessageBatch(msgs))
        assert r.is_ok(), r
        a = r.append_message_result
        phy, ts = a.wrote_offset, a.store_timestamp
        expected = b""
        units = []
        for i, m in enumerate(msgs):
            rec = ref.encode("RefBatch", m.body, ref.properties_string(m.properties), 1, m.flag, 1 + i,
                             phy + len(expected), 0, m.born_timestamp, m.born_host, ts, store_host, 0, 0)
            units.append((phy + len(expected), len(rec), ref.java_hash(m.tags) if m.tags else 0))
            expected += rec
        assert a.wrote_bytes == len(expected)
        store.flush()
        with open(os.path.join(str(root), "commitlog", "%020d" % 0), "rb") as f:
            f.seek(phy)
            assert f.read(len(expected)) == expected
        got = list(iter_consume_queue(os.path.join(str(root), "consumequeue", "RefBatch", "1")))
        assert got[1:] == units
    finally:
        store.destroy()
