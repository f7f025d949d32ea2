"""``MessageBatch.from_bodies``: a batch of bodies sharing one template message, encoded without a
``Message`` per body. What it stores must be byte for byte what the same batch of ``Message`` objects
stores; it must refuse what a ``Message`` batch refuses, and read, index, filter, pickle and flush the same."""

from __future__ import annotations

import os
import pickle
import sys
import zlib

import pytest
from conftest import BORN_BASE, BORN_HOST, FakeClock
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pystore import FlushDiskType, GetMessageStatus, Message, MessageBatch, PutMessageStatus, TagFilter
from pystore.engine.store import MessageStore
from pystore.tools import iter_commitlog

TOPIC = "TopicTest"
FIELDS = dict(tags="TagA", keys=["k1", "k2"], flag=7, properties={"a": "b"}, queue_id=2,
              born_timestamp=BORN_BASE, born_host=BORN_HOST)


def as_messages(bodies, **kw) -> MessageBatch:
    return MessageBatch([Message(TOPIC, b, **kw) for b in bodies])


def commit_log_bytes(store: MessageStore) -> bytes:
    store.flush()
    files = sorted(os.listdir(os.path.join(store.root, "commitlog")))
    end = store.get_max_phy_offset()
    data = b"".join(open(os.path.join(store.root, "commitlog", f), "rb").read() for f in files)
    return data[:end]


def read_bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Every body of the queue, page after page: one get_message returns at most 32 messages
    (RocketMQ's maxTransferCountOnMessageInMemory), and a batch may hold more."""
    bodies: list[bytes] = []
    offset = 0
    while True:
        got = store.get_message("g", topic, queue_id, offset, 64)
        if got.status is not GetMessageStatus.FOUND:
            return bodies
        bodies.extend(m.body for m in got.messages)
        offset = got.next_begin_offset


def stored_records(store: MessageStore, result) -> list:
    """The records one put wrote, read back from the commit log in order."""
    a = result.append_message_result
    out, offset = [], a.wrote_offset
    for _ in range(a.msg_num):
        m = store.look_message_by_offset(offset)
        out.append(m)
        offset += m.store_size
    assert offset == a.wrote_offset + a.wrote_bytes
    return out


# -- the object ---------------------------------------------------------------------------------------------


def test_batch_of_bodies_behaves_like_the_messages_it_stands_for():
    bodies = [b"a", bytearray(b"bb"), memoryview(b"ccc"), b""]
    fb = MessageBatch.from_bodies(TOPIC, bodies, **FIELDS)
    ref = as_messages([bytes(b) for b in bodies], **FIELDS)
    assert len(fb) == 4 and fb.topic == TOPIC and fb.queue_id == 2
    assert "4 messages" in repr(fb)
    got = fb.messages
    assert [m.body for m in got] == [b"a", b"bb", b"ccc", b""]
    for a, b in zip(got, ref.messages, strict=True):
        assert (a.topic, a.body, a.properties, a.flag, a.queue_id, a.born_timestamp, a.born_host) == \
            (b.topic, b.body, b.properties, b.flag, b.queue_id, b.born_timestamp, b.born_host)
    assert [m.body for m in fb] == [m.body for m in got]
    back = pickle.loads(pickle.dumps(fb))
    assert [m.body for m in back] == [m.body for m in got] and back.topic == TOPIC
    assert fb.wait_store_msg_ok and not MessageBatch.from_bodies(TOPIC, [b"x"], properties={"WAIT": "false"}
                                                                 ).wait_store_msg_ok
    bodies.append(b"later")                          # the batch took its own list
    assert len(fb) == 4


def test_the_batch_holds_its_bodies():
    # from_bodies takes a reference to every body of a list in one pass (and drops the ones it took when an item
    # is not bytes, converting them all): the batch alone keeps them alive, nothing leaks
    import gc

    bodies = [os.urandom(64 + i) for i in range(40)]
    crcs = [zlib.crc32(b) for b in bodies]
    before = [sys.getrefcount(b) for b in bodies]
    batch = MessageBatch.from_bodies(TOPIC, bodies)
    assert [sys.getrefcount(b) for b in bodies] == [n + 1 for n in before]
    mixed = MessageBatch.from_bodies(TOPIC, bodies[:20] + [bytearray(b"x")] + bodies[20:])
    assert [sys.getrefcount(b) for b in bodies] == [n + 2 for n in before]
    del mixed
    bodies.clear()
    gc.collect()
    assert [zlib.crc32(m.body) for m in batch.messages] == crcs


@pytest.mark.parametrize("bodies,exc", [([], ValueError), (["text"], TypeError), ([None], TypeError),
                                        ([b"ok", 5], TypeError), (None, TypeError)])
def test_bad_bodies(bodies, exc):
    with pytest.raises(exc):
        MessageBatch.from_bodies(TOPIC, bodies)


def test_bad_template_arguments():
    with pytest.raises(TypeError):
        MessageBatch.from_bodies(5, [b"x"])
    with pytest.raises(TypeError):
        MessageBatch.from_bodies(TOPIC, [b"x"], tags=3)
    with pytest.raises(TypeError):
        MessageBatch.from_bodies(TOPIC, [b"x"], properties={"a": 1})


def test_plain_batches_share_nothing_but_what_they_should(store_factory):
    # from_bodies(topic, bodies[, queue_id]) with nothing else given shares a cached template: each batch
    # still gets its own born time, in its messages and in its records, and a new topic or queue makes a new
    # template
    import time

    store = store_factory()
    plan = [("PlainA", 0), ("PlainA", 0), ("PlainB", 0), ("PlainA", 3), ("PlainA", 3), ("PlainA", 0)]
    # made first, put last: a later batch of the same template must not change its born time
    early = MessageBatch.from_bodies("PlainA", [b"early"])
    early_born = early.messages[0].born_timestamp
    for i, (topic, qid) in enumerate(plan):
        time.sleep(0.002)                                     # a later millisecond than the last batch's
        before = int(time.time() * 1000)
        batch = MessageBatch.from_bodies(topic, [b"p%d-%d" % (i, j) for j in range(3)], queue_id=qid)
        after = int(time.time() * 1000)
        assert (batch.topic, batch.queue_id, len(batch)) == (topic, qid, 3)
        ms = batch.messages
        assert all(before <= m.born_timestamp <= after for m in ms)
        assert [(m.topic, m.queue_id, m.properties, m.flag, m.born_host) for m in ms] == \
            [(topic, qid, {}, 0, ("127.0.0.1", 0))] * 3
        ms[0].properties = {"changed": "yes"}                 # a materialized message is the caller's own
        assert batch.messages[0].properties == {}
        r = store.put_messages(batch)
        assert r.is_ok()
        stored = stored_records(store, r)
        assert [m.born_timestamp for m in stored] == [m.born_timestamp for m in ms]     # every record
        assert [m.body for m in stored] == [m.body for m in ms]
        assert all(m.properties.get("changed") is None for m in stored)
    r = store.put_messages(early)
    assert r.is_ok()
    assert early.messages[0].born_timestamp == early_born < ms[0].born_timestamp
    assert [m.born_timestamp for m in stored_records(store, r)] == [early_born]
    for topic, qid in sorted(set(plan)):
        got = read_bodies(store, topic, qid)
        expect = [b"p%d-%d" % (i, j) for i, tq in enumerate(plan) if tq == (topic, qid) for j in range(3)]
        expect += [b"early"] if (topic, qid) == ("PlainA", 0) else []
        assert got == expect
    # stored like a Message batch of the same bodies and born time
    plain = MessageBatch.from_bodies("PlainC", [b"x", b"yy"])
    born = plain.messages[0].born_timestamp
    same = MessageBatch([Message("PlainC", b, born_timestamp=born) for b in (b"x", b"yy")])
    a, b = store.put_messages(plain), store.put_messages(same)
    ra = [store.look_message_by_offset(a.append_message_result.wrote_offset)]
    rb = [store.look_message_by_offset(b.append_message_result.wrote_offset)]
    strip = lambda raw: raw[:8] + raw[12:20] + raw[36:56] + raw[64:]    # noqa: E731 - offsets, CRC, store time
    assert strip(ra[0].raw) == strip(rb[0].raw)
    store_factory.expect_messages(3 * len(plan) + 5)


def test_the_template_and_the_bodies_cannot_change_under_a_put():
    # the put reads the bodies through borrowed references (big ones without the GIL) and sized the records
    # from the template before taking the lock: neither may change, even reached through the gc module
    import gc

    a = MessageBatch.from_bodies("FrozenT", [b"a1", bytearray(b"a2")])
    referents = gc.get_referents(a)
    bodies = [r for r in referents if isinstance(r, (list, tuple)) and b"a1" in r]
    assert bodies and all(type(r) is tuple for r in bodies)
    assert bodies[0] == (b"a1", b"a2")
    templates = [r for r in referents if isinstance(r, Message)]
    assert templates
    for t in templates:
        for name, value in [("properties", {"leak": "x"}), ("topic", "Other"), ("body", b"x"), ("tags", "T"),
                            ("keys", ["k"]), ("flag", 1), ("queue_id", 3), ("born_timestamp", 1),
                            ("born_host", ("10.0.0.1", 1)), ("sys_flag", 0), ("reconsume_times", 1),
                            ("prepared_transaction_offset", 1), ("delay_time_level", 2),
                            ("wait_store_msg_ok", False)]:
            with pytest.raises(AttributeError, match="template"):
                setattr(t, name, value)
        with pytest.raises(AttributeError, match="template"):
            t.put_property("leak", "x")
        with pytest.raises(AttributeError, match="template"):
            t.clear_property("TAGS")
        with pytest.raises(AttributeError, match="template"):
            t.__init__("Other", b"x" * 1000)           # a second __init__ would bypass every setter
        assert (t.topic, t.body) == ("FrozenT", b"")
    b = MessageBatch.from_bodies("FrozenT", [b"b1"])
    assert [m.properties for m in b.messages] == [{}]
    # the messages a batch hands out are the caller's own, not frozen
    m = b.messages[0]
    m.properties = {"mine": "yes"}
    assert m.properties == {"mine": "yes"}


def test_many_bodies_and_big_bodies(store_factory):
    # more bodies than the put keeps pointers to on the stack (256), and bodies big enough for the batch to be
    # copied without the GIL, next to small ones: every record whole, in order, with its CRC and the batch's born
    # time
    store = store_factory(mapped_file_size_commit_log=8 << 20)
    many = [bytes([i % 251]) * (i % 97) for i in range(300)]
    big = [os.urandom(300 << 10), b"small", os.urandom(256 << 10), b""]
    put = []
    for bodies in (many, big):
        batch = MessageBatch.from_bodies("BigT", bodies)
        r = store.put_messages(batch)
        assert r.is_ok() and r.append_message_result.msg_num == len(bodies)
        got = stored_records(store, r)
        assert [m.body for m in got] == bodies
        assert [m.body_crc for m in got] == [zlib.crc32(b) & 0x7FFFFFFF for b in bodies]
        assert {m.born_timestamp for m in got} == {batch.messages[0].born_timestamp}
        put += bodies
    assert read_bodies(store, "BigT", 0) == put
    store_factory.expect_messages(len(put))


# -- stored bytes --------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(st.binary(max_size=600), min_size=1, max_size=40),
       tags=st.sampled_from([None, "", "TagA", "标签"]),
       keys=st.sampled_from([None, "one", ["a", "b c"]]),
       long_topic=st.booleans(), v6=st.booleans(), store_v6=st.booleans())
@example(bodies=[b""] * 40, tags=None, keys=None, long_topic=False, v6=False, store_v6=False)  # > one read's 32
@example(bodies=[b"a", b"bc" * 300, b""], tags="TagA", keys="one", long_topic=True, v6=True, store_v6=True)
def test_stored_bytes_equal_a_message_batch(tmp_path_factory, bodies, tags, keys, long_topic, v6, store_v6):
    topic = "T" * 200 if long_topic else TOPIC        # a topic over 127 characters makes version-2 records
    kw = dict(tags=tags, keys=keys, flag=3, queue_id=1, born_timestamp=BORN_BASE,
              born_host=("::1", 9) if v6 else BORN_HOST)
    roots = tmp_path_factory.mktemp("same")
    out = []
    stamps: list[int] = []
    for name, batch in (("a", MessageBatch.from_bodies(topic, bodies, **kw)),
                        ("b", MessageBatch([Message(topic, b, **kw) for b in bodies]))):
        store = MessageStore.open(str(roots / name), clock=FakeClock(), mapped_file_size_commit_log=1 << 20,
                                  store_host=("fe80::2", 10911) if store_v6 else ("127.0.0.1", 10911))
        try:
            r = store.put_messages(batch)
            assert r.is_ok(), r
            a = r.append_message_result
            out.append((commit_log_bytes(store), a.wrote_offset, a.wrote_bytes, a.msg_num, a.logics_offset,
                        a.msg_id, read_bodies(store, topic, 1)))
            stamps.append(a.store_timestamp)
        finally:
            store.destroy()
    assert out[0] == out[1]
    assert out[0][6] == bodies
    # and both are what the docs/format.md reference encoder writes for each message (both batches now share the
    # copy-from-the-first-record encoder, so their equality alone would not see a fault in it)
    import reference_codec as ref

    store_host = ("fe80::2", 10911) if store_v6 else ("127.0.0.1", 10911)
    expected = b""
    for i, b in enumerate(bodies):
        m = Message(topic, b, **kw)
        expected += ref.encode(topic, b, ref.properties_string(m.properties), 1, 3, i, len(expected), 0,
                               BORN_BASE, kw["born_host"], stamps[0], store_host, 0, 0)
    assert out[0][0] == expected


def test_reads_index_and_filters_like_messages(store_factory):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    r1 = store.put_messages(MessageBatch.from_bodies(TOPIC, [b"x%d" % i for i in range(10)], tags="TagA",
                                                     keys="shared"))
    r2 = store.put_messages(MessageBatch.from_bodies(TOPIC, [b"y%d" % i for i in range(5)], tags="TagB"))
    assert r1.is_ok() and r2.is_ok()
    assert r2.append_message_result.logics_offset == 10
    got = store.get_message("g", TOPIC, 0, 0, 32, TagFilter("TagB"))
    assert [m.body for m in got.messages] == [b"y%d" % i for i in range(5)]
    assert [m.queue_offset for m in got.messages] == list(range(10, 15))
    found = store.query_message(TOPIC, "shared", 32)
    assert sorted(m.body for m in found.messages) == sorted(b"x%d" % i for i in range(10))
    for m in store.get_message("g", TOPIC, 0, 0, 32).messages:
        assert m.body_crc == store.look_message_by_offset(m.commit_log_offset).body_crc
    store_factory.expect_messages(15)


def test_refused_like_a_message_batch(store_factory):
    store = store_factory(max_message_size=100)
    ok = MessageBatch.from_bodies(TOPIC, [b"a" * 100])
    assert store.put_messages(ok).is_ok()
    too_big = MessageBatch.from_bodies(TOPIC, [b"a", b"b" * 101])
    assert store.put_messages(too_big).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages(MessageBatch.from_bodies("bad topic!", [b"a"])).status is \
        PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages(MessageBatch.from_bodies(TOPIC, [b"a"], properties={"DELAY": "3"})).status is \
        PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages(MessageBatch.from_bodies(TOPIC, [b"a"], properties={"k": "v" * 40000})).status is \
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_messages(MessageBatch.from_bodies(TOPIC, [b"a"], queue_id=-1)).status is \
        PutMessageStatus.MESSAGE_ILLEGAL
    assert store.get_max_offset_in_queue(TOPIC, 0) == 1
    store_factory.expect_messages(1)


def test_sync_flush_and_async_put(store_factory):
    store = store_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    r = store.put_messages(MessageBatch.from_bodies(TOPIC, [b"d%d" % i for i in range(8)]))
    assert r.status is PutMessageStatus.PUT_OK
    f = store.async_put_messages(MessageBatch.from_bodies(TOPIC, [b"e"]))
    assert f.result(timeout=10).status is PutMessageStatus.PUT_OK
    got = store.get_message("g", TOPIC, 0, 0, 32)
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [b"d%d" % i for i in range(8)] + [b"e"]
    # WAIT=false: acknowledged without waiting for the flush (consume queues follow the flush later)
    r = store.put_messages(MessageBatch.from_bodies(TOPIC, [b"w"], properties={"WAIT": "false"}))
    assert r.status is PutMessageStatus.PUT_OK
    store.flush()
    assert [m.body for m in iter_commitlog(os.path.join(store.root, "commitlog"), verify_crc=True)] == \
        [b"d%d" % i for i in range(8)] + [b"e", b"w"]
    store_factory.expect_messages(10)
