"""The key index and lookups by id (docs/format.md §1.8, §3; RocketMQ ``IndexFileTest``, ``queryMessage``,
``viewMessageById``): ``query_message`` by key and ``UNIQ_KEY`` with its time window and ``max_num``, hash
collisions resolved, index files byte for byte (header, slots, entries, capacity ``max_index_num - 1``),
rolling to a new file, rebuilding by dispatch; ``view_message_by_id`` and ``look_message_by_offset``."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time

import pytest
import reference_codec as ref
from conftest import make_message

from pystore import Message, MessageBatch
from pystore.message.constants import SysFlag

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


def test_query_max_num_above_max_msgs_num_batch_is_cut_and_says_so_once(store_factory, caplog):
    """RocketMQ's maxMsgsNumBatch (64) caps every query: max_num=1000 gets 64 messages, and the log says why
    (once per store, not per call); a store with a larger max_msgs_num_batch returns more."""
    store = store_factory()
    store.put_messages(MessageBatch([make_message(i, keys="shared") for i in range(100)]))
    with caplog.at_level(logging.WARNING, logger="pystore.engine.store"):
        assert len(store.query_message(TOPIC, "shared", max_num=1000).messages) == 64
        assert len(store.query_message(TOPIC, "shared", max_num=1000).messages) == 64
        assert len(store.query_message(TOPIC, "shared", max_num=64).messages) == 64
    cut = [r for r in caplog.records if "max_msgs_num_batch" in r.getMessage()]
    assert len(cut) == 1 and "max_num=1000" in cut[0].getMessage() and "64" in cut[0].getMessage()
    store.shutdown()
    wide = store_factory(max_msgs_num_batch=128)
    assert len(wide.query_message(TOPIC, "shared", max_num=1000).messages) == 100


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
    """docs/format.md §3.3: ROLLBACK is not indexed; NOT, PREPARED and COMMIT are (the reput path; the inline path
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
    """docs/format.md §3.1/§3.2: header, slot table and entries of a small index file, by hand. Entries written
    inline (``index_build_async`` off): the file is named by the clock when it is made, at the first put."""
    slots, num = 7, 5
    fake_clock.set(T0 + 123)
    store = store_factory(clock=fake_clock, max_hash_slot_num=slots, max_index_num=num, index_build_async=False)
    puts = []
    for i, key in enumerate(["a", "b", "a"]):
        fake_clock.set(T0 + 123 + 2500 * i)
        a = store.put_message(make_message(i, keys=key)).append_message_result
        puts.append((TOPIC + "#" + key, a.wrote_offset, a.store_timestamp))
    store.flush()                                       # the index builder catches up
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
    store.flush()
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
    """docs/format.md §3.3 / §7.2: the index takes NOT, PREPARED and COMMIT records (only ROLLBACK is skipped); only
    the consume queue is limited to NOT and COMMIT. Inline dispatch (ASYNC_FLUSH) indexes PREPARED at once."""
    store = store_factory()
    store.put_message(make_message(0, keys="prep", sys_flag=SysFlag.TRANSACTION_PREPARED_TYPE))
    store.put_message(make_message(1, keys="rollback", sys_flag=SysFlag.TRANSACTION_ROLLBACK_TYPE))
    assert [m.body for m in store.query_message(TOPIC, "prep").messages] == [b"Hello RocketMQ 0"]
    assert store.query_message(TOPIC, "rollback").messages == []


# -- damaged index files: every walk is bounded ------------------------------------------------------------

SLOTS, ENTRIES = 64, 256
GEOMETRY = {"max_hash_slot_num": SLOTS, "max_index_num": ENTRIES, "mapped_file_size_commit_log": 64 * 1024}
_QUERY_CHILD = r"""
import sys, json
from pystore import MessageStore
root, geometry, keys = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
with MessageStore.open(root, read_only=True, **geometry) as s:
    print(json.dumps([[m.commit_log_offset for m in s.query_message("TopicTest", k).messages] for k in keys]))
"""


def _keyed_store(root, n=20):
    """A closed store of ``n`` messages with keys ``key<i>``; their commit-log offsets."""
    from pystore import MessageStore

    offsets = []
    with MessageStore.open(root, **GEOMETRY) as s:
        for i in range(n):
            offsets.append(s.put_message(make_message(i)).append_message_result.wrote_offset)
    return offsets


def _slot_of(key):
    return key_hash(TOPIC + "#" + key) % SLOTS


def _other_key_in_slot(slot, avoid):
    """A key whose hash is in ``slot`` but matches no entry of the store."""
    for i in range(100_000):
        k = "probe%d" % i
        if _slot_of(k) == slot and key_hash(TOPIC + "#" + k) not in avoid:
            return k
    raise AssertionError("no probe key")


def _entry_pos(n):
    return 40 + SLOTS * 4 + n * 20


def _query_in_child(root, keys, timeout=60):
    """``query_message`` for each key in a child process: a hang fails the test instead of the suite."""
    import json
    import subprocess
    import sys

    try:
        r = subprocess.run([sys.executable, "-c", _QUERY_CHILD, str(root), json.dumps(GEOMETRY), json.dumps(keys)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("query_message did not return within %d s (a looping index chain)" % timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def _store_with_key5_chain(root):
    """A keyed store, its one index file, the file's bytes, the slot of ``key5`` and the entry at its head."""
    offsets = _keyed_store(root)
    (path,) = index_files(str(root))
    data = bytearray(open(path, "rb").read())
    slot = _slot_of("key5")
    return offsets, path, data, slot, struct.unpack_from(">i", data, 40 + slot * 4)[0]


@pytest.mark.no_verify
def test_looping_index_chain_ends_the_lookup(tmp_path):
    root = tmp_path / "s"
    offsets, path, data, slot, x = _store_with_key5_chain(root)
    y = 1 if x != 1 else 2
    # x -> y -> x: a loop no hash of the probe key ever ends
    struct.pack_into(">i", data, _entry_pos(x) + 16, y)
    struct.pack_into(">i", data, _entry_pos(y) + 16, x)
    open(path, "wb").write(data)
    hashes = {struct.unpack_from(">i", data, _entry_pos(n))[0] for n in range(1, 21)}
    probe = _other_key_in_slot(slot, hashes)
    found, stderr = _query_in_child(root, [probe, "key5", "key7"])
    assert found[0] == []
    assert found[1] == [offsets[5]]           # the entry at the slot's head is still found
    assert found[2] == [offsets[7]]           # other chains are untouched
    assert "broken index chain" in stderr and path in stderr


@pytest.mark.no_verify
@pytest.mark.parametrize("damage", ["slot_past_file", "prev_forward", "prev_past_count", "count_past_file",
                                    "prev_negative"])
def test_damaged_index_lookups_stay_inside_the_file(tmp_path, damage):
    root = tmp_path / "s"
    offsets, path, data, slot, x = _store_with_key5_chain(root)
    if damage == "slot_past_file":
        struct.pack_into(">i", data, 40 + slot * 4, 10_000_000)
    elif damage == "prev_forward":
        struct.pack_into(">i", data, _entry_pos(x) + 16, 20)
    elif damage == "prev_past_count":
        struct.pack_into(">i", data, _entry_pos(x) + 16, 200)
    elif damage == "prev_negative":
        struct.pack_into(">i", data, _entry_pos(x) + 16, -7)
    else:  # a header that lets links run past the file's end
        struct.pack_into(">i", data, 36, 2_000_000_000)
        struct.pack_into(">i", data, _entry_pos(x) + 16, 50_000_000)
    open(path, "wb").write(data)
    found, _ = _query_in_child(root, ["key5", "key7", _other_key_in_slot(slot, set())])
    assert found[0] == ([] if damage == "slot_past_file" else [offsets[5]])
    assert found[1] == [offsets[7]]
    assert found[2] == []


def test_check_chains_of_a_sound_file(store_factory):
    from pystore.index._index import IndexFileCore
    from pystore.log._mapped_file import MappedFile

    store = store_factory(**GEOMETRY)
    for i in range(300):                         # 600 entries: rolls over three files
        store.put_message(make_message(i, keys=["key%d" % i, "k%d" % (i % 7)]))
    store.flush()
    for p in index_files(store.root):
        f = IndexFileCore(MappedFile(p, os.path.getsize(p), read_only=True, from_offset=0), SLOTS, ENTRIES)
        try:
            assert f.check_chains() == []
        finally:
            f.mapped_file.close()


@pytest.mark.no_verify
def test_check_chains_reports_each_break(tmp_path):
    from pystore.index._index import IndexFileCore
    from pystore.log._mapped_file import MappedFile

    root = tmp_path / "s"
    _keyed_store(root)
    (path,) = index_files(str(root))
    data = bytearray(open(path, "rb").read())
    slot = _slot_of("key5")
    x = struct.unpack_from(">i", data, 40 + slot * 4)[0]
    struct.pack_into(">i", data, _entry_pos(x) + 16, x)                 # a self loop
    other = _slot_of("key7")
    struct.pack_into(">i", data, 40 + other * 4, 99)                   # past the written entries
    open(path, "wb").write(data)
    f = IndexFileCore(MappedFile(path, len(data), read_only=True, from_offset=0), SLOTS, ENTRIES)
    try:
        problems = f.check_chains()
    finally:
        f.mapped_file.close()
    positions = [p for p, _ in problems]
    assert _entry_pos(x) + 16 in positions and 40 + other * 4 in positions
    assert any("links to entry %d" % x in what for _, what in problems)


def test_a_reader_walks_an_entry_linked_after_its_header(tmp_path):
    """A reader whose header is older than the slot it reads (the builder thread links entries while
    lookups run beside it; a read-only process loads the header before newer puts) walks the newer entry:
    the entry is whole before the slot names it, and it links to the older ones, which stay findable."""
    from pystore.index._index import IndexFileCore, index_file_size, select_in_files
    from pystore.log._mapped_file import MappedFile

    path = str(tmp_path / "idx")
    size = index_file_size(1, 8)                      # one slot: every key shares one chain
    writer = IndexFileCore(MappedFile(path, size, create=True, from_offset=0), 1, 8)
    writer.init_header(T0, T0, 0, 0)
    assert writer.put_key("T#a", 100, T0 + 1000)
    reader = IndexFileCore(MappedFile(path, size, read_only=True, from_offset=0), 1, 8)
    try:
        assert reader.index_count == 2
        assert writer.put_key("T#b", 200, T0 + 2000)   # links entry 2 into the slot, past the reader's count
        out: list[int] = []
        reader.select_phy_offset(out, "T#a", 8, 0, 2**62)
        assert out == [100]
        out = []
        assert select_in_files([reader], "T#b", 8, 0, 2**62, out) == (T0 + 1000, 100)   # the reader's header
        assert out == [200]
    finally:
        reader.mapped_file.close()
        writer.mapped_file.close()


def test_only_ascii_digit_names_are_index_files(store_factory):
    """An index folder's files are named by ASCII digits; a name of other digits (``str.isdigit`` takes
    superscripts and other scripts' digits) is not an index file: the store opens, looks up and verifies as
    if it were not there."""
    from pystore.engine.verify import verify_store
    from pystore.log.geometry import is_index_file_name

    assert is_index_file_name("20261204180000123")
    assert not is_index_file_name("²⁰²⁶") and not is_index_file_name("١٢٣") and not is_index_file_name("")
    store = store_factory()
    r = store.put_message(Message(TOPIC, b"k", keys="digits")).append_message_result
    root = store.config.store_path_root_dir
    store.shutdown()
    stray = os.path.join(root, "index", "١٢٣")
    with open(stray, "wb") as f:
        f.write(b"not an index file")
    again = store_factory()
    assert [m.commit_log_offset for m in again.query_message(TOPIC, "digits", 4).messages] == [r.wrote_offset]
    assert all(not f.mapped_file.file_name.endswith("١٢٣") for f in again._parts.index._files)
    again.shutdown()
    report = verify_store(root)
    assert report.ok, report
    os.unlink(stray)


def test_the_walk_resumes_over_ranges_made_readable_as_it_asks(tmp_path):
    """``IndexFileCore.walk`` with a map of readable ranges (an archived file fetched by ranges): it asks for the
    key's slot, then each chain entry (one straddling two ranges asks for both), one at a time, and finds what
    the walk over every byte finds; with nothing readable it asks first for the slot."""
    from pystore.index._index import IndexFileCore, index_file_size
    from pystore.log._mapped_file import MappedFile

    path = str(tmp_path / "idx")
    size = index_file_size(2, 40)                    # two slots: keys alternate, chains of every other entry
    f = IndexFileCore(MappedFile(path, size, create=True, from_offset=0), 2, 40)
    try:
        f.init_header(T0, T0, 0, 0)
        for i in range(30):
            assert f.put_key("T#a" if i % 3 else "T#b", 1000 + i, T0 + i * 1000)
        for key in ("T#a", "T#b", "T#none"):
            h = key_hash(key)
            for max_num in (64, 3):
                want: list[int] = []
                f.select_phy_offset(want, key, max_num, 0, 2**62)
                rs = 64                                  # entries of 20 bytes straddle ranges of 64
                ready = bytearray(-(-size // rs))
                out: list[int] = []
                cur, asked = -1, []
                while True:
                    cur, lo, hi = f.walk(out, h, max_num, 0, 2**62, cur, bytes(ready), rs)
                    if cur == 0:
                        break
                    asked.append((lo, hi))
                    assert (lo, hi) not in asked[:-1] and len(asked) <= 40
                    for i in range(lo // rs, (hi - 1) // rs + 1):
                        ready[i] = 1
                assert out == want, (key, max_num)
                slot = 40 + h % 2 * 4
                assert asked[0] == (slot, slot + 4)
                assert all((lo - 48) % 20 == 0 and hi - lo == 20 for lo, hi in asked[1:])
                everything: list[int] = []
                assert f.walk(everything, h, max_num, 0, 2**62, -1, None, 0) == (0, 0, 0) and everything == want
        assert f.walk([], key_hash("T#a"), 8, 0, 2**62, -1, b"", 64)[0] == -1      # nothing readable
        with pytest.raises(ValueError):
            f.walk([], key_hash("T#a"), 8, 0, 2**62, 40, None, 0)                 # no entry 40
        with pytest.raises(ValueError):
            f.walk([], key_hash("T#a"), 8, 0, 2**62, -1, b"\x01", 0)              # a map needs a range size
    finally:
        f.mapped_file.close()
