"""The read API by queue (docs/format.md §11; docs/api.md "Reading"), mirroring RocketMQ's ``DefaultMessageStoreTest``
read cases: write-and-read, pull sizes, every ``GetMessageStatus`` with its next offset, the transfer caps,
tag filters and the two-method filter protocol, the time search (exact, 2 ms and 20 s skew, missing queue,
``lower``/``upper`` and out-of-range times), store timestamps and the other per-queue reads."""

from __future__ import annotations

import os
import time

import pytest
from conftest import BORN_BASE, SMALL_FILE, drop_commit_log_head, make_message
from reference_codec import java_hash

from pystore import GetMessageStatus, Message, MessageBatch, TagFilter
from pystore.errors import StoreClosedError, StoreError

TOPIC = "TopicTest"
GROUP = "GROUP_A"
CQ_UNITS = 16                      # small consume-queue files: 16 units each
CQ_FILE = CQ_UNITS * 20




def put_n(store, n, start=0, clock=None, step=1, **kw):
    """Put ``n`` messages numbered ``start..``; with ``clock``, advance it ``step`` ms before each put.
    Returns the put results."""
    out = []
    for i in range(start, start + n):
        if clock is not None:
            clock.advance(step)
        r = store.put_message(make_message(i, **kw))
        assert r.is_ok(), r
        out.append(r)
    return out


def bodies(result):
    return [m.body for m in result.messages]


# ------------------------------------------------------------------------------------------------------
# write and read
# ------------------------------------------------------------------------------------------------------


def test_write_and_read_ipv4_and_ipv6_hosts(store_factory):
    """``testWriteAndRead``: 10 messages born on IPv4 and 10 on IPv6 hosts, each readable at its offset."""
    store = store_factory()
    for i in range(10):
        assert store.put_message(make_message(i)).is_ok()
    for i in range(10, 20):
        assert store.put_message(make_message(i, born_host=("::1", 50000 + i))).is_ok()
    store_factory.expect_messages(20)
    for i in range(20):
        r = store.get_message(GROUP, TOPIC, 0, i, 1)
        assert r.status is GetMessageStatus.FOUND
        assert r.message_count == 1 and r.next_begin_offset == i + 1
        m = r.messages[0]
        assert m.body == b"Hello RocketMQ %d" % i and m.queue_offset == i and m.queue_id == 0
        assert m.born_host == (("127.0.0.1", 50000) if i < 10 else ("::1", 50000 + i))
        assert m.tags == "TagA" and m.keys == ["key%d" % i]
        assert (r.min_offset, r.max_offset) == (0, 20)
        assert r.buffer_total_size == m.store_size


def test_read_returns_every_field_as_stored(store_factory):
    store = store_factory()
    msg = Message(TOPIC, b"payload", tags="T1", keys=["k1", "k2"], flag=7, properties={"a": "1"}, queue_id=3,
                  born_timestamp=BORN_BASE, born_host=("10.0.0.1", 1234), reconsume_times=2)
    r = store.put_message(msg)
    a = r.append_message_result
    g = store.get_message(GROUP, TOPIC, 3, 0)
    assert g.status is GetMessageStatus.FOUND
    (m,) = g.messages
    assert (m.topic, m.body, m.tags, m.keys, m.flag, m.queue_id, m.queue_offset) == (
        TOPIC, b"payload", "T1", ["k1", "k2"], 7, 3, 0)
    assert m.properties["a"] == "1"
    assert m.commit_log_offset == a.wrote_offset and m.store_size == a.wrote_bytes
    assert m.store_timestamp == a.store_timestamp and m.msg_id == a.msg_id
    assert m.born_host == ("10.0.0.1", 1234) and m.reconsume_times == 2 and m.born_timestamp == BORN_BASE


@pytest.mark.parametrize("nums", [32, 20, 10])
def test_pull_size(store_factory, nums):
    """``testPullSize``: 32 messages, a pull of 32/20/10 returns exactly that many."""
    store = store_factory()
    put_n(store, 32)
    r = store.get_message(GROUP, TOPIC, 0, 0, nums)
    assert r.status is GetMessageStatus.FOUND
    assert r.message_count == nums and r.next_begin_offset == nums
    assert bodies(r) == [b"Hello RocketMQ %d" % i for i in range(nums)]
    assert r.buffer_total_size == sum(m.store_size for m in r.messages)


def test_paging_reads_every_message_once(store_factory):
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE)
    put_n(store, 100)
    got, off = [], 0
    while True:
        r = store.get_message(GROUP, TOPIC, 0, off, 7)
        if r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
            break
        assert r.status is GetMessageStatus.FOUND
        got += [m.queue_offset for m in r.messages]
        off = r.next_begin_offset
    assert got == list(range(100)) and off == 100


def test_max_msg_nums_zero_or_negative_still_returns_one(store_factory):
    """RocketMQ accepts the first message whatever the limits (``isTheBatchFull`` is false when empty)."""
    store = store_factory()
    put_n(store, 3)
    for n in (0, -5):
        r = store.get_message(GROUP, TOPIC, 0, 0, n)
        assert r.status is GetMessageStatus.FOUND and r.message_count == 1 and r.next_begin_offset == 1


def test_a_scan_never_crosses_a_consume_queue_file(store_factory):
    """4.8: the buffer taken at ``offset`` ends at its consume-queue file's end."""
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE)
    put_n(store, 40)
    r = store.get_message(GROUP, TOPIC, 0, CQ_UNITS - 3, 32)
    assert r.status is GetMessageStatus.FOUND
    assert [m.queue_offset for m in r.messages] == [13, 14, 15]
    assert r.next_begin_offset == CQ_UNITS
    r = store.get_message(GROUP, TOPIC, 0, CQ_UNITS, 32)
    assert [m.queue_offset for m in r.messages] == list(range(16, 32)) and r.next_begin_offset == 32


def test_batch_messages_have_consecutive_queue_offsets(store_factory):
    store = store_factory()
    put_n(store, 2)
    batch = MessageBatch([make_message(i) for i in range(2, 12)])
    r = store.put_messages(batch)
    assert r.is_ok() and r.append_message_result.logics_offset == 2
    g = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert [m.queue_offset for m in g.messages] == list(range(12))
    assert bodies(g) == [b"Hello RocketMQ %d" % i for i in range(12)]
    assert len({m.store_timestamp for m in g.messages[2:]}) == 1


def test_queues_are_independent(store_factory):
    store = store_factory()
    for i in range(30):
        assert store.put_message(make_message(i, topic="T%d" % (i % 2), queue_id=i % 3)).is_ok()
    for t in range(2):
        for q in range(3):
            want = [i for i in range(30) if i % 2 == t and i % 3 == q]
            r = store.get_message(GROUP, "T%d" % t, q, 0, 32)
            assert bodies(r) == [b"Hello RocketMQ %d" % i for i in want]
            assert r.max_offset == len(want) and store.get_max_offset_in_queue("T%d" % t, q) == len(want)
    assert store.get_topic_queue_table() == {("T%d" % t, q): 5 for t in range(2) for q in range(3)}


# ------------------------------------------------------------------------------------------------------
# statuses and next offsets (docs/format.md §11.1, docs/api.md "Settled details")
# ------------------------------------------------------------------------------------------------------


def test_status_unknown_queue_is_no_message_in_queue(store_factory):
    store = store_factory()
    put_n(store, 3)
    for topic, qid, off in ((TOPIC, 1, 0), ("Nope", 0, 0), ("Nope", 0, 17)):
        r = store.get_message(GROUP, topic, qid, off)
        assert r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
        assert (r.next_begin_offset, r.min_offset, r.max_offset, r.message_count) == (0, 0, 0, 0)


def test_status_empty_store(store_factory):
    store = store_factory()
    r = store.get_message(GROUP, TOPIC, 0, 0)
    assert r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE and r.next_begin_offset == 0


def test_status_overflow_one_and_badly(store_factory):
    store = store_factory()
    put_n(store, 5)
    r = store.get_message(GROUP, TOPIC, 0, 5)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert (r.next_begin_offset, r.min_offset, r.max_offset, r.message_count) == (5, 0, 5, 0)
    r = store.get_message(GROUP, TOPIC, 0, 6)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 5
    r = store.get_message(GROUP, TOPIC, 0, 10**12)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 5


def test_status_offset_too_small_for_a_negative_offset(store_factory):
    store = store_factory()
    put_n(store, 5)
    r = store.get_message(GROUP, TOPIC, 0, -1)
    assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == 0


def _store_with_head_deleted(store_factory, n=800, clock=None):
    """A store whose first commit-log file was deleted while it was down: reopened, the queue's min offset
    is corrected (``correctMinOffset``) to the first message that still exists."""
    kw = {} if clock is None else {"clock": clock}
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE, **kw)
    results = put_n(store, n, clock=clock)
    store.shutdown()
    first = os.path.join(store.root, "commitlog", "%020d" % 0)
    os.unlink(first)
    store_factory.skip_check()
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE, **kw)
    survivors = [i for i, r in enumerate(results) if r.append_message_result.wrote_offset >= SMALL_FILE]
    return store, results, survivors


def test_status_offset_too_small_after_the_commit_log_head_was_deleted(store_factory):
    store, results, survivors = _store_with_head_deleted(store_factory)
    low = survivors[0]
    assert low > 0
    assert store.get_min_offset_in_queue(TOPIC, 0) == low
    assert store.get_max_offset_in_queue(TOPIC, 0) == 800
    r = store.get_message(GROUP, TOPIC, 0, 0)
    assert r.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert (r.next_begin_offset, r.min_offset, r.max_offset) == (low, low, 800)
    r = store.get_message(GROUP, TOPIC, 0, low, 4)
    assert r.status is GetMessageStatus.FOUND
    assert [m.queue_offset for m in r.messages] == list(range(low, low + 4))
    assert store.get_earliest_message_time(TOPIC, 0) == results[low].append_message_result.store_timestamp
    assert store.get_earliest_message_time() == results[low].append_message_result.store_timestamp
    assert store.get_message_store_timestamp(TOPIC, 0, low - 1) == -1
    assert store.get_min_phy_offset() == SMALL_FILE


def test_status_message_was_removing(store_factory):
    """Units whose commit-log file is gone while the queue's min offset is not corrected yet: nothing found
    in the scanned units ⇒ MESSAGE_WAS_REMOVING, the units are consumed."""
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE)
    results = put_n(store, 800)
    n0 = sum(1 for r in results if r.append_message_result.wrote_offset < SMALL_FILE)
    assert n0 > 2 * CQ_UNITS
    drop_commit_log_head(store)
    store_factory.skip_check()
    r = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert r.status is GetMessageStatus.MESSAGE_WAS_REMOVING
    assert r.message_count == 0 and r.next_begin_offset == CQ_UNITS
    assert (r.min_offset, r.max_offset) == (0, 800)
    r = store.get_message(GROUP, TOPIC, 0, CQ_UNITS + 3, 32)
    assert r.status is GetMessageStatus.MESSAGE_WAS_REMOVING and r.next_begin_offset == 2 * CQ_UNITS
    assert store.get_message_store_timestamp(TOPIC, 0, 3) == -1


def test_message_was_removing_then_found_in_one_scan(store_factory):
    """A scan that starts in deleted data and reaches live data returns what it found (status FOUND)."""
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE * 100)
    results = put_n(store, 800)
    n0 = sum(1 for r in results if r.append_message_result.wrote_offset < SMALL_FILE)
    drop_commit_log_head(store)
    store_factory.skip_check()
    r = store.get_message(GROUP, TOPIC, 0, n0 - 2, 5)
    assert r.status is GetMessageStatus.FOUND
    assert [m.queue_offset for m in r.messages] == list(range(n0, n0 + 5))
    assert r.next_begin_offset == n0 + 5


@pytest.mark.no_verify      # its queue's first file is deleted by hand: damage a later open reports
def test_status_offset_found_null(store_factory):
    """The consume-queue file holding ``offset`` is gone while the min offset still covers it."""
    store = store_factory(mapped_file_size_consume_queue=CQ_FILE)
    put_n(store, 40)
    cq = store._cq_store.find(TOPIC, 0)
    first = cq.queue.first()
    while not first.destroy(0, store.clock()):
        time.sleep(0.01)
    cq.queue._remove([first])                  # min_logic_offset still 0: the state between two steps
    r = store.get_message(GROUP, TOPIC, 0, 3)
    assert r.status is GetMessageStatus.OFFSET_FOUND_NULL
    assert r.next_begin_offset == CQ_UNITS      # rollNextFile(offset)
    assert (r.min_offset, r.max_offset) == (0, 40)
    r = store.get_message(GROUP, TOPIC, 0, CQ_UNITS, 2)
    assert r.status is GetMessageStatus.FOUND and [m.queue_offset for m in r.messages] == [16, 17]


def test_status_no_matched_message_consumes_the_filtered_units(store_factory):
    store = store_factory()
    put_n(store, 10, tags="TagB")
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, TagFilter("TagA"))
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert r.message_count == 0 and r.next_begin_offset == 10


def test_filter_scan_stops_after_16000_bytes_of_units(store_factory):
    """4.8: at most ``max(16000, maxMsgNums*20)`` bytes of units (800 units) are looked at per call."""
    store = store_factory(mapped_file_size_commit_log=1 << 20)
    store.put_messages(MessageBatch([make_message(i, tags="TagB") for i in range(1000)]))
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, TagFilter("TagA"))
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 800
    r = store.get_message(GROUP, TOPIC, 0, 0, 1000, TagFilter("TagA"))
    assert r.next_begin_offset == 1000


def test_not_readable_raises_and_closed_store_raises(store_factory):
    """Never None (docs/api.md types it GetMessageResult): not readable is a StoreError, shut down StoreClosedError."""
    store = store_factory()
    put_n(store, 2)
    store.running_flags.get_and_make_not_readable()
    with pytest.raises(StoreError, match="not readable") as ei:
        store.get_message(GROUP, TOPIC, 0, 0)
    assert not isinstance(ei.value, StoreClosedError) and store.root in str(ei.value)
    store.running_flags.get_and_make_readable()
    assert store.get_message(GROUP, TOPIC, 0, 0).status is GetMessageStatus.FOUND
    store.shutdown()
    with pytest.raises(StoreClosedError):
        store.get_message(GROUP, TOPIC, 0, 0)


def test_argument_types(store_factory):
    store = store_factory()
    put_n(store, 1)
    with pytest.raises(TypeError):
        store.get_message(GROUP, TOPIC, "0", 0)
    with pytest.raises(TypeError):
        store.get_message(GROUP, TOPIC, 0, "0")
    with pytest.raises(TypeError):
        store.get_message(GROUP, TOPIC, 0, 0, 32, object())


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
def test_offsets_are_integers(store_factory, read_only):
    """A float offset was truncated (``get_commit_log_data(1.5)`` served offset 1, the queue reads read unit 1)
    or compared as no record's start (``look_message_by_offset(1.5)`` None): each raises ``TypeError`` now, as
    ``get_message`` does; an integer of another type (numpy's, from ``queue_units``) still reads as its value."""
    np = pytest.importorskip("numpy")
    writer = store_factory()
    phys = [r.append_message_result.wrote_offset for r in put_n(writer, 3)]
    store = store_factory(read_only=True) if read_only else writer
    second = float(phys[1])
    reads = [store.look_message_by_offset, store.get_commit_log_data,
             lambda v: store.get_commit_log_offset_in_queue(TOPIC, 0, v),
             lambda v: store.get_message_store_timestamp(TOPIC, 0, v)]
    for read in reads:
        for bad in (1.5, 1.0, second, second + 0.5, "1"):
            with pytest.raises(TypeError, match="must be an int"):
                read(bad)
    assert store.look_message_by_offset(np.int64(phys[1])).commit_log_offset == phys[1]
    assert store.look_message_by_offset(True) is None          # a bool is the int Python says it is
    with store.get_commit_log_data(np.int64(phys[1])) as view:
        assert view.start_offset == phys[1]
    assert store.get_commit_log_offset_in_queue(TOPIC, 0, np.int64(1)) == phys[1]
    assert store.get_message_store_timestamp(TOPIC, 0, np.int64(1)) == store.look_message_by_offset(
        phys[1]).store_timestamp
    store_factory.expect_messages(3)


# ------------------------------------------------------------------------------------------------------
# transfer caps (isTheBatchFull)
# ------------------------------------------------------------------------------------------------------


def test_transfer_count_cap(store_factory):
    store = store_factory(max_transfer_count_on_message_in_memory=5)
    put_n(store, 20)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert r.status is GetMessageStatus.FOUND
    assert r.message_count == 5 and r.next_begin_offset == 5


def test_transfer_bytes_cap(store_factory):
    store = store_factory()
    rs = put_n(store, 20, body_size=100)
    size = rs[0].append_message_result.wrote_bytes
    store.shutdown()
    store = store_factory(max_transfer_bytes_on_message_in_memory=3 * size + size // 2)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert r.message_count == 3 and r.next_begin_offset == 3 and r.buffer_total_size == 3 * size
    store.shutdown()
    store = store_factory(max_transfer_bytes_on_message_in_memory=3 * size)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert r.message_count == 3                    # bytes + next > cap: exactly 3 fit
    store.shutdown()
    store = store_factory(max_transfer_bytes_on_message_in_memory=1)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32)
    assert r.message_count == 1 and r.next_begin_offset == 1   # the first message is always accepted
    store_factory.expect_messages(20)


# ------------------------------------------------------------------------------------------------------
# filters
# ------------------------------------------------------------------------------------------------------


def _tagged_store(store_factory):
    store = store_factory()
    tags = ["TagA", "TagB", "TagC", None, "TagA", "Aa", "BB", "TagB"]
    for i, t in enumerate(tags):
        assert store.put_message(make_message(i, tags=t)).is_ok()
    return store, tags


@pytest.mark.parametrize("expr, want", [
    ("TagA", {"TagA"}),
    ("TagA || TagB", {"TagA", "TagB"}),
    (" TagC ||TagA ", {"TagA", "TagC"}),
    (["TagB", "TagC"], {"TagB", "TagC"}),
    (("Aa",), {"Aa"}),
    ("BB", {"BB"}),
    ("Missing", set()),
])
def test_tag_filter(store_factory, expr, want):
    store, tags = _tagged_store(store_factory)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, TagFilter(expr))
    expect = [i for i, t in enumerate(tags) if t in want]
    assert [m.queue_offset for m in r.messages] == expect
    assert r.status is (GetMessageStatus.FOUND if expect else GetMessageStatus.NO_MATCHED_MESSAGE)
    assert r.next_begin_offset == len(tags)


@pytest.mark.parametrize("expr", [None, "", "*", " * ", [], "TagA || *"])
def test_tag_filter_match_all(store_factory, expr):
    store, tags = _tagged_store(store_factory)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, TagFilter(expr))
    assert [m.queue_offset for m in r.messages] == list(range(len(tags)))


def test_tag_filter_as_a_string_argument(store_factory):
    store, tags = _tagged_store(store_factory)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, "TagC || BB")
    assert [m.tags for m in r.messages] == ["TagC", "BB"]


def test_tag_filter_hash_collision_is_resolved_by_the_commit_log_check():
    """``Aa`` and ``BB`` share Java hash 2112: the consume-queue test passes both, the tag string decides."""
    assert java_hash("Aa") == java_hash("BB") == 2112
    f = TagFilter("Aa")
    assert f.is_matched_by_consume_queue(2112)
    assert not f.is_matched_by_consume_queue(java_hash("TagA"))


class RecordingFilter:
    """The two-method protocol: consume-queue test on the tags code, then a test on the message."""

    def __init__(self, cq_ok, cl_ok):
        self.cq_ok, self.cl_ok = cq_ok, cl_ok
        self.codes, self.msgs = [], []

    def is_matched_by_consume_queue(self, tags_code):
        self.codes.append(tags_code)
        return self.cq_ok(tags_code)

    def is_matched_by_commit_log(self, msg):
        self.msgs.append(msg.queue_offset)
        return self.cl_ok(msg)


def test_filter_protocol(store_factory):
    store, tags = _tagged_store(store_factory)
    codes = [java_hash(t) if t else 0 for t in tags]
    f = RecordingFilter(lambda c: c != java_hash("TagC"), lambda m: m.queue_offset % 2 == 0)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, f)
    assert f.codes == codes                                  # every unit's tags code, sign-extended ints
    assert f.msgs == [i for i, t in enumerate(tags) if t != "TagC"]
    assert [m.queue_offset for m in r.messages] == [0, 4, 6]
    assert r.status is GetMessageStatus.FOUND and r.next_begin_offset == len(tags)


def test_filter_protocol_nothing_matches_in_the_commit_log(store_factory):
    store, tags = _tagged_store(store_factory)
    f = RecordingFilter(lambda c: True, lambda m: False)
    r = store.get_message(GROUP, TOPIC, 0, 0, 32, f)
    assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == len(tags)
    assert f.msgs == list(range(len(tags)))


def test_filter_exception_propagates(store_factory):
    store, _ = _tagged_store(store_factory)

    class Boom:
        def is_matched_by_consume_queue(self, code):
            raise RuntimeError("boom")

        def is_matched_by_commit_log(self, msg):
            return True

    with pytest.raises(RuntimeError):
        store.get_message(GROUP, TOPIC, 0, 0, 32, Boom())
    assert store.get_message(GROUP, TOPIC, 0, 0, 32).message_count == 8


def test_filtered_units_count_against_the_batch_but_not_the_message_count(store_factory):
    """``nextBeginOffset`` moves over filtered units; the batch-full unit is not consumed."""
    store = store_factory()
    for i in range(40):
        assert store.put_message(make_message(i, tags="TagA" if i % 4 == 0 else "TagB")).is_ok()
    r = store.get_message(GROUP, TOPIC, 0, 0, 3, TagFilter("TagA"))
    assert [m.queue_offset for m in r.messages] == [0, 4, 8]
    # the scan stopped at the next unit that would be a 4th message's candidate (offset 9: TagB is
    # filtered after the batch-full check, so the check trips at 9)
    assert r.next_begin_offset == 9


# ------------------------------------------------------------------------------------------------------
# offsets, times
# ------------------------------------------------------------------------------------------------------


def test_store_timestamps_equal_the_put_results(store_factory):
    """``testGetMessageStoreTimeStamp``."""
    store = store_factory()
    rs = put_n(store, 10)
    for i, r in enumerate(rs):
        a = r.append_message_result
        assert store.get_message_store_timestamp(TOPIC, 0, i) == a.store_timestamp
        assert store.get_commit_log_offset_in_queue(TOPIC, 0, i) == a.wrote_offset
    assert store.get_message_store_timestamp(TOPIC, 0, 10) == -1         # ConsumeQueueOffsetNotExist
    assert store.get_message_store_timestamp(TOPIC, 0, -1) == -1
    assert store.get_message_store_timestamp("Nope", 0, 0) == -1           # ConsumeQueueNotFound2
    assert store.get_commit_log_offset_in_queue(TOPIC, 0, 10) == 0
    assert store.get_commit_log_offset_in_queue("Nope", 1, 0) == 0


def test_min_max_offsets_and_earliest_time(store_factory, fake_clock):
    store = store_factory(clock=fake_clock)
    assert store.get_earliest_message_time() == -1
    assert store.get_earliest_message_time(TOPIC, 0) == -1
    assert store.get_max_offset_in_queue(TOPIC, 0) == 0 and store.get_min_offset_in_queue(TOPIC, 0) == 0
    rs = put_n(store, 5, clock=fake_clock, step=10)
    assert store.get_earliest_message_time() == rs[0].append_message_result.store_timestamp
    assert store.get_earliest_message_time(TOPIC, 0) == rs[0].append_message_result.store_timestamp
    assert store.get_max_offset_in_queue(TOPIC, 0) == 5
    assert store.get_min_offset_in_queue(TOPIC, 0) == 0
    assert store.get_message_total_in_queue(TOPIC, 0) == 5
    assert store.get_topic_queue_table() == {(TOPIC, 0): 5}


@pytest.fixture
def timed_store(store_factory, fake_clock):
    """10 messages stored 1 s apart (fake clock), store times known."""
    store = store_factory(clock=fake_clock)
    rs = put_n(store, 10, clock=fake_clock, step=1000)
    return store, [r.append_message_result.store_timestamp for r in rs]


def test_offset_by_time_exact(timed_store):
    """``testGetOffsetInQueueByTime``: a message's own store time finds it, both boundaries."""
    store, ts = timed_store
    for i, t in enumerate(ts):
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t) == i
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t, boundary="upper") == i


def test_offset_by_time_skewing(timed_store):
    """``…_TimestampIsSkewing``: 2 ms before a message's time still finds it (lower bound); upper gives the
    message before."""
    store, ts = timed_store
    for i, t in enumerate(ts):
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t - 2) == i
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t + 2, boundary="upper") == i
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t - 2, boundary="upper") == max(i - 1, 0)


def test_offset_by_time_skewing_is_large(timed_store):
    """``…_TimestampSkewingIsLarge``: 20 s before the first message ⇒ the first offset; after the last ⇒
    LOWER gives the max offset (nothing at or after), UPPER the last offset."""
    store, ts = timed_store
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[0] - 20_000) == 0
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[0] - 20_000, boundary="upper") == 0
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[-1] + 20_000) == 10
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[-1] + 20_000, boundary="upper") == 9
    assert store.get_offset_in_queue_by_time(TOPIC, 0, 0) == 0
    assert store.get_offset_in_queue_by_time(TOPIC, 0, 2**63 - 1) == 10
    assert store.get_offset_in_queue_by_time(TOPIC, 0, -(2**63)) == 0


def test_offset_by_time_consume_queue_not_found(timed_store):
    """``…_ConsumeQueueNotFound1``: 0."""
    store, ts = timed_store
    assert store.get_offset_in_queue_by_time("Nope", 0, ts[3]) == 0
    assert store.get_offset_in_queue_by_time(TOPIC, 5, ts[3], boundary="upper") == 0


def test_offset_by_time_bad_boundary(timed_store):
    store, ts = timed_store
    with pytest.raises(ValueError):
        store.get_offset_in_queue_by_time(TOPIC, 0, ts[0], boundary="LOWER")


def test_offset_by_time_duplicated_timestamps_walk_to_the_boundary(store_factory, fake_clock):
    """5.x: equal store times are walked to the boundary (LOWER: first of them, UPPER: last)."""
    store = store_factory(clock=fake_clock, mapped_file_size_consume_queue=CQ_FILE)
    groups = [1, 7, 3, 20, 1, 5]                 # messages per store time, spanning consume-queue files
    first, i = [], 0
    for n in groups:
        fake_clock.advance(100)
        first.append(i)
        put_n(store, n, start=i)
        i += n
    t0 = fake_clock() - 100 * (len(groups) - 1)
    for g, n in enumerate(groups):
        t = t0 + 100 * g
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t) == first[g]
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t, boundary="upper") == first[g] + n - 1
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t + 50) == first[g] + n
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t + 50, boundary="upper") == first[g] + n - 1


def test_offset_by_time_after_the_commit_log_head_was_deleted(store_factory, fake_clock):
    """Only offsets whose message still exists are candidates: times before the new min give the min."""
    store, results, survivors = _store_with_head_deleted(store_factory, clock=fake_clock)
    low = survivors[0]
    ts = [r.append_message_result.store_timestamp for r in results]
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[0] - 1) == low
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[low]) == low
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[-1]) == ts.index(ts[-1])


def test_reads_of_a_closed_store_raise(store_factory):
    store = store_factory()
    put_n(store, 1)
    store.shutdown()
    for call in (lambda: store.get_max_offset_in_queue(TOPIC, 0),
                 lambda: store.get_min_offset_in_queue(TOPIC, 0),
                 lambda: store.get_offset_in_queue_by_time(TOPIC, 0, 0),
                 lambda: store.get_message_store_timestamp(TOPIC, 0, 0),
                 lambda: store.get_commit_log_offset_in_queue(TOPIC, 0, 0),
                 lambda: store.get_earliest_message_time(),
                 lambda: store.get_topic_queue_table(),
                 lambda: store.dispatch_behind_bytes()):
        with pytest.raises(StoreClosedError):
            call()


def _brute_by_time(ts, low, t, lower):
    """docs/format.md §2.6 (5.x) over the store times ``ts`` of offsets ``low..``: LOWER the first offset stored at
    or after ``t`` (the end when none is), UPPER the last stored at or before it (0 when none is)."""
    import bisect
    if lower:
        return low + bisect.bisect_left(ts[low:], t)
    k = low + bisect.bisect_right(ts[low:], t)
    return k - 1 if k > low else 0


def test_offset_by_time_on_a_long_queue_matches_a_brute_force(store_factory, fake_clock):
    """Thousands of units (the search goes through the queue's time samples): every boundary, duplicated
    times across sample windows, times between, before and after, equal to a brute force."""
    import random

    store = store_factory(clock=fake_clock, mapped_file_size_commit_log=1 << 20)
    rng = random.Random(5)
    ts = []
    i = 0
    while i < 6000:
        fake_clock.advance(rng.choice([1, 1, 2, 7, 100]))
        k = rng.choice([1, 3, 40, 300])
        r = store.put_messages(MessageBatch([make_message(j) for j in range(i, i + k)]))
        assert r.is_ok()
        ts += [r.append_message_result.store_timestamp] * k
        i += k
    probes = sorted(set(ts)) + [t + d for t in rng.sample(ts, 300) for d in (-1, 1)]
    probes += [ts[0] - 99, ts[-1] + 99]
    for t in probes:
        for lower, b in ((True, "lower"), (False, "upper")):
            got = store.get_offset_in_queue_by_time(TOPIC, 0, t, b)
            assert got == _brute_by_time(ts, 0, t, lower), (t, b)
    # more messages: the samples extend; results still agree
    for j in range(700):
        fake_clock.advance(1)
        ts.append(store.put_message(make_message(i + j)).append_message_result.store_timestamp)
    for t in ts[::97] + [ts[-1], ts[-1] + 1]:
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t) == _brute_by_time(ts, 0, t, True)
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t, "upper") == _brute_by_time(ts, 0, t, False)


def test_offset_by_time_on_a_long_queue_with_the_head_gone(store_factory, fake_clock):
    """Samples taken before the commit log's head was deleted: gone records count as oldest (before the
    min offset is corrected), then the min offset bounds the search (after)."""
    store = store_factory(clock=fake_clock, mapped_file_size_consume_queue=20 * 100_000)
    ts = []
    for i in range(3000):
        fake_clock.advance(3)
        ts.append(store.put_message(make_message(i)).append_message_result.store_timestamp)
    assert store.get_offset_in_queue_by_time(TOPIC, 0, ts[1500]) == 1500      # samples taken
    n0 = store.get_message(GROUP, TOPIC, 0, 0, 32).messages[-1].queue_offset  # (reads still fine)
    assert n0 == 31
    first_file = sum(1 for i in range(3000) if store.get_commit_log_offset_in_queue(TOPIC, 0, i) < SMALL_FILE)
    drop_commit_log_head(store)
    store_factory.skip_check()
    for t in (ts[0] - 1, ts[0], ts[first_file - 1], ts[first_file], ts[2000], ts[-1] + 1):
        want_low = max(_brute_by_time(ts, 0, t, True), first_file)
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t) == want_low, t
    store._cq_store.find(TOPIC, 0).correct_min_offset(store.get_min_phy_offset())
    assert store.get_min_offset_in_queue(TOPIC, 0) == first_file
    for t in (ts[0], ts[first_file], ts[2500], ts[-1] + 1):
        assert store.get_offset_in_queue_by_time(TOPIC, 0, t) == _brute_by_time(ts, first_file, t, True)
        got = store.get_offset_in_queue_by_time(TOPIC, 0, t, "upper")
        assert got == _brute_by_time(ts, first_file, t, False)
