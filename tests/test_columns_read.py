"""``get_columns`` against ``get_message``: on random stores, every page ``get_columns`` returns is, column for
column, ``export.record_batch`` of the messages ``get_message`` returns with its in-memory caps lifted (a store
configured without them), with the same status and next offset — through tag filters, filter objects, the ends
of consume-queue and commit-log files, offsets out of range, damaged records, read-only stores and slaves.
"""

from __future__ import annotations

import os
import random
import time

import numpy as np
import pyarrow as pa
import pytest

from pystore import Message, MessageBatch, TagFilter
from pystore.columns.api import PAGE_BYTES, columns_schema, lifted
from pystore.columns.export import arrow_schema, record_batch
from pystore.config import BrokerRole
from pystore.errors import StoreCorruptedError
from pystore.status import GetMessageStatus

#: get_message as get_columns runs it: no in-memory transfer caps
UNCAPPED = {"max_transfer_count_on_message_in_memory": 2**31 - 1,
            "max_transfer_bytes_on_message_in_memory": PAGE_BYTES}
TOPICS = ("Orders", "Pay-2")
TAGS = [None, "A", "B", "C", "ünï"]


class OddQueueOffsets:
    """A filter object: units of odd queue offsets pass the consume-queue test, bodies not ending in 7 the
    commit-log test."""

    def __init__(self) -> None:
        self.unit = 0

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        self.unit += 1
        return self.unit % 2 == 1

    def is_matched_by_commit_log(self, msg) -> bool:
        return not msg.body.endswith(b"7")


def _fill(store, rng: random.Random, n: int) -> None:
    """n random messages over two topics and three queues: bodies of 0-700 bytes, tags, keys, properties
    (some unicode), singles and batches."""
    i = 0
    while i < n:
        topic = rng.choice(TOPICS)
        qid = rng.randrange(3)
        tags = rng.choice(TAGS)
        if rng.random() < 0.2:
            k = rng.randint(2, 12)
            bodies = [rng.randbytes(rng.randint(0, 300)) + b"%d" % j for j in range(k)]
            r = store.put_messages(MessageBatch([Message(topic, b, tags, queue_id=qid) for b in bodies]))
            assert r.is_ok()
            i += k
            continue
        keys = rng.choice([None, "k%d" % i, "k%d  other-%d é" % (i, i)])
        props = rng.choice([None, {"p": str(i)}, {"ключ": "значение", "x": "1 2"}])
        body = rng.randbytes(rng.randint(0, 700)) + b"%d" % i
        assert store.put_message(Message(topic, body, tags, keys, rng.randrange(4), props, qid)).is_ok()
        i += 1


def _same(store, topic, qid, offset, nums, filt_of=lambda: None):
    """get_columns equals get_message (uncapped) at (topic, qid, offset): status, next offset, columns."""
    want = store.get_message("g", topic, qid, offset, nums, filt_of())
    status, nxt, batch = store.get_columns("g", topic, qid, offset, nums, filt_of())
    assert (status, nxt) == (want.status, want.next_begin_offset), (topic, qid, offset, nums)
    assert batch.schema.equals(arrow_schema())
    expected = record_batch(want.messages)
    for name in batch.schema.names:
        assert batch.column(name).equals(expected.column(name)), (name, topic, qid, offset)
    return status, nxt, batch


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_get_columns_is_uncapped_get_message_page_by_page(store_factory, seed):
    rng = random.Random(seed)
    store = store_factory(mapped_file_size_consume_queue=20 * 37, **UNCAPPED)
    _fill(store, rng, 400)
    filters = [lambda: None, lambda: TagFilter("A || ünï"), lambda: "B", lambda: TagFilter("*"),
               OddQueueOffsets]
    pages = 0
    for topic in TOPICS + ("Nope",):
        for qid in range(4):
            high = store.get_max_offset_in_queue(topic, qid)
            for filt_of in filters:
                offset = 0
                while True:
                    nums = rng.choice([1, 7, 64, 1024])
                    status, nxt, batch = _same(store, topic, qid, offset, nums, filt_of)
                    pages += 1
                    if status is not GetMessageStatus.FOUND and nxt <= offset or nxt >= high:
                        break
                    offset = nxt
            for offset in (high, high + 5, -3):          # one past, far past, below
                _same(store, topic, qid, offset, 16)
    assert pages > 100


def test_get_columns_without_caps_on_a_capped_store(store_factory):
    """A store with the default caps: get_columns is its get_message with the in-memory caps lifted."""
    store = store_factory()
    assert store.put_messages(MessageBatch.from_bodies("T", [b"%04d" % i * 10 for i in range(300)])).is_ok()
    assert store.get_message("g", "T", 0, 0, 300).message_count == 32      # the default count cap
    status, nxt, batch = store.get_columns("g", "T", 0, 0, 300)
    assert status is GetMessageStatus.FOUND and nxt == 300 and batch.num_rows == 300
    r = store._reads.get_message("g", "T", 0, 0, 300, None, 0, lifted)
    assert batch.equals(record_batch(r.messages))
    assert batch.column("queue_offset").to_numpy(zero_copy_only=True).tolist() == list(range(300))


def test_fixed_width_columns_are_zero_copy_numpy(store_factory):
    store = store_factory()
    assert store.put_messages(MessageBatch.from_bodies("T", [b"x" * 128] * 50)).is_ok()
    _status, _nxt, batch = store.get_columns("g", "T", 0, 0, 100)
    for name, dtype in (("queue_offset", np.int64), ("commit_log_offset", np.int64), ("store_size", np.int32),
                        ("queue_id", np.int32), ("body_crc", np.int32)):
        a = batch.column(name).to_numpy(zero_copy_only=True)
        assert a.dtype == dtype and len(a) == 50
    sizes = batch.column("store_size").to_numpy(zero_copy_only=True)
    offs = batch.column("commit_log_offset").to_numpy(zero_copy_only=True)
    assert (np.diff(offs) == sizes[:-1]).all()


def test_a_page_past_the_first_buffer_rows_grows(store_factory):
    """More rows than the decoder first makes room for (its fixed-width columns grow)."""
    store = store_factory(mapped_file_size_commit_log=4 << 20)
    n = 40_000
    for i in range(0, n, 1000):
        assert store.put_messages(MessageBatch.from_bodies("T", [b"%06d" % j for j in range(i, i + 1000)])).is_ok()
    for timeout_ms in (0, 10):                 # a wait sizes nothing up front: the rows grow as they come
        status, nxt, batch = store.get_columns("g", "T", 0, 0, n, timeout_ms=timeout_ms)
        assert status is GetMessageStatus.FOUND and nxt == n == batch.num_rows
        assert batch.column("queue_offset").to_pylist() == list(range(n))
        assert batch.column("body").to_pylist() == [b"%06d" % i for i in range(n)]
        assert len(set(batch.column("msg_id").to_pylist())) == n
        assert batch.equals(record_batch(store._reads.get_message("g", "T", 0, 0, n, None, 0, lifted).messages))


def _damage(store, topic, qid, offset, at):
    """Flip a byte ``at`` bytes into the record of (topic, qid, offset)."""
    (m,) = store.get_message("g", topic, qid, offset, 1).messages
    store.flush()
    phy = m.commit_log_offset
    size = store.config.mapped_file_size_commit_log
    path = os.path.join(store.config.commit_log_paths()[0], "%020d" % (phy - phy % size))
    with open(path, "r+b") as f:
        f.seek(phy % size + at)
        b = f.read(1)
        f.seek(phy % size + at)
        f.write(bytes([b[0] ^ 0xFF]))
    return m


@pytest.mark.parametrize("at", [-3, 4])      # the body's last bytes (a CRC error), the magic code
def test_a_damaged_record_is_refused_as_get_message_refuses_it(store_factory, at):
    store = store_factory(**UNCAPPED)
    assert store.put_messages(MessageBatch.from_bodies("T", [b"body %d" % i * 10 for i in range(20)])).is_ok()
    (m,) = store.get_message("g", "T", 0, 12, 1).messages
    _damage(store, "T", 0, 12, m.store_size + at if at < 0 else at)
    # a page that reaches it stops before it ...
    _same(store, "T", 0, 0, 100)
    status, nxt, batch = store.get_columns("g", "T", 0, 0, 100)
    assert status is GetMessageStatus.FOUND and nxt == 12 and batch.num_rows == 12
    # ... and a page that starts at it fails as get_message does, naming the file and offset
    with pytest.raises(StoreCorruptedError) as want:
        store.get_message("g", "T", 0, 12, 100)
    with pytest.raises(StoreCorruptedError) as got:
        store.get_columns("g", "T", 0, 12, 100)
    assert (got.value.path, got.value.offset) == (want.value.path, want.value.offset)
    store_factory.skip_check()


def test_read_only_store_and_slave_read_as_get_message(store_factory):
    writer = store_factory(mapped_file_size_consume_queue=20 * 10, **UNCAPPED)
    rng = random.Random(9)
    _fill(writer, rng, 120)
    writer.flush()
    ro = store_factory(read_only=True, mapped_file_size_consume_queue=20 * 10, **UNCAPPED)
    _fill(writer, rng, 30)                       # the reader follows what the writer adds after it opened
    writer.flush()
    for s in (ro, writer):
        for topic in TOPICS:
            for qid in range(3):
                offset = 0
                while True:
                    status, nxt, _batch = _same(s, topic, qid, offset, 1000)
                    if nxt == offset:
                        break
                    offset = nxt
    writer.config.broker_role = BrokerRole.SLAVE  # a slave's next offsets keep the asked offset
    try:
        for offset in (-1, 10**6):
            _same(writer, "Orders", 0, offset, 8)
        _same(writer, "Nope", 0, 7, 8)
    finally:
        writer.config.broker_role = BrokerRole.ASYNC_MASTER


def test_an_empty_page_has_the_schema(store_factory):
    store = store_factory()
    status, nxt, batch = store.get_columns("g", "T", 0, 0)
    assert status is GetMessageStatus.NO_MESSAGE_IN_QUEUE and nxt == 0
    assert batch.num_rows == 0 and batch.schema.equals(columns_schema())
    assert isinstance(batch, pa.RecordBatch)


def test_small_queue_ranges_are_packed_into_a_task_per_core():
    """Spark's planner: consecutive small ranges share a partition while ``target`` partitions remain; a queue's
    ranges stay in order; too few messages to pack keep one partition per range."""
    pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
    from pystore.spark.batch import QueueGroup, QueueSlice, plan_queue_slices

    ranges = {("T", q): (0, 250) for q in range(4)}
    parts = plan_queue_slices("/r", ranges, 1_000_000, 2)
    assert len(parts) == 2 and all(isinstance(p, QueueGroup) for p in parts)
    flat = [(s.queue_id, s.start, s.end) for p in parts for s in p.slices]
    assert flat == [(q, 0, 250) for q in range(4)]
    # one queue split for 7 cores: slices of 15, none packed
    parts = plan_queue_slices("/r", {("T", 0): (0, 100)}, 1_000_000, 7)
    assert len(parts) >= 7 and all(isinstance(p, QueueSlice) for p in parts)
    assert [(p.start, p.end) for p in parts][:2] == [(0, 15), (15, 30)]
    # packing that would leave fewer partitions than asked for is not done
    parts = plan_queue_slices("/r", {("T", q): (0, 1) for q in range(7)}, 1_000_000, 6)
    assert len(parts) == 7 and all(isinstance(p, QueueSlice) for p in parts)


def _scanned_batches(b, mf) -> list:
    """The batches of one whole scan of commit-log file ``mf`` by the Spark decoder into builder ``b``."""
    from pystore.columns._arrow_source import scan_file

    pos, done, got = 0, False, []
    while not done:
        pos, done = scan_file(b, mf, pos)
        batch = b.build()
        if batch is not None:
            got.append(batch)
    return got


def test_hosts_topics_ids_and_properties_vary_from_row_to_row(store_factory):
    """Rows whose hosts (IPv4 and IPv6, born and store), commit-log offsets (across 64 KiB steps inside one file:
    the message id's digits) and properties (none, then keys and tags, then none again) change from one to the
    next decode as the export writes them, in one page and in small ones."""
    store = store_factory(mapped_file_size_commit_log=1 << 20, store_host=("2001:db8::7", 10911), **UNCAPPED)
    rng = random.Random(5)
    hosts = [("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 80), ("fe80::1:2", 7), ("10.1.2.3", 65535)]
    n = 0
    while n < 900:
        body = rng.randbytes(rng.choice([0, 5, 200, 900]))
        host = hosts[(n // rng.choice([1, 3, 40])) % len(hosts)]
        kind = (n // 50) % 3
        m = Message("Orders", body, "t%d" % (n % 3) if kind == 1 else None, "k%d x" % n if kind == 1 else None,
                    0, {"é": "ü"} if kind == 1 and n % 2 else None, 0, born_host=host)
        assert store.put_message(m).is_ok()
        n += 1
    assert store.get_max_phy_offset() > 3 * 65536
    for nums in (1000, 33, 7):
        offset = 0
        while offset < n:
            status, offset, batch = _same(store, "Orders", 0, offset, nums)
            assert status is GetMessageStatus.FOUND
    ids = store.get_columns("g", "Orders", 0, 0, 1000)[2].column("msg_id").to_pylist()
    assert len(ids) == n and all(len(i) == 56 for i in ids) and len(set(ids)) == n


def test_one_builder_over_many_batches_and_topics_equals_the_export(store_factory):
    """The Spark decoder over a commit-log file in small batches (a builder reused: buffers sized from the
    batch before, left empty or not) with rows of several topics is ``export.record_batch`` of the same
    messages."""
    from pystore.columns._arrow import BatchBuilder
    from pystore.log._mapped_file import MappedFile
    from pystore.tools import iter_commitlog

    store = store_factory(**UNCAPPED)
    topics = ["T", "T-2", "a-much-longer-topic-name-than-thirty-two-bytes-%d" % 7, "T"]
    for i in range(300):
        keyed = (i // 25) % 2 == 1
        m = Message(topics[(i // 7) % len(topics)], b"%d" % i * (i % 13), "x" if keyed else None,
                    "k%d" % i if keyed else None, 0, None, i % 2)
        assert store.put_message(m).is_ok()
    store.flush()
    want = record_batch(list(iter_commitlog(store.config.commit_log_paths()[0])))
    path = os.path.join(store.config.commit_log_paths()[0], "%020d" % 0)
    mf = MappedFile(path, -1, read_only=True)
    try:
        b = BatchBuilder(arrow_schema(), True, max_rows=16)
        got = _scanned_batches(b, mf)
    finally:
        mf.close()
    table = pa.Table.from_batches(got, schema=arrow_schema())
    assert table.num_rows == 300 and len(got) > 10
    assert table.equals(pa.Table.from_batches([want]))


def test_a_pages_memory_goes_back_to_arrow_when_its_batch_is_dropped(store_factory):
    """The columns are Arrow's until the batch (or a column kept from it) is dropped; then every buffer goes
    back to the pool, for a page as for the Spark decoder's batches."""
    store = store_factory()
    for i in range(500):
        assert store.put_message(Message("T", b"x" * 300, "t", "k%d" % i)).is_ok()
    pool = pa.default_memory_pool()
    store.get_columns("g", "T", 0, 0, 500)          # the first call's lasting allocations (pyarrow's own)
    before = pool.bytes_allocated()
    _status, _nxt, batch = store.get_columns("g", "T", 0, 0, 500)
    assert pool.bytes_allocated() >= before + 500 * 300
    body = batch.column("body")
    del batch
    assert body.to_pylist()[7] == b"x" * 300 and pool.bytes_allocated() >= before + 500 * 300
    del body
    assert pool.bytes_allocated() == before


# -- pages of many windows: the decode worker, CRC damage found while decoding ---------------------------------

#: records a BatchBuilder window holds (``_arrow.WINDOW``): pages of more than two are decoded in part by the
#: decode worker while the scan fills the next window
WINDOW = 2048
#: where the body starts in a record with IPv4 hosts (docs/format.md §1)
BODY_AT = 88


@pytest.fixture(params=[True, False], ids=["worker", "no-worker"])
def worker(request):
    from pystore.columns._arrow import decode_worker

    before = decode_worker(request.param)
    yield request.param
    decode_worker(before)


def _many(store, n: int, rng: random.Random) -> None:
    """n messages of queue T/0: bodies of 0-300 bytes, some with tags (``Aa`` and ``BB`` share a tags code),
    keys and properties, put in batches of mixed messages."""
    i = 0
    while i < n:
        msgs = []
        for _ in range(min(500, n - i)):
            tags = rng.choice([None, "Aa", "BB", "C"])
            keys = rng.choice([None, "k%d" % i, "k%d x" % i])
            props = rng.choice([None, None, {"p": str(i)}])
            msgs.append(Message("T", rng.randbytes(rng.choice([0, 3, 128, 300])) + b"%d" % i, tags, keys, 0, props))
            i += 1
        for m in msgs:
            assert store.put_message(m).is_ok()


def test_pages_of_many_windows_equal_get_message(store_factory, worker):
    """Pages of several windows, over commit-log files that end inside them, with and without filters, decoded
    with and without the decode worker: get_message's page, column for column."""
    store = store_factory(mapped_file_size_commit_log=256 << 10, **UNCAPPED)
    n = 3 * WINDOW + 700
    _many(store, n, random.Random(11))
    assert store.get_max_phy_offset() > 4 * (256 << 10)
    for filt_of in (lambda: None, lambda: TagFilter("Aa || C"), lambda: "BB"):
        for nums in (n, WINDOW + 1, 3 * WINDOW):
            offset = 0
            while offset < n:
                status, nxt, batch = _same(store, "T", 0, offset, nums, filt_of)
                assert status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE) and nxt > offset
                offset = nxt


def _same_error(store, offset: int, n: int) -> None:
    """A page of queue ``T`` 0 from ``offset`` fails in ``get_columns`` exactly as in ``get_message``: the same
    ``StoreCorruptedError`` (path, offset, text)."""
    with pytest.raises(StoreCorruptedError) as want:
        store.get_message("g", "T", 0, offset, n)
    with pytest.raises(StoreCorruptedError) as got:
        store.get_columns("g", "T", 0, offset, n)
    assert (got.value.path, got.value.offset, str(got.value)) == (want.value.path, want.value.offset, str(want.value))


def _flip(store, offset: int, at: int) -> None:
    """Flip the byte ``at`` bytes into the record of T/0 at ``offset``."""
    _damage(store, "T", 0, offset, at)


@pytest.mark.parametrize("bad", [5, WINDOW + 17, 2 * WINDOW - 1, 3 * WINDOW + 3])
def test_a_body_crc_error_found_while_decoding_ends_the_page_there(store_factory, worker, bad):
    """A record whose body CRC is wrong, in any window of a page (the first, one the worker decodes, the last,
    decoded by the scan's own thread): the page ends before it, as get_message's does, with the same next
    offset; a page that starts at it raises get_message's error."""
    store = store_factory(mapped_file_size_commit_log=1 << 20, **UNCAPPED)
    n = 3 * WINDOW + 100
    for i in range(0, n, 1000):
        bodies = [b"%07d" % j * 4 for j in range(i, min(n, i + 1000))]
        assert store.put_messages(MessageBatch.from_bodies("T", bodies)).is_ok()
    _flip(store, bad, BODY_AT + 3)
    status, nxt, batch = _same(store, "T", 0, 0, n)
    assert status is GetMessageStatus.FOUND and nxt == bad == batch.num_rows
    assert batch.column("queue_offset").to_pylist() == list(range(bad))
    # a page that starts after the good records before it, then past the bad one
    if bad > 1:
        assert _same(store, "T", 0, bad - 1, n)[1:] and store.get_columns("g", "T", 0, bad - 1, n)[1] == bad
    _same_error(store, bad, n)
    assert _same(store, "T", 0, bad + 1, n)[1] == n
    # with the CRC not checked (check_crc_on_read off) the record is decoded as stored
    from pystore.columns._arrow import BatchBuilder
    from pystore.read._read import ReadLimits

    def unchecked(limits):
        lim = lifted(limits)
        return ReadLimits(lim.bytes_in_memory, lim.count_in_memory, lim.bytes_in_disk, lim.count_in_disk,
                          lim.memory_window, False)

    builder = BatchBuilder(columns_schema(), False)
    r = store._reads.get_message("g", "T", 0, 0, n, None, 0, unchecked, builder)
    assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == n and builder.build().num_rows == n
    store_factory.skip_check()


def test_the_first_damage_in_queue_order_decides(store_factory, worker):
    """A body CRC error (found while decoding, after the scan went on) before a record whose structure is damaged
    (found by the scan): the page ends at the CRC error; from between them, at the damaged record."""
    store = store_factory(mapped_file_size_commit_log=1 << 20, **UNCAPPED)
    n = 3 * WINDOW
    for i in range(0, n, 1000):
        bodies = [b"%07d" % j * 4 for j in range(i, min(n, i + 1000))]
        assert store.put_messages(MessageBatch.from_bodies("T", bodies)).is_ok()
    crc_at, magic_at = WINDOW + 5, WINDOW + 40
    _flip(store, magic_at, 4)
    _flip(store, crc_at, BODY_AT + 1)
    assert _same(store, "T", 0, 0, n)[1] == crc_at
    assert _same(store, "T", 0, crc_at + 1, n)[1] == magic_at
    for offset in (crc_at, magic_at):
        _same_error(store, offset, n)
    store_factory.skip_check()


def test_a_record_a_tag_filter_passes_over_by_name_is_still_crc_checked(store_factory, worker):
    """``Aa`` and ``BB`` share a tags code: a TagFilter("Aa") passes over the ``BB`` records by their TAGS
    property, which the scan reads after checking the record, CRC included. A ``BB`` record with a wrong CRC ends
    the page there (or fails it), as in get_message."""
    store = store_factory(**UNCAPPED)
    for i in range(3 * WINDOW):
        assert store.put_message(Message("T", b"body %d" % i, "Aa" if i % 3 else "BB")).is_ok()
    bad = 2 * WINDOW + 2             # a BB record (i % 3 == 0)
    assert bad % 3 == 0
    _flip(store, bad, BODY_AT + 2)
    status, nxt, batch = _same(store, "T", 0, 0, 3 * WINDOW, lambda: TagFilter("Aa"))
    assert status is GetMessageStatus.FOUND and nxt == bad
    assert batch.num_rows == sum(1 for i in range(bad) if i % 3)
    with pytest.raises(StoreCorruptedError) as want:
        store.get_message("g", "T", 0, bad, 100, TagFilter("Aa"))
    with pytest.raises(StoreCorruptedError) as got:
        store.get_columns("g", "T", 0, bad, 100, TagFilter("Aa"))
    assert (got.value.path, got.value.offset) == (want.value.path, want.value.offset)
    store_factory.skip_check()


def test_topics_longer_than_the_decoders_topic_cache(tmp_path):
    """A V2 record may hold a topic of more bytes than the decoder keeps of the last one (RocketMQ's own
    files): such topics are decoded as they come, with the rows around them."""
    import reference_codec as ref

    from pystore.columns._arrow import BatchBuilder
    from pystore.columns._arrow_source import scan_file
    from pystore.log._mapped_file import MappedFile

    topics = ["é" * 200, "T", "L" * 300, "L" * 300, "T", "ü" * 129]
    out = bytearray()
    for i, topic in enumerate(topics):
        out += ref.encode(topic, b"body %d" % i, b"TAGS\x01t\x02", 0, 0, i, len(out), 0, 1000 + i,
                          ("127.0.0.1", 1), 2000 + i, ("127.0.0.1", 10911), 0, 0)
    path = tmp_path / ("%020d" % 0)
    path.write_bytes(bytes(out) + bytes(65536 - len(out)))
    mf = MappedFile(str(path), -1, read_only=True)
    try:
        b = BatchBuilder(arrow_schema(), True)
        pos, done = scan_file(b, mf, 0)
        batch = b.build()
    finally:
        mf.close()
    assert done and pos == len(out)
    assert batch.column("topic").to_pylist() == topics
    assert batch.column("body").to_pylist() == [b"body %d" % i for i in range(len(topics))]
    assert batch.column("tags").to_pylist() == ["t"] * len(topics)


def _reference_properties(s: str) -> dict[str, str]:
    """RocketMQ's decoder (``string2messageProperties``) written out: items split on \\x02, name and value on
    an item's first \\x01, both non-empty; a repeated name keeps its first place and its last value."""
    out: dict[str, str] = {}
    for item in s.split("\x02"):
        name, sep, value = item.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


def test_properties_are_split_as_rocketmq_splits_them_at_any_length_and_place():
    """The properties splitter reads eight bytes at a time (and a string's last eight for its tail): on random
    strings of 0-40 characters drawn mostly from the separators, its split is RocketMQ's."""
    from pystore.format._props import string_to_properties

    rng = random.Random(7)
    alphabet = ["\x01", "\x02", "a", "b", "é", "\x01\x01", "\x02\x02", "KEYS", "TAGS"]
    for _ in range(20000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert string_to_properties(s) == _reference_properties(s), repr(s)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_decode_worker_after_a_fork(store_factory):
    """A child forked after the decode worker started (its thread is not in the child) decodes pages of several
    windows with a worker of its own (its file of the parent's worker's run-queue figures closed); the parent's
    goes on."""
    from pystore.columns._arrow import decode_worker

    store = store_factory(mapped_file_size_commit_log=1 << 20, **UNCAPPED)
    n = 3 * WINDOW
    for i in range(0, n, 1000):
        bodies = [b"%06d" % j for j in range(i, min(n, i + 1000))]
        assert store.put_messages(MessageBatch.from_bodies("T", bodies)).is_ok()
    def schedstat_fds_of(pid: int) -> list[str]:
        """This process's open files that are a thread's schedstat of process ``pid`` (the worker's own)."""
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                continue
            if target.endswith("/schedstat") and target.startswith("/proc/%d/" % pid):
                found.append(target)
        return found

    before = decode_worker(True)
    try:
        want = store.get_columns("g", "T", 0, 0, n)[2].column("body").to_pylist()
        assert want == [b"%06d" % i for i in range(n)]
        parent = os.getpid()
        for _ in range(200):                           # the worker opens its schedstat as it starts
            if schedstat_fds_of(parent) or not _schedstat_readable():
                break
            time.sleep(0.005)
        pid = os.fork()
        if pid == 0:            # the child: exit status 0 only if it read the page right, without the parent's fd
            ok = False
            try:
                ok = store.get_columns("g", "T", 0, 0, n)[2].column("body").to_pylist() == want
                ok = ok and not schedstat_fds_of(parent)
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert store.get_columns("g", "T", 0, 0, n)[2].column("body").to_pylist() == want
    finally:
        decode_worker(before)


_ONE_CPU_READER = r"""
import json, os, sys
from pystore import MessageBatch
from pystore import MessageStore
from pystore.columns._arrow import decode_worker, decode_worker_state

# this thread and every thread it starts (the decode worker among them) on one CPU: the worker is never free
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
decode_worker(True)
store = MessageStore.open(sys.argv[1], mapped_file_size_commit_log=1 << 22)
n = int(sys.argv[2])
for i in range(0, n, 1000):
    store.put_messages(MessageBatch.from_bodies("T", [b"%07d" % j * 3 for j in range(i, min(n, i + 1000))]))
want = [b"%07d" % j * 3 for j in range(n)]
ok = True
for _ in range(int(sys.argv[3])):
    for cols in (None, ["queue_offset", "body"]):
        status, nxt, batch = store.get_columns("g", "T", 0, 0, n, columns=cols)
        ok = ok and nxt == n and batch.column("body").to_pylist() == want
        ok = ok and batch.column("queue_offset").to_pylist() == list(range(n))
store.shutdown()
print(json.dumps({"ok": ok, **decode_worker_state()}))
"""


def test_pages_read_by_several_threads_at_once_equal_single_thread_pages(store_factory, worker):
    """Three threads reading pages of several windows at once, a fourth turning the decode worker off and on: one
    reader borrows the worker at a time, the others decode in their own threads, windows are split, whole, taken
    back or backed off as it happens; every page equals the same page decoded in one thread (the worker off)."""
    import threading

    from pystore.columns._arrow import decode_worker

    store = store_factory(mapped_file_size_commit_log=1 << 20, **UNCAPPED)
    n = 5 * WINDOW + 333
    _many(store, n, random.Random(5))
    starts = [0, 17, WINDOW - 1, 2 * WINDOW + 5, 3 * WINDOW]
    projections = [None, ["topic"], ["keys", "queue_offset"], ["queue_offset", "body"], ["msg_id", "body"]]
    before = decode_worker(False)
    try:
        want = {(s, i): store.get_columns("g", "T", 0, s, n, columns=c)
                for s in starts for i, c in enumerate(projections)}
    finally:
        decode_worker(before)
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        rng = random.Random(k)
        try:
            for i in range(60):
                s, c = rng.choice(starts), rng.randrange(len(projections))
                status, nxt, batch = store.get_columns("g", "T", 0, s, n, columns=projections[c])
                w = want[(s, c)]
                assert (status, nxt) == w[:2] and batch.equals(w[2]), (k, i, s, projections[c])
        except BaseException as e:          # noqa: BLE001 - reported by the main thread
            errors.append(e)

    stop = threading.Event()

    def toggler() -> None:
        # the worker turned off and on while pages are under way: a page's windows then go both ways
        try:
            flip = False
            while not stop.is_set():
                decode_worker(flip)
                flip = not flip
                time.sleep(0.0005)
        finally:
            decode_worker(worker)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(3)]
    flipper = threading.Thread(target=toggler)
    flipper.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    flipper.join(10)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]


def _schedstat_readable() -> bool:
    try:
        with open("/proc/thread-self/schedstat") as f:
            return len(f.read().split()) >= 2
    except OSError:
        return False


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity")
@pytest.mark.skipif(not _schedstat_readable(), reason="needs /proc/thread-self/schedstat (the worker never backs "
                                                      "off without it)")
def test_the_decode_worker_backs_off_when_it_has_no_cpu_of_its_own(tmp_path):
    """A reader and its decode worker on one CPU (another process's, in effect): the worker waits on the run
    queue more than a quarter of the time it runs, so the owner decodes its next windows itself (the back-off),
    and jobs the worker has not taken yet when the scan wants them are run by the scan's thread. The pages are
    right all along: windows decoded by the worker, taken back, and decoded in the owner's thread mix."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _ONE_CPU_READER, str(tmp_path / "s"), str(8 * WINDOW), "12"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state["ok"] is True
    assert state["preemptions"] >= 1 and state["backoff"] >= 8


# -- column projection (``columns=``) ---------------------------------------------------------------------

ALL = tuple(columns_schema().names)


def _projections(rng: random.Random) -> list[list[str]]:
    """Column lists to ask for: the common ones, each column alone, and random subsets in random orders."""
    out = [["queue_offset", "body"], ["body", "queue_offset"], ["msg_id"], ["tags"], ["keys"], ["properties"],
           ["topic", "born_host", "store_host"], ["store_host", "msg_id"], list(reversed(ALL)), list(ALL)]
    out += [[c] for c in ALL]
    for _ in range(12):
        out.append(rng.sample(ALL, rng.randint(1, len(ALL))))
    return out


def _same_projected(store, topic, qid, offset, nums, cols, filt_of=lambda: None):
    """``get_columns(columns=cols)`` is the all-columns page's selection of ``cols``, same status and next."""
    status, nxt, full = store.get_columns("g", topic, qid, offset, nums, filt_of())
    got = store.get_columns("g", topic, qid, offset, nums, filt_of(), columns=cols)
    assert got[:2] == (status, nxt), (topic, qid, offset, cols)
    assert got[2].schema.names == list(cols)
    assert got[2].schema.equals(pa.schema([columns_schema().field(c) for c in cols]))
    assert got[2].num_rows == full.num_rows
    for c in cols:
        assert got[2].column(c).equals(full.column(c)), (c, cols, topic, qid, offset)
    return status, nxt


@pytest.mark.parametrize("seed", [4, 5])
def test_a_projection_is_the_all_columns_pages_selection(store_factory, seed):
    """Random stores (tags, keys, properties, unicode, batches), pages through file ends, with filters: each
    projection asked for is, column for column, the all-columns page's."""
    rng = random.Random(seed)
    store = store_factory(mapped_file_size_consume_queue=20 * 37, mapped_file_size_commit_log=64 << 10,
                          **UNCAPPED)
    _fill(store, rng, 300)
    projections = _projections(rng)
    filters = [lambda: None, lambda: TagFilter("A || ünï"), lambda: "B", OddQueueOffsets]
    pages = 0
    for topic in TOPICS:
        for qid in range(3):
            high = store.get_max_offset_in_queue(topic, qid)
            for filt_of in filters:
                offset = 0
                while offset < high:
                    cols = rng.choice(projections)
                    status, nxt = _same_projected(store, topic, qid, offset, rng.choice([1, 7, 64, 1024]), cols,
                                                  filt_of)
                    pages += 1
                    if nxt <= offset:
                        break
                    offset = nxt
            _same_projected(store, topic, qid, high, 16, ["body"])          # one past the end: empty
    assert pages > 50


def test_projections_over_many_windows(store_factory, worker):
    """Pages of several deferred windows, decoded with and without the worker, projected."""
    store = store_factory(mapped_file_size_commit_log=256 << 10, **UNCAPPED)
    n = 2 * WINDOW + 300
    _many(store, n, random.Random(12))
    for cols in (["queue_offset", "body"], ["keys", "tags"], ["msg_id", "commit_log_offset"], ["properties"]):
        offset = 0
        while offset < n:
            status, nxt = _same_projected(store, "T", 0, offset, n, cols)
            assert status is GetMessageStatus.FOUND and nxt > offset
            offset = nxt


@pytest.mark.parametrize("cols", [None, ["topic", "body"], ["keys", "queue_offset"]])
def test_windows_split_between_threads_grow_the_rows_midway(store_factory, worker, cols):
    """A builder sized for few rows fed a page of several windows (no size hint: its per-row buffers grow while
    windows are decoded, a split window's other columns perhaps still with the worker): the same batch as a
    builder sized for the page up front, and as get_message's page."""
    from pystore.columns._arrow import BatchBuilder
    from pystore.columns.api import _projected

    store = store_factory(mapped_file_size_commit_log=1 << 20, **UNCAPPED)
    n = 4 * WINDOW + 123
    _many(store, n, random.Random(21))
    schema = _projected(cols)
    small = BatchBuilder(schema, False, max_rows=100)
    r = store._reads.get_message("g", "T", 0, 0, n, None, 0, lifted, small)
    assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == n
    got = small.build(False)
    status, nxt, want = store.get_columns("g", "T", 0, 0, n, columns=cols)
    assert (status, nxt) == (GetMessageStatus.FOUND, n) and got.num_rows == n
    assert got.equals(want)
    expected = record_batch(store.get_message("g", "T", 0, 0, n).messages)
    for name in got.schema.names:
        assert got.column(name).equals(expected.column(name)), name


def test_an_empty_projected_page_has_the_projected_schema(store_factory):
    store = store_factory()
    status, nxt, batch = store.get_columns("g", "T", 0, 0, 10, columns=["body", "queue_offset"])
    assert status is GetMessageStatus.NO_MESSAGE_IN_QUEUE and batch.num_rows == 0
    assert batch.schema.names == ["body", "queue_offset"]


@pytest.mark.parametrize("cols, words", [
    (["queue_offset", "nope"], ["nope"]),
    (["Body"], ["Body"]),
    (["body", "tags", "body"], ["body"]),
    ([], ["at least one"]),
])
def test_unknown_or_repeated_columns_are_refused_by_name(store_factory, cols, words):
    store = store_factory()
    assert store.put_message(Message("T", b"x")).is_ok()
    with pytest.raises(ValueError) as e:
        store.get_columns("g", "T", 0, 0, 10, columns=cols)
    for w in words:
        assert w in str(e.value)
    with pytest.raises(TypeError):
        store.get_columns("g", "T", 0, 0, 10, columns="body")


def test_a_builder_refuses_a_schema_of_other_columns_or_types():
    from pystore.columns._arrow import BatchBuilder

    full = columns_schema()
    BatchBuilder(pa.schema([full.field("body"), full.field("topic")]))
    for bad in (pa.schema([pa.field("body", pa.string())]), pa.schema([pa.field("other", pa.int64())]),
                pa.schema([full.field("body"), full.field("body")]),
                pa.schema([pa.field("born_timestamp", pa.timestamp("ms")),
                           pa.field("store_timestamp", pa.timestamp("us"))])):
        with pytest.raises(ValueError):
            BatchBuilder(bad)


@pytest.mark.parametrize("cols", [["queue_offset"], ["queue_offset", "topic", "msg_id"]])
@pytest.mark.parametrize("bad", [5, WINDOW + 17])
def test_a_projection_without_body_still_checks_the_crc(store_factory, worker, cols, bad):
    """A wrong body CRC ends a page without a ``body`` column exactly where it ends the full page, and a page
    that starts at it raises get_message's error."""
    store = store_factory(mapped_file_size_commit_log=1 << 20, **UNCAPPED)
    n = 2 * WINDOW
    for i in range(0, n, 1000):
        bodies = [b"%07d" % j * 4 for j in range(i, min(n, i + 1000))]
        assert store.put_messages(MessageBatch.from_bodies("T", bodies)).is_ok()
    _flip(store, bad, BODY_AT + 3)
    status, nxt = _same_projected(store, "T", 0, 0, n, cols)
    assert status is GetMessageStatus.FOUND and nxt == bad
    with pytest.raises(StoreCorruptedError) as want:
        store.get_message("g", "T", 0, bad, n)
    with pytest.raises(StoreCorruptedError) as got:
        store.get_columns("g", "T", 0, bad, n, columns=cols)
    assert (got.value.path, got.value.offset, str(got.value)) == (want.value.path, want.value.offset, str(want.value))
    assert _same_projected(store, "T", 0, bad + 1, n, cols)[1] == n
    store_factory.skip_check()


@pytest.mark.parametrize("cols", [["queue_offset"], ["body", "queue_offset"]])
def test_a_projection_refuses_a_structurally_damaged_record(store_factory, cols):
    """A record whose magic code is damaged: the projected page stops before it, and one that starts at it
    raises the error get_message raises."""
    store = store_factory(**UNCAPPED)
    assert store.put_messages(MessageBatch.from_bodies("T", [b"body %d" % i * 10 for i in range(20)])).is_ok()
    _damage(store, "T", 0, 12, 4)
    status, nxt, batch = store.get_columns("g", "T", 0, 0, 100, columns=cols)
    assert status is GetMessageStatus.FOUND and nxt == 12 and batch.num_rows == 12
    assert batch.column("queue_offset").to_pylist() == list(range(12))
    with pytest.raises(StoreCorruptedError) as want:
        store.get_message("g", "T", 0, 12, 100)
    with pytest.raises(StoreCorruptedError) as got:
        store.get_columns("g", "T", 0, 12, 100, columns=cols)
    assert (got.value.path, got.value.offset) == (want.value.path, want.value.offset)
    store_factory.skip_check()


@pytest.mark.parametrize("cols", [None, ["queue_offset", "body"]])
def test_the_on_disk_caps_hold_as_in_get_message(store_factory, cols):
    """Every record more than the memory window behind the log's end (a window of 0): a page stops at the
    on-disk caps (count, then bytes) exactly where get_message's does."""
    store = store_factory(access_message_in_memory_max_ratio=0, max_transfer_count_on_message_in_disk=5,
                          max_transfer_bytes_on_message_in_disk=1500, **UNCAPPED)
    rng = random.Random(3)
    bodies = [rng.randbytes(rng.choice([10, 100, 400])) for _ in range(200)]
    assert store.put_messages(MessageBatch.from_bodies("T", bodies)).is_ok()
    offset = pages = 0
    while offset < 200:
        want = store.get_message("g", "T", 0, offset, 64)
        status, nxt, batch = store.get_columns("g", "T", 0, offset, 64, columns=cols)
        assert (status, nxt) == (want.status, want.next_begin_offset) and want.message_count <= 5
        assert batch.column("body").to_pylist() == [m.body for m in want.messages]
        offset = nxt
        pages += 1
    assert pages >= 40


@pytest.mark.parametrize("cols", [["body", "queue_offset"], ["msg_id", "keys", "topic"], ["properties", "tags"],
                                  ["store_timestamp", "born_host"]])
def test_the_spark_decoder_builds_a_projection_over_many_batches(store_factory, cols):
    """``scan_file`` (records added one at a time, a builder reused over small batches, a topic filter) into a
    projected schema: the projected columns of the all-columns batches, batch for batch."""
    from pystore.columns._arrow import BatchBuilder
    from pystore.log._mapped_file import MappedFile

    store = store_factory(**UNCAPPED)
    rng = random.Random(21)
    _fill(store, rng, 250)
    store.flush()
    path = os.path.join(store.config.commit_log_paths()[0], "%020d" % 0)
    schema = pa.schema([arrow_schema().field(c) for c in cols])
    tables = []
    mf = MappedFile(path, -1, read_only=True)
    try:
        for s in (arrow_schema(), schema):
            b = BatchBuilder(s, True, ["Orders"], max_rows=16)
            got = _scanned_batches(b, mf)
            tables.append(pa.Table.from_batches(got, schema=s))
    finally:
        mf.close()
    full, projected = tables
    assert projected.num_rows == full.num_rows > 50
    assert projected.schema.names == cols
    assert projected.equals(full.select(cols))
