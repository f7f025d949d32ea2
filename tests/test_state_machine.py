"""The public API against a plain-Python model of the queues (hypothesis ``RuleBasedStateMachine``).

Puts (single messages and batches), reads (``get_message`` with RocketMQ's statuses and next offsets,
``look_message_by_offset``, ``query_message``), clean restarts and crashes interleave on one store whose files
are small enough to roll often (64 KiB commit-log files, 32 units a consume-queue file, 256 index entries an
index file). After each step the store must answer exactly as the model says.

The crash is in-process: the store's services are stopped and its files unmapped without the shutdown's
final flush, checkpoint and removal of the ``abort`` file, so the next open recovers as after a crash (the
page cache keeps what was written, as after a process kill). Under ASYNC_FLUSH every acknowledged message must
survive it. Real process kills are ``test_crash.py``'s.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pystore import Message, MessageBatch, MessageStore
from pystore.status import GetMessageStatus, PutMessageStatus

TOPICS = ["TopicA", "TopicB", "Topic_C"]
QUEUE_IDS = st.integers(0, 2)
KEYS = ["k0", "k1", "k2", "k3"]
TAGS = st.none() | st.sampled_from(["TagA", "TagB", "标签"])
KEY_LISTS = st.none() | st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)
UNITS_PER_FILE = 32
GEOMETRY = dict(
    flush_disk_type="ASYNC_FLUSH",
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=640,          # UNITS_PER_FILE units a file
    max_hash_slot_num=64,
    max_index_num=256,
)


def crash(store: MessageStore) -> None:
    """Stop ``store`` as a killed process stops: its threads end and its mappings go, nothing else is done (no
    final flush, no checkpoint, the abort file stays)."""
    for service in reversed(store._services):
        service.shutdown()
    store._services = []
    store._release_after_failure()


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="pystore-sm-")
        self.store = MessageStore.open(self.root, **GEOMETRY)
        # (topic, queue id) -> the queue's messages in order: (body, tags, keys)
        self.queues: dict[tuple[str, int], list[tuple[bytes, str | None, list[str]]]] = {}
        # commit-log offset -> (topic, queue id, queue offset) of every single put
        self.offsets: dict[int, tuple[str, int, int]] = {}
        # (topic, queue id) -> where the consumer of ``consume`` reads next
        self.consumed: dict[tuple[str, int], int] = {}
        self.n = 0

    def teardown(self) -> None:
        try:
            self.store.shutdown()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _body(self, size: int) -> bytes:
        self.n += 1
        head = b"m%06d:" % self.n
        return head + bytes((self.n + i) % 251 for i in range(size))

    # -- writes ----------------------------------------------------------------------------------

    @rule(topic=st.sampled_from(TOPICS), queue_id=QUEUE_IDS, tags=TAGS, keys=KEY_LISTS,
          size=st.integers(0, 400) | st.integers(4000, 9000))
    def put(self, topic, queue_id, tags, keys, size):
        body = self._body(size)
        r = self.store.put_message(Message(topic, body, tags=tags, keys=keys, queue_id=queue_id))
        assert r.status is PutMessageStatus.PUT_OK, r
        q = self.queues.setdefault((topic, queue_id), [])
        assert r.append_message_result.logics_offset == len(q)
        self.offsets[r.append_message_result.wrote_offset] = (topic, queue_id, len(q))
        q.append((body, tags, keys or []))

    @rule(topic=st.sampled_from(TOPICS), queue_id=QUEUE_IDS, tags=TAGS, keys=KEY_LISTS,
          sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8) | st.lists(st.just(100), min_size=20, max_size=40))
    def put_messages(self, topic, queue_id, tags, keys, sizes):
        bodies = [self._body(s) for s in sizes]
        batch = MessageBatch([Message(topic, b, tags=tags, keys=keys, queue_id=queue_id) for b in bodies])
        r = self.store.put_messages(batch)
        assert r.status is PutMessageStatus.PUT_OK, r
        q = self.queues.setdefault((topic, queue_id), [])
        assert r.append_message_result.logics_offset == len(q)
        q.extend((b, tags, keys or []) for b in bodies)

    # -- reads -----------------------------------------------------------------------------------

    @rule(group=st.sampled_from(["g1", "g2"]), topic=st.sampled_from(TOPICS + ["NoSuchTopic"]), queue_id=QUEUE_IDS,
          data=st.data(), max_msg_nums=st.integers(1, 40))
    def get_message(self, group, topic, queue_id, data, max_msg_nums):
        q = self.queues.get((topic, queue_id), [])
        offset = data.draw(st.integers(-2, len(q) + 2) | st.sampled_from(range(0, len(q) + 1, 32)), label="offset")
        self._check_get(group, topic, queue_id, offset, max_msg_nums)

    @rule(topic=st.sampled_from(TOPICS), queue_id=QUEUE_IDS, max_msg_nums=st.integers(1, 40))
    def consume(self, topic, queue_id, max_msg_nums):
        """A consumer that keeps up with the writer: it reads on from where its last page ended."""
        key = (topic, queue_id)
        offset = self.consumed.get(key, 0)
        self.consumed[key] = self._check_get("consumer", topic, queue_id, offset, max_msg_nums)

    def _check_get(self, group, topic, queue_id, offset, max_msg_nums) -> int:
        q = self.queues.get((topic, queue_id), [])
        r = self.store.get_message(group, topic, queue_id, offset, max_msg_nums)
        n = len(q)
        if n == 0:
            assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0), r
        elif offset < 0:
            assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 0), r
        elif offset == n:
            assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, n), r
        elif offset > n:
            assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, n), r
        else:
            got = list(r.messages)
            assert r.status is GetMessageStatus.FOUND, r
            assert r.next_begin_offset == offset + len(got), (r, len(got))
            # a page stops at max_msg_nums, at the end of the queue, at the end of its consume-queue file, at 32
            # messages or 256 KiB (the in-memory transfer limits): with bodies far below the byte limit, exactly
            # there; otherwise any non-empty prefix
            k = min(max_msg_nums, UNITS_PER_FILE, n - offset, UNITS_PER_FILE - offset % UNITS_PER_FILE)
            if sum(len(q[offset + i][0]) + 1024 for i in range(k)) <= 256 * 1024:
                assert len(got) == k, (len(got), k, r)
            else:
                assert 1 <= len(got) <= k, (len(got), k, r)
            for i, m in enumerate(got):
                body, tags, keys = q[offset + i]
                assert (m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys) == (
                    topic, queue_id, offset + i, body, tags, keys)
        if n:
            assert (r.min_offset, r.max_offset) == (0, n)
        return r.next_begin_offset

    @precondition(lambda self: self.offsets)
    @rule(data=st.data())
    def look_message_by_offset(self, data):
        off = data.draw(st.sampled_from(sorted(self.offsets)), label="commit_log_offset")
        topic, queue_id, queue_offset = self.offsets[off]
        m = self.store.look_message_by_offset(off)
        assert m is not None
        body, tags, keys = self.queues[(topic, queue_id)][queue_offset]
        assert (m.commit_log_offset, m.topic, m.queue_id, m.queue_offset, m.body, m.tags, m.keys) == (
            off, topic, queue_id, queue_offset, body, tags, keys)

    @rule(topic=st.sampled_from(TOPICS), key=st.sampled_from(KEYS), max_num=st.integers(1, 64))
    def query_message(self, topic, key, max_num):
        expected = {body for (t, _), q in self.queues.items() if t == topic
                    for body, _, keys in q if key in keys}
        got = [m.body for m in self.store.query_message(topic, key, max_num).messages]
        assert len(got) == len(set(got)), "a message returned twice"
        assert set(got) <= expected
        assert len(got) == min(len(expected), max_num), (len(got), len(expected), max_num)

    # -- lifecycle -------------------------------------------------------------------------------

    @rule()
    def restart(self):
        self.store.shutdown()
        self.store = MessageStore.open(self.root, **GEOMETRY)

    @rule()
    def crash_restart(self):
        crash(self.store)
        self.store = MessageStore.open(self.root, **GEOMETRY)

    @invariant()
    def queue_ends_match(self):
        for (topic, queue_id), q in self.queues.items():
            assert self.store.get_max_offset_in_queue(topic, queue_id) == len(q)


StoreMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreMachine = StoreMachine.TestCase
