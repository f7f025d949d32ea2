"""The index builder (``IndexBuildService``, ``_index.index_log``): with ``index_build_async`` the put path writes
no index entries; a thread follows the commit log and writes them. What it writes equals what inline dispatch
and the reput write, a lookup finds a key as soon as its put returned, the shutdown drains it, a query running
beside the puts never sees damage, and after a SIGKILL the recovered store finds every acknowledged key."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import crash_writer as cw  # noqa: E402
from test_crash import check_crashed, write_args  # noqa: E402
from writer_procs import kill, read_line, stderr_of  # noqa: E402

from pystore import Message, MessageBatch  # noqa: E402
from pystore.engine.verify import verify_store  # noqa: E402
from pystore.index._index_walk import index_log  # noqa: E402
from pystore.index.service import IndexService  # noqa: E402

TOPIC = "TopicTest"
T0 = 1_700_000_000_000


def index_bytes(root) -> list[bytes]:
    d = os.path.join(str(root), "index")
    return [open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))]


def keyed_puts(store, n: int, start: int = 0) -> list[int]:
    """``n`` puts of messages with two keys and a UNIQ_KEY each (a batch among them); their offsets."""
    out = []
    for i in range(start, start + n):
        if i % 10 == 9:
            r = store.put_messages(MessageBatch([Message(TOPIC, b"b%d-%d" % (i, j), keys="k%d-%d" % (i, j))
                                                 for j in range(3)]))
        else:
            r = store.put_message(Message(TOPIC, b"m%d" % i, keys=["k%d" % i, "all"],
                                          properties={"UNIQ_KEY": "U%d" % i}))
        assert r.is_ok()
        out.append(r.append_message_result.wrote_offset)
    return out


def test_the_put_path_writes_no_entry_and_the_builder_writes_what_inline_dispatch_writes(store_factory,
                                                                                         fake_clock):
    """The same puts under the same clock into two stores, one indexing inline, one by the builder: byte-equal
    index files once the builder caught up (a flush), across file switches (a file of 12 entries)."""
    fake_clock.set(T0)
    geometry = {"max_hash_slot_num": 7, "max_index_num": 13}
    inline = store_factory("inline", clock=fake_clock, index_build_async=False, **geometry)
    built = store_factory("built", clock=fake_clock, **geometry)
    builder = built._writer.index_builder
    assert builder is not None and inline._writer.index_builder is None
    assert not built._dispatcher.inline_index
    builder.shutdown()                      # no background pass: what is indexed is what catch_up wrote
    built._index.builder = builder
    for store in (inline, built):
        fake_clock.set(T0)
        keyed_puts(store, 30)
    assert builder.behind() > 0
    assert builder.catch_up() > 0 and builder.behind() == 0
    assert builder.catch_up() == 0
    inline.flush()
    assert len(index_bytes(inline.root)) > 3
    assert index_bytes(built.root) == index_bytes(inline.root)
    for i in (0, 8, 9, 29):
        key = "k%d" % i if i % 10 != 9 else "k%d-2" % i
        assert len(built.query_message(TOPIC, key).messages) == 1


def test_index_log_writes_what_the_reput_writes(store_factory, tmp_path):
    """``index_log`` over a log (records of every shape: batches, many keys, rolled back, no keys) writes the
    entries the reput's ``index_message`` writes, in the same order; from an offset inside the log it
    indexes only the records from there."""
    store = store_factory(index_build_async=False, max_hash_slot_num=101, max_index_num=1000)
    offsets = keyed_puts(store, 25)
    store.put_message(Message(TOPIC, b"many", keys=["key-%d" % i for i in range(40)],
                              properties={"UNIQ_KEY": "UM"}))
    store.put_message(Message(TOPIC, b"plain"))
    store.flush()
    want = index_bytes(store.root)
    q = store._commitlog.queue
    end = store.get_max_phy_offset()

    class _Checkpoint:
        index_msg_timestamp = 0

    fresh = IndexService(str(tmp_path / "fresh"), 101, 1000, _Checkpoint(), clock=store._parts.index.clock)
    try:
        assert index_log(fresh.core, q.files, q.mapped_file_size, 0, end) == end
        fresh.flush()
        got = [open(f.mapped_file.file_name, "rb").read() for f in fresh.files]
    finally:
        fresh.close()
    # the files are named by the clock; their bytes are what counts
    assert got == want
    part = IndexService(str(tmp_path / "part"), 101, 1000, _Checkpoint())
    try:
        assert index_log(part.core, q.files, q.mapped_file_size, offsets[20], end) == end
        assert part.files[0].begin_phy_offset == offsets[20]
        assert part.query_offset(TOPIC, "k19", 10, 0, 2**62).phy_offsets == []
        assert part.query_offset(TOPIC, "k20", 10, 0, 2**62).phy_offsets == [offsets[20]]
        # a walk that ends inside a record stops before it
        assert index_log(part.core, q.files, q.mapped_file_size, end, end + 7) == end
    finally:
        part.close()


def test_a_key_is_found_as_soon_as_its_put_returned(store_factory):
    """The builder polls rarely here: every lookup right after a put catches it up first."""
    store = store_factory()
    builder = store._writer.index_builder
    builder.idle_ms = builder.busy_ms = 60_000
    for i in range(50):
        a = store.put_message(Message(TOPIC, b"m%d" % i, keys="key%d" % i)).append_message_result
        found = store.query_message(TOPIC, "key%d" % i).messages
        assert [m.commit_log_offset for m in found] == [a.wrote_offset]


def test_the_shutdown_drains_the_builder(store_factory):
    """Puts the builder has not reached when the store shuts down are indexed before the final checkpoint: a
    read-only opener (which builds nothing) finds every key."""
    store = store_factory(max_hash_slot_num=11, max_index_num=40)
    builder = store._writer.index_builder
    builder.shutdown()                      # nothing indexes in the background any more
    offsets = keyed_puts(store, 20)
    assert builder.behind() > 0
    store.shutdown()
    reader = store_factory(read_only=True, max_hash_slot_num=11, max_index_num=40)
    for i, off in enumerate(offsets):
        key = "k%d" % i if i % 10 != 9 else "k%d-0" % i
        assert [m.commit_log_offset for m in reader.query_message(TOPIC, key).messages] == [off]


def test_a_query_beside_the_puts_sees_old_or_new_chains_never_damage(store_factory, caplog):
    """One thread puts keyed messages (files of 200 entries: many switches) while another queries a key every
    message has and keys just put; no lookup logs a broken chain, each finds at most what was put, and the
    index checks clean afterwards."""
    store = store_factory(max_hash_slot_num=53, max_index_num=200)
    stop = threading.Event()
    put_count = [0]
    errors: list[BaseException] = []

    def put() -> None:
        try:
            for i in range(1500):
                assert store.put_message(Message(TOPIC, b"m%d" % i, keys=["k%d" % i, "all"])).is_ok()
                put_count[0] = i + 1
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
        finally:
            stop.set()

    t = threading.Thread(target=put)
    t.start()
    lookups = 0
    with caplog.at_level("WARNING", logger="pystore.index.service"):
        while not stop.is_set() or lookups < 5:
            n = put_count[0]
            got = store.query_message(TOPIC, "all", 64).messages
            assert min(n, 64) <= len(got) <= 64
            if n:
                assert [m.body for m in store.query_message(TOPIC, "k%d" % (n - 1)).messages] == [b"m%d" % (n - 1)]
            lookups += 1
    t.join()
    assert not errors, errors
    assert not [r for r in caplog.records if "broken" in r.getMessage()]
    store.flush()
    for f in store._index.files:
        assert f.check_chains() == []
    for i in (0, 777, 1499):
        assert [m.body for m in store.query_message(TOPIC, "k%d" % i).messages] == [b"m%d" % i]
    store.shutdown()
    report = verify_store(store.root, max_hash_slot_num=53, max_index_num=200)
    assert report.ok, report.problems


@pytest.mark.slow
def test_every_acknowledged_key_is_found_after_a_kill(procs, tmp_path):
    """An ASYNC_FLUSH writer putting keyed messages as fast as it can is SIGKILLed, its index lagging its log
    (the builder runs behind the puts); the store recovered in this process finds every acknowledged
    message by its key (recovery indexes from where the index ends: the builder starts past it)."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    file_size = 65536
    for run in range(2):
        p = procs.start(*write_args(root, ack, mode="async", sizes="small", file_size=file_size, run=run,
                                    seed=7, batch_prob=0.1))
        try:
            read_line(p, "READY")
            deadline = time.monotonic() + 120
            start = len(cw.read_acks(str(ack)))
            while len(cw.read_acks(str(ack))) < start + 2000:
                assert p.poll() is None and time.monotonic() < deadline, stderr_of(p)
                time.sleep(0.02)
        finally:
            kill(p)
        acks = cw.read_acks(str(ack))
        w = check_crashed(root, acks, sync=False)
        by_offset = cw.index_records(w)
        store = cw.open_store(root, file_size)
        try:
            assert store._writer.index_builder is not None
            assert store._writer.index_builder.behind() == 0
            for a in acks:
                r = by_offset[a.offset]
                found = store.query_message(r.topic, "k%d" % r.idx, 32).messages
                assert a.offset in [m.commit_log_offset for m in found], "message %d (key k%d) at %d not found" % (
                    a.idx, r.idx, a.offset)
        finally:
            store.shutdown()
    shutil.rmtree(root)


def test_puts_without_keys_need_no_walk_from_the_builder(store_factory):
    """While messages without keys come, the builder follows them without the GIL (``follow_log``) and
    walks (``catch_up``, which takes the GIL and the lock) only about once a ``FOLLOW_MAX_MS``; a keyed put
    hands over at once. Before, it walked every ``busy_ms`` while records came (hundreds of walks here)."""
    store = store_factory(mapped_file_size_commit_log=4 << 20)
    builder = store._writer.index_builder
    walks = []
    catch_up = builder.catch_up

    def counted() -> int:
        walks.append(time.monotonic())
        return catch_up()

    builder.catch_up = counted
    time.sleep(0.05)
    t0 = time.monotonic()
    for i in range(300):
        store.put_message(Message(TOPIC, b"p%d" % i))
        time.sleep(0.001)
    window = time.monotonic() - t0
    during = [t for t in walks if t >= t0]
    assert len(during) <= 2 + window * 1000 / builder.FOLLOW_MAX_MS, during
    # the follow itself moved over the keyless records: within its longest pause (and no walk meanwhile)
    time.sleep(2 * builder.idle_max_ms / 1000)
    assert builder.behind() == 0
    assert len([t for t in walks if t >= t0]) <= 2 + (time.monotonic() - t0) * 1000 / builder.FOLLOW_MAX_MS
    keyed = store.put_message(Message(TOPIC, b"k", keys="late-key")).append_message_result.wrote_offset
    deadline = time.monotonic() + 30
    while builder.behind() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert builder.behind() == 0
    index = store._parts.index
    assert index.query_offset(TOPIC, "late-key", 10, 0, 2**62).phy_offsets == [keyed]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
@pytest.mark.parametrize("nice", [10, 0])
def test_the_builder_thread_lowers_its_own_priority(store_factory, nice):
    """``index_build_nice``: the builder's thread alone runs that much nicer (put threads win a busy machine);
    the threads that put keep theirs."""
    store = store_factory(index_build_nice=nice)
    builder = store._writer.index_builder
    deadline = time.monotonic() + 10
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    while builder._thread.native_id is None and time.monotonic() < deadline:
        time.sleep(0.01)
    want = min(19, mine + nice)
    got = None
    while time.monotonic() < deadline:
        got = os.getpriority(os.PRIO_PROCESS, builder._thread.native_id)
        if got == want:
            break
        time.sleep(0.01)
    assert got == want
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
    r = store.put_message(Message(TOPIC, b"k", keys="nice-key")).append_message_result
    assert store._parts.index.query_offset(TOPIC, "nice-key", 4, 0, 2**62).phy_offsets == [r.wrote_offset]
