"""The column API: ``put_columns``, ``get_columns``, ``queue_units`` (``pystore.columns.api``).

What is stored is compared byte for byte with the same messages put by hand (two stores on one fake clock);
what is read is compared with ``get_message`` and ``pystore.tools.iter_consume_queue``.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from conftest import FakeClock, drop_commit_log_head

from pystore import Message, MessageBatch, PutColumnsResult, PutMessageResult, TagFilter
from pystore.columns.api import _chunks
from pystore.columns.export import format_host
from pystore.format._codec import record_length
from pystore.status import GetMessageStatus, PutMessageStatus
from pystore.tools import iter_consume_queue

T = "ColTopic"
FILE = 64 * 1024


def _bodies(n: int, size: int = 150) -> list[bytes]:
    return [(b"%d-" % i * size)[:size] for i in range(n)]


def _commit_log_bytes(store) -> bytes:
    """Every commit-log byte the store wrote, file after file (the store is shut down first)."""
    end = store.get_max_phy_offset()
    folder = store.config.commit_log_paths()[0]
    store.shutdown()
    out = b"".join(open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder)))
    return out[:end]


def _by_hand(store, clock, topic, bodies, keys, tags, props, queue_id=0):
    """The messages put_columns stores, put one by one."""
    born = clock()
    return [store.put_message(Message(topic, b, tags[i], keys[i], 0, props[i], queue_id, born_timestamp=born))
            for i, b in enumerate(bodies)]


def test_put_columns_stores_the_bytes_of_one_by_one_puts(store_factory):
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a)
    b = store_factory("b", clock=clock_b)
    n = 700                                   # about 3 commit-log files of 64 KiB: the puts roll files
    bodies = _bodies(n)
    keys = ["k%d other%d" % (i, i) if i % 3 else None for i in range(n)]
    tags = ["TagA" if i % 2 else None for i in range(n)]
    props = [{"p": str(i)} if i % 5 == 0 else None for i in range(n)]
    r = a.put_columns(T, bodies, queue_id=1, keys=keys, tags=tags, properties=props)
    want = _by_hand(b, clock_b, T, bodies, keys, tags, props, queue_id=1)
    assert isinstance(r, PutColumnsResult) and r.status is PutMessageStatus.PUT_OK and r.count == n
    assert r.queue_offsets.tolist() == [w.append_message_result.logics_offset for w in want] == list(range(n))
    assert r.commit_log_offsets.tolist() == [w.wrote_offset for w in want]
    assert r.store_timestamps.tolist() == [w.append_message_result.store_timestamp for w in want]
    assert r.commit_log_offsets[-1] > 2 * FILE
    store_factory.expect_messages(n, "a")
    assert _commit_log_bytes(a) == _commit_log_bytes(b)


def test_batch_put_stores_the_bytes_of_message_batch_puts(store_factory):
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a)
    b = store_factory("b", clock=clock_b)
    bodies = _bodies(100)
    tags = ["TagB"] * 100
    keys = ["key%d" % i for i in range(100)]
    r = a.put_columns(T, bodies, keys=keys, tags=tags, batch=True)
    born = clock_b()
    w = b.put_messages(MessageBatch([Message(T, x, "TagB", keys[i], born_timestamp=born) for i, x in enumerate(bodies)]))
    assert w.is_ok() and r.count == 100
    sizes = [record_length(Message(T, x, "TagB", keys[i]), b.config.store_host) for i, x in enumerate(bodies)]
    assert r.commit_log_offsets.tolist() == (w.wrote_offset + np.cumsum([0] + sizes[:-1])).tolist()
    assert r.queue_offsets.tolist() == list(range(100))
    assert set(r.store_timestamps.tolist()) == {w.append_message_result.store_timestamp}
    assert _commit_log_bytes(a) == _commit_log_bytes(b)


def test_batches_never_span_a_file_and_equal_message_batch_puts(store_factory):
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a)
    b = store_factory("b", clock=clock_b)
    a.put_columns(T, _bodies(7, 5000))            # the file is part full: the first batch must not span it
    born = clock_b()
    for x in _bodies(7, 5000):
        b.put_message(Message(T, x, born_timestamp=born))
    bodies = _bodies(1000, 200)
    r = a.put_columns(T, bodies, batch=True)
    assert r.count == 1000 and r.status is PutMessageStatus.PUT_OK
    born = clock_b()
    msgs = [Message(T, x, born_timestamp=born) for x in bodies]
    groups = _chunks(b, msgs)
    assert len(groups) > 2
    at = 0
    for g in groups:
        w = b.put_messages(MessageBatch(g))
        assert w.is_ok()
        first, last = r.commit_log_offsets[at], r.commit_log_offsets[at + len(g) - 1]
        end = last + record_length(g[-1], b.config.store_host)
        assert first // FILE == (end - 1) // FILE, "a batch spans two files"
        assert sum(record_length(m, b.config.store_host) for m in g) <= FILE - 8
        at += len(g)
    assert at == 1000
    assert _commit_log_bytes(a) == _commit_log_bytes(b)


@pytest.mark.parametrize("form", ["list", "buffers", "numpy32", "numpy64", "arrow", "large_arrow", "arrow_slice",
                                  "chunked"])
def test_every_bodies_form_stores_the_same_bodies(store_factory, form):
    store = store_factory()
    want = [b"", b"x", b"hello", bytes(range(256)), b"z" * 1000]
    values = np.frombuffer(b"".join(want), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(x) for x in want])
    arg = {
        "list": want,
        "buffers": [bytearray(x) if i % 2 else memoryview(x) for i, x in enumerate(want)],
        "numpy32": (values, offsets.astype(np.int32)),
        "numpy64": (values, offsets.astype(np.int64)),
        "arrow": pa.array(want, pa.binary()),
        "large_arrow": pa.array(want, pa.large_binary()),
        "arrow_slice": pa.array([b"skip"] + want + [b"after"], pa.binary()).slice(1, len(want)),
        "chunked": pa.chunked_array([pa.array(want[:2], pa.binary()), pa.array(want[2:], pa.binary())]),
    }[form]
    r = store.put_columns(T, arg)
    assert r.count == len(want)
    got = store.get_message("g", T, 0, 0, 32)
    assert [m.body for m in got.messages] == want


def test_bad_columns_are_refused(store_factory):
    store = store_factory()
    with pytest.raises(ValueError):
        store.put_columns(T, [b"a", b"b"], keys=["k"])
    with pytest.raises(TypeError):
        store.put_columns(T, b"abc")
    with pytest.raises(ValueError):
        store.put_columns(T, pa.array([b"a", None], pa.binary()))
    with pytest.raises(ValueError):
        store.put_columns(T, (np.zeros(3, np.uint8), np.array([0, 2, 1, 3], np.int64)))
    with pytest.raises(TypeError):
        store.put_columns(T, (np.zeros(3, np.int16), np.array([0, 3], np.int64)))
    assert store.get_max_offset_in_queue(T, 0) == 0


def test_keys_tags_and_properties_columns(store_factory):
    store = store_factory()
    r = store.put_columns(T, [b"a", b"b", b"c"], keys=pa.array(["k1 k2", None, "k3"]),
                          tags=np.array(["TagA", None, "TagC"], dtype=object),
                          properties=[{"x": "1"}, None, [("y", "2")]])
    assert r.count == 3
    ms = store.get_message("g", T, 0, 0).messages
    assert [m.keys for m in ms] == [["k1", "k2"], [], ["k3"]]
    assert [m.tags for m in ms] == ["TagA", None, "TagC"]
    assert ms[0].properties["x"] == "1" and ms[2].properties["y"] == "2" and "x" not in ms[1].properties
    assert [m.body for m in store.query_message(T, "k2").messages] == [b"a"]
    store.put_columns(T, [b"d", b"e"], properties={"shared": "yes"})
    assert [m.properties["shared"] for m in store.get_message("g", T, 0, 3).messages] == ["yes", "yes"]


@pytest.mark.parametrize("batch", [False, True])
def test_a_refusal_stops_the_put_there(store_factory, batch):
    store = store_factory(max_message_size=1024)
    bodies = [b"a" * 10, b"b" * 10, b"c" * 2000, b"d" * 10]
    r = store.put_columns(T, bodies, batch=batch)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert r.count == 2 and len(r.queue_offsets) == len(r.commit_log_offsets) == len(r.store_timestamps) == 2
    assert r.queue_offsets.tolist() == [0, 1]
    assert store.get_max_offset_in_queue(T, 0) == 2
    assert [m.body for m in store.get_message("g", T, 0, 0).messages] == bodies[:2]
    store_factory.expect_messages(2)


def test_a_read_only_store_refuses_put_columns(store_factory):
    store_factory().put_columns(T, [b"x"])
    ro = store_factory(read_only=True)
    r = ro.put_columns(T, [b"y", b"z"])
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and r.count == 0 and r.queue_offsets.dtype == np.int64


# -- get_columns ---------------------------------------------------------------------------------------------


def _assert_rows_are(batch: pa.RecordBatch, messages) -> None:
    rows = batch.to_pylist()
    assert len(rows) == len(messages)
    utc = UTC
    for row, m in zip(rows, messages):
        assert row == {
            "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commit_log_offset": m.commit_log_offset, "store_size": m.store_size, "body": m.body, "tags": m.tags,
            "keys": m.keys, "properties": list(m.properties.items()), "flag": m.flag, "sys_flag": m.sys_flag,
            "born_timestamp": datetime.fromtimestamp(m.born_timestamp / 1000, utc),
            "store_timestamp": datetime.fromtimestamp(m.store_timestamp / 1000, utc),
            "born_host": format_host(m.born_host), "store_host": format_host(m.store_host),
            "reconsume_times": m.reconsume_times, "prepared_transaction_offset": m.prepared_transaction_offset,
            "body_crc": m.body_crc, "msg_id": m.msg_id,
        }


def test_get_columns_is_get_message_without_the_memory_caps(store_factory):
    store = store_factory(max_transfer_count_on_message_in_memory=4)
    store.put_columns(T, _bodies(60, 50), keys=["k%d" % i for i in range(60)], tags=["TagA", "TagB"] * 30,
                      properties=[{"n": str(i)} for i in range(60)])
    capped = store.get_message("g", T, 0, 10, 32)
    assert capped.message_count == 4
    status, nxt, batch = store.get_columns("g", T, 0, 10, 32)
    assert status is GetMessageStatus.FOUND and nxt == 42 and batch.num_rows == 32
    got = []
    offset = 10
    while offset < 42:
        r = store.get_message("g", T, 0, offset, 42 - offset)
        got += r.messages
        offset = r.next_begin_offset
    _assert_rows_are(batch, got)
    assert batch.schema.names[:3] == ["topic", "queue_id", "queue_offset"]


@pytest.mark.parametrize("topic, queue_id, offset, filt", [
    ("nope", 0, 0, None),           # unknown queue: NO_MESSAGE_IN_QUEUE, next 0
    (T, 0, 30, None),               # at the end: OFFSET_OVERFLOW_ONE
    (T, 0, 99, None),               # past it: OFFSET_OVERFLOW_BADLY
    (T, 0, 0, TagFilter("TagB")),   # a filter: the matching half
    (T, 0, 0, "TagZ"),              # a filter nothing matches
])
def test_get_columns_has_get_message_statuses_and_next_offsets(store_factory, topic, queue_id, offset, filt):
    store = store_factory()
    store.put_columns(T, _bodies(30, 40), tags=["TagA", "TagB", "TagC"] * 10)
    want = store.get_message("g", topic, queue_id, offset, 64, filt)
    status, nxt, batch = store.get_columns("g", topic, queue_id, offset, 64, filt)
    assert (status, nxt) == (want.status, want.next_begin_offset)
    _assert_rows_are(batch, want.messages)
    if filt is not None and str(filt) != "TagZ":
        assert batch.num_rows == 10 and set(batch.column("tags").to_pylist()) == {"TagB"}


def test_get_columns_stops_at_the_end_of_a_consume_queue_file(store_factory):
    store = store_factory(mapped_file_size_consume_queue=20 * 25)
    store.put_columns(T, _bodies(60, 20))
    status, nxt, batch = store.get_columns("g", T, 0, 10, 1024)
    assert status is GetMessageStatus.FOUND and batch.num_rows == 15 and nxt == 25
    status, nxt, batch = store.get_columns("g", T, 0, 25, 1024)
    assert batch.column("queue_offset").to_pylist() == list(range(25, 50)) and nxt == 50


def test_get_columns_waits_for_a_message(store_factory):
    store = store_factory()
    timer = threading.Timer(0.2, lambda: store.put_columns(T, [b"late"]))
    timer.start()
    try:
        status, nxt, batch = store.get_columns("g", T, 0, 0, timeout_ms=10_000)
    finally:
        timer.join()
    assert status is GetMessageStatus.FOUND and nxt == 1 and batch.column("body").to_pylist() == [b"late"]


# -- queue_units ---------------------------------------------------------------------------------------------


def test_queue_units_are_the_consume_queue_file_by_file(store_factory):
    store = store_factory(mapped_file_size_consume_queue=20 * 30)
    store.put_columns(T, _bodies(100, 30), tags=["TagA", None] * 50)
    store.flush()
    want = list(iter_consume_queue(os.path.join(store.config.consume_queue_path(), T, "0")))
    assert len(want) == 100
    got, start, lengths = [], 0, []
    while True:
        u = store.queue_units(T, 0, start)
        if len(u) == 0:
            break
        assert u.dtype == np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
        assert not u.flags.writeable
        got += [tuple(int(x) for x in t) for t in u.tolist()]
        lengths.append(len(u))
        start += len(u)
    assert got == want and lengths == [30, 30, 30, 10]
    assert store.queue_units(T, 0, 35).tolist() == store.queue_units(T, 0, 35, 1000).tolist()
    assert len(store.queue_units(T, 0, 35)) == 25 and len(store.queue_units(T, 0, 35, count=3)) == 3
    assert len(store.queue_units(T, 0, 100)) == 0 and len(store.queue_units(T, 0, 500)) == 0
    assert len(store.queue_units(T, 0, 0, count=0)) == 0
    assert len(store.queue_units("nope", 0)) == 0 and len(store.queue_units(T, 7)) == 0
    with pytest.raises(ValueError):
        store.queue_units(T, 0, -1)
    with pytest.raises(ValueError):
        store.queue_units(T, 0, 0, -1)


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
def test_queue_units_takes_integer_positions(store_factory, read_only):
    """A float (or bool, or str) ``start`` or ``count`` is a wrong type, as for the other offset reads; numpy's
    integers are integers."""
    writer = store_factory()
    writer.put_columns(T, _bodies(10, 30))
    store = store_factory(read_only=True) if read_only else writer
    for bad in (1.5, 1.0, True, "1"):
        with pytest.raises(TypeError):
            store.queue_units(T, 0, bad)
        with pytest.raises(TypeError):
            store.queue_units(T, 0, 0, bad)
    assert store.queue_units(T, 0, np.int64(4), np.int32(2)).tolist() == store.queue_units(T, 0, 4, 2).tolist()


def test_queue_units_is_a_view_of_the_file_that_outlives_the_store(store_factory):
    store = store_factory()
    store.put_columns(T, _bodies(10, 30))
    u = store.queue_units(T, 0)
    # zero-copy: two calls view the same mapped bytes
    assert np.shares_memory(u, store.queue_units(T, 0, 4, 2))
    want = u.tolist()
    store.clean_unused_topic(keep=set())          # the queue's files are destroyed while the array holds one
    assert store.get_max_offset_in_queue(T, 0) == 0
    assert u.tolist() == want
    store.shutdown()
    assert u.tolist() == want and int(u["size"].sum()) == sum(int(s) for _, s, _ in want)
    store_factory.skip_check()                    # the consume queue was removed on purpose


def test_read_only_store_follows_the_writer(store_factory):
    writer = store_factory()
    writer.put_columns(T, _bodies(5, 30))
    ro = store_factory(read_only=True)
    assert len(ro.queue_units(T, 0)) == 5
    writer.put_columns(T, _bodies(5, 30), queue_id=3)
    writer.put_columns(T, _bodies(4, 30))
    writer.flush()
    assert len(ro.queue_units(T, 0, 5)) == 4 and len(ro.queue_units(T, 3)) == 5
    status, nxt, batch = ro.get_columns("g", T, 0, 0)
    assert status is GetMessageStatus.FOUND and nxt == 9 and batch.num_rows == 9
    _assert_rows_are(batch, writer.get_message("g", T, 0, 0).messages)


def test_without_numpy_the_error_names_the_extra(store_factory, monkeypatch):
    store = store_factory()
    monkeypatch.setitem(sys.modules, "numpy", None)     # import numpy now raises ImportError
    with pytest.raises(ImportError, match=r"pystore-mq\[columns\]"):
        store.queue_units(T, 0)
    with pytest.raises(ImportError, match=r"pystore-mq\[columns\]"):
        store.put_columns(T, [b"x"])


def test_a_refused_batch_is_retried_message_by_message(store_factory, monkeypatch):
    """A batch refused as a whole (here once, as a busy page cache would) is put again one message at a time:
    the put goes on past it when each is accepted (the ``Message`` path: a properties column takes it)."""
    store = store_factory()
    put = store.put_messages
    calls = []

    def refuse_first(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            return PutMessageResult(PutMessageStatus.OS_PAGE_CACHE_BUSY)
        return put(batch)

    monkeypatch.setattr(store, "put_messages", refuse_first)
    r = store.put_columns(T, _bodies(5, 20_000), properties=[None] * 5, batch=True)  # 3 records fill a file
    assert calls == [3, 1, 1, 1, 2]
    assert r.status is PutMessageStatus.PUT_OK and r.count == 5 and r.queue_offsets.tolist() == list(range(5))
    assert len({int(x) for x in r.commit_log_offsets}) == 5


def test_queue_units_below_the_min_offset_are_refused(store_factory):
    store = store_factory()
    store.put_columns(T, _bodies(400, 300))         # about two commit-log files
    drop_commit_log_head(store)
    cq = store._cq_store.find(T, 0)
    cq.correct_min_offset(store.get_min_phy_offset())
    low = store.get_min_offset_in_queue(T, 0)
    assert 0 < low < 400
    with pytest.raises(ValueError, match="min offset %d" % low):
        store.queue_units(T, 0, 0)
    u = store.queue_units(T, 0, low)
    assert len(u) > 0 and int(u["offset"][0]) >= store.get_min_phy_offset()
    store_factory.skip_check()                      # the head file was dropped on purpose


@pytest.mark.parametrize("props", [None, [None] * 8], ids=["compiled", "messages"])
def test_a_failed_wait_is_reported_but_does_not_stop_the_put(store_factory, monkeypatch, props):
    """The commit log's wait hook (``after_put``: group commit, replicas) times out on the first put (a chunk
    of the compiled path, a message of the ``Message`` path): the status says so, and the rest is stored."""
    store = store_factory()
    seen = []

    def flush_timeout_on_first(result, msg):
        seen.append(result.append_message_result.logics_offset)
        return result.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT) if len(seen) == 1 else result

    monkeypatch.setattr(store._commitlog, "after_put", flush_timeout_on_first)
    r = store.put_columns(T, _bodies(8, 20_000), properties=props)     # 3 records a 64 KiB file: 3 chunks
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.count == 8
    assert r.queue_offsets.tolist() == list(range(8))
    assert len(seen) == (3 if props is None else 8) and seen[0] == 0
