"""The read fast path: ``get_message`` and ``look_message_by_offset`` bound to a compiled
``_queue_reader.QueueReader`` (the common call without a Python frame, every other call handed to the ``MessageStore``
method), and the messages of one page sharing one copy of their contiguous records. Behaviour only: the
compiled answer must equal the Python method's for every call, a message must stay whole after its
neighbours, its page and its files are gone, and the store's state (closed, not readable) must be honoured
through an old reference."""

from __future__ import annotations

import gc
import pickle

import pytest
from conftest import SMALL_FILE, drop_commit_log_head, make_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pystore import GetMessageStatus, Message, MessageBatch, TagFilter
from pystore.engine.store import MessageStore
from pystore.errors import StoreClosedError, StoreError
from pystore.read._queue_reader import QueueReader
from pystore.tools import decode_record, iter_commitlog

TOPIC = "TopicTest"
GROUP = "g"
FIELDS = ("topic", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag", "born_timestamp",
          "store_timestamp", "reconsume_times", "prepared_transaction_offset", "store_size", "body_crc",
          "magic_code", "body", "properties", "tags", "keys", "born_host", "store_host", "msg_id", "raw")


def slow(store: MessageStore, *args):
    """The same call through the Python reads (``StoreReads``: the fast path's fallback and its specification)."""
    return store._reads.get_message(*args)


def summary(r) -> tuple | None:
    if r is None:
        return None
    return (r.status, r.next_begin_offset, r.min_offset, r.max_offset, r.buffer_total_size,
            r.suggest_pulling_from_slave, [tuple(getattr(m, f) for f in FIELDS) for m in r.messages])


# -- binding ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True])
def test_no_instance_attribute_shadows_a_method(store_factory, read_only):
    """The store's methods are the class's in every state: load points them at compiled objects, it does not
    rebind them on the instance."""
    w = store_factory("w")
    assert w.put_message(make_message(0)).is_ok()
    store = store_factory("w", read_only=True) if read_only else w
    methods = {name for name in dir(MessageStore) if callable(getattr(MessageStore, name, None))}
    assert not methods & set(vars(store))
    assert store.get_message(GROUP, TOPIC, 0, 0).status is GetMessageStatus.FOUND
    assert not methods & set(vars(store))
    store_factory.expect_messages(1, "w")


def test_writable_store_binds_the_compiled_reader(store_factory):
    store = store_factory()
    assert store.put_message(make_message(0)).is_ok()
    assert isinstance(store._reader, QueueReader) and store._reader.open
    assert store._gets is store._reader and "get_message" not in vars(store)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [0]
    store_factory.expect_messages(1)


def test_read_only_store_binds_the_following_reader(store_factory):
    """A read-only store's get is its live reader's (which follows the writer); its look stays the Python
    method's."""
    w = store_factory("w")
    assert w.put_messages(MessageBatch([make_message(i) for i in range(5)])).is_ok()
    w.flush()
    ro = store_factory("w", read_only=True)
    assert ro._gets is ro._reader and ro._looks is ro._reads and not {"get_message", "look_message_by_offset"} & set(vars(ro))
    assert [m.body for m in ro.get_message(GROUP, TOPIC, 0, 0, 32).messages] == \
        [m.body for m in w.get_message(GROUP, TOPIC, 0, 0, 32).messages]
    store_factory.expect_messages(5, "w")


class FilteringStore(MessageStore):
    calls = 0

    def get_message(self, *args, **kwargs):
        type(self).calls += 1
        return super().get_message(*args, **kwargs)


def test_subclass_override_survives_open(store_factory):
    store = store_factory.track(FilteringStore.open(store_factory.path("a"), mapped_file_size_commit_log=SMALL_FILE))
    assert store.put_message(make_message(0)).is_ok()
    assert "get_message" not in vars(store) and "look_message_by_offset" not in vars(store)
    assert store._reader is None
    assert store.get_message(GROUP, TOPIC, 0, 0).status is GetMessageStatus.FOUND and FilteringStore.calls == 1


class PlainSubclass(MessageStore):
    """Overrides nothing: a subclass keeps the Python methods all the same (``_attach_fast_paths``)."""


def test_a_subclass_reads_through_the_python_methods(store_factory):
    store = store_factory.track(PlainSubclass.open(store_factory.path("a"), mapped_file_size_commit_log=SMALL_FILE))
    r = store.put_message(make_message(0))
    assert r.is_ok()
    assert store._reader is None and "get_message" not in vars(store) and "look_message_by_offset" not in vars(store)
    assert [m.queue_offset for m in store.get_message(GROUP, TOPIC, 0, 0).messages] == [0]
    assert store.look_message_by_offset(r.append_message_result.wrote_offset).queue_offset == 0
    store_factory.expect_messages(1, "a")
    store_factory.expect_messages(1, "a")


def test_look_message_by_offset_agrees_with_the_python_method(store_factory):
    store = store_factory(mapped_file_size_commit_log=4096)
    results = [store.put_message(make_message(i, body_size=300 + i)) for i in range(40)]
    assert store._looks is store._reader and "look_message_by_offset" not in vars(store)
    offsets = [r.append_message_result.wrote_offset for r in results]
    probes = offsets + [o + 1 for o in offsets[:5]] + [-1, 0, 4095, 4096, store.get_max_phy_offset(),
                                                       store.get_max_phy_offset() + 10**6, True, 10**9]
    for off in probes:
        fast = store.look_message_by_offset(off)
        slow_m = store._reads.look_message_by_offset(off)
        assert (fast is None) == (slow_m is None), off
        if fast is not None:
            assert (fast.raw, fast.commit_log_offset) == (slow_m.raw, slow_m.commit_log_offset)
    assert [store.look_message_by_offset(o).body for o in offsets] == [r.body for r in
                                                                       (make_message(i, body_size=300 + i)
                                                                        for i in range(40))]
    with pytest.raises(TypeError):
        store.look_message_by_offset("0")
    with pytest.raises(OverflowError):
        store.look_message_by_offset(1 << 70)
    get = store.look_message_by_offset
    store.shutdown()
    with pytest.raises(StoreClosedError):
        get(offsets[0])
    store_factory.expect_messages(40)


def test_old_reference_after_shutdown(tmp_path):
    store = MessageStore.open(str(tmp_path / "s"), mapped_file_size_commit_log=SMALL_FILE)
    assert store.put_message(make_message(0)).is_ok()
    get = store.get_message
    assert get(GROUP, TOPIC, 0, 0).status is GetMessageStatus.FOUND
    store.running_flags.get_and_make_not_readable()
    with pytest.raises(StoreError, match="not readable"):
        get(GROUP, TOPIC, 0, 0)
    store.running_flags.get_and_make_readable()
    store.shutdown()
    assert not store._reader.open
    with pytest.raises(StoreClosedError):
        get(GROUP, TOPIC, 0, 0)


def test_loaded_but_not_started_store_reads(tmp_path):
    store = MessageStore.open(str(tmp_path / "s"), mapped_file_size_commit_log=SMALL_FILE)
    assert store.put_messages(MessageBatch([make_message(i) for i in range(3)])).is_ok()
    store.shutdown()
    again = MessageStore(store.config)
    try:
        assert again.load() and again._reader.open
        assert [m.queue_offset for m in again.get_message(GROUP, TOPIC, 0, 0, 32).messages] == [0, 1, 2]
    finally:
        again.shutdown()


def test_arguments_the_fast_path_does_not_take_go_to_the_python_method(store_factory):
    store = store_factory()
    assert store.put_messages(MessageBatch([make_message(i, tags="TagA" if i % 2 else "TagB")
                                            for i in range(10)])).is_ok()
    with pytest.raises(TypeError):
        store.get_message(GROUP, TOPIC, "0", 0)
    with pytest.raises(TypeError):
        store.get_message(GROUP, TOPIC, 0, 1.0)
    with pytest.raises(TypeError):
        store.get_message(GROUP, TOPIC, True, 0)          # a bool is not a queue id here either
    with pytest.raises(TypeError):
        store.get_message(GROUP, 5, 0, 0)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, "TagA")
    assert [m.queue_offset for m in r.messages] == [1, 3, 5, 7, 9]
    r = store.get_message(GROUP, TOPIC, 0, 0, message_filter=TagFilter("TagB"), max_msg_nums=2)
    assert [m.queue_offset for m in r.messages] == [0, 2]
    assert store.get_message(GROUP, "Nope", 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    with pytest.raises(OverflowError):
        store.get_message(GROUP, TOPIC, 0, 1 << 70)
    store_factory.expect_messages(10)


def test_slave_keeps_the_requested_offset(store_factory):
    s = store_factory(broker_role="SLAVE")
    # a slave takes no puts; its reads of an unknown or empty queue keep the offset asked for
    r = s.get_message(GROUP, TOPIC, 0, 7)
    assert r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 7


# -- shared runs ------------------------------------------------------------------------------------------


def test_page_messages_are_whole_after_the_page_and_the_files_are_gone(store_factory):
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    msgs = [make_message(i, keys=["k%d" % i, "x"], born_host=("::1", 9000 + i) if i % 3 else ("10.0.0.%d" % i, 1))
            for i in range(40)]
    assert store.put_messages(MessageBatch(msgs[:20])).is_ok()
    for m in msgs[20:]:
        assert store.put_message(m).is_ok()
    page = store.get_message(GROUP, TOPIC, 0, 0, 40)
    expected = [tuple(getattr(store.look_message_by_offset(m.commit_log_offset), f) for f in FIELDS)
                for m in page.messages]
    keep = page.messages[5]
    raw_first = page.messages[6]
    assert raw_first.raw == store.look_message_by_offset(raw_first.commit_log_offset).raw    # detach first
    del page
    store.destroy()
    gc.collect()
    assert tuple(getattr(keep, f) for f in FIELDS) == expected[5]
    assert tuple(getattr(raw_first, f) for f in FIELDS) == expected[6]
    assert len(keep.raw) == keep.store_size and decode_record(keep.raw).body == keep.body
    assert pickle.loads(pickle.dumps(keep)).raw == keep.raw


def test_large_interleaved_and_file_crossing_records(store_factory):
    """Records of other queues between a page's records, records larger than a run, a page crossing a
    commit-log file: every message equals its own record."""
    store = store_factory(mapped_file_size_commit_log=256 << 10)
    sizes = [10, 70_000, 5, 100_000, 1, 1, 65_000, 200] * 6
    for i, n in enumerate(sizes):
        assert store.put_message(Message(TOPIC, bytes([i % 251]) * n, queue_id=i % 2)).is_ok()
        assert store.put_message(Message("Other", b"o" * (i * 37 % 3000))).is_ok()
    got = []
    for qid in (0, 1):
        off = 0
        while True:
            r = store.get_message(GROUP, TOPIC, qid, off, 32)
            if r.status is not GetMessageStatus.FOUND:
                break
            assert summary(r) == summary(slow(store, GROUP, TOPIC, qid, off, 32))
            got += [(m.queue_id, m.queue_offset, m.body) for m in r.messages]
            for m in r.messages:
                own = store.look_message_by_offset(m.commit_log_offset)
                assert (m.raw, m.body, m.topic, m.properties) == (own.raw, own.body, own.topic, own.properties)
            off = r.next_begin_offset
    want = [(i % 2, i // 2, bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    assert sorted(got) == sorted(want)
    store_factory.expect_messages(2 * len(sizes))


def test_big_bodies_are_copied_once_and_read_whole(store_factory):
    """A body of 4 KiB or more is copied once, into ``body``, and the rest of its record apart from it (raw puts
    the record together when asked): every read path gives the record's own bytes and fields, before and after
    raw is asked for, with and without a filter, and next to small records that share a page's copy."""
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    sizes = [10, 4095, 4096, 4097, 20, 70_000, 0, 5000, 3]
    for i, n in enumerate(sizes):
        m = Message(TOPIC, bytes([65 + i]) * n, tags="T%d" % (i % 2), keys=["k%d" % i], properties={"p": "é" * (i + 1)})
        assert store.put_message(m).is_ok()
    cl = store.config.commit_log_paths()

    def on_disk(m) -> bytes:
        with store.get_commit_log_data(m.commit_log_offset) as sel:
            return bytes(sel.buffer[:m.store_size])

    def check(m, i, raw_first: bool) -> None:
        if raw_first:
            assert m.raw == on_disk(m)
        assert (m.body, m.topic, m.tags, m.keys, m.properties) == \
            (bytes([65 + i]) * sizes[i], TOPIC, "T%d" % (i % 2), ["k%d" % i], {"TAGS": "T%d" % (i % 2),
                                                                              "KEYS": "k%d" % i, "p": "é" * (i + 1)})
        assert m.raw == on_disk(m) and len(m.raw) == m.store_size
        assert m.body == bytes([65 + i]) * sizes[i] and m.properties["p"] == "é" * (i + 1)   # after raw, too
        back = pickle.loads(pickle.dumps(m))
        assert (back.raw, back.body, back.properties) == (m.raw, m.body, m.properties)

    for raw_first in (False, True):
        page = store.get_message(GROUP, TOPIC, 0, 0, 32)
        assert [m.queue_offset for m in page.messages] == list(range(len(sizes)))
        for i, m in enumerate(page.messages):
            check(m, i, raw_first)
        tagged = store.get_message(GROUP, TOPIC, 0, 0, 32, TagFilter("T1"))
        assert [m.queue_offset for m in tagged.messages] == [i for i in range(len(sizes)) if i % 2]
        for m in tagged.messages:
            check(m, m.queue_offset, raw_first)

        class Odd:
            def is_matched_by_consume_queue(self, code):
                return True

            def is_matched_by_commit_log(self, msg):
                return msg.queue_offset % 2 == 1

        assert [m.queue_offset for m in store.get_message(GROUP, TOPIC, 0, 0, 32, Odd()).messages] == \
            [i for i in range(len(sizes)) if i % 2]
        for i, m in enumerate(m for m in iter_commitlog(cl) if m.topic == TOPIC):
            check(m, i, raw_first)
        for m in page.messages:
            check(store.look_message_by_offset(m.commit_log_offset), m.queue_offset, raw_first)
    store_factory.expect_messages(len(sizes))


# -- the compiled answer is the Python method's ------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(puts=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3000), st.booleans()), min_size=0, max_size=60),
       reads=st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 70), st.integers(-2, 80)), min_size=1,
                      max_size=25),
       drop_head=st.booleans())
def test_fast_and_python_get_message_agree(tmp_path_factory, puts, reads, drop_head):
    root = tmp_path_factory.mktemp("agree")
    store = MessageStore.open(str(root / "s"), mapped_file_size_commit_log=64 << 10,
                              mapped_file_size_consume_queue=20 * 16, max_transfer_count_on_message_in_memory=7,
                              max_transfer_bytes_on_message_in_memory=20_000)
    try:
        for qid, n, batch in puts:
            body = bytes([n % 256]) * n
            r = (store.put_messages(MessageBatch([Message(TOPIC, body, queue_id=qid)] * 3)) if batch and n
                 else store.put_message(Message(TOPIC, body, queue_id=qid)))
            assert r.is_ok(), r
        if drop_head and store.get_max_phy_offset() > (64 << 10):
            # the first commit-log file gone under the queues: MESSAGE_WAS_REMOVING / OFFSET_TOO_SMALL paths
            drop_commit_log_head(store)
        for qid, off, nums in reads:
            assert summary(store.get_message(GROUP, TOPIC, qid, off, nums)) == \
                summary(slow(store, GROUP, TOPIC, qid, off, nums))
    finally:
        store.destroy()


def test_a_page_crossing_into_a_commit_log_file_newer_than_the_readers_view(store_factory):
    """A reader's view of the commit-log files is taken before it reads the queue, and a put may roll to a
    new file in between (a thread switch): units then point past the files in view. They are not readable
    yet, never skipped: a FOUND page's next offset is always its offset plus the messages returned. (A live
    consumer lost up to a queue file's worth of messages at such a moment.)"""
    from pystore.read._read import read_queue

    store = store_factory(mapped_file_size_consume_queue=640)
    stale = store._commitlog.queue.files              # the view before the roll
    n = 0
    while len(store._commitlog.queue.files) < 2 or n % 32 != 20:
        assert store.put_message(make_message(n, body_size=100)).is_ok()
        n += 1
    cl = store._commitlog.queue
    cq = store._cq_store.find(TOPIC, 0)
    offset = 0
    seen = []
    while offset < n:
        r = read_queue(cq.core, offset, 32, stale, cl.mapped_file_size, store._limits, None, None, None, False)
        if r.status is GetMessageStatus.FOUND:
            assert r.next_begin_offset == offset + len(r.messages)
            seen.extend(m.queue_offset for m in r.messages)
        if r.next_begin_offset == offset:
            break                                    # the rest is past this view
        offset = r.next_begin_offset
    assert seen == list(range(offset)) and offset < n
    # with the current view, the rest is there
    r = store.get_message(GROUP, TOPIC, 0, offset, 64)
    assert [m.queue_offset for m in r.messages] == list(range(offset, min(n, offset + 32 - offset % 32)))
    store_factory.expect_messages(n)
