"""The key index and lookups by id (FORMAT.md §1.8, §3; RocketMQ ``IndexFileTest``, ``queryMessage``,
``viewMessageById``): ``query_message`` by key and ``UNIQ_KEY`` with its time window and ``max_num``, hash
collisions resolved, index files byte for byte (header, slots, entries, capacity ``max_index_num - 1``),
rolling to a new file, rebuilding by dispatch; ``view_message_by_id`` and ``look_message_by_offset``."""

from __future__ import annotations

import os
import shutil
import struct
import time

import pytest
import reference_codec as ref
from conftest import make_message

from pystore import Message
from pystore.message import SysFlag

TOPIC = "TopicTest"
T0 = 1_700_000_000_000




def index_files(root):
    d = os.path.join(root, "index")
    return [os.path.join(d, n) for n in sorted(os.listdir(d))] if os.path.isdir(d) else []


def key_hash(key):
    h = ref.java_hash(key)
    return 0 if h == -(2**31) else abs(h)


@pytest.fixture
def keyed(store_factory, fake_clock):
    """Messages 10 s apart (fake clock): ``i`` has keys ``key<i>`` and ``shared``, and ``UNIQ_KEY`` ``U<i>``."""
    fake_clock.set(T0)
    store = store_factory(clock=fake_clock)
    rs = []
    for i in range(20):
        fake_clock.set(T0 + 10_000 * i)
        m = make_message(i, keys=["key%d" % i, "shared"], properties={"UNIQ_KEY": "U%d" % i})
        rs.append(store.put_message(m).append_message_result)
    return store, rs


def test_query_by_key_and_uniq_key(keyed):
    store, rs = keyed
    for i in (0, 7, 19):
        for key in ("key%d" % i, "U%d" % i):
            r = store.query_message(TOPIC, key)
            assert [m.body for m in r.messages] == [b"Hello RocketMQ %d" % i]
            assert r.messages[0].commit_log_offset == rs[i].wrote_offset
    assert store.query_message(TOPIC, "nope").messages == []
    assert store.query_message("OtherTopic", "key3").messages == []


def test_query_result_fields(keyed):
    store, rs = keyed
    r = store.query_message(TOPIC, "key3")
    assert r.index_last_update_timestamp == rs[-1].store_timestamp
    assert r.index_last_update_phyoffset == rs[-1].wrote_offset
    assert r.message_count == 1 and r.buffer_total_size == rs[3].wrote_bytes


def test_query_max_num_and_order(keyed):
    store, rs = keyed
    r = store.query_message(TOPIC, "shared")
    assert [m.queue_offset for m in r.messages] == list(range(20))          # ascending offsets
    r = store.query_message(TOPIC, "shared", max_num=5)
    assert len(r.messages) == 5
    # the index walks newest first: the 5 newest, returned in offset order
    assert [m.queue_offset for m in r.messages] == list(range(15, 20))


def test_query_time_window(keyed):
    store, rs = keyed
    ts = [a.store_timestamp for a in rs]
    r = store.query_message(TOPIC, "shared", 32, ts[5], ts[9])
    assert [m.queue_offset for m in r.messages] == list(range(5, 10))
    r = store.query_message(TOPIC, "shared", 32, ts[5] + 1, ts[9] - 1)
    assert [m.queue_offset for m in r.messages] == list(range(6, 9))
    assert store.query_message(TOPIC, "key3", 32, ts[4], ts[19]).messages == []
    assert store.query_message(TOPIC, "shared", 32, ts[19] + 1).messages == []


def test_query_hash_collision_returns_only_the_key(store_factory):
    """``TopicTest#Aa`` and ``TopicTest#BB`` share a hash: the index returns both offsets, the store keeps the
    real match."""
    assert ref.java_hash(TOPIC + "#Aa") == ref.java_hash(TOPIC + "#BB")
    store = store_factory()
    store.put_message(make_message(0, keys="Aa"))
    store.put_message(make_message(1, keys="BB"))
    assert [m.body for m in store.query_message(TOPIC, "Aa").messages] == [b"Hello RocketMQ 0"]
    assert [m.body for m in store.query_message(TOPIC, "BB").messages] == [b"Hello RocketMQ 1"]


def test_transaction_types_in_the_index_rebuilt_by_dispatch(store_factory):
    """FORMAT.md §3.3: ROLLBACK is not indexed; NOT, PREPARED and COMMIT are (the reput path; the inline path
    is ``test_read_bugs.test_inline_dispatch_indexes_prepared_messages``)."""
    store = store_factory()
    kinds = {"not": SysFlag.TRANSACTION_NOT_TYPE, "prep": SysFlag.TRANSACTION_PREPARED_TYPE,
             "commit": SysFlag.TRANSACTION_COMMIT_TYPE, "rollback": SysFlag.TRANSACTION_ROLLBACK_TYPE}
    for i, (name, flag) in enumerate(kinds.items()):
        store.put_message(make_message(i, keys=name, sys_flag=flag))
    store.shutdown()
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    shutil.rmtree(os.path.join(store.root, "index"))
    store = store_factory()
    for name in kinds:
        assert len(store.query_message(TOPIC, name).messages) == (0 if name == "rollback" else 1)
    assert len(store.query_message(TOPIC, "not").messages) == 1


def test_index_disabled(store_factory):
    store = store_factory(message_index_enable=False)
    store.put_message(make_message(0))
    assert store.query_message(TOPIC, "key0").messages == []
    assert index_files(store.root) == []


def test_index_file_bytes(store_factory, fake_clock):
    """FORMAT.md §3.1/§3.2: header, slot table and entries of a small index file, by hand."""
    slots, num = 7, 5
    fake_clock.set(T0 + 123)
    store = store_factory(clock=fake_clock, max_hash_slot_num=slots, max_index_num=num)
    puts = []
    for i, key in enumerate(["a", "b", "a"]):
        fake_clock.set(T0 + 123 + 2500 * i)
        a = store.put_message(make_message(i, keys=key)).append_message_result
        puts.append((TOPIC + "#" + key, a.wrote_offset, a.store_timestamp))
    (path,) = index_files(store.root)
    size = 40 + slots * 4 + num * 20
    t = time.localtime((T0 + 123) / 1000)
    assert os.path.basename(path) == time.strftime("%Y%m%d%H%M%S", t) + "123"
    data = open(path, "rb").read()
    assert len(data) == size
    begin_ts = puts[0][2]
    header = struct.pack(">qqqqii", begin_ts, puts[-1][2], puts[0][1], puts[-1][1],
                         len({key_hash(k) % slots for k, _, _ in puts}), 1 + len(puts))
    assert data[:40] == header
    slot_table = [0] * slots
    entries = b"\0" * 20                                   # entry 0 is never used
    for n, (k, phy, ts) in enumerate(puts, start=1):
        h = key_hash(k)
        diff = 0 if n == 1 else (ts - begin_ts) // 1000      # the first entry is relative to begin 0 ⇒ 0
        entries += struct.pack(">iqii", h, phy, diff, slot_table[h % slots])
        slot_table[h % slots] = n
    assert data[40:40 + slots * 4] == struct.pack(">%di" % slots, *slot_table)
    body = data[40 + slots * 4:]
    assert body[:len(entries)] == entries and body[len(entries):] == bytes(len(body) - len(entries))


def test_index_rolls_to_a_new_file_when_full(store_factory, fake_clock):
    """A file holds ``max_index_num - 1`` entries (``IndexFileTest.testPutKey``); queries walk every file."""
    fake_clock.set(T0)
    store = store_factory(clock=fake_clock, max_hash_slot_num=11, max_index_num=4)
    for i in range(10):
        fake_clock.advance(1000)
        store.put_message(make_message(i, keys="k%d" % i))
    files = index_files(store.root)
    assert len(files) == 4                                  # 3 + 3 + 3 + 1 entries
    counts = [struct.unpack_from(">i", open(p, "rb").read(), 36)[0] for p in files]
    assert counts == [4, 4, 4, 2]
    # a new file starts from the previous file's end values
    h1 = struct.unpack_from(">qqqq", open(files[1], "rb").read(), 0)
    h0 = struct.unpack_from(">qqqq", open(files[0], "rb").read(), 0)
    assert h1[2] > h0[3] and h1[0] > h0[1]
    for i in range(10):
        assert [m.body for m in store.query_message(TOPIC, "k%d" % i).messages] == [b"Hello RocketMQ %d" % i]


def test_index_rebuilt_by_dispatch(store_factory):
    """With the consume queues and the index gone, opening the store rebuilds both from the commit log."""
    store = store_factory()
    for i in range(30):
        store.put_message(make_message(i, properties={"UNIQ_KEY": "U%d" % i}))
    store.shutdown()
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    shutil.rmtree(os.path.join(store.root, "index"))
    store = store_factory()
    for i in (0, 17, 29):
        assert [m.body for m in store.query_message(TOPIC, "key%d" % i).messages] == [b"Hello RocketMQ %d" % i]
        assert [m.body for m in store.query_message(TOPIC, "U%d" % i).messages] == [b"Hello RocketMQ %d" % i]
    store_factory.expect_messages(30)


def test_index_survives_a_restart(store_factory):
    store = store_factory()
    for i in range(10):
        store.put_message(make_message(i))
    store.shutdown()
    store = store_factory()
    store.put_message(make_message(10))
    for i in (0, 10):
        assert [m.body for m in store.query_message(TOPIC, "key%d" % i).messages] == [b"Hello RocketMQ %d" % i]


# ------------------------------------------------------------------------------------------------------
# by id, by offset
# ------------------------------------------------------------------------------------------------------


def test_view_message_by_id(store_factory):
    store = store_factory()
    rs = [store.put_message(make_message(i)).append_message_result for i in range(5)]
    for i, a in enumerate(rs):
        assert len(a.msg_id) == 32 and a.msg_id == ref.msg_id(("127.0.0.1", 10911), a.wrote_offset)
        m = store.view_message_by_id(a.msg_id)
        assert m.body == b"Hello RocketMQ %d" % i and m.msg_id == a.msg_id
        assert store.view_message_by_id(a.msg_id.lower()).commit_log_offset == a.wrote_offset
    end = rs[-1].wrote_offset + rs[-1].wrote_bytes
    assert store.view_message_by_id(ref.msg_id(("127.0.0.1", 10911), end)) is None
    assert store.look_message_by_offset(end) is None                   # ..._OffsetIsOutOfBound
    assert store.look_message_by_offset(rs[0].wrote_offset).body == b"Hello RocketMQ 0"     # _OffsetIsFirst
    assert store.look_message_by_offset(rs[-1].wrote_offset).body == b"Hello RocketMQ 4"    # _OffsetIsLast
    for bad in ("", "XYZ", "G" * 32, "0" * 31):
        with pytest.raises(ValueError):
            store.view_message_by_id(bad)
    with pytest.raises(TypeError):
        store.view_message_by_id(12)


def test_view_message_by_id_ipv6_store_host(store_factory):
    store = store_factory(store_host=("::1", 10911))
    a = store.put_message(Message(TOPIC, b"six")).append_message_result
    assert len(a.msg_id) == 56 and a.msg_id == ref.msg_id(("::1", 10911), a.wrote_offset)
    m = store.view_message_by_id(a.msg_id)
    assert m.body == b"six" and m.store_host == ("::1", 10911)


def test_look_message_by_offset_not_at_a_record(store_factory):
    store = store_factory()
    a = store.put_message(make_message(0)).append_message_result
    store.put_message(make_message(1))
    assert store.look_message_by_offset(a.wrote_offset + 3) is None
    assert store.look_message_by_offset(-1) is None
    assert store.look_message_by_offset(10**15) is None


def test_inline_dispatch_indexes_prepared_messages(store_factory):
    """FORMAT.md §3.3 / §7.2: the index takes NOT, PREPARED and COMMIT records (only ROLLBACK is skipped); only
    the consume queue is limited to NOT and COMMIT. Inline dispatch (ASYNC_FLUSH) indexes PREPARED at once."""
    store = store_factory()
    store.put_message(make_message(0, keys="prep", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    store.put_message(make_message(1, keys="rollback", sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE))
    assert [m.body for m in store.query_message(TOPIC, "prep").messages] == [b"Hello RocketMQ 0"]
    assert store.query_message(TOPIC, "rollback").messages == []
