"""Export to Parquet with pyarrow (``pystore.columns.export``): one row per message with the source's columns, topics
picked, batches bounded by ``batch_rows``, progress by records, a damaged record leaving no output, hosts
formatted. The ``pystore export`` command: test_cli.py."""

from __future__ import annotations

import os

import pytest
from conftest import BORN_HOST, make_message

from pystore.columns.export import COLUMNS, arrow_schema, export_parquet, format_host, record_batch
from pystore.errors import StoreCorruptedError

pq = pytest.importorskip("pyarrow.parquet", reason="the spark extra (pyarrow) is not installed")


def _closed_store(store_factory, n=50):
    store = store_factory()
    results = [store.put_message(make_message(i, "T%d" % (i % 2), i % 3, tags="Tag%d" % (i % 3),
                                              keys=["k%d" % i], born_host=("::1", 7) if i == 5 else BORN_HOST))
               for i in range(n)]
    assert all(r.is_ok() for r in results)
    messages = [store.look_message_by_offset(r.append_message_result.wrote_offset) for r in results]
    store.shutdown()
    store_factory.expect_messages(n)
    return store_factory.path(), messages


@pytest.mark.parametrize("host, text", [(("127.0.0.1", 10911), "127.0.0.1:10911"), (("::1", 7), "[::1]:7"),
                                        (("2001:db8::2", 0), "[2001:db8::2]:0")])
def test_format_host(host, text):
    assert format_host(host) == text


def test_every_message_is_a_row_with_the_source_columns(store_factory, tmp_path):
    root, messages = _closed_store(store_factory)
    out = tmp_path / "all.parquet"
    res = export_parquet(root, out, batch_rows=8)
    assert (res.rows, res.bytes_in, res.batches, res.path) == (
        50, sum(m.store_size for m in messages), 7, str(out))
    t = pq.read_table(out)
    assert t.schema.equals(arrow_schema()) and t.column_names == [c for c, _ in COLUMNS]
    rows = t.to_pylist()
    assert [r["commit_log_offset"] for r in rows] == [m.commit_log_offset for m in messages]
    for r, m in zip(rows, messages):
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["body"], r["tags"], r["keys"], r["msg_id"]) == (
            m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys, m.msg_id)
        assert dict(r["properties"]) == m.properties
        assert int(r["store_timestamp"].timestamp() * 1000) == m.store_timestamp
        assert r["born_host"] == format_host(m.born_host)
    assert rows[5]["born_host"] == "[::1]:7"
    assert not os.path.exists(str(out) + ".part")


def test_topics_pick_the_rows(store_factory, tmp_path):
    root, messages = _closed_store(store_factory)
    res = export_parquet(root, tmp_path / "t1.parquet", topics=["T1"])
    topics = pq.read_table(tmp_path / "t1.parquet").column("topic").to_pylist()
    assert res.rows == 25 and set(topics) == {"T1"}


def test_progress_counts_records_and_ends_with_the_totals(store_factory, tmp_path):
    root, messages = _closed_store(store_factory, 2100)
    calls = []
    res = export_parquet(root, tmp_path / "o.parquet", progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == [1024, 2048, 2100]
    assert calls[-1] == (2100, res.bytes_in)


def test_a_damaged_record_stops_the_export_and_leaves_no_file(store_factory, tmp_path):
    root, messages = _closed_store(store_factory)
    store_factory.skip_check()
    m = messages[10]
    path = os.path.join(str(root), "commitlog", "%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(m.commit_log_offset)
        raw = bytearray(f.read(m.store_size))
        raw[raw.index(m.body)] ^= 0xFF
        f.seek(m.commit_log_offset)
        f.write(raw)
    out = tmp_path / "bad.parquet"
    with pytest.raises(StoreCorruptedError):
        export_parquet(root, out)
    assert not out.exists() and not os.path.exists(str(out) + ".part")
    assert export_parquet(root, out, verify_crc=False).rows == 50


def test_a_folder_without_a_commit_log_creates_no_output(tmp_path):
    with pytest.raises(FileNotFoundError):
        export_parquet(tmp_path / "absent", tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "o.parquet.part").exists()


def test_record_batch_of_no_messages_is_an_empty_batch_of_the_schema():
    b = record_batch([])
    assert b.num_rows == 0 and b.schema.equals(arrow_schema())
