"""``pystore.read.store_reads.StoreReads`` on its own, over the parts ``pystore.engine.parts.open_parts`` opens (no
                  ``MessageStore``): the readability check, ``get`` and its transfer caps, the queue-offset and time queries,
the look-up by commit-log offset and by key, a reader following a live writer, and the waiting get's
arguments. The same reads through the store, and the compiled fast path, are in test_get_message.py and
test_get_fast_path.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import SMALL_FILE, SMALL_INDEX, make_message

from pystore import StoreConfig
from pystore.engine.parts import StoreParts, open_parts
from pystore.errors import StoreClosedError, StoreError
from pystore.read._read import ReadLimits
from pystore.read.store_reads import StoreReads
from pystore.status import GetMessageStatus
from pystore.system.running_flags import RunningFlags
from pystore.system.service import real_clock

TOPIC = "TopicTest"


class Opened:
    """``StoreReads`` over the parts of the folder at ``root``, readable; closed again by ``close``."""

    def __init__(self, root: str, read_only: bool = False, **overrides: Any) -> None:
        for key, value in SMALL_INDEX.items():
            overrides.setdefault(key, value)
        self.config = StoreConfig(store_path_root_dir=root, read_only=read_only,
                                  mapped_file_size_commit_log=SMALL_FILE, **overrides)
        self.flags = RunningFlags()
        parts, error = open_parts(self.config, last_exit_ok=True, running_flags=self.flags, clock=real_clock,
                                  injected_clock=None)
        assert parts is not None and error is None
        self.parts: StoreParts = parts
        self.reads = StoreReads(self.config, self.flags)
        self.reads.attach(parts)
        self.reads.closed = None

    def close(self) -> None:
        self.reads.closed = "shutdown"
        self.parts.close()


@pytest.fixture
def written(store_factory: Any, fake_clock: Any) -> Iterator[tuple[str, list[Any]]]:
    """A store's folder holding 10 messages of TopicTest/0, each stored 10 ms after the one before; the store
    is shut down. Yields (root, put results)."""
    store = store_factory(clock=fake_clock)
    results = []
    for i in range(10):
        fake_clock.advance(10)
        results.append(store.put_message(make_message(i, keys="key%d" % i)))
    assert all(r.is_ok() for r in results)
    store_factory.expect_messages(10)
    store.shutdown()
    yield store.root, results


@pytest.fixture
def opened(written: tuple[str, list[Any]]) -> Iterator[tuple[StoreReads, list[Any]]]:
    root, results = written
    o = Opened(root)
    try:
        yield o.reads, results
    finally:
        o.close()


def test_closed_until_the_store_says_readable(written):
    root, _ = written
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=SMALL_FILE)
    reads = StoreReads(config, RunningFlags())
    with pytest.raises(StoreClosedError, match="is new"):
        reads.check()
    with pytest.raises(StoreClosedError):
        reads.get_message("g", TOPIC, 0, 0, 32, None, 0)
    o = Opened(root)
    try:
        assert o.reads.check() is o.parts.commitlog
        o.reads.closed = "shutdown"
        for read in (o.reads.check, o.reads.arrivals, lambda: o.reads.get_max_offset_in_queue(TOPIC, 0),
                     lambda: o.reads.look_message_by_offset(0), lambda: o.reads.query_message(TOPIC, "k", 1, 0, 1)):
            with pytest.raises(StoreClosedError, match="is shutdown"):
                read()
    finally:
        o.close()


def test_get_reads_the_queue_with_its_caps(opened):
    reads, results = opened
    r = reads.get_message("g", TOPIC, 0, 0, 32, None, 0)
    assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == 10
    assert [m.queue_offset for m in r.messages] == list(range(10))
    assert [m.commit_log_offset for m in r.messages] == [p.wrote_offset for p in results]

    def two_at_most(limits: ReadLimits) -> ReadLimits:
        return ReadLimits(limits.bytes_in_memory, 2, limits.bytes_in_disk, 2, limits.memory_window, limits.check_crc)
    r = reads.get_message("g", TOPIC, 0, 3, 32, None, 0, two_at_most)
    assert [m.queue_offset for m in r.messages] == [3, 4] and r.next_begin_offset == 5
    assert reads.get_message("g", TOPIC, 0, 10, 32, None, 0).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert reads.get_message("g", TOPIC, 1, 0, 32, None, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE   # unknown queue


def test_get_refuses_bad_arguments_and_a_store_not_readable(opened):
    reads, _ = opened
    with pytest.raises(TypeError):
        reads.get_message("g", TOPIC, 0, "0", 32, None, 0)
    with pytest.raises(TypeError):
        reads.queue(b"TopicTest", 0)
    with pytest.raises(TypeError):
        reads.queue(TOPIC, True)
    assert reads.running_flags.get_and_make_not_readable()
    with pytest.raises(StoreError, match="not readable"):
        reads.get_message("g", TOPIC, 0, 0, 32, None, 0)


def test_queue_queries(opened):
    reads, results = opened
    assert reads.get_max_offset_in_queue(TOPIC, 0) == 10
    assert reads.get_min_offset_in_queue(TOPIC, 0) == 0
    assert reads.get_message_total_in_queue(TOPIC, 0) == 10
    assert reads.get_commit_log_offset_in_queue(TOPIC, 0, 4) == results[4].wrote_offset
    stamps = [p.append_message_result.store_timestamp for p in results]
    assert reads.get_message_store_timestamp(TOPIC, 0, 4) == stamps[4]
    assert reads.get_earliest_message_time(None, None) == stamps[0]
    assert reads.get_earliest_message_time(TOPIC, 0) == stamps[0]
    assert reads.get_offset_in_queue_by_time(TOPIC, 0, stamps[4] - 5, "lower") == 4
    assert reads.get_offset_in_queue_by_time(TOPIC, 0, stamps[4] + 5, "upper") == 4
    with pytest.raises(ValueError, match="boundary"):
        reads.get_offset_in_queue_by_time(TOPIC, 0, stamps[4], "nearest")
    with pytest.raises(TypeError):
        reads.get_earliest_message_time(TOPIC, None)
    # an unknown queue
    assert reads.get_max_offset_in_queue(TOPIC, 7) == 0 and reads.get_message_total_in_queue(TOPIC, 7) == 0
    assert reads.get_commit_log_offset_in_queue(TOPIC, 7, 0) == 0
    assert reads.get_message_store_timestamp(TOPIC, 7, 0) == -1 and reads.get_earliest_message_time(TOPIC, 7) == -1
    assert reads.get_offset_in_queue_by_time(TOPIC, 7, stamps[0], "lower") == 0


def test_look_up_by_commit_log_offset_and_by_key(opened):
    reads, results = opened
    m = reads.look_message_by_offset(results[6].wrote_offset)
    assert m is not None and m.queue_offset == 6
    assert reads.look_message_by_offset(results[6].wrote_offset + 1) is None
    found = reads.query_message(TOPIC, "key6", 32, 0, 2**63 - 1)
    assert [x.queue_offset for x in found.messages] == [6]
    assert reads.query_message(TOPIC, "nokey", 32, 0, 2**63 - 1).messages == []
    with pytest.raises(TypeError):
        reads.query_message(TOPIC, 6, 32, 0, 1)  # type: ignore[arg-type]


def test_without_an_index_a_query_finds_nothing(written):
    root, _ = written
    o = Opened(root, message_index_enable=False)
    try:
        assert o.parts.index is None
        assert o.reads.query_message(TOPIC, "key1", 32, 0, 2**63 - 1).messages == []
    finally:
        o.close()


def test_a_reader_follows_its_writer_as_far_as_the_read_needs(store_factory):
    writer = store_factory()
    first = [writer.put_message(make_message(i)) for i in range(3)]
    o = Opened(writer.root, read_only=True)
    try:
        reads = o.reads
        assert reads.get_max_offset_in_queue(TOPIC, 0) == 3
        later = [writer.put_message(make_message(i)) for i in range(3, 5)]
        other = writer.put_message(make_message(5, topic="Other"))
        # beyond what the reader saw: it follows the queue and the commit log, then reads
        r = reads.get_message("g", TOPIC, 0, 3, 32, None, 0)
        assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [3, 4]
        assert reads.look_message_by_offset(later[-1].wrote_offset) is not None
        # a queue created since the reader opened
        assert [m.commit_log_offset for m in reads.get_message("g", "Other", 0, 0, 32, None, 0).messages] == \
            [other.wrote_offset]
        assert reads.followed().get_max_offset() == writer.get_max_phy_offset()
        assert first[0].wrote_offset == reads.get_commit_log_offset_in_queue(TOPIC, 0, 0)
    finally:
        o.close()
    store_factory.expect_messages(6)


def test_a_waiting_get_checks_its_timeout_and_returns_what_it_found_at_the_end(opened):
    reads, _ = opened
    for bad in (True, 1.5, "10"):
        with pytest.raises(TypeError, match="timeout_ms"):
            reads.get_message("g", TOPIC, 0, 10, 32, None, bad)
    with pytest.raises(ValueError, match="timeout_ms"):
        reads.get_message("g", TOPIC, 0, 10, 32, None, -1)
    # something there: no wait at all
    assert reads.get_message("g", TOPIC, 0, 0, 32, None, 60_000).status is GetMessageStatus.FOUND
    # nothing arrives on a writer's parts no service writes to: the last plain get's answer
    assert reads.get_message("g", TOPIC, 0, 10, 32, None, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    reads.wake_waiters()
