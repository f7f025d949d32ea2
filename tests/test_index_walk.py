"""The index builder's walk (``pystore.index._index_walk``): its cursor (``IndexCursor``: moved only forward, and
the lock of the index's one writer) and ``follow_log``, the wait between walks that indexes what the newest
commit-log file gained without the GIL (the cursor moved over records without keys; with the index given, the
entries of records with keys written) and hands back to ``index_log`` when there is anything else to do.
``index_log`` itself: test_index_build.py."""

from __future__ import annotations

import threading
import time

from pystore import Message
from pystore.index._index_walk import (
          FOLLOW_STOPPED,
          FOLLOW_TIMEOUT,
          FOLLOW_WORK,
          IndexCursor,
          follow_log,
          index_log,
          log_end,
      )

TOPIC = "TopicTest"
MS = 1_000_000


def test_the_cursor_moves_only_forward():
    c = IndexCursor(100)
    assert c.reached == 100
    assert c.advance(50) == 100 and c.reached == 100
    assert c.advance(400) == 400 and c.reached == 400


def first_index_file(store, q) -> int:
    """Put a keyed message and walk it (``index_log``, as the builder would), which makes the first index file;
    returns where the log ends."""
    start = store.get_max_phy_offset()
    store.put_message(Message(TOPIC, b"first", keys="first"))
    end = store.get_max_phy_offset()
    assert index_log(store._parts.index.core, q.files, q.mapped_file_size, start, end) == end
    assert store._parts.index._files
    return end


def quiet_log(store_factory, **kw):
    """A store whose builder is stopped (nothing moves the cursor but the test) and its commit log."""
    store = store_factory(**kw)
    store._writer.index_builder.shutdown()
    return store, store._commitlog.queue


def test_follow_moves_over_records_without_keys_and_stops_at_one_with_keys(store_factory):
    store, q = quiet_log(store_factory)
    start = store.get_max_phy_offset()
    plain = [store.put_message(Message(TOPIC, b"p%d" % i)).append_message_result for i in range(20)]
    keyed = store.put_message(Message(TOPIC, b"k", keys="key")).append_message_result
    store.put_message(Message(TOPIC, b"after"))
    c = IndexCursor(start)
    assert follow_log(c, q.files, MS, MS, 5000 * MS) == FOLLOW_WORK
    # over the plain records, not past the keyed one: its entries are index_log's to write
    assert c.reached == keyed.wrote_offset == plain[-1].wrote_offset + plain[-1].wrote_bytes


def test_follow_returns_when_its_time_is_up_and_keeps_up_with_the_log(store_factory):
    store, q = quiet_log(store_factory)
    store.put_message(Message(TOPIC, b"first"))         # the log's first file (without one there is nothing to follow)
    c = IndexCursor(store.get_max_phy_offset())
    done = threading.Event()

    def puts():
        for i in range(200):
            store.put_message(Message(TOPIC, b"p%d" % i))
            if i % 20 == 0:
                time.sleep(0.002)
        done.set()

    t = threading.Thread(target=puts)
    t.start()
    assert follow_log(c, q.files, MS // 2, MS // 2, 300 * MS) == FOLLOW_TIMEOUT
    t.join()
    assert done.is_set()
    # the last records may have come after the follow's last look: one more follow takes them
    assert follow_log(c, q.files, MS // 2, MS // 2, 5 * MS) == FOLLOW_TIMEOUT
    assert c.reached == log_end(q.files) == store.get_max_phy_offset()


def test_follow_ends_when_stopped_from_another_thread(store_factory):
    store, q = quiet_log(store_factory)
    store.put_message(Message(TOPIC, b"first"))
    c = IndexCursor(store.get_max_phy_offset())
    got = []
    t = threading.Thread(target=lambda: got.append(follow_log(c, q.files, MS, 5 * MS, 600_000 * MS)))
    t.start()
    time.sleep(0.05)
    c.stop()
    t.join(30)
    assert not t.is_alive() and got == [FOLLOW_STOPPED]
    assert follow_log(c, q.files, MS, MS, 600_000 * MS) == FOLLOW_STOPPED     # stays stopped
    c.resume()
    assert follow_log(c, q.files, MS, MS, 10 * MS) == FOLLOW_TIMEOUT


def test_stop_cuts_a_long_pause_short(store_factory):
    """A follow pausing a minute between looks (a builder told to poll rarely) ends when stopped, not when its
    pause is over: a store's shutdown waited the whole pause before (60 s in a test of the builder)."""
    store, q = quiet_log(store_factory)
    store.put_message(Message(TOPIC, b"first"))
    c = IndexCursor(store.get_max_phy_offset())
    got = []
    t = threading.Thread(target=lambda: got.append(follow_log(c, q.files, 60_000 * MS, 60_000 * MS, 600_000 * MS)))
    t.start()
    time.sleep(0.05)
    c.stop()
    t.join(30)
    assert not t.is_alive() and got == [FOLLOW_STOPPED]


def test_follow_leaves_a_cursor_that_a_walk_moved_further(store_factory):
    """A walk under the builder's lock may move the cursor while the follow scans: the follow's move from
    where it started then fails, and the cursor stays where the walk left it."""
    store, q = quiet_log(store_factory)
    for i in range(5):
        store.put_message(Message(TOPIC, b"p%d" % i))
    end = store.get_max_phy_offset()
    c = IndexCursor(0)
    c.advance(end + 1000)                   # past everything: the newest file does not hold the cursor's place
    assert follow_log(c, q.files, MS, MS, 20 * MS) in (FOLLOW_TIMEOUT, FOLLOW_WORK)
    assert c.reached == end + 1000


def test_follow_hands_over_when_the_cursor_is_in_an_older_file(store_factory):
    store, q = quiet_log(store_factory, mapped_file_size_commit_log=64 * 1024)
    while len(q.files) < 2:
        store.put_message(Message(TOPIC, b"x" * 1000))
    c = IndexCursor(0)
    assert follow_log(c, q.files, MS, MS, 5000 * MS) == FOLLOW_WORK
    assert c.reached == 0
    assert follow_log(c, [], MS, MS, 5000 * MS) == FOLLOW_WORK


def test_follow_writes_the_entries_of_keyed_records_itself(store_factory):
    """With the index given, a keyed record is no reason to hand over: the follow writes its entries into the
    newest index file (without the GIL) and moves on; a lookup finds every key, in put order."""
    store, q = quiet_log(store_factory)
    index = store._parts.index
    walked_to = first_index_file(store, q)
    c = IndexCursor(walked_to)
    start_count = index._files[-1].index_count
    puts = []
    for i in range(50):
        keys = "key-%d" % i if i % 3 else "key-%d other-%d" % (i, i)
        puts.append(store.put_message(Message(TOPIC, b"m%d" % i, keys=keys)).append_message_result)
        store.put_message(Message(TOPIC, b"plain%d" % i))
    assert follow_log(c, q.files, MS // 2, MS // 2, 50 * MS, None, 0, index.core) == FOLLOW_TIMEOUT
    assert c.reached == log_end(q.files) == store.get_max_phy_offset()
    # one entry per key (each KEYS item; these messages have no UNIQ_KEY)
    per_put = [1 if i % 3 else 2 for i in range(50)]
    assert index._files[-1].index_count == start_count + sum(per_put)
    for i, r in enumerate(puts):
        assert index.query_offset(TOPIC, "key-%d" % i, 4, 0, 2**62).phy_offsets == [r.wrote_offset]
        if i % 3 == 0:
            assert index.query_offset(TOPIC, "other-%d" % i, 4, 0, 2**62).phy_offsets == [r.wrote_offset]


def test_follow_goes_on_into_the_next_index_file_when_one_fills(store_factory):
    """A full index file stops the look only to switch files (with the GIL, the one crossing: the spare made
    ahead, else a new file); it goes on where it was, a record's keys spanning two files as in RocketMQ. Every
    key is found; no entry is written twice."""
    store, q = quiet_log(store_factory, max_index_num=16, max_hash_slot_num=8)
    index = store._parts.index
    c = IndexCursor(first_index_file(store, q))
    puts = [store.put_message(Message(TOPIC, b"m%d" % i, keys="a-%d b-%d c-%d" % (i, i, i))).append_message_result
            for i in range(40)]
    assert follow_log(c, q.files, MS // 2, MS // 2, 50 * MS, None, 0, index.core) == FOLLOW_TIMEOUT
    assert c.reached == store.get_max_phy_offset()
    # 1 + 120 entries, 15 a file (entry 0 is never used)
    assert [f.index_count - 1 for f in index._files] == [15] * 8 + [1]
    for i, r in enumerate(puts):
        for k in "abc":
            assert index.query_offset(TOPIC, "%s-%d" % (k, i), 4, 0, 2**62).phy_offsets == [r.wrote_offset]


def test_follow_without_an_index_file_hands_over_at_the_first_keyed_record(store_factory):
    """No index file yet (the walk makes the first one, in Python): the follow moves over the records without
    keys and stops at the first with keys, having written nothing."""
    store, q = quiet_log(store_factory)
    index = store._parts.index
    assert index._files == []
    store.put_message(Message(TOPIC, b"first"))
    c = IndexCursor(store.get_max_phy_offset())
    plain = store.put_message(Message(TOPIC, b"plain")).append_message_result
    keyed = store.put_message(Message(TOPIC, b"k", keys="key")).append_message_result
    assert follow_log(c, q.files, MS, MS, 5000 * MS, None, 0, index.core) == FOLLOW_WORK
    assert c.reached == keyed.wrote_offset == plain.wrote_offset + plain.wrote_bytes
    assert index._files == []


def test_the_cursor_is_the_lock_of_the_index_writer(store_factory):
    """A follow's look waits for the lock a walk or a lookup holds (taken without the GIL, so the follow's
    thread needs none while it waits), and indexes once it is released."""
    store, q = quiet_log(store_factory)
    index = store._parts.index
    c = IndexCursor(first_index_file(store, q))
    r = store.put_message(Message(TOPIC, b"k", keys="held")).append_message_result
    got = []
    with c:
        t = threading.Thread(target=lambda: got.append(follow_log(c, q.files, MS, MS, 30 * MS, None, 0, index.core)))
        t.start()
        time.sleep(0.1)
        assert c.reached == r.wrote_offset          # nothing moved while the lock is held
        assert index.query_offset(TOPIC, "held", 4, 0, 2**62).phy_offsets == []
    t.join(30)
    assert got == [FOLLOW_TIMEOUT]
    assert c.reached == store.get_max_phy_offset()
    assert index.query_offset(TOPIC, "held", 4, 0, 2**62).phy_offsets == [r.wrote_offset]
