"""Consume queues searched by store time (``pystore.queue._timesearch``): ``pickup_store_timestamp`` of a commit-log
offset, and ``queue_offset_by_time`` against a brute-force reference over a queue whose store times repeat and
that spans several consume-queue and commit-log files. ``get_offset_in_queue_by_time`` through the store (times
between and beyond the stored ones, deleted heads): test_get_message.py, test_consume_queue.py."""

from __future__ import annotations

from conftest import make_message

from pystore.queue._timesearch import pickup_store_timestamp, queue_offset_by_time

T0 = 1_700_000_000_000


def _store(store_factory, fake_clock, n=150):
    """A queue of ``n`` messages stored at times that stay put for runs of up to four messages."""
    fake_clock.set(T0)
    store = store_factory(clock=fake_clock, mapped_file_size_commit_log=8 * 1024,
                          mapped_file_size_consume_queue=16 * 20)
    times = []
    for i in range(n):
        if i % 4 == 0 or i % 7 == 0:
            fake_clock.advance(10)
        r = store.put_message(make_message(i, "TimeTopic", 0, body=b"t%d" % i * 20))
        assert r.is_ok()
        times.append(r.append_message_result.store_timestamp)
    assert times == sorted(times) and len(set(times)) < n
    store_factory.expect_messages(n)
    return store, times


def test_pickup_store_timestamp(store_factory, fake_clock):
    store, times = _store(store_factory, fake_clock, 40)
    cl = store._commitlog.queue
    for i in (0, 17, 39):
        phy = store.get_commit_log_offset_in_queue("TimeTopic", 0, i)
        assert pickup_store_timestamp(cl.files, cl.mapped_file_size, phy) == times[i]
        assert pickup_store_timestamp(cl.files, cl.mapped_file_size, phy + 1) == -1       # not a record
    assert pickup_store_timestamp(cl.files, cl.mapped_file_size, store.get_max_phy_offset()) == -1
    assert pickup_store_timestamp([], cl.mapped_file_size, 0) == -1


def test_queue_offset_by_time_equals_a_brute_force_search(store_factory, fake_clock):
    store, times = _store(store_factory, fake_clock)
    cl = store._commitlog.queue
    cq = store._cq_store.find("TimeTopic", 0)
    assert len(cl.files) > 2
    for t in sorted(set(times)):
        first = times.index(t)
        last = len(times) - 1 - times[::-1].index(t)
        assert queue_offset_by_time(cq.core, cl.files, cl.mapped_file_size, t, True) == first
        assert queue_offset_by_time(cq.core, cl.files, cl.mapped_file_size, t, False) == last
