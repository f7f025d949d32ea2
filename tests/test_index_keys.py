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
import time

import pytest
import reference_codec as ref

from pystore import Message
from pystore._index import index_keys
from pystore.index import IndexService
from pystore.message import SysFlag

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
    index_keys(service, topic, b"KEYS\x01" + key, 100, T0, 0)
    want = expected(topic.decode("utf-8", "replace"), [(key.decode("utf-8", "replace"), None, 100)])
    assert entries(service.files[-1].mapped_file.file_name, 97) == want


def test_non_ascii_keys_inline_and_rebuilt_alike(store_factory, fake_clock):
    """Inline dispatch (from the ``Message``) and the reput (from the record) write the same bytes, whose
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
    index_keys(service, b"T", b"KEYS\x01 a  b   c ", 7, T0, 0)
    assert entries(service.files[-1].mapped_file.file_name, 97) == expected("T", [(" a  b   c ", None, 7)])
    assert len(entries(service.files[-1].mapped_file.file_name, 97)) == 3


def test_uniq_key_first_then_keys_whatever_the_stored_order(service):
    index_keys(service, b"T", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01U", 7, T0, 0)
    index_keys(service, b"T", b"UNIQ_KEY\x01V\x02KEYS\x01k3", 9, T0, 0)
    assert entries(service.files[-1].mapped_file.file_name, 97) == expected(
        "T", [("k1 k2", "U", 7), ("k3", "V", 9)])


def test_uniq_key_only(store_factory):
    store = store_factory()
    m = Message(TOPIC, b"only uniq", properties={"UNIQ_KEY": "U1"})
    a = store.put_message(m).append_message_result
    assert all_entries(store.root, store.config.max_hash_slot_num) == [(key_hash(TOPIC + "#U1"), a.wrote_offset)]
    assert [x.body for x in store.query_message(TOPIC, "U1").messages] == [b"only uniq"]


def test_no_keys_no_entry(service):
    index_keys(service, b"T", b"TAGS\x01a\x02KEYSX\x01b\x02XKEYS\x01c\x02KEYS\x01", 7, T0, 0)
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
    index_keys(service, b"T", b"KEYS\x01" + keys.encode(), 5, T0, 0)
    assert [f.index_count for f in service.files] == [64, 8]
    got = [e for f in service.files for e in entries(f.mapped_file.file_name, 97)]
    assert got == expected("T", [(keys, None, 5)])


def test_rollback_messages_are_not_indexed(store_factory, service):
    index_keys(service, b"T", b"KEYS\x01r", 5, T0, SysFlag.TRANSACTION_ROLLBACK_TYPE)
    assert service.files == []
    store = store_factory()
    store.put_message(Message(TOPIC, b"r", keys="rb", properties={"UNIQ_KEY": "UR"}))
    ok = store.put_message(Message(TOPIC, b"x", keys="ok")).append_message_result
    # a rolled-back record (what the broker writes on an end-transaction ROLLBACK)
    m = Message(TOPIC, b"rolled", keys="rb2")
    m.sys_flag = SysFlag.TRANSACTION_ROLLBACK_TYPE
    store.put_message(m)
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
    before = all_entries(store.root, slots)
    assert len(before) == 30
    q = store._commitlog.queue
    store._dispatcher.reput(q.files, q.mapped_file_size, 0, store.get_max_phy_offset())
    after = all_entries(store.root, slots)
    assert after[:30] == before and after[30:] == before[-3:]
    assert [m.body for m in store.query_message(TOPIC, "both").messages] == [b"m%d" % i for i in range(10)]
    assert [m.body for m in store.query_message(TOPIC, "k9").messages] == [b"m9"]


def test_close_waits_for_the_flushes_of_full_files(tmp_path):
    """Each file that fills up is flushed by a thread of its own (RocketMQ's FlushIndexFileThread); close()
    joins them, so none outlives the service or flushes a file after it was closed."""
    class SlowCheckpoint(_Checkpoint):
        def flush(self) -> None:
            time.sleep(0.2)

    s = IndexService(str(tmp_path / "index"), 97, 64, SlowCheckpoint(), clock=lambda: T0)
    keys = " ".join("k%d" % i for i in range(200))
    before = set(threading.enumerate())
    index_keys(s, b"T", b"KEYS\x01" + keys.encode(), 5, T0, 0)
    assert [f.index_count for f in s.files] == [64, 64, 64, 12]
    running = [t for t in threading.enumerate() if t not in before]
    assert len(running) == 3 and all(t.is_alive() for t in running)
    s.close()
    assert not any(t.is_alive() for t in running)
    assert s.checkpoint.index_msg_timestamp == T0
