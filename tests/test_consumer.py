"""Arrival listeners, long polling (``get_message(..., timeout_ms=N)``) and ``MessageStore.consumer``
(docs/api.md "Consumers"). Waits are tested as behaviour: a get wakes on a put and returns the message, and on a
timeout returns the plain get's status; no assertion on how fast."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest
from writer_procs import WORKTREE

from pystore import GetMessageStatus, Message, MessageBatch, StoreClosedError, StoreError
from pystore.config import BrokerRole, FlushDiskType
from pystore.consumer.consumer import Consumer

FOUND = GetMessageStatus.FOUND


def put_later(store, msg: Message, delay: float = 0.2) -> threading.Thread:
    t = threading.Timer(delay, store.put_message, (msg,))
    t.start()
    return t


# -- listeners ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_listener_arguments(store_factory, flush: FlushDiskType) -> None:
    store = store_factory(flush_disk_type=flush)
    calls = []
    store.add_arriving_listener(lambda *args: calls.append(args))
    r1 = store.put_message(Message("T", b"a", tags="TagA", keys="k1", properties={"p": "v"}, queue_id=2))
    r2 = store.put_message(Message("T", b"b", queue_id=2))
    assert len(calls) == 2
    topic, qid, offset, tags_code, ts, bitmap, props = calls[0]
    assert (topic, qid, offset, bitmap) == ("T", 2, 0, None)
    assert tags_code == store._cq_store.find("T", 2).unit(0)[2] == 2_598_919   # Java's "TagA".hashCode()
    assert ts == r1.append_message_result.store_timestamp
    assert props == {"TAGS": "TagA", "KEYS": "k1", "p": "v"}
    assert calls[1][:3] == ("T", 2, 1) and calls[1][4] == r2.append_message_result.store_timestamp
    assert calls[1][6] == {}


def test_listener_batch_and_removal_and_errors(store_factory, caplog) -> None:
    store = store_factory()
    seen = []

    def bad(*args):
        raise RuntimeError("listener fails")

    def good(*args):
        seen.append(args[2])

    store.add_arriving_listener(bad)
    store.add_arriving_listener(good)
    batch = MessageBatch([Message("T", b"%d" % i) for i in range(3)])
    assert store.put_messages(batch).status.name == "PUT_OK"
    assert seen == [0, 1, 2]
    assert "listener fails" in caplog.text
    store.remove_arriving_listener(good)
    store.remove_arriving_listener(bad)
    store.put_message(Message("T", b"x"))
    assert seen == [0, 1, 2]
    assert store.get_message("g", "T", 0, 0).message_count == 4
    with pytest.raises(ValueError):
        store.remove_arriving_listener(good)
    with pytest.raises(TypeError):
        store.add_arriving_listener(42)


def test_no_hook_without_listeners_or_waiters(store_factory) -> None:
    store = store_factory()
    dispatcher = store._dispatcher
    assert dispatcher.arriving is None
    fn = lambda *a: None  # noqa: E731
    store.add_arriving_listener(fn)
    assert dispatcher.arriving is not None
    store.remove_arriving_listener(fn)
    assert dispatcher.arriving is None


def test_listener_not_called_on_a_slave(store_factory) -> None:
    slave = store_factory("slave", broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:1")
    calls = []
    slave.add_arriving_listener(lambda *a: calls.append(a))
    assert slave._reads.arrivals()._listeners_on is False
    slave._reads.arrivals().arrived("T", 0, 0, 0, 0, b"")
    assert calls == []


def test_read_only_store_refuses_listeners(store_factory) -> None:
    store_factory().put_message(Message("T", b"a"))
    reader = store_factory(read_only=True)
    with pytest.raises(StoreError):
        reader.add_arriving_listener(lambda *a: None)


# -- long polling -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_long_poll_wakes_on_put(store_factory, flush: FlushDiskType) -> None:
    store = store_factory(flush_disk_type=flush)
    store.put_message(Message("T", b"first"))
    t = put_later(store, Message("T", b"second"))
    r = store.get_message("g", "T", 0, 1, timeout_ms=30_000)
    t.join()
    assert r.status is FOUND
    assert [m.body for m in r.messages] == [b"second"]
    assert store._dispatcher.arriving is None                   # the waiter is gone: no hook left


@pytest.mark.parametrize("offset, status", [(1, GetMessageStatus.OFFSET_OVERFLOW_ONE),
                                            (0, GetMessageStatus.NO_MESSAGE_IN_QUEUE)])
def test_long_poll_times_out_with_the_plain_status(store_factory, offset: int, status: GetMessageStatus) -> None:
    store = store_factory()
    topic = "T" if offset else "Empty"
    store.put_message(Message("T", b"first"))
    plain = store.get_message("g", topic, 0, offset)
    start = time.monotonic()
    r = store.get_message("g", topic, 0, offset, timeout_ms=300)
    assert time.monotonic() - start >= 0.29                     # it did wait its timeout
    assert r.status is plain.status is status
    assert r.next_begin_offset == plain.next_begin_offset


def test_long_poll_new_queue_and_other_queue(store_factory) -> None:
    store = store_factory()
    put_later(store, Message("T", b"other", queue_id=1), 0.1)
    put_later(store, Message("T", b"mine", queue_id=5), 0.4).join()
    r = store.get_message("g", "T", 5, 0, timeout_ms=30_000)
    assert [m.body for m in r.messages] == [b"mine"]


def test_long_poll_filter_waits_for_a_match(store_factory) -> None:
    store = store_factory()
    store.put_message(Message("T", b"a", tags="A"))
    put_later(store, Message("T", b"b", tags="B"), 0.1)
    t = put_later(store, Message("T", b"b2", tags="B"), 0.5)
    r = store.get_message("g", "T", 0, 0, message_filter="B", timeout_ms=30_000)
    t.join()
    assert r.status is FOUND and [m.body for m in r.messages] == [b"b"]
    r = store.get_message("g", "T", 0, 0, message_filter="C", timeout_ms=200)
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 3


def test_shutdown_ends_a_waiting_get(store_factory) -> None:
    store = store_factory()
    errors = []

    def wait() -> None:
        try:
            store.get_message("g", "T", 0, 0, timeout_ms=120_000)
        except StoreClosedError as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    store.shutdown()
    t.join(30)
    assert not t.is_alive() and len(errors) == 1


def test_listener_that_puts_into_another_store(store_factory) -> None:
    """A listener may put elsewhere (into the same store from its own thread it would deadlock: documented)."""
    store, other = store_factory("a"), store_factory("b")
    store.add_arriving_listener(lambda topic, qid, off, *rest: other.put_message(Message("Copy", b"%d" % off)))
    for i in range(3):
        store.put_message(Message("T", b"x"))
    assert [m.body for m in other.get_message("g", "Copy", 0, 0).messages] == [b"0", b"1", b"2"]


def test_timeout_zero_and_bad_timeout(store_factory) -> None:
    store = store_factory()
    assert store.get_message("g", "T", 0, 0, timeout_ms=0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    with pytest.raises(ValueError):
        store.get_message("g", "T", 0, 0, timeout_ms=-1)
    with pytest.raises(TypeError):
        store.get_message("g", "T", 0, 0, timeout_ms=1.5)


READER = textwrap.dedent(r"""
    import sys
    from pystore import MessageStore
    reader = MessageStore.open(sys.argv[1], read_only=True)
    print("READY", flush=True)
    r = reader.get_message("g", "T", 0, 1, timeout_ms=60_000)
    print(r.status.name, b",".join(m.body for m in r.messages).decode(), flush=True)
""")


def test_long_poll_on_a_read_only_store_of_a_live_writer(store_factory) -> None:
    writer = store_factory()
    writer.put_message(Message("T", b"first"))
    p = subprocess.Popen([sys.executable, "-c", READER, writer.root], stdout=subprocess.PIPE,
                         env={"PYTHONPATH": str(WORKTREE)}, text=True)
    try:
        assert p.stdout.readline().strip() == "READY"
        time.sleep(0.3)
        writer.put_message(Message("T", b"second"))
        assert p.stdout.readline().split() == ["FOUND", "second"]
    finally:
        p.kill()
        p.wait()


# -- consumer ----------------------------------------------------------------------------------------------------

def test_consumer_poll_commit_and_resume(store_factory) -> None:
    store = store_factory()
    for q in (0, 1):
        for i in range(3):
            store.put_message(Message("T", b"%d-%d" % (q, i), queue_id=q))
    with store.consumer("g", "T", auto_commit=False) as c:
        assert isinstance(c, Consumer)
        got = c.poll()
        assert sorted(m.body for m in got) == sorted(b"%d-%d" % (q, i) for q in (0, 1) for i in range(3))
        assert store.fetch_offset("g", "T", 0) == -1          # not committed yet
        assert c.poll() == []
    assert store.fetch_offset("g", "T", 0) == 3 and store.fetch_offset("g", "T", 1) == 3
    store.put_message(Message("T", b"new", queue_id=1))
    c2 = store.consumer("g", "T")
    assert [m.body for m in c2.poll()] == [b"new"]
    assert store.fetch_offset("g", "T", 1) == 3               # handed out, not processed yet
    assert c2.poll() == []
    assert store.fetch_offset("g", "T", 1) == 4               # auto-committed by the next poll


def test_consumer_waits_and_takes_up_new_queues(store_factory) -> None:
    store = store_factory()
    c = store.consumer("g", "T")
    assert c.poll(50) == []
    put_later(store, Message("T", b"late", queue_id=7))
    start = time.monotonic()
    assert [m.body for m in c.poll(60_000)] == [b"late"]
    assert time.monotonic() - start < 30                        # woken by the put, not by the timeout
    assert c.poll() == []
    assert store.fetch_offset("g", "T", 7) == 1


def test_consumer_queue_ids_and_filter(store_factory) -> None:
    store = store_factory()
    store.put_message(Message("T", b"a0", tags="A", queue_id=0))
    store.put_message(Message("T", b"b0", tags="B", queue_id=0))
    store.put_message(Message("T", b"a1", tags="A", queue_id=1))
    c = store.consumer("g", "T", queue_ids=[0], message_filter="A")
    assert [m.body for m in c.poll()] == [b"a0"]
    assert c.poll() == []
    assert store.fetch_offset("g", "T", 0) == 2 and store.fetch_offset("g", "T", 1) == -1


def test_consumer_iteration_commits_only_what_was_handed_out(store_factory) -> None:
    store = store_factory()
    for i in range(5):
        store.put_message(Message("T", b"%d" % i))
    with store.consumer("g", "T") as c:
        got = []
        for m in c:
            got.append(m.body)
            if len(got) == 2:
                break
    assert got == [b"0", b"1"]
    assert store.fetch_offset("g", "T", 0) == 2
    it = iter(store.consumer("g", "T"))
    put_later(store, Message("T", b"5"))
    assert [next(it).body for _ in range(4)] == [b"2", b"3", b"4", b"5"]


def test_consumer_starts_at_min_offset_when_never_committed(store_factory) -> None:
    store = store_factory()
    store.put_message(Message("T", b"a"))
    c = store.consumer("g", "T")
    assert c.positions == {0: store.get_min_offset_in_queue("T", 0)}


def test_consumer_of_a_read_only_store(store_factory) -> None:
    writer = store_factory()
    for i in range(3):
        writer.put_message(Message("T", b"%d" % i))
    writer.commit_offset("g", "T", 0, 1)
    writer.shutdown()
    reader = store_factory(read_only=True)
    with pytest.raises(StoreError):
        reader.consumer("g", "T")
    c = reader.consumer("g", "T", auto_commit=False)
    assert [m.body for m in c.poll()] == [b"1", b"2"]
    with pytest.raises(StoreError):
        c.commit()
