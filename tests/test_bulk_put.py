"""The compiled column put (``pystore.log._bulk_put``, through ``put_columns``): what it stores equals, byte for byte,
what the same messages put one by one (``put_message``) or as ``MessageBatch``es store — commit log, consume
queue and index files — on stores with one fake clock; refusals stop it at the refused message; a writer
SIGKILLed in the middle of one leaves a log whose every acknowledged message reads back.
"""

from __future__ import annotations

import os
import random
import zlib

import numpy as np
import pyarrow as pa
import pytest
from conftest import FakeClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from writer_procs import kill, read_line

from pystore import Message, MessageBatch, MessageStore
from pystore.columns import api as columns
from pystore.columns.api import _chunks, _messages, _put_messages
from pystore.log._bulk_put import CHUNK_BYTES, _copy_crc32, batch_ends, put_bodies
from pystore.status import PutMessageStatus
from pystore.tools import iter_commitlog

T = "BulkTopic"
FILE = 64 * 1024


def _bodies(n: int, size: int = 150, vary: bool = True) -> list[bytes]:
    return [(b"%d." % i * (size + (i % 7 if vary else 0)))[:size + (i % 7 if vary else 0)] for i in range(n)]


def _files(folder: str) -> dict[str, bytes]:
    out = {}
    for base, _, names in os.walk(folder):
        for name in names:
            p = os.path.join(base, name)
            out[os.path.relpath(p, folder)] = open(p, "rb").read()
    return out


def _disk(store: MessageStore) -> tuple[dict[str, bytes], dict[str, bytes], dict[str, bytes]]:
    """Commit-log, consume-queue and index files of a store, after its shutdown (which flushes them)."""
    cfg = store.config
    store.shutdown()
    return (_files(cfg.commit_log_paths()[0]), _files(cfg.consume_queue_path()), _files(cfg.index_path()))


def _one_by_one(store, clock, bodies, props=None, queue_id=0):
    born = clock()
    return [store.put_message(Message(T, b, None, None, 0, props, queue_id, born_timestamp=born)) for b in bodies]


def _as_batches(store, clock, bodies, props=None):
    born = clock()
    msgs = [Message(T, b, None, None, 0, props, 0, born_timestamp=born) for b in bodies]
    return [store.put_messages(MessageBatch(g)) for g in _chunks(store, msgs)]


def _forms(bodies: list[bytes]) -> dict[str, object]:
    values = np.frombuffer(b"".join(bodies), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(b) for b in bodies])
    padded = pa.array([b"x"] + bodies + [b"y"], type=pa.binary())
    return {"list": bodies, "numpy32": (values, offsets.astype(np.int32)), "numpy64": (values, offsets),
            "arrow": pa.array(bodies, type=pa.binary()), "large": pa.array(bodies, type=pa.large_binary()),
            "sliced": padded.slice(1, len(bodies)), "chunked": pa.chunked_array([bodies[:3], bodies[3:]]),
            "buffers": [bytearray(b) if i % 2 else memoryview(b) for i, b in enumerate(bodies)],
            "generator": (b for b in bodies)}


@pytest.mark.parametrize("form", ["list", "numpy32", "numpy64", "arrow", "large", "sliced", "chunked", "buffers",
                                  "generator"])
@pytest.mark.parametrize("props", [None, {"KEYS": "alpha beta", "TAGS": "TagX", "p": "v"}], ids=["plain", "keyed"])
def test_bulk_put_stores_the_files_of_one_by_one_puts(store_factory, monkeypatch, form, props):
    """Across file rolls (about 3 commit-log files), with properties shared by every message (keys: index
    entries; tags: the units' tags code), in every form of bodies."""
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a)
    b = store_factory("b", clock=clock_b)
    bodies = _bodies(700)
    with monkeypatch.context() as m:
        m.setattr(columns, "_put_messages", None)           # the compiled path only
        r = a.put_columns(T, _forms(bodies)[form], queue_id=2, properties=props)
    want = _one_by_one(b, clock_b, bodies, props, queue_id=2)
    assert r.status is PutMessageStatus.PUT_OK and r.count == 700
    assert r.queue_offsets.tolist() == [w.append_message_result.logics_offset for w in want] == list(range(700))
    assert r.commit_log_offsets.tolist() == [w.wrote_offset for w in want]
    assert r.store_timestamps.tolist() == [w.append_message_result.store_timestamp for w in want]
    assert r.commit_log_offsets[-1] > 2 * FILE
    if props:
        assert [m.body for m in a.query_message(T, "beta", 3, 0, 2**62).messages] == bodies[-3:]
    store_factory.expect_messages(700, "a")
    da, db = _disk(a), _disk(b)
    assert da[0] == db[0] and da[1] == db[1] and da[2] == db[2]
    assert len(da[0]) >= 3 and da[1] and (da[2] if props else True)


def test_bulk_batch_put_stores_the_files_of_message_batch_puts(store_factory):
    """``batch=True``: the batches ``_chunks`` cuts, each wholly in one file (the blank comes before a batch
    that does not fit, not before each message)."""
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a, max_message_size=20_000)
    b = store_factory("b", clock=clock_b, max_message_size=20_000)
    bodies = _bodies(900, 120)
    r = a.put_columns(T, bodies, batch=True, properties={"TAGS": "t"})
    want = _as_batches(b, clock_b, bodies, {"TAGS": "t"})
    assert all(w.is_ok() for w in want) and len(want) > 6
    assert r.status is PutMessageStatus.PUT_OK and r.count == 900
    firsts = [w.wrote_offset for w in want]
    assert set(firsts) <= set(r.commit_log_offsets.tolist())
    da, db = _disk(a), _disk(b)
    assert da == db
    # one by one, the same bodies fill the files differently
    c = store_factory("c", clock=FakeClock(), max_message_size=20_000)
    c.put_columns(T, bodies, properties={"TAGS": "t"})
    assert _disk(c)[0] != da[0]


def test_a_chunk_is_one_put_of_the_statistics_and_one_wait(store_factory, monkeypatch):
    store = store_factory(mapped_file_size_commit_log=8 * 1024 * 1024)
    waits = []
    monkeypatch.setattr(store._commitlog, "after_put", lambda r, m: waits.append(r.append_message_result) or r)
    before = store._commitlog.put_times_total
    n = 3 * CHUNK_BYTES // 1000
    r = store.put_columns(T, _bodies(n, 900, vary=False))
    assert r.count == n and store._commitlog.put_times_total - before == n
    # chunks of whole records up to CHUNK_BYTES: the waits cover the records in order, each once
    assert len(waits) == 4
    assert [w.wrote_offset for w in waits] == [0] + [sum(x.wrote_bytes for x in waits[:i]) for i in range(1, 4)]
    assert sum(w.msg_num for w in waits) == n and all(w.wrote_bytes <= CHUNK_BYTES for w in waits)


@pytest.mark.parametrize("batch", [False, True])
def test_an_oversized_body_stops_the_bulk_put_there(store_factory, batch):
    store = store_factory(max_message_size=1000)
    bodies = _bodies(50, 300)
    bodies[31] = b"z" * 1001
    r = store.put_columns(T, bodies, batch=batch)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.count == 31
    assert r.queue_offsets.tolist() == list(range(31))
    assert store.get_max_offset_in_queue(T, 0) == 31
    stored = [m.body for m in iter_commitlog(store.config.commit_log_paths())]
    assert stored == bodies[:31]
    store_factory.expect_messages(31)


def test_a_record_larger_than_a_file_is_refused_at_its_place(store_factory):
    store = store_factory(mapped_file_size_commit_log=4096, max_message_size=10_000)
    bodies = [b"a" * 100, b"b" * 200, b"c" * 5000, b"d"]
    r = store.put_columns(T, bodies)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.count == 2
    store_factory.expect_messages(2)


def test_illegal_properties_and_a_store_not_writeable_refuse_the_first_message(store_factory):
    store = store_factory()
    r = store.put_columns(T, [b"a", b"b"], properties={"p": "x" * 40_000})
    assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED and r.count == 0
    store._commitlog.writeable = False
    try:
        r = store.put_columns(T, [b"a", b"b"])
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and r.count == 0
    finally:
        store._commitlog.writeable = True
    assert store.get_max_phy_offset() == 0
    store_factory.expect_messages(0)


def test_put_bodies_checks_its_arrays(store_factory):
    store = store_factory()
    tmpl = Message(T, b"")
    out = np.empty(2, dtype=np.int64)
    values = np.zeros(10, dtype=np.uint8)
    with pytest.raises(ValueError, match="outside the values"):
        put_bodies(store._commitlog.core, tmpl, values, np.array([0, 5, 11]), False, 0, out, out, out)
    with pytest.raises(ValueError, match="fewer than"):
        put_bodies(store._commitlog.core, tmpl, values, np.array([0, 5, 6, 7]), False, 0, out, out, out)
    assert put_bodies(store._commitlog.core, tmpl, values, np.array([0]), False, 0, out, out, out)[1] == 0
    store_factory.expect_messages(0)


@pytest.mark.parametrize("level", [0, 1, 2], ids=["zlib", "pclmulqdq", "vpclmulqdq"])
def test_the_fused_copy_stores_the_bytes_and_gives_zlibs_crc(level):
    """The body copy of the column put (copy and CRC in one pass), on each CRC path (a path the CPU lacks
    falls back to the best it has): for every length 0..4096, from unaligned sources to unaligned places, the
    bytes land exactly there (nothing around them touched) and the CRC is zlib's."""
    rng = random.Random(22)
    data = rng.randbytes(4096 + 64)
    for n in range(4097):
        for skip, at in ((0, 0), (1, 7), (13, 3), (5, 32)):
            src = memoryview(data)[skip:skip + n]
            dst = bytearray(b"\xa5" * (n + 64))
            assert _copy_crc32(dst, at, src, level) == zlib.crc32(src), (level, n, skip, at)
            assert dst[at:at + n] == src, (level, n, skip, at)
            assert dst[:at] == b"\xa5" * at and dst[at + n:] == b"\xa5" * (64 - at), (level, n, skip, at)
    with pytest.raises(ValueError, match="do not fit"):
        _copy_crc32(bytearray(10), 5, b"123456")


def _reference_batches(sizes: list[int], lens: list[int], max_size: int, file_size: int) -> list[int]:
    """RocketMQ's batching as the put path checks it, spelled out: a batch's records add up to at most the max
    message size and the file less its 8-byte blank; a body over the max size goes alone."""
    cap = min(max_size, file_size - 8)
    ends: list[int] = []
    total = 0
    for i, (size, ln) in enumerate(zip(sizes, lens, strict=True)):
        alone = ln > max_size
        if i > (ends[-1] if ends else 0) and (alone or total + size > cap):
            ends.append(i)
            total = 0
        total += size
        if alone:
            ends.append(i + 1)
            total = 0
    if not ends or ends[-1] != len(sizes):
        ends.append(len(sizes))
    return ends


def test_batch_ends_cut_rocketmqs_batches():
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randrange(0, 60)
        max_size, file_size = rng.choice([(1000, 4096), (4000, 2048), (20_000, 1 << 20)])
        lens = [rng.choice([0, 10, 300, 900, 999, 1000, 1001, 5000]) for _ in range(n)]
        sizes = [100 + ln for ln in lens]
        got = batch_ends(np.array(sizes, dtype=np.int32), np.array(lens, dtype=np.int64), max_size, file_size)
        assert got == (_reference_batches(sizes, lens, max_size, file_size) if n else []), (sizes, max_size)
    with pytest.raises(ValueError, match="sizes for"):
        batch_ends(np.zeros(2, dtype=np.int32), np.zeros(3, dtype=np.int64), 100, 1000)


def _texts(n: int, every: int, word: str) -> list[str | None]:
    return [None if i % every == 0 else "" if i % every == 1 else "%s%d" % (word, i % 13) for i in range(n)]


@pytest.mark.parametrize("form", ["list", "arrow", "large", "numpy", "chunked"])
@pytest.mark.parametrize("batch", [False, True])
def test_tags_and_keys_columns_store_the_files_of_message_puts(store_factory, monkeypatch, form, batch):
    """Tags and keys of their own per message (None, empty, one or two keys, non-ASCII) with shared
    properties, across file rolls: the same files as the ``Message`` path (``put_message`` one by one, or
    ``MessageBatch``es), index and consume-queue tags codes included."""
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a)
    b = store_factory("b", clock=clock_b)
    n = 600
    bodies = _bodies(n)
    tags = _texts(n, 5, "Tag\u00e9")
    keys = [None if k is None else k if not k else k + " second%d" % i for i, k in enumerate(_texts(n, 4, "key"))]
    props = {"p": "v", "UNIQ_KEY": "u"}

    def as_form(col):
        return {"list": col, "arrow": pa.array(col, type=pa.string()), "large": pa.array(col, type=pa.large_string()),
                "numpy": np.array(col, dtype=object), "chunked": pa.chunked_array([col[:100], col[100:]])}[form]

    with monkeypatch.context() as m:
        m.setattr(columns, "_put_messages", None)           # the compiled path only
        r = a.put_columns(T, bodies, keys=as_form(keys), tags=as_form(tags), properties=props, batch=batch)
    w = _put_messages(b, _messages(T, bodies, 0, keys, tags, props, clock_b()), batch)
    assert (r.status, r.count) == (w.status, w.count) == (PutMessageStatus.PUT_OK, n)
    assert r.queue_offsets.tolist() == w.queue_offsets.tolist()
    assert r.commit_log_offsets.tolist() == w.commit_log_offsets.tolist()
    assert [m.body for m in a.query_message(T, "key7", 64, 0, 2**62).messages] != []
    units = a.queue_units(T, 0, 0, 10)
    assert units["tags_code"][2] != 0 and units["tags_code"][0] == 0 and units["tags_code"][1] == 0
    store_factory.expect_messages(n, "a")
    assert _disk(a) == _disk(b)


@pytest.mark.parametrize("batch", [False, True])
def test_properties_too_long_stop_the_put_at_that_message(store_factory, batch):
    """A keys entry that makes its message's properties longer than 32767 bytes: PROPERTIES_SIZE_EXCEEDED at
    that message, what comes before stored as the ``Message`` path stores it (a batch refused whole is put
    again message by message)."""
    clock_a, clock_b = FakeClock(), FakeClock()
    a = store_factory("a", clock=clock_a)
    b = store_factory("b", clock=clock_b)
    bodies = _bodies(300)
    keys = ["k%d" % i for i in range(300)]
    keys[257] = "x" * 33_000
    r = a.put_columns(T, bodies, keys=keys, batch=batch)
    w = _put_messages(b, _messages(T, bodies, 0, keys, None, None, clock_b()), batch)
    assert (r.status, r.count) == (w.status, w.count) == (PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, 257)
    assert r.commit_log_offsets.tolist() == w.commit_log_offsets.tolist()
    store_factory.expect_messages(257, "a")
    assert _disk(a) == _disk(b)


def test_a_separator_in_a_tag_is_refused_before_anything_is_stored(store_factory):
    store = store_factory()
    with pytest.raises(ValueError, match="separator"):
        store.put_columns(T, [b"a", b"b"], tags=pa.array(["ok", "bad\x01tag"]))
    assert store.get_max_phy_offset() == 0
    store_factory.expect_messages(0)


bodies_st = st.lists(st.binary(min_size=0, max_size=3000), min_size=1, max_size=60)
text_st = st.one_of(st.none(), st.text(alphabet="ab \u00e9\u4e2d", max_size=12))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), bodies=bodies_st, batch=st.booleans(), keyed=st.booleans(),
       file_kib=st.sampled_from([4, 8, 64]))
def test_random_columns_store_the_files_of_the_message_puts(tmp_path_factory, data, bodies, batch, keyed, file_kib):
    """Random bodies (some over the max message size), tags and keys columns and shared properties, one by
    one or in batches, small files: the same result and files as the ``Message`` path."""
    n = len(bodies)
    tags = data.draw(st.one_of(st.none(), st.lists(text_st, min_size=n, max_size=n)))
    keys = data.draw(st.one_of(st.none(), st.lists(text_st, min_size=n, max_size=n)))
    props = {"KEYS": "k1 k2", "TAGS": "T"} if keyed and tags is None and keys is None else (
        {"p": "q"} if keyed else None)
    root = tmp_path_factory.mktemp("h")
    opts = dict(mapped_file_size_commit_log=file_kib * 1024, max_message_size=2500, max_hash_slot_num=100,
                max_index_num=400)
    clock_a, clock_b = FakeClock(), FakeClock()
    a = MessageStore.open(str(root / "a"), clock=clock_a, **opts)
    b = MessageStore.open(str(root / "b"), clock=clock_b, **opts)
    try:
        r = a.put_columns(T, bodies, keys=keys, tags=tags, properties=props, batch=batch)
        w = _put_messages(b, _messages(T, bodies, 0, keys, tags, props, clock_b()), batch)
        assert (r.status, r.count) == (w.status, w.count)
        assert r.commit_log_offsets.tolist() == w.commit_log_offsets.tolist()
        assert _disk(a) == _disk(b)
    finally:
        a.shutdown()
        b.shutdown()


WRITER = r"""
import sys
import numpy as np
from pystore import MessageStore
root = sys.argv[1]
store = MessageStore.open(root, mapped_file_size_commit_log=1 << 20)
values = np.frombuffer(bytes(range(256)) * 4000, dtype=np.uint8)
offsets = np.arange(0, 4000 * 256 + 1, 256, dtype=np.int64)
i = 0
while True:
    r = store.put_columns("Crash", (values, offsets), properties={"KEYS": "k%d" % i})
    assert r.count == 4000, r
    print("ACK %d %d %d" % (i, r.queue_offsets[-1], r.commit_log_offsets[-1]), flush=True)
    i += 1
"""


def test_sigkill_mid_bulk_put_keeps_every_acknowledged_message(tmp_path, procs):
    root = str(tmp_path / "s")
    p = procs.start(root, script=WRITER)
    acks = [read_line(p, "ACK").split() for _ in range(6)]
    kill(p)
    last_qoff, last_phy = int(acks[-1][2]), int(acks[-1][3])
    with MessageStore.open(root, mapped_file_size_commit_log=1 << 20) as store:
        assert store.get_max_offset_in_queue("Crash", 0) >= last_qoff + 1
        assert store.get_max_phy_offset() >= last_phy
        got = store.get_message("g", "Crash", 0, last_qoff - 2, 3)
        assert [m.queue_offset for m in got.messages] == [last_qoff - 2, last_qoff - 1, last_qoff]
        assert all(m.body == bytes(range(256)) for m in got.messages)
        assert got.messages[-1].commit_log_offset == last_phy
        folders = store.config.commit_log_paths()
        end = store.get_max_phy_offset()
    # every record recovery kept has its CRC (no torn record is served), and they reach the log's end
    msgs = list(iter_commitlog(folders, verify_crc=True))
    assert len(msgs) >= len(acks) * 4000
    tail = msgs[-1].commit_log_offset + msgs[-1].store_size
    # killed just after a chunk closed a file with its blank: the log then reaches that file's end
    assert tail == end or (end % (1 << 20) == 0 and 8 <= end - tail < (1 << 20)), (tail, end)
    assert [m.queue_offset for m in msgs] == list(range(len(msgs)))


@pytest.mark.parametrize("with_tags", [False, True], ids=["shared", "tags-column"])
def test_arriving_listeners_hear_each_message_as_from_message_puts(store_factory, monkeypatch, with_tags):
    """The arrival hook gets every message of a column put (queue offset, tags code, properties), as it does
    for the same messages put through ``Message``s."""
    heard: dict[str, list[tuple]] = {"a": [], "b": []}
    stores = {}
    for name in ("a", "b"):
        clock = FakeClock()
        stores[name] = (store_factory(name, clock=clock), clock)
        stores[name][0].add_arriving_listener(
            lambda t, q, off, code, ts, _x, props, name=name: heard[name].append((t, q, off, code, ts, props)))
    bodies = _bodies(300)
    tags = ["t%d" % (i % 3) if i % 4 else None for i in range(300)] if with_tags else None
    props = {"p": "v"} if with_tags else {"TAGS": "all", "p": "v"}
    a, _ = stores["a"]
    b, clock_b = stores["b"]
    with monkeypatch.context() as m:
        m.setattr(columns, "_put_messages", None)           # the compiled path only
        assert a.put_columns(T, bodies, tags=tags, properties=props).count == 300
    assert _put_messages(b, _messages(T, bodies, 0, None, tags, props, clock_b()), False).count == 300
    assert len(heard["a"]) == 300 and heard["a"] == heard["b"]
    assert heard["a"][5][5]["TAGS"] == ("t2" if with_tags else "all")
    store_factory.expect_messages(300, "a")
