"""``Consumer``: a group's reader of one topic over a store (``MessageStore.consumer``), on top of
``get_message``, the long-polling wait and the committed offsets.

It reads the topic's queues (the ``queue_ids`` given, or all of them, including queues created later) from
each queue's committed offset, or the queue's min offset when the group never committed. ``poll`` hands out
what is there (waiting up to its timeout when nothing is); iterating blocks for new messages. What was handed
out is committed by ``commit()``, by the next ``poll`` (``auto_commit``, the default: as Kafka's consumer, a
poll commits the page the previous one handed out, which the caller has processed by asking for more) and when
the ``with`` block ends. A consumer that dies while processing a page gets that page again once restarted, and
nothing else twice (at-least-once: the committed offset is always the offset after the last message
committed, never beyond what was handed out).

Iteration hands out one message at a time and counts it handed out then; with ``auto_commit`` it commits
before each fetch, and ``commit()`` (or the end of the ``with`` block) after a loop that broke out commits up
to the last message the loop got, never past it.

A read-only store can read committed offsets but not commit: its consumers need ``auto_commit=False``. Its
waits sleep on the writer's wake file (``pystore.read.arrival``); ``spin_us`` makes each of them spin that long
first, for the lowest latency across processes at the cost of a CPU while spinning. A consumer of one fixed
queue without a filter waits in compiled code (``Arrivals.wait_queue``), from the spin (on the place of the
queue's next unit: the writer does nothing for it) to the get after it.

Thread-safety: one consumer belongs to one thread; several consumers may share a store.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pystore.errors import StoreError
from pystore.message._message_ext import MessageExt
from pystore.status import GetMessageStatus

if TYPE_CHECKING:
    from pystore.engine.store import MessageStore
    from pystore.read.arrival import Arrivals
    from pystore.read.results import GetMessageResult

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

#: messages one queue hands out per get (RocketMQ's default ``pullBatchSize``)
PULL_BATCH = 32
_FOUND = GetMessageStatus.FOUND
#: the statuses whose next offset is where the queue's data is; they move the position on
_STAY = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE)


class Consumer:
    """``group``'s consumer of ``topic`` (see the module docstring)."""

    def __init__(self, store: MessageStore, group: str, topic: str, queue_ids: Iterable[int] | None = None,
                 message_filter: Any = None, auto_commit: bool = True, spin_us: float = 0, *,
                 arrivals: Arrivals) -> None:
        """Made by ``MessageStore.consumer``, which hands over the store's ``arrivals`` (the waits)."""
        if not isinstance(group, str) or not isinstance(topic, str):
            raise TypeError("group and topic must be str")
        if not group or not topic:
            raise ValueError("group and topic must not be empty")
        if auto_commit and store.read_only:
            # refused here, not at the first poll: that poll would lose its messages to the failed commit
            raise StoreError("%s is open read-only: it cannot commit; use auto_commit=False" % store.root)
        self.store = store
        self._arrivals = arrivals
        self.group = group
        self.topic = topic
        self.message_filter = message_filter
        self.auto_commit = auto_commit
        if isinstance(spin_us, bool) or not isinstance(spin_us, (int, float)) or not spin_us >= 0:
            raise ValueError("spin_us must be a number >= 0, got %r" % (spin_us,))
        #: µs a wait of a read-only store's consumer spins on the wake word before sleeping
        self.spin_us = spin_us
        self._fixed: list[int] | None = None
        if queue_ids is not None:
            self._fixed = sorted(set(queue_ids))
            for qid in self._fixed:
                if isinstance(qid, bool) or not isinstance(qid, int) or qid < 0:
                    raise ValueError("queue ids must be ints >= 0, got %r" % (qid,))
        #: queue id -> the offset of the next get
        self._position: dict[int, int] = {}
        #: queue id -> the offset after the last message handed out, not committed yet
        self._handed: dict[int, int] = {}
        #: queue id -> where the gets went (past messages filtered out too), handed over with the last message
        self._reached: dict[int, int] = {}
        self._next_queue = 0
        self._buffer: deque[MessageExt] = deque()
        #: the queue id of a read-only store's consumer of one fixed queue without a filter: its waits are
        #: compiled (``Arrivals.wait_queue``); None otherwise
        self._compiled: int | None = None
        if self._fixed is not None and len(self._fixed) == 1 and message_filter is None and store.read_only:
            self._compiled = self._fixed[0]
        self._discover()

    # -- queues and positions ----------------------------------------------------------------------------------

    def _discover(self) -> None:
        """Take up the queues not read yet, each from its committed (or min) offset."""
        if self._fixed is not None:
            qids: Iterable[int] = self._fixed
        else:
            qids = sorted(qid for topic, qid in self.store.get_topic_queue_table() if topic == self.topic)
        for qid in qids:
            if qid not in self._position:
                start = self.store.fetch_offset(self.group, self.topic, qid)
                if start < 0:
                    start = self.store.get_min_offset_in_queue(self.topic, qid)
                self._position[qid] = start

    @property
    def positions(self) -> dict[int, int]:
        """Queue id -> the offset the next get of that queue starts at."""
        return dict(self._position)

    def _fetch(self) -> list[MessageExt]:
        """One round over the queues, starting after the queue the last round started at: what they have."""
        out: list[MessageExt] = []
        qids = sorted(self._position)
        if not qids:
            return out
        start = self._next_queue % len(qids)
        self._next_queue += 1
        for qid in qids[start:] + qids[:start]:
            offset = self._position[qid]
            self._take(qid, offset, self.store.get_message(self.group, self.topic, qid, offset, PULL_BATCH,
                                                           self.message_filter), out)
        return out

    def _take(self, qid: int, offset: int, r: GetMessageResult, out: list[MessageExt]) -> None:
        """The answer ``r`` of queue ``qid``'s get at ``offset``: its messages onto ``out``, the position on."""
        if r.status in _STAY:
            return
        if r.status is _FOUND:
            out.extend(r.messages)
        elif r.next_begin_offset != offset:
            # filtered out, removed by cleanup, or an offset out of range: the queue says where to go on
            log.debug("%s@%s/%d: %s at %d, going on at %d", self.topic, self.group, qid, r.status.name,
                      offset, r.next_begin_offset)
        self._position[qid] = self._reached[qid] = r.next_begin_offset

    def _wait(self, timeout_ms: int) -> list[MessageExt]:
        """What a round finds, waiting up to ``timeout_ms`` for an arrival when it finds nothing. A read-only
        store's consumer of one fixed queue without a filter waits in C (``Arrivals.wait_queue``: the spin on
        the wake word and the get after it without a Python frame between); any other waits via ``wait_for``."""
        qid = self._compiled
        if qid is not None:
            deadline = time.monotonic() + timeout_ms / 1000.0
            out: list[MessageExt] = []
            while True:
                offset = self._position[qid]
                r = self._arrivals.wait_queue(self.topic, qid, offset, PULL_BATCH, timeout_ms, self.spin_us)
                if r is None:
                    break
                if r.status is _FOUND:
                    # ``_take``'s usual case, without its call: what a tailing consumer waits for after a put
                    self._position[qid] = self._reached[qid] = r.next_begin_offset
                    return r.messages
                self._take(qid, offset, r, out)
                if out or r.status in _STAY or self._position[qid] == offset:
                    return out
                # moved on past units without a message (removed, filtered): wait on from there
                timeout_ms = int((deadline - time.monotonic()) * 1000.0)
                if timeout_ms <= 0:
                    return out
        return self._arrivals.wait_for(self.topic, timeout_ms, self._fetch_or_discover, bool, self.spin_us)

    def _fetch_or_discover(self) -> list[MessageExt]:
        """A round over the known queues; when they had nothing, the topic's new queues are taken up and read."""
        msgs = self._fetch()
        if not msgs and self._fixed is None:
            known = len(self._position)
            self._discover()
            if len(self._position) > known:
                msgs = self._fetch()
        return msgs

    # -- the API --------------------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> list[MessageExt]:
        """The messages there now, in queue order within each queue; when there are none, waits up to
        ``timeout_ms`` for some. With ``auto_commit``, first commits what the previous poll handed out."""
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 0:
            raise ValueError("timeout_ms must be an int >= 0, got %r" % (timeout_ms,))
        if self.auto_commit:
            # the previous poll's page: asking for more says it was processed (committing a page as it is
            # handed out would lose it to a crash while it is processed: at-most-once)
            self.commit()
        if self._buffer:
            msgs = list(self._buffer)
            self._buffer.clear()
        elif timeout_ms:
            msgs = self._wait(timeout_ms)
        else:
            msgs = self._fetch_or_discover()
        # _all_handed, inline: this runs between a tailing consumer's wake-up and its caller holding the page
        self._handed.update(self._reached)
        self._reached.clear()
        return msgs

    def _all_handed(self) -> None:
        """Every message fetched is handed out: each queue is consumed up to where its gets went."""
        self._handed.update(self._reached)
        self._reached.clear()

    def commit(self) -> None:
        """Commit, for every queue, the offset after the last message handed out."""
        for qid, offset in list(self._handed.items()):
            self.store.commit_offset(self.group, self.topic, qid, offset)
            del self._handed[qid]

    def __iter__(self) -> Iterator[MessageExt]:
        return self

    def __next__(self) -> MessageExt:
        """The next message, waiting for one as long as it takes."""
        while not self._buffer:
            self._all_handed()
            if self.auto_commit:
                self.commit()
            self._buffer.extend(self._wait(1000))
        msg = self._buffer.popleft()
        self._handed[msg.queue_id] = msg.queue_offset + 1
        return msg

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.commit()

    def __repr__(self) -> str:
        return "Consumer(%r, %r, queues %s)" % (self.group, self.topic, sorted(self._position))
