"""The index builder's walk (``pystore.index._index_walk``): its cursor (``IndexCursor``: moved only forward, by a
      walk's ``advance`` or the follow's compare-and-swap) and ``follow_keyless``, the wait between walks that moves
the cursor over records without keys without the GIL and hands back to ``index_log`` when there is anything
else to do. ``index_log`` itself: test_index_build.py."""

from __future__ import annotations

import threading
import time

from pystore import Message
from pystore.index._index_walk import (
          FOLLOW_STOPPED,
          FOLLOW_TIMEOUT,
          FOLLOW_WORK,
          IndexCursor,
          follow_keyless,
          log_end,
      )

TOPIC = "TopicTest"
MS = 1_000_000


def test_the_cursor_moves_only_forward():
    c = IndexCursor(100)
    assert c.reached == 100
    assert c.advance(50) == 100 and c.reached == 100
    assert c.advance(400) == 400 and c.reached == 400


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
    assert follow_keyless(c, q.files, MS, MS, 5000 * MS) == FOLLOW_WORK
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
    assert follow_keyless(c, q.files, MS // 2, MS // 2, 300 * MS) == FOLLOW_TIMEOUT
    t.join()
    assert done.is_set()
    # the last records may have come after the follow's last look: one more follow takes them
    assert follow_keyless(c, q.files, MS // 2, MS // 2, 5 * MS) == FOLLOW_TIMEOUT
    assert c.reached == log_end(q.files) == store.get_max_phy_offset()


def test_follow_ends_when_stopped_from_another_thread(store_factory):
    store, q = quiet_log(store_factory)
    store.put_message(Message(TOPIC, b"first"))
    c = IndexCursor(store.get_max_phy_offset())
    got = []
    t = threading.Thread(target=lambda: got.append(follow_keyless(c, q.files, MS, 5 * MS, 600_000 * MS)))
    t.start()
    time.sleep(0.05)
    c.stop()
    t.join(30)
    assert not t.is_alive() and got == [FOLLOW_STOPPED]
    assert follow_keyless(c, q.files, MS, MS, 600_000 * MS) == FOLLOW_STOPPED     # stays stopped
    c.resume()
    assert follow_keyless(c, q.files, MS, MS, 10 * MS) == FOLLOW_TIMEOUT


def test_follow_leaves_a_cursor_that_a_walk_moved_further(store_factory):
    """A walk under the builder's lock may move the cursor while the follow scans: the follow's move from
    where it started then fails, and the cursor stays where the walk left it."""
    store, q = quiet_log(store_factory)
    for i in range(5):
        store.put_message(Message(TOPIC, b"p%d" % i))
    end = store.get_max_phy_offset()
    c = IndexCursor(0)
    c.advance(end + 1000)                   # past everything: the newest file does not hold the cursor's place
    assert follow_keyless(c, q.files, MS, MS, 20 * MS) in (FOLLOW_TIMEOUT, FOLLOW_WORK)
    assert c.reached == end + 1000


def test_follow_hands_over_when_the_cursor_is_in_an_older_file(store_factory):
    store, q = quiet_log(store_factory, mapped_file_size_commit_log=64 * 1024)
    while len(q.files) < 2:
        store.put_message(Message(TOPIC, b"x" * 1000))
    c = IndexCursor(0)
    assert follow_keyless(c, q.files, MS, MS, 5000 * MS) == FOLLOW_WORK
    assert c.reached == 0
    assert follow_keyless(c, [], MS, MS, 5000 * MS) == FOLLOW_WORK
