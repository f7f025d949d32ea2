"""The index entries of a message as compiled code writes them (``_index.index_message``, called by the inline
dispatch and by the reput): key hashes identical to ``abs(String.hashCode)`` of ``topic + "#" + key`` over
UTF-16 code units (non-ASCII, astral characters, bytes that are not UTF-8), keys split on single spaces,
``UNIQ_KEY`` first, a file that fills up in the middle of a message's keys, rolled-back messages skipped,
and a re-dispatch that adds nothing."""

from __future__ import annotations

import os
import shutil
import struct
import threading

import pytest
import reference_codec as ref

from pystore import Message, MessageBatch
from pystore.index._index import index_keys
from pystore.index.service import IndexService
from pystore.message.constants import SysFlag

TOPIC = "TopicTest"
T0 = 1_700_000_000_000

NON_ASCII = ["ключ", "键值", "é", "e\u0301", "😀", "a😀b", "\uffff", "\u0800x", "Zürich Köln"]


def key_hash(key: str) -> int:
    h = ref.java_hash(key)
    return 0 if h == -(2**31) else abs(h)


def entries(path: str, slots: int) -> list[tuple[int, int]]:
    """``(key hash, phy offset)`` of every written entry of an index file, in order."""
    data = open(path, "rb").read()
    count = struct.unpack_from(">i", data, 36)[0]
    base = 40 + slots * 4
    return [struct.unpack_from(">iq", data, base + n * 20) for n in range(1, count)]


def all_entries(root: str, slots: int) -> list[tuple[int, int]]:
    d = os.path.join(root, "index")
    return [e for n in sorted(os.listdir(d)) for e in entries(os.path.join(d, n), slots)]


def expected(topic: str, puts: list[tuple[str | None, str | None, int]]) -> list[tuple[int, int]]:
    """What ``IndexService.build_index`` wrote for ``(keys, uniq, phy)``: UNIQ_KEY, then each non-empty key."""
    out = []
    for keys, uniq, phy in puts:
        if uniq:
            out.append((key_hash(topic + "#" + uniq), phy))
        for k in (keys or "").split(" "):
            if k:
                out.append((key_hash(topic + "#" + k), phy))
    return out


class _Checkpoint:
    index_msg_timestamp = 0

    def flush(self) -> None:
        pass


@pytest.fixture
def service(tmp_path):
    s = IndexService(str(tmp_path / "index"), 97, 64, _Checkpoint(), clock=lambda: T0)
    yield s
    s.close()


@pytest.mark.parametrize("key", [k.encode() for k in NON_ASCII] + [
    b"\xff", b"a\xffb", b"\xe2\x82", b"\xe2\x82x", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xf4\x90\x80\x80",
])
def test_hash_of_the_stored_bytes_is_the_java_hash_of_the_decoded_string(service, key):
    """The reput indexes record bytes: each part decoded on its own with U+FFFD for what is not UTF-8, as
    the Python path decoded them before hashing, then hashed as Java does over UTF-16 code units."""
    topic = "Top\u00efc".encode()
    index_keys(service.core, topic, b"KEYS\x01" + key, 100, T0, 0)
    want = expected(topic.decode("utf-8", "replace"), [(key.decode("utf-8", "replace"), None, 100)])
    assert entries(service.files[-1].mapped_file.file_name, 97) == want


def test_non_ascii_keys_inline_and_rebuilt_alike(store_factory, fake_clock):
    """The index builder (from the record, as the put left it) and the reput (from the record) write the same bytes, whose
    hashes are the reference codec's Java hashes, and every key is found."""
    fake_clock.set(T0)
    geometry = {"max_hash_slot_num": 101, "max_index_num": 200}
    store = store_factory(clock=fake_clock, **geometry)
    puts = []
    for i, k in enumerate(NON_ASCII):
        fake_clock.advance(1000)
        a = store.put_message(Message(TOPIC, b"m%d" % i, keys=k.split(" "),
                                      properties={"UNIQ_KEY": "ü%d" % i})).append_message_result
        puts.append((k, "ü%d" % i, a.wrote_offset))
    store.flush()
    assert all_entries(store.root, 101) == expected(TOPIC, puts)
    (path,) = [os.path.join(store.root, "index", n) for n in os.listdir(os.path.join(store.root, "index"))]
    inline = open(path, "rb").read()
    for i, k in enumerate(NON_ASCII):
        for key in k.split(" ") + ["ü%d" % i]:
            assert [m.body for m in store.query_message(TOPIC, key).messages] == [b"m%d" % i]
    store.shutdown()
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    shutil.rmtree(os.path.join(store.root, "index"))
    store = store_factory(clock=fake_clock, **geometry)
    (path,) = [os.path.join(store.root, "index", n) for n in os.listdir(os.path.join(store.root, "index"))]
    assert open(path, "rb").read() == inline


def test_keys_split_on_single_spaces(service):
    """``"a  b   c "``: three keys; the empty ones between repeated spaces and at either end are skipped."""
    index_keys(service.core, b"T", b"KEYS\x01 a  b   c ", 7, T0, 0)
    assert entries(service.files[-1].mapped_file.file_name, 97) == expected("T", [(" a  b   c ", None, 7)])
    assert len(entries(service.files[-1].mapped_file.file_name, 97)) == 3


def test_uniq_key_first_then_keys_whatever_the_stored_order(service):
    index_keys(service.core, b"T", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01U", 7, T0, 0)
    index_keys(service.core, b"T", b"UNIQ_KEY\x01V\x02KEYS\x01k3", 9, T0, 0)
    assert entries(service.files[-1].mapped_file.file_name, 97) == expected(
        "T", [("k1 k2", "U", 7), ("k3", "V", 9)])


def test_uniq_key_only(store_factory):
    store = store_factory()
    m = Message(TOPIC, b"only uniq", properties={"UNIQ_KEY": "U1"})
    a = store.put_message(m).append_message_result
    store.flush()                                       # the index builder catches up
    assert all_entries(store.root, store.config.max_hash_slot_num) == [(key_hash(TOPIC + "#U1"), a.wrote_offset)]
    assert [x.body for x in store.query_message(TOPIC, "U1").messages] == [b"only uniq"]


def test_no_keys_no_entry(service):
    index_keys(service.core, b"T", b"TAGS\x01a\x02KEYSX\x01b\x02XKEYS\x01c\x02KEYS\x01", 7, T0, 0)
    assert service.files == []


def test_a_message_whose_keys_fill_a_file_goes_on_in_the_next(store_factory, fake_clock):
    """A file of 3 entries (``max_index_num`` 4): the second message's 3 keys put 1 entry in the first file and
    2 in a new one, whose header starts at the first's end; every key is found."""
    fake_clock.set(T0)
    store = store_factory(clock=fake_clock, max_hash_slot_num=11, max_index_num=4)
    puts = []
    for i, keys in enumerate(["a b", "c d e", "f"]):
        fake_clock.advance(1000)
        a = store.put_message(Message(TOPIC, b"m%d" % i, keys=keys.split())).append_message_result
        puts.append((keys, None, a.wrote_offset))
    store.flush()
    files = sorted(os.listdir(os.path.join(store.root, "index")))
    assert len(files) == 2
    paths = [os.path.join(store.root, "index", n) for n in files]
    assert [len(entries(p, 11)) for p in paths] == [3, 3]
    assert all_entries(store.root, 11) == expected(TOPIC, puts)
    h0 = struct.unpack_from(">qqqq", open(paths[0], "rb").read(), 0)
    h1 = struct.unpack_from(">qqqq", open(paths[1], "rb").read(), 0)
    assert h1[2] == h0[3] == puts[1][2]                  # c went into the first file, d and e into the second
    for i, keys in enumerate(["a b", "c d e", "f"]):
        for k in keys.split():
            assert [m.body for m in store.query_message(TOPIC, k).messages] == [b"m%d" % i]


def test_a_full_file_rolls_in_the_function(service):
    """Called directly: 64 entries a file, 63 usable; 70 keys of one message fill the first and go on."""
    keys = " ".join("k%d" % i for i in range(70))
    index_keys(service.core, b"T", b"KEYS\x01" + keys.encode(), 5, T0, 0)
    assert [f.index_count for f in service.files] == [64, 8]
    got = [e for f in service.files for e in entries(f.mapped_file.file_name, 97)]
    assert got == expected("T", [(keys, None, 5)])


def test_rollback_messages_are_not_indexed(store_factory, service):
    index_keys(service.core, b"T", b"KEYS\x01r", 5, T0, SysFlag.TRANSACTION_ROLLBACK_TYPE)
    assert service.files == []
    store = store_factory()
    store.put_message(Message(TOPIC, b"r", keys="rb", properties={"UNIQ_KEY": "UR"}))
    ok = store.put_message(Message(TOPIC, b"x", keys="ok")).append_message_result
    # a rolled-back record (what the broker writes on an end-transaction ROLLBACK)
    m = Message(TOPIC, b"rolled", keys="rb2")
    m.sys_flag = SysFlag.TRANSACTION_ROLLBACK_TYPE
    store.put_message(m)
    store.flush()
    hashes = [h for h, _ in all_entries(store.root, store.config.max_hash_slot_num)]
    assert key_hash(TOPIC + "#rb2") not in hashes
    assert (key_hash(TOPIC + "#ok"), ok.wrote_offset) in all_entries(store.root, store.config.max_hash_slot_num)
    assert store.query_message(TOPIC, "rb2").messages == []


def test_redispatch_adds_no_entries(store_factory):
    """A reput over records already indexed writes nothing for those below the newest file's end offset; the
    record at that offset is indexed again (RocketMQ's rule, ``phyOffset < endPhyOffset`` skips), and a
    query still returns it once."""
    store = store_factory()
    for i in range(10):
        store.put_message(Message(TOPIC, b"m%d" % i, keys=["k%d" % i, "both"], properties={"UNIQ_KEY": "U%d" % i}))
    slots = store.config.max_hash_slot_num
    store.flush()
    before = all_entries(store.root, slots)
    assert len(before) == 30
    q = store._commitlog.queue
    store._dispatcher.reput(q.files, q.mapped_file_size, 0, store.get_max_phy_offset())
    after = all_entries(store.root, slots)
    assert after[:30] == before and after[30:] == before[-3:]
    assert [m.body for m in store.query_message(TOPIC, "both").messages] == [b"m%d" % i for i in range(10)]
    assert [m.body for m in store.query_message(TOPIC, "k9").messages] == [b"m9"]


def test_full_files_wait_for_their_flush_on_no_thread_of_their_own(tmp_path):
    """A file that fills up is queued for its flush (``_full``), which ``flush_full`` does oldest first (a store
    runs it in ``IndexFileService``), and ``close`` does for what is left: no thread per full file (RocketMQ's
    FlushIndexFileThread), so none can outlive the service or flush a file after it was closed."""
    flushed_at: list[int] = []

    class RecordingCheckpoint(_Checkpoint):
        def flush(self) -> None:
            flushed_at.append(self.index_msg_timestamp)

    s = IndexService(str(tmp_path / "index"), 97, 64, RecordingCheckpoint(), clock=lambda: T0)
    keys = " ".join("k%d" % i for i in range(200))
    before = set(threading.enumerate())
    index_keys(s.core, b"T", b"KEYS\x01" + keys.encode(), 5, T0, 0)
    assert [f.index_count for f in s.files] == [64, 64, 64, 12]
    assert set(threading.enumerate()) <= before
    assert s._full == s.files[:3] and s.checkpoint.index_msg_timestamp == 0
    assert s.flush_full() == 3 and s._full == []
    assert flushed_at == [T0] * 3
    index_keys(s.core, b"T", b"KEYS\x01" + keys.encode(), 6, T0 + 5000, 0)
    assert len(s._full) == 3
    s.close()
    assert s._full == [] and s.checkpoint.index_msg_timestamp == T0 + 5000 and len(flushed_at) == 6


# -- the writer's parts: the hash's ASCII words, the KEYS/UNIQ_KEY scan, the topic kept, a message's scan kept --


def _props_reference(props: bytes) -> dict[bytes, bytes]:
    """docs/format.md §1.3 read as the record readers read it: ``\\x02``-separated ``name\\x01value``, split at
    the first ``\\x01``; an empty name or value is no property; the last of a name wins."""
    out = {}
    for seg in props.split(b"\x02"):
        name, sep, value = seg.partition(b"\x01")
        if sep and name and value:
            out[name] = value
    return out


def _expected_from_props(topic: bytes, props: bytes, phy: int) -> list[tuple[int, int]]:
    p = _props_reference(props)
    dec = lambda b: b.decode("utf-8", "replace")  # noqa: E731 - each part decoded on its own, as stored
    keys = p.get(b"KEYS")
    uniq = p.get(b"UNIQ_KEY")
    out = []
    if uniq:
        out.append((key_hash(dec(topic) + "#" + dec(uniq)), phy))
    for k in (keys or b"").split(b" "):
        if k:
            out.append((key_hash(dec(topic) + "#" + dec(k)), phy))
    return out


@pytest.mark.parametrize("length", range(0, 13))
def test_hash_of_ascii_words_with_a_non_ascii_byte_anywhere(tmp_path, length):
    """The hash folds four ASCII bytes at a time: a key of every length up to 12, plain and with a multi-byte or
    invalid sequence at every position (inside, across and after a word), hashes as the decoded string."""
    s = IndexService(str(tmp_path / "index"), 97, 4096, _Checkpoint(), clock=lambda: T0)
    try:
        keys = [b"abcdefghijkl"[:length]]
        for pos in range(length + 1):
            for odd in (b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xff", b"\xe2\x82"):
                keys.append(b"abcdefghijkl"[:pos] + odd + b"abcdefghijkl"[pos:length])
        want = []
        for phy, k in enumerate(keys, 1):
            index_keys(s.core, b"Topic", b"KEYS\x01" + k, phy, T0, 0)
            want += expected("Topic", [(k.decode("utf-8", "replace"), None, phy)])
        assert entries(s.files[-1].mapped_file.file_name, 97) == want
    finally:
        s.close()


def test_properties_scan_matches_the_record_readers(tmp_path):
    """Which KEYS and UNIQ_KEY a properties string holds, for properties strings built at random from the
    pieces that matter (names that are prefixes or extensions of the two, separators in a row, empty names
    and values, repeated names): the entries are those of the readers' parse."""
    import random

    rnd = random.Random(19)
    names = [b"KEYS", b"UNIQ_KEY", b"KEY", b"KEYSX", b"XKEYS", b"UNIQ_KE", b"", b"a"]
    values = [b"", b"a", b"b c", b" a", b"\x01x", b"\xc3\xa9", b"k1 k2  k3 ", b"\xff"]

    def segment() -> bytes:
        return rnd.choice(names) + (b"\x01" if rnd.random() < 0.9 else b"") + rnd.choice(values)
    s = IndexService(str(tmp_path / "index"), 97, 8192, _Checkpoint(), clock=lambda: T0)
    try:
        want = []
        for phy in range(1, 3001):
            props = rnd.choice([b"\x02", b"\x02\x02"]).join(segment() for _ in range(rnd.randint(1, 4)))
            props += rnd.choice([b"", b"\x02"])
            index_keys(s.core, b"T", props, phy, T0, 0)
            want += _expected_from_props(b"T", props, phy)
        assert len(want) > 500
        got = entries(s.files[-1].mapped_file.file_name, 97) if s.files else []
        assert got == want
    finally:
        s.close()


def test_topics_taking_turns_each_hash_under_their_own_name(service):
    """The writer keeps the last topic's hash: topics of one length that differ in one byte, a prefix of
    another, and the empty topic, in turns, each index under ``topic#key``."""
    topics = [b"TopicA", b"TopicB", b"Topic", b"TopicA", b"", b"TopicB", b"\xc3\xa9t\xc3\xa9", b"TopicA"]
    want = []
    for phy, t in enumerate(topics, 1):
        index_keys(service.core, t, b"KEYS\x01k", phy, T0, 0)
        want += expected(t.decode(), [("k", None, phy)])
    assert entries(service.files[-1].mapped_file.file_name, 97) == want


@pytest.mark.parametrize("n", [15, 16, 17, 40])
def test_a_message_with_many_keys_gets_them_all_in_order(store_factory, n):
    """The writer hashes keys 16 at a time: a message of ``n`` keys and a UNIQ_KEY, put (inline dispatch) and
    then rebuilt from the record (reput), gets ``n + 1`` entries in the order UNIQ_KEY, then the keys."""
    store = store_factory(max_hash_slot_num=101, max_index_num=400)
    keys = ["key-%d" % i for i in range(n)]
    a = store.put_message(Message(TOPIC, b"many", keys=keys, properties={"UNIQ_KEY": "U"})).append_message_result
    want = expected(TOPIC, [(" ".join(keys), "U", a.wrote_offset)])
    store.flush()
    assert all_entries(store.root, 101) == want
    for k in (keys[0], keys[15 if n > 15 else 0], keys[-1], "U"):
        assert [m.body for m in store.query_message(TOPIC, k).messages] == [b"many"]
    store.shutdown()
    shutil.rmtree(os.path.join(store.root, "consumequeue"))
    shutil.rmtree(os.path.join(store.root, "index"))
    store = store_factory(max_hash_slot_num=101, max_index_num=400)
    assert all_entries(store.root, 101) == want


@pytest.mark.parametrize("index_build_async", [False, True])
def test_a_message_put_again_after_its_keys_changed_is_indexed_under_the_new_keys(store_factory, index_build_async):
    """The dispatcher keeps the last keyed message's scan (by its properties bytes): the same ``Message`` put
    twice, its keys changed in between, and put again between puts of others, is indexed under the keys it had
    at each put; a batch of keyed messages gets one entry per message. Inline (the dispatcher's kept scan) and
    by the index builder alike."""
    store = store_factory(max_hash_slot_num=101, max_index_num=400, index_build_async=index_build_async)
    m = Message(TOPIC, b"m", keys="a")
    other = Message(TOPIC, b"o", keys="o")
    puts = []
    for keys in ("a", "a", "b c", None, "d"):
        m.keys = keys
        puts.append((keys, None, store.put_message(m).append_message_result.wrote_offset))
        puts.append(("o", None, store.put_message(other).append_message_result.wrote_offset))
    store.put_messages(MessageBatch([Message(TOPIC, b"x%d" % i, keys="x%d" % i) for i in range(3)]))
    store.flush()
    got = all_entries(store.root, 101)
    assert got[:-3] == expected(TOPIC, puts)
    assert [h for h, _ in got[-3:]] == [key_hash(TOPIC + "#x%d" % i) for i in range(3)]
    assert got[-3][1] < got[-2][1] < got[-1][1]
    assert sorted(x.queue_offset for x in store.query_message(TOPIC, "a", 10).messages) == [0, 2]
    assert [x.body for x in store.query_message(TOPIC, "c").messages] == [b"m"]
    assert [x.body for x in store.query_message(TOPIC, "x2").messages] == [b"x2"]


@pytest.mark.parametrize("index_build_async", [False, True])
def test_a_rolled_back_message_put_after_a_keyed_one_with_the_same_properties_is_not_indexed(store_factory,
                                                                                          index_build_async):
    """The kept scan is a scan of the properties *and* the flag: the same properties bytes under the
    rollback type get no entry (inline and by the index builder)."""
    store = store_factory(max_hash_slot_num=101, max_index_num=400, index_build_async=index_build_async)
    m = Message(TOPIC, b"m", keys="k")
    a = store.put_message(m).append_message_result
    m.sys_flag = SysFlag.TRANSACTION_ROLLBACK_TYPE
    store.put_message(m)
    store.flush()
    assert all_entries(store.root, 101) == expected(TOPIC, [("k", None, a.wrote_offset)])
