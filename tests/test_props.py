"""The properties string (docs/format.md §1.7) read back by both of pystore's decoders: the dict of
``MessageExt.properties`` (``get_message``, ``look_message_by_offset``, ``get_columns``) and the Arrow decoder
of the Spark source (``pystore.columns._arrow``). Both split it with ``_props.next_prop`` and keep what RocketMQ's
``MessageDecoder.string2messageProperties`` keeps; RocketMQ decodes into a HashMap, so a name that repeats takes
its last value, and both decoders keep that name at its first place."""

from __future__ import annotations

import os

import pytest

from pystore import Message, MessageStore
from pystore.format._props import properties_to_string, string_to_properties


def test_a_repeated_name_takes_its_last_value_at_its_first_place():
    got = string_to_properties("a\x011\x02b\x012\x02a\x013\x02")
    assert got == {"a": "3", "b": "2"}
    assert list(got) == ["a", "b"]


def test_items_kept_and_dropped_as_rocketmq_decodes_them():
    # empty name, empty value, no separator, too short: dropped; a value may hold \x01 (the name ends at the first)
    assert string_to_properties("\x01x\x02y\x01\x02z\x02k\x01v\x01w") == {"k": "v\x01w"}
    assert string_to_properties("") == {}
    assert string_to_properties("n\x01v") == {"n": "v"}              # no trailing separator
    assert string_to_properties("\x02\x02n\x01v\x02\x02") == {"n": "v"}


def test_any_str_round_trips():
    props = {"ü-name": "wert ✓", "k": "\U0001F600", "lone": "\udc80"}
    assert string_to_properties(properties_to_string(props)) == props


def _store_with_a_repeated_name(root: str) -> int:
    """A store whose only record's properties name ``p1`` twice (``one``, then ``six``): written through the
    store, then the name ``p3`` patched to ``p1`` in the file (same length; the CRC covers the body only)."""
    with MessageStore.open(root, mapped_file_size_commit_log=64 * 1024) as s:
        r = s.put_message(Message("T", b"body", properties={"p1": "one", "p2": "two", "p3": "six"}))
        offset = r.append_message_result.wrote_offset
    path = os.path.join(root, "commitlog", "%020d" % 0)
    with open(path, "r+b") as f:
        data = f.read()
        at = data.index(b"p3\x01six\x02")
        assert data.count(b"p3\x01six\x02") == 1
        f.seek(at)
        f.write(b"p1")
    return offset


def test_a_repeated_name_reads_alike_through_get_message_and_by_offset(tmp_path):
    root = str(tmp_path / "s")
    offset = _store_with_a_repeated_name(root)
    with MessageStore.open(root, mapped_file_size_commit_log=64 * 1024) as s:
        (m,) = s.get_message("g", "T", 0, 0).messages
        by_offset = s.look_message_by_offset(offset)
    assert m.properties["p1"] == "six" and m.properties["p2"] == "two" and "p3" not in m.properties
    names = list(m.properties)
    assert names.index("p1") < names.index("p2")                       # p1 keeps its first place
    assert list(by_offset.properties.items()) == list(m.properties.items())


def test_a_repeated_name_reads_alike_in_the_arrow_decoder(tmp_path):
    pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
    pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")
    from pystore.columns._arrow import BatchBuilder
    from pystore.columns._arrow_source import scan_file
    from pystore.log._mapped_file import MappedFile
    from pystore.spark.schema import arrow_schema

    root = str(tmp_path / "s")
    _store_with_a_repeated_name(root)
    with MessageStore.open(root, mapped_file_size_commit_log=64 * 1024) as s:
        (m,) = s.get_message("g", "T", 0, 0).messages
        _status, _next, batch = s.get_columns("g", "T", 0, 0)
    b = BatchBuilder(arrow_schema())
    mf = MappedFile(os.path.join(root, "commitlog", "%020d" % 0), -1, read_only=True)
    try:
        scan_file(b, mf, 0)
        rows = b.build().to_pylist()
    finally:
        mf.close()
    assert len(rows) == 1
    assert rows[0]["properties"] == list(m.properties.items())           # same items, same order
    assert dict(rows[0]["properties"])["p1"] == "six"
    assert batch.to_pylist()[0]["properties"] == list(m.properties.items())
