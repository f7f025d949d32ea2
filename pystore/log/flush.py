"""Flush services: when the commit log reaches disk (docs/format.md §6.2, §6.3).

* ``FlushRealTimeService`` (ASYNC_FLUSH): every ``flush_interval_commit_log`` ms, or when a put wakes it
  (unless ``flush_commit_log_timed``), flushes if at least ``flush_commit_log_least_pages`` pages are dirty;
  once ``flush_commit_log_thorough_interval`` ms passed since the last full flush, flushes any dirty page.
  When puts wake it (no transient pool, not timed), it waits between those passes in C without the GIL
  (``_flush_wait.follow_flush``): the newest file is flushed each time the puts dirtied the least pages, as
  RocketMQ's woken thread does, but no sooner than ``flush_commit_log_min_gap`` ms after the last flush (each
  flush wakes the thread, which takes a core), and the Python pass runs at the thorough flush's time (or on ``wakeup``, a
  file's end, the shutdown). A put thread that keeps the GIL busy thus hands it over for no flush.
* ``GroupCommitService`` (SYNC_FLUSH): puts hand it requests (the offset their data ends at); it swaps its
  request lists, flushes once for all of them and completes each, so N concurrent writers share one
  ``msync``. A put waits ``sync_flush_timeout`` ms, then reports ``FLUSH_DISK_TIMEOUT``. A synchronous put
  waits on its own thread instead (``sync``, a leader/follower group commit: the put that finds no flush
  under way flushes for everyone appended before it, the others wait for that flush and the first of them
  leads the next one, after waiting at most one flush's time for the rest of the last group to be back;
  RocketMQ always hands over to the service thread, which costs a Python store two GIL hand-offs per put);
  what a put's flush covers completes the requests handed to the service too. Futures
  (``async_put_message``) still go through the service; one expiry thread per service completes those the
  service has not reached by their deadline (a flush stuck on the disk) with ``FLUSH_DISK_TIMEOUT``.
* ``CommitRealTimeService`` (transient store pool): copies pooled writes into the files, then wakes the flush.
* ``flush_all``: everything, now (``MessageStore.flush`` and the shutdown's last flush).

Time (``pystore.system.service``): the intervals that decide a thorough flush or commit (``*_thorough_interval``)
are policy and read the store's clock; how long a put waits for its flush (``sync_flush_timeout``, the
requests' deadlines and ``sync``), how long a leader gathers its group and how long the last flush took are
real waits and measurements, on ``time.monotonic``.

The msync/fdatasync inside ``MappedFile.flush`` runs without the GIL. Each flush records the store time of
the last flushed message as the checkpoint's ``physicMsgTimestamp``. ``after_flush`` (SYNC_FLUSH) lets
dispatch follow the flushed offset, so no reader sees what a crash could take back.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import TYPE_CHECKING, Any

from pystore.log._flush_wait import FLUSH_ERROR, FlushStop, follow_flush
from pystore.status import PutMessageStatus
from pystore.system.crashpoint import crashpoint
from pystore.system.service import ServiceThread

if TYPE_CHECKING:
    from pystore.config import StoreConfig
    from pystore.engine.checkpoint import StoreCheckpoint
    from pystore.log.commitlog import CommitLog
    from pystore.log.mapped_file_queue import MappedFileQueue

__all__ = ["FlushRealTimeService", "GroupCommitService", "GroupCommitRequest", "CommitRealTimeService",
           "FlushConsumeQueueService", "flush_all"]

log = logging.getLogger(__name__)

#: TEST ONLY, a deliberately broken build: the group commit acknowledges its puts without forcing their bytes
#: to disk (it moves the flushed offset over them unsynced). The power-cut tests run a writer with it to
#: prove they catch a missing fsync (tests/powerloss/test_store_powerloss.py). Read once at import, so the
#: production path pays one constant test per group commit.
SKIP_GROUP_COMMIT_FSYNC = os.environ.get("PYSTORE_TEST_SKIP_GROUP_COMMIT_FSYNC") == "1"
if SKIP_GROUP_COMMIT_FSYNC:
    log.warning("PYSTORE_TEST_SKIP_GROUP_COMMIT_FSYNC=1: SYNC_FLUSH acknowledges puts it never syncs (test only)")


def flush_all(queue: MappedFileQueue) -> int:
    """Commit and flush the whole commit log ``queue`` (a ``MappedFileQueue``); returns the flushed offset."""
    for _ in range(len(queue.files) + 2):
        committed_still = queue.commit(0)
        if queue.flush(0) and committed_still:
            break
    return queue.flushed_where


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH's flush thread (RocketMQ's ``FlushRealTimeService``). Woken by the puts once
    ``flush_commit_log_least_pages`` pages are dirty (unless ``flush_commit_log_timed``), it waits in C without
    the GIL when the commit log wakes it there (``CommitLogCore.flush_wake_c``, set by the wiring when there is
    no transient pool): ``_flush_wait.follow_flush`` flushes the newest file each time enough is dirty and
    returns at the time of the next thorough flush, at a file's end, on ``wakeup`` or at the shutdown, after
    which this loop runs its pass as before (a thorough flush when due, the checkpoint's time)."""

    def __init__(self, commitlog: CommitLog, config: StoreConfig, checkpoint: StoreCheckpoint,
                 clock: Callable[[], int] | None = None) -> None:
        super().__init__("FlushRealTimeService", clock)
        self.commitlog = commitlog
        self.config = config
        self.checkpoint = checkpoint
        self.last_flush_timestamp = 0
        self._follow_stop = FlushStop()

    def start(self) -> None:
        self._follow_stop.resume()
        super().start()

    def wakeup(self) -> None:
        super().wakeup()
        self._follow_stop.poke(self.commitlog.core)

    def shutdown(self, join: bool = True) -> None:
        self._follow_stop.stop(self.commitlog.core)
        super().shutdown(join)

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped():
            follow = self.commitlog.flush_wake_c and not cfg.flush_commit_log_timed
            if follow:
                self._follow(cfg)       # flushes as the puts dirty pages, until this loop's pass is due
            least = cfg.flush_commit_log_least_pages
            now = self.clock()
            if now >= self.last_flush_timestamp + cfg.flush_commit_log_thorough_interval:
                self.last_flush_timestamp = now
                least = 0
            if not follow:
                if cfg.flush_commit_log_timed:
                    self.sleep(cfg.flush_interval_commit_log)      # puts do not wake it; shutdown does
                else:
                    self.wait_for_running(cfg.flush_interval_commit_log)
            self.commitlog.clear_flush_notified()
            self._flush(least)
        for _ in range(10):       # shutdown: flush everything
            if self._flush(0):
                break

    def _follow(self, cfg: StoreConfig) -> None:
        """Flush the newest file as puts dirty it, without the GIL, until the next thorough flush is due."""
        queue = self.commitlog.queue
        mf = queue.last()
        due_ms = self.last_flush_timestamp + cfg.flush_commit_log_thorough_interval - self.clock()
        if mf is None:
            self.wait_for_running(cfg.flush_interval_commit_log)       # nothing to follow yet
            return
        if queue.flushed_where < mf.file_from_offset or due_ms <= 0:
            # older files to flush first (this loop's passes flush one a pass), or a pass due now
            if due_ms > 0:
                self.wait_for_running(min(cfg.flush_interval_commit_log, 10))
            return
        queue.pending_dirs.sync()          # the file's name is durable before any of its bytes count as flushed
        budget = min(due_ms, cfg.flush_commit_log_thorough_interval)
        if follow_flush(self.commitlog.core, mf, self._follow_stop, cfg.flush_commit_log_least_pages,
                        max(cfg.flush_interval_commit_log, 1) * 1_000_000, max(budget, 1) * 1_000_000,
                        cfg.flush_commit_log_min_gap * 1_000_000) == FLUSH_ERROR:
            err = self._follow_stop.errno
            log.error("flushing %s failed: %s", mf.file_name, os.strerror(err))
            self.wait_for_running(cfg.flush_interval_commit_log)      # not again at once: the pass retries

    def _flush(self, least: int) -> bool:
        try:
            result = self.commitlog.queue.flush(least)
        except OSError:
            log.exception("flushing the commit log failed")
            return True
        ts = self.commitlog.queue.store_timestamp
        if ts > 0:
            self.checkpoint.physic_msg_timestamp = ts
        return result


class GroupCommitRequest:
    """One durable put waiting for the flushed offset to reach ``next_offset``."""

    __slots__ = ("next_offset", "event", "ok", "future", "result", "deadline")

    def __init__(self, next_offset: int, future: Future[Any] | None = None, result: Any = None,
                 timeout_s: float = 0.0) -> None:
        self.next_offset = next_offset
        self.event = threading.Event()
        self.ok = False
        self.future = future
        self.result = result
        #: monotonic time after which the service's expiry thread completes it unflushed (0: never)
        self.deadline = time.monotonic() + timeout_s if timeout_s > 0 else 0.0

    def complete(self, ok: bool) -> None:
        self.ok = ok
        self.event.set()
        fut = self.future
        if fut is not None and not fut.done():
            r = self.result
            try:
                fut.set_result(r if ok else r.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT))
            except InvalidStateError:
                pass        # the expiry thread completed it meanwhile (done() then set_result is not atomic)


class GroupCommitService(ServiceThread):
    def __init__(self, commitlog: CommitLog, checkpoint: StoreCheckpoint, after_flush: Callable[[int], object] | None = None,
                 clock: Callable[[], int] | None = None) -> None:
        super().__init__("GroupCommitService", clock)
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.after_flush = after_flush
        self._lock = threading.Lock()
        self._write: list[GroupCommitRequest] = []
        self._read: list[GroupCommitRequest] = []
        # One flush at a time, the service's or a put's (``sync``): ``_flushing`` says one is under way, and
        # the threads waiting for it to end each sleep on a lock of their own in ``_waiting``, released when
        # it ends (outside ``_state``, so a woken put needs nothing but the GIL). ``_followers`` counts the
        # puts among them; ``_expect`` is the size of the last group (its followers and its leader), which
        # the next leader waits to see back before it flushes (``_gatherer``: its lock, released by the
        # last to arrive).
        self._state = threading.Lock()
        self._flushing = False
        self._waiting: list[Any] = []
        self._followers = 0
        self._expect = 0
        self._gatherer: Any = None
        self._last_flush_s = 0.0
        # Requests with a deadline, in arrival order (one timeout for all: deadlines only grow), watched by
        # one expiry thread, started with the first of them (a thread per request cost a thread start per
        # put). The service trims the completed ones off the front after each commit, so the deque holds
        # only requests not yet handled.
        self._expiring: collections.deque[GroupCommitRequest] = collections.deque()
        self._expiry_wake = threading.Condition(self._lock)
        self._expiry_thread: threading.Thread | None = None

    def put_request(self, req: GroupCommitRequest) -> None:
        with self._lock:
            self._write.append(req)
            if req.deadline:
                self._expiring.append(req)
                if len(self._expiring) == 1:
                    self._expiry_wake.notify()
                if self._expiry_thread is None:
                    self._expiry_thread = threading.Thread(target=self._expire_loop, daemon=True,
                                                           name="GroupCommitExpiry")
                    self._expiry_thread.start()
        self.wakeup()

    def _expire_loop(self) -> None:
        """Complete, unflushed, each request still waiting at its deadline (the service is stuck in a
        flush, or was stopped); ends once the service stopped and nothing waits."""
        while True:
            expired: list[GroupCommitRequest] = []
            with self._lock:
                q = self._expiring
                while q and q[0].event.is_set():
                    q.popleft()
                if not q:
                    if self.is_stopped():
                        self._expiry_thread = None
                        return
                    self._expiry_wake.wait(1.0)
                    continue
                now = time.monotonic()
                while q and (q[0].event.is_set() or q[0].deadline <= now):
                    r = q.popleft()
                    if not r.event.is_set():
                        expired.append(r)
                if not expired:
                    self._expiry_wake.wait(min(1.0, q[0].deadline - now))
            for r in expired:
                r.complete(False)

    def _trim_expiring(self) -> None:
        with self._lock:
            q = self._expiring
            while q and q[0].event.is_set():
                q.popleft()

    def on_wait_end(self) -> None:
        with self._lock:
            self._write, self._read = self._read, self._write

    def run(self) -> None:
        while not self.is_stopped():
            self.wait_for_running(10)
            self.do_commit()
        time.sleep(0.01)          # let puts in flight hand in their requests
        self.on_wait_end()
        self.do_commit()
        self.on_wait_end()
        self.do_commit()

    def do_commit(self) -> None:
        reqs = self._read
        target = max((r.next_offset for r in reqs), default=0)
        queue = self.commitlog.queue
        lead = False
        while True:
            with self._state:
                if reqs and queue.flushed_where >= target:
                    break                               # a put's flush covered them
                if not self._flushing:
                    self._flushing = lead = True
                    break
                # A put's flush under way covers what was appended before it: the service waits for it
                # only for requests (waiting for every put's flush would have the end of each wake this
                # thread and hand it the GIL, a third of a lone durable writer's time)
                if not reqs:
                    break
                w = self._enlist(follower=False)
            if not w.acquire(True, 1.0):                # released at the flush's end (1 s: a guard)
                self._withdraw(w, follower=False)
        flushed = self._lead(target, by_put=False) if lead else queue.flushed_where
        for r in reqs:
            r.complete(flushed >= r.next_offset)
        self._read = []
        if reqs:
            self._trim_expiring()

    #: the longest a leader waits for the last group to come back (capped by the last flush's duration)
    GATHER_MAX_S = 0.001

    def sync(self, next_offset: int, timeout_s: float) -> bool:
        """A durable put's wait, on its own thread (a leader/follower group commit): True once the log is
        flushed to ``next_offset``; False when the flush failed or ``timeout_s`` passed first.

        With no flush under way the put flushes itself (the leader), covering every put appended before
        it; otherwise it waits for that flush to end (a follower), and if its data is still not on disk,
        the first follower to wake leads the next flush, for all the others. Nobody hands work to the
        service thread, which would cost each put two more thread switches and GIL hand-offs.

        A leader first waits for the puts of the last group to come back with their next data, up to the
        time the last flush took (at most ``GATHER_MAX_S``): the puts a flush wakes get the GIL one after
        the other, so the first of them back would otherwise flush for itself alone while the rest were
        still on their way, and the groups stayed small (about 2 puts a flush with 4 threads, 7 with 16).
        A put alone never waits: its group is itself."""
        queue = self.commitlog.queue
        state = self._state
        deadline = 0.0
        while True:
            with state:
                if queue.flushed_where >= next_offset:
                    return True
                if not self._flushing:
                    self._flushing = True
                    gather, wait_s = None, 0.0
                    if self._followers + 1 < self._expect:
                        gather = self._gatherer = _allocate_lock()
                        gather.acquire()
                        wait_s = min(self._last_flush_s, self.GATHER_MAX_S)
                    break
                now = time.monotonic()
                if not deadline:
                    deadline = now + timeout_s
                left = deadline - now
                if left <= 0:
                    return False
                w = self._enlist(follower=True)
                g = self._gatherer
                if g is not None and self._followers + 1 >= self._expect:
                    self._gatherer = None
                    g.release()
            if not w.acquire(True, left):
                self._withdraw(w, follower=True)
        return self._lead(next_offset, by_put=True, gather=gather, wait_s=wait_s) >= next_offset

    def _enlist(self, follower: bool) -> Any:
        """Under ``_state``: a lock, held, that the end of the flush under way releases (``_waiting``);
        a put counts among the flush's followers."""
        w = _allocate_lock()
        w.acquire()
        self._waiting.append(w)
        if follower:
            self._followers += 1
        return w

    def _withdraw(self, w: Any, follower: bool) -> None:
        """A wait on ``w`` timed out: unless a flush's end took it meanwhile, it no longer waits."""
        with self._state:
            if w in self._waiting:
                self._waiting.remove(w)
                if follower:
                    self._followers -= 1

    def _lead(self, target: int, by_put: bool, gather: Any = None, wait_s: float = 0.0) -> int:
        """With ``_flushing`` taken: wait for the group to gather (``gather``, ``wait_s``), flush to
        ``target``, complete the handed-in requests the flush covers, end the flush and wake the threads
        waiting for it, whatever happens meanwhile; the flushed offset."""
        done: list[GroupCommitRequest] = []
        waiting: list[Any] = []
        t0 = time.monotonic()
        try:
            if gather is not None:
                gather.acquire(True, wait_s)
                with self._state:
                    if self._gatherer is gather:
                        self._gatherer = None
                t0 = time.monotonic()
            flushed = self._flush_to(target)
            with self._lock:
                pending = self._write
                done = [r for r in pending if r.next_offset <= flushed]
                if done:
                    self._write = [r for r in pending if r.next_offset > flushed]
        finally:
            with self._state:
                self._flushing = False
                self._gatherer = None
                self._expect = self._followers + (1 if by_put else 0)
                self._followers = 0
                self._last_flush_s = time.monotonic() - t0
                waiting, self._waiting = self._waiting, []
            for w in waiting:
                w.release()
        for r in done:
            r.complete(True)
        return flushed

    def _flush_to(self, target: int) -> int:
        """With ``_flushing`` taken: flush until ``target`` is on disk (or a flush fails); the flushed offset."""
        queue = self.commitlog.queue
        if SKIP_GROUP_COMMIT_FSYNC:
            return self._claim_unsynced(queue)
        try:
            queue.flush(0)
            # a request may end in the next file, and a flush moves through one file at a time
            tries = 0
            while queue.flushed_where < target and tries < 1000:
                if queue.flush(0):
                    time.sleep(0.001)
                tries += 1
        except OSError:
            log.exception("group commit flush failed")
        flushed = queue.flushed_where
        crashpoint("groupcommit.flushed")
        ts = queue.store_timestamp
        if ts > 0:
            self.checkpoint.physic_msg_timestamp = ts
        if self.after_flush is not None:
            try:
                self.after_flush(flushed)
            except Exception:
                log.exception("dispatch after flush failed")
        return flushed


    def _claim_unsynced(self, queue: MappedFileQueue) -> int:
        """The broken build's flush (``SKIP_GROUP_COMMIT_FSYNC``): every file's bytes count as flushed, no
        msync; the rest (checkpoint time, dispatch) as after a real flush."""
        for mf in queue.files:
            pos = mf.read_position
            mf.claim_flushed(pos)
            queue.flushed_where = max(queue.flushed_where, mf.file_from_offset + pos)
        last = queue.last()
        ts = queue.store_timestamp = last.store_timestamp if last is not None else 0
        if ts > 0:
            self.checkpoint.physic_msg_timestamp = ts
        if self.after_flush is not None:
            self.after_flush(queue.flushed_where)
        return queue.flushed_where


class CommitRealTimeService(ServiceThread):
    """Transient store pool: copy appended bytes from pool buffers into the files."""

    def __init__(self, commitlog: Any, config: Any, flush_service: ServiceThread,
                 after_commit: Callable[[int], Any] | None = None, clock: Callable[[], int] | None = None) -> None:
        super().__init__("CommitRealTimeService", clock)
        self.commitlog = commitlog
        self.after_commit = after_commit
        self.config = config
        self.flush_service = flush_service
        self.last_commit_timestamp = 0

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped():
            least = cfg.commit_commit_log_least_pages
            now = self.clock()
            if now >= self.last_commit_timestamp + cfg.commit_commit_log_thorough_interval:
                self.last_commit_timestamp = now
                least = 0
            self.wait_for_running(cfg.commit_interval_commit_log)
            self.commitlog.clear_flush_notified()
            if not self._commit(least):
                self.last_commit_timestamp = self.clock()
                self.flush_service.wakeup()
        for _ in range(10):
            if self._commit(0):
                break
        self.flush_service.wakeup()

    def _commit(self, least: int) -> bool:
        try:
            unchanged = bool(self.commitlog.queue.commit(least))
        except OSError:
            log.exception("committing the transient pool failed")
            return True
        if not unchanged and self.after_commit is not None:
            try:
                self.after_commit(self.commitlog.queue.committed_where)
            except Exception:
                log.exception("dispatch after commit failed")
        return unchanged


class FlushConsumeQueueService(ServiceThread):
    """Flushes the consume queues (docs/format.md §6.4): every ``flush_interval_consume_queue`` ms when at least
    ``flush_consume_queue_least_pages`` pages are dirty; every ``flush_consume_queue_thorough_interval`` ms
    (and at shutdown) everything, then the index and the checkpoint, whose ``logicsMsgTimestamp`` is the store
    time of the last message built into a queue *before* that flush began."""

    def __init__(self, cq_store: Any, index: Any, dispatcher: Any, config: Any, checkpoint: Any,
                 clock: Callable[[], int] | None = None) -> None:
        super().__init__("FlushConsumeQueueService", clock)
        self.cq_store = cq_store
        self.index = index
        self.dispatcher = dispatcher
        self.config = config
        self.checkpoint = checkpoint
        self.last_flush_timestamp = self.clock()

    def run(self) -> None:
        cfg = self.config
        while not self.is_stopped():
            self.wait_for_running(cfg.flush_interval_consume_queue)
            self.do_flush(1)
        self.do_flush(3)

    def do_flush(self, retry_times: int) -> None:
        cfg = self.config
        least = cfg.flush_consume_queue_least_pages
        if retry_times == 3:
            least = 0
        now = self.clock()
        thorough = now >= self.last_flush_timestamp + cfg.flush_consume_queue_thorough_interval
        if thorough:
            self.last_flush_timestamp = now
            least = 0
        logics_ts = self.dispatcher.last_store_ts if self.dispatcher is not None else 0
        synced = True
        for _ in range(retry_times):
            synced = self.cq_store.flush(least)
        if least == 0:
            try:
                if self.index is not None:
                    self.index.flush()
                if logics_ts > 0 and synced:
                    # only what the queue flush made durable: after a failed one, recovery must rebuild
                    # the queues from the older time still recorded
                    self.checkpoint.logics_msg_timestamp = logics_ts
                self.checkpoint.flush()
            except OSError:
                log.exception("flushing the index or the checkpoint failed")
