"""The Spark source's decoder on its own (``pystore.columns._arrow``): commit-log records straight into Arrow record
batches, from a file range (``scan_file``) or through a consume queue (``QueueReader``), with the builder's
filters and limits; rows compared with ``get_message``. Through Spark and ``pystore.spark.batch``:
test_spark.py."""

from __future__ import annotations

import os
import struct

import pytest
from conftest import make_message

pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")
pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")

import pyarrow as pa  # noqa: E402

from pystore.columns._arrow import COLUMNS, BatchBuilder  # noqa: E402
from pystore.columns._arrow_source import QueueReader, scan_file  # noqa: E402
from pystore.errors import StoreCorruptedError  # noqa: E402
from pystore.log._mapped_file import MappedFile  # noqa: E402
from pystore.spark.schema import arrow_schema  # noqa: E402


@pytest.fixture
def filled(store_factory):
    store = store_factory()
    for i in range(60):
        r = store.put_message(make_message(i, "T%d" % (i % 2), i % 3, body=b"m%d" % i * (1 + i % 9),
                                           tags="Tag%d" % (i % 4), keys=["k%d" % i]))
        assert r.is_ok()
    store_factory.expect_messages(60)
    return store


def _log_file(store) -> MappedFile:
    return MappedFile(os.path.join(store.config.commit_log_paths()[0], "%020d" % 0), -1, read_only=True)


def test_a_schema_of_other_columns_is_refused_and_any_order_of_the_sources_is_taken(filled):
    schema = arrow_schema()
    for bad in (pa.schema(list(schema) + [pa.field("extra", pa.int32())]),
                pa.schema([schema.field("topic"), schema.field("topic")])):
        with pytest.raises(ValueError, match="columns"):
            BatchBuilder(bad)
    assert list(schema.names) == list(COLUMNS)
    # the source's columns in another order (or some of them): the same rows, those columns in that order
    backwards = pa.schema(list(reversed(list(schema))))
    built = []
    for s in (schema, backwards):
        b = BatchBuilder(s)
        mf = _log_file(filled)
        try:
            scan_file(b, mf, 0)
            built.append(b.build())
        finally:
            mf.close()
    assert built[1].schema.names == list(reversed(COLUMNS))
    assert built[1].equals(built[0].select(list(reversed(COLUMNS))))


def test_scan_file_rows_equal_the_stores_messages(filled):
    b = BatchBuilder(arrow_schema())
    mf = _log_file(filled)
    try:
        nxt, done = scan_file(b, mf, 0)
        rows = b.build().to_pylist()
    finally:
        mf.close()
    assert done and nxt == filled.get_max_phy_offset()
    assert b.build() is None                                     # nothing added since
    assert len(rows) == 60 and b.rows_total == 60
    for row in rows:
        m = filled.look_message_by_offset(row["commit_log_offset"])
        assert (row["topic"], row["queue_id"], row["queue_offset"], row["body"], row["tags"], row["keys"]) == (
            m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys)
        assert row["store_size"] == m.store_size and row["msg_id"] == m.msg_id


def test_the_builder_filters_topic_and_queue(filled):
    mf = _log_file(filled)
    try:
        b = BatchBuilder(arrow_schema(), topics=["T1"], queue_id=2)
        scan_file(b, mf, 0)
        rows = b.build().to_pylist()
    finally:
        mf.close()
    assert rows and all(r["topic"] == "T1" and r["queue_id"] == 2 for r in rows)
    assert len(rows) == sum(1 for i in range(60) if i % 2 == 1 and i % 3 == 2)


def test_a_full_builder_stops_the_scan_at_a_record_boundary_and_it_goes_on_from_there(filled):
    mf = _log_file(filled)
    got = []
    try:
        b = BatchBuilder(arrow_schema(), max_rows=7)
        pos, done = 0, False
        while not done:
            pos, done = scan_file(b, mf, pos)
            batch = b.build()
            assert batch is None or batch.num_rows <= 7
            got += batch.column("commit_log_offset").to_pylist() if batch is not None else []
    finally:
        mf.close()
    assert got == sorted(got) and len(got) == 60


def test_a_spent_builder_takes_no_more_records_and_its_batch_keeps_its_rows(filled):
    mf = _log_file(filled)
    try:
        b = BatchBuilder(arrow_schema(), max_rows=10)
        pos, done = scan_file(b, mf, 0)
        last = b.build(again=False)
        with pytest.raises(ValueError, match="last batch"):
            scan_file(b, mf, pos)
    finally:
        mf.close()
    assert not done and last.num_rows == 10
    assert last.column("queue_offset").to_pylist() == [filled.look_message_by_offset(o).queue_offset
                                                       for o in last.column("commit_log_offset").to_pylist()]


def test_a_wrong_body_crc_names_the_file_and_offset(filled, store_factory):
    target = filled.get_commit_log_offset_in_queue("T0", 0, 2)
    m = filled.look_message_by_offset(target)
    filled.shutdown()
    path = os.path.join(filled.config.commit_log_paths()[0], "%020d" % 0)
    store_factory.skip_check()
    with open(path, "r+b") as f:
        f.seek(target)
        raw = bytearray(f.read(m.store_size))
        at = raw.index(m.body)
        raw[at] ^= 0xFF
        f.seek(target)
        f.write(raw)
    mf = MappedFile(path, -1, read_only=True)
    try:
        with pytest.raises(StoreCorruptedError) as e:
            scan_file(BatchBuilder(arrow_schema()), mf, 0)
        assert e.value.offset == target
        b = BatchBuilder(arrow_schema(), verify_crc=False)
        scan_file(b, mf, 0)
        assert b.build().num_rows == 60
    finally:
        mf.close()


def test_queue_reader_reads_a_queue_by_offsets(filled):
    cq = os.path.join(filled.config.consume_queue_path(), "T0", "1")
    reader = QueueReader("T0", 1, [os.path.join(cq, n) for n in sorted(os.listdir(cq))],
                         [os.path.join(filled.config.commit_log_paths()[0], "%020d" % 0)])
    b = BatchBuilder(arrow_schema())
    nxt, done = reader.scan(b, 2, 100)
    rows = b.build().to_pylist()
    want = filled.get_message("g", "T0", 1, 2, 100).messages
    assert [(r["queue_offset"], r["body"]) for r in rows] == [(m.queue_offset, m.body) for m in want]
    assert done and nxt == filled.get_max_offset_in_queue("T0", 1)
    assert (reader.topic, reader.queue_id, reader.lost) == ("T0", 1, 0)


def _damaged_queue_read(filled, store_factory, damage):
    """Queue T0/1 read with ``QueueReader`` after ``damage(unit bytes, commit-log bytes)`` changed its files:
    the rows, or the ``StoreCorruptedError`` raised."""
    filled.shutdown()
    store_factory.skip_check()
    cq = os.path.join(filled.config.consume_queue_path(), "T0", "1", "%020d" % 0)
    log = os.path.join(filled.config.commit_log_paths()[0], "%020d" % 0)
    units, data = bytearray(open(cq, "rb").read()), bytearray(open(log, "rb").read())
    damage(units, data)
    open(cq, "wb").write(bytes(units))
    open(log, "wb").write(bytes(data))
    reader = QueueReader("T0", 1, [cq], [log])
    b = BatchBuilder(arrow_schema())
    reader.scan(b, 0, 100)
    return b.build().column("queue_offset").to_pylist()


def test_queue_reader_refuses_an_empty_unit_before_written_ones(filled, store_factory):
    """A zeroed unit with written units after it is damage, not the queue's end (which would hide them)."""
    def zero_unit_4(units, data):
        units[4 * 20:5 * 20] = bytes(20)

    with pytest.raises(StoreCorruptedError) as e:
        _damaged_queue_read(filled, store_factory, zero_unit_4)
    assert e.value.offset == 4 * 20 and "unit 4 is empty" in e.value.reason


def test_queue_reader_refuses_a_unit_pointing_back(filled, store_factory):
    """A unit pointing at a record before the unit ahead of it (here the first record of the log, into a file
    a cleaner could have deleted) is damage: units follow the commit log."""
    def unit_6_to_unit_1(units, data):
        units[6 * 20:6 * 20 + 12] = units[1 * 20:1 * 20 + 12]

    with pytest.raises(StoreCorruptedError) as e:
        _damaged_queue_read(filled, store_factory, unit_6_to_unit_1)
    assert e.value.offset == 6 * 20 and "not after the unit ahead of it" in e.value.reason


def test_queue_reader_refuses_a_record_of_another_queue_offset(filled, store_factory):
    """A record whose QUEUEOFFSET field is not its unit's offset (a damaged field) is not served with it."""
    def qoff_of_unit_3(units, data):
        phy = struct.unpack_from(">q", units, 3 * 20)[0]
        struct.pack_into(">q", data, phy + 20, 0)

    with pytest.raises(StoreCorruptedError) as e:
        _damaged_queue_read(filled, store_factory, qoff_of_unit_3)
    assert "does not match the record" in e.value.reason


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_queue_reader_refuses_a_missing_middle_file(store_factory, damage):
    """A consume-queue file cut short or gone between others: its units' messages are not skipped as the
    queue's end, nor are a later file's units read as theirs."""
    store = store_factory(mapped_file_size_consume_queue=4 * 20)       # 4 units a file
    for i in range(20):
        assert store.put_message(make_message(i, "T0", 0)).is_ok()
    store.shutdown()
    store_factory.skip_check()
    folder = os.path.join(store.config.consume_queue_path(), "T0", "0")
    files = [os.path.join(folder, n) for n in sorted(os.listdir(folder))]
    assert len(files) == 5
    if damage == "truncated":
        os.truncate(files[2], 1)
    else:
        os.remove(files[2])
        files.pop(2)
    reader = QueueReader("T0", 0, files, [os.path.join(store.config.commit_log_paths()[0], "%020d" % 0)])
    b = BatchBuilder(arrow_schema())
    with pytest.raises(StoreCorruptedError) as e:
        reader.scan(b, 0, 20)
    assert e.value.offset == 8 * 20 and "missing or cut short" in e.value.reason
