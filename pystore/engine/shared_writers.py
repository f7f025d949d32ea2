"""Several writer processes on one store (``StoreConfig.shared_writers``): who does what, and how a process joins,
leads and takes over. RocketMQ has one broker per store; this mode is pystore's own.

Every process that opens the store this way holds a shared ``flock`` on ``<root>/lock`` (a single writer holds
it exclusively, so the two modes refuse each other: ``StoreLock``) and maps the writers' state page
(``<root>/writers``, ``pystore.log.shared_state``), whose append lock serialises the puts of all of them
(``pystore.log.shared_append``: each put takes its queue's next offset from the writers' queue-offset table in
the same file, so queue offsets stay continuous, and a put whose writer died holding the lock is repaired).

One process at a time is the **leader**: it holds an OFD lock on byte 4002 of the state file (the kernel drops
it when the process dies) and runs the services: dispatch into the consume queues and the index, flushing,
cleaning, the checkpoint, the delay levels, the consumer offsets' file. Its commit log is a writer's, opened
and recovered as a single writer's is, and appended to under the shared lock; a ``LeaderFollow`` thread catches
it up on the others' records and dispatches them (the leader dispatches its own puts that way too, never
inline), and publishes how far it dispatched in the page (``dispatched end``).

The other processes are **followers**: they read as a read-only store does (following the leader's queues
and the log), and put through an **appender**: a commit log of their own over the same files, positioned at
the leader's dispatched end with each queue's offset from the queues (everything below that end has its unit),
which its first put catches up from. Under SYNC_FLUSH a follower's put flushes the log itself before it returns.
A ``LeaderWatch`` thread tries the leader's byte every ``_WATCH_S`` (50 ms); when the leader has died (or shut
down) one follower gets it and **takes over**: without the append lock (the others go on putting) it opens the store as a
writer up to the published end (every record below it is whole), re-dispatching from the dead leader's dispatched
end; then, under the append lock for well under a millisecond, repairs a put a writer died in and shares the new
log, which catches up on what the others put meanwhile; it starts the services and serves from then on through
them; what it used as a follower is kept until it shuts down (calls already inside it finish).

The first opener (alone: no other process has the store open) recovers the store as a single writer does
while it still holds the page's dead-man byte exclusively, so nobody can open, let alone put, before the log's
end is known; it is the first leader.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.engine.checkpoint import lock_holders
from pystore.engine.schedule import ScheduleMessageService
from pystore.errors import ConfigError, StoreError
from pystore.log._shared_lock import LEADER, SharedLock, ofd_try_lock, ofd_unlock
from pystore.log.commitlog import CommitLog
from pystore.log.flush import flush_all
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.log.shared_append import TornPutRepair, share, unshare
from pystore.log.shared_state import SharedState
from pystore.system.durable import sync_tree
from pystore.system.service import ServiceThread
from pystore.timer import timer_log_path, timer_wheel_path
from pystore.timer._timer_put import TimerPut

if TYPE_CHECKING:
    from pystore.engine.parts import StoreParts
    from pystore.errors import StoreCorruptedError
    from pystore.log._results import PutMessageResult
    from pystore.message._message import Message
    from pystore.message._message_batch import MessageBatch
    from pystore.queue.dispatch import ReputService

__all__ = ["LeaderFollow", "SharedWriting", "check_shared_config", "take_over", "writer_info"]

log = logging.getLogger(__name__)

#: how often a follower tries to become the leader (a dead leader's successor starts within about this): one
#: non-blocking OFD lock call, so a short period costs nothing measurable and takes up to 150 ms off a takeover
_WATCH_S = 0.05
#: how often it lets go of the commit-log files the leader's cleaning deleted (a listing of the head's files)
_DROP_DELETED_S = 0.2
#: how long a follower whose takeover failed waits before it tries again (s)
_RETRY_S = 5
#: how long the leader's follow thread sleeps between passes (ms): the dispatch lag behind the writers; and the
#: longest it sleeps once the log has stopped moving
_FOLLOW_MS = 1
_FOLLOW_IDLE_MS = 16


def check_shared_config(cfg: StoreConfig) -> None:
    """What ``shared_writers`` cannot be combined with: ``ConfigError`` naming the setting."""
    if not cfg.shared_writers:
        return
    if cfg.read_only:
        raise ConfigError("shared_writers", True, "a read-only store is no writer: open it with read_only=True alone")
    if cfg.transient_store_pool_enable:
        raise ConfigError("transient_store_pool_enable", True, "puts into private buffers cannot be shared by "
                          "several writer processes")
    if cfg.broker_role == BrokerRole.SLAVE:
        raise ConfigError("broker_role", cfg.broker_role.name, "a slave's log grows by replication, not by puts")
    if cfg.warm_mapped_file_enable:
        raise ConfigError("warm_mapped_file_enable", True, "warming writes zeros into a file other writers may "
                          "be writing")


#: what opening the store's parts gives: the parts, or None and the damaged file to blame (None: see the log)
_Opened = tuple["StoreParts | None", "StoreCorruptedError | None"]


class _OpenRefused(Exception):
    def __init__(self, error: StoreCorruptedError | None) -> None:
        self.error = error


class SharedWriting:
    """One process's part in a store several writer processes share (held by the ``MessageStore``)."""

    def __init__(self, cfg: StoreConfig, clock: Callable[[], int], injected_clock: Callable[[], int] | None) -> None:
        self.cfg = cfg
        self.clock = clock
        self.injected_clock = injected_clock
        self.state = SharedState(cfg.store_path_root_dir, queue_slots=cfg.shared_writers_queue_slots)
        self.lock: SharedLock | None = None
        self.leader = False
        #: a follower's commit log (None for the leader, whose commit log is the store's)
        self.appender: CommitLog | None = None
        #: where this process's puts go: its appender while it follows, the new log once a takeover has it
        #: running (switched in one assignment; None for the first leader, which puts into the store's log)
        self.put_log: CommitLog | None = None
        #: what a follower used before it took over (closed at shutdown)
        self.retired: list[object] = []
        #: how long this process's takeover held the append lock, ms (0: it never took over): what the other
        #: writers' puts waited for it (the recovery itself runs without the lock)
        self.takeover_lock_ms = 0.0
        self._watch: LeaderWatch | None = None

    # -- opening ------------------------------------------------------------------------------------------

    def open(self, open_writer: Callable[[], _Opened], open_reader: Callable[[], _Opened]) -> _Opened:
        """Join the store: as its first opener, ``open_writer()`` (recovery as a single writer) while nobody
        else may open, and lead; else ``open_reader()`` and an appender. ``(parts, None)`` or ``(None, why)``."""
        check_shared_config(self.cfg)
        opened: list[StoreParts] = []

        def recover_end() -> int:
            parts, error = open_writer()
            if parts is None:
                raise _OpenRefused(error)
            opened.append(parts)
            if not ofd_try_lock(self.state.fd, LEADER, True):     # alone: nobody can hold it
                raise StoreError("%s: the leader's lock is held although no other process has the store open"
                                 % self.state.path)
            return int(parts.commitlog.get_max_offset())

        try:
            self.lock = self.state.open(recover_end=recover_end)
        except _OpenRefused as refused:
            return None, refused.error
        except BaseException:
            for parts in opened:
                parts.close()
            raise
        if self.state.first:
            self.leader = True
            self.lock.leader_pid = os.getpid()
            parts = opened[0]
            self._lead(parts)
            log.info("%s: first of the shared writers, leading (%s lock)", self.cfg.store_path_root_dir,
                     self.lock.kind_name)
            return parts, None
        dispatched = self.lock.dispatched_end          # before the queues are read: every unit below it is there
        reader, error = open_reader()
        if reader is None:
            self.state.close()
            return None, error
        self.appender = self.put_log = self._make_appender(reader, dispatched)
        log.info("%s: joined the shared writers (leader pid %d)", self.cfg.store_path_root_dir, self.lock.leader_pid)
        return reader, None

    def _lead(self, parts: StoreParts) -> None:
        cl = parts.commitlog
        assert self.lock is not None
        cl.queue.allocate = None
        share(cl, self.lock)

    def _make_appender(self, parts: StoreParts, dispatched: int) -> CommitLog:
        cfg = self.cfg
        assert self.lock is not None
        queue = MappedFileQueue(cfg.commit_log_paths(), parts.commitlog.queue.mapped_file_size, clock=self.clock)
        queue.others_write = True       # the others go on putting (and rolling) while this process joins
        if not queue.load():
            raise StoreError("%s: the commit-log files cannot be mapped for writing" % cfg.store_path_root_dir)
        queue.view_until(dispatched)
        appender = CommitLog(cfg, queue, clock=self.injected_clock)
        appender.attach_last()
        for cq in parts.cq_store.queues():
            appender.get_cell(cq.topic, cq.queue_id).next_offset = cq.get_max_offset_in_queue()
        share(appender, self.lock)
        # a delay level rewrites the message for the schedule topic here too; the leader delivers it when due
        appender.delay_rewrite = ScheduleMessageService(appender, parts.cq_store, cfg, clock=self.clock).rewrite
        # and a timer message for the timer topic (no flow control here: the wheel is the leader's)
        appender.timer_rewrite = TimerPut(cfg, self.injected_clock)
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            appender.after_put = _flush_before_returning(appender)
        return appender

    # -- leading ------------------------------------------------------------------------------------------

    def follow_service(self, parts: StoreParts) -> LeaderFollow:
        assert self.lock is not None and parts.reput is not None
        return LeaderFollow(parts.commitlog, parts.reput, self.lock,
                            self.cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH, self.clock,
                            self.cfg.shared_writers_stuck_ms)

    def watch(self, take_over: Callable[[], None]) -> None:
        """(A follower, once started.) Try the leader's lock now and then; ``take_over()`` when it is had."""
        self._watch = LeaderWatch(self, take_over)
        self._watch.start()

    def try_lead(self) -> bool:
        return bool(ofd_try_lock(self.state.fd, LEADER, True))

    def took_over(self, parts: StoreParts) -> None:
        """The follower leads from now on: ``parts`` are its new writer's (``take_over``), running; its puts go
        there from now on."""
        assert self.lock is not None
        self.leader = True
        self.lock.leader_pid = os.getpid()
        self.put_log = parts.commitlog

    # -- what others see ----------------------------------------------------------------------------------

    def writers_open(self) -> int:
        """How many stores have this one open for writing, in every process (this one included)."""
        return len(lock_holders(self.cfg.lock_path()) or [])

    def others_writing(self) -> bool:
        """Another process has the store open for writing (``destroy`` is refused then)."""
        return len([pid for pid, _ in lock_holders(self.cfg.lock_path()) or [] if pid != os.getpid()]) > 0

    def info(self) -> dict[str, object]:
        lock = self.lock
        if lock is None:
            return {"shared": True, "lock": "none", "writers": 0, "leader_pid": 0, "leader": False}
        return {"shared": True, "lock": lock.kind_name, "writers": len(lock_holders(self.cfg.lock_path()) or []),
                "leader_pid": lock.leader_pid, "leader": self.leader, "published_end": lock.published_end,
                "generation": lock.generation, "takeover_lock_ms": self.takeover_lock_ms}

    def stop_watch(self) -> None:
        if self._watch is not None:
            self._watch.shutdown()
            self._watch = None

    def close(self) -> None:
        self.stop_watch()
        if self.leader and self.state.fd >= 0:
            if self.lock is not None and self.lock.leader_pid == os.getpid():
                self.lock.leader_pid = 0
            ofd_unlock(self.state.fd, LEADER)
        if self.appender is not None:
            unshare(self.appender)
            self.appender.queue.close()
        for part in self.retired:
            close = getattr(part, "close", None)
            if close is not None:
                close()
        self.retired = []
        self.state.close()


def writer_info(shared: SharedWriting | None, writing: bool) -> dict[str, object]:
    """``MessageStore.writer_info``: ``shared`` (several writer processes), ``lock`` (``robust-mutex`` or ``ofd``
    between them; ``flock`` for a single writer), ``writers`` (processes that have it open for writing),
    ``leader_pid`` (the process running the services), and, with several writers, ``leader`` (this process),
    ``published_end`` and ``generation`` (repairs of puts whose writer died). ``writing``: this process holds the
    store's lock (a single writer)."""
    if shared is not None:
        return shared.info()
    return {"shared": False, "lock": "flock", "writers": 1 if writing else 0, "leader_pid": os.getpid() if writing else 0}


def take_over(shared: SharedWriting, open_writer: Callable[[int, int], _Opened]) -> StoreParts:
    """(A follower holding the leader's lock.) Open the store as a writer up to the published end, from where the
    dead leader had dispatched to (``open_writer(end, dispatched)``: a process died, not the machine, so its pages
    are all there and the recovery is not abnormal; the walk checks and re-dispatches from that end), then, under the append
    lock, repair a put a writer died in and share the new commit log, which then catches up (in steps) on what the
    others put meanwhile. The caller runs the writer's services, then ``took_over`` moves its puts to the new log:
    until then they go through the appender as before. The recovery runs without the append lock: records below
    the published end are whole and never change, and nothing past it is touched, so the other writers go on
    putting while it re-dispatches (under the lock it held every writer's puts for the whole recovery: 0.2-0.35
    s). Raises when the writer cannot open or finds another end than the published one (nothing was changed then)."""
    lock = shared.lock
    assert lock is not None and shared.appender is not None
    _sync_what_the_leader_wrote(shared.cfg)
    # the dead leader's dispatched end first: it never passes the published end
    dispatched = lock.dispatched_end
    end = lock.published_end
    parts, error = open_writer(end, dispatched)
    if parts is None:
        raise StoreError("%s: this process cannot take over as the leader: %s" % (shared.cfg.store_path_root_dir,
                                                                               error or "see the log"))
    found = int(parts.commitlog.get_max_offset())
    if found != end:
        parts.close()
        raise StoreError("%s: recovery found the log's end at %d, the writers published %d: not taking over"
                         % (shared.cfg.store_path_root_dir, found, end))
    # the append lock through this process's put lock, as its puts take it: the lock object is the process's, and
    # its put thread may hold it right now
    with shared.appender.put_lock:
        lock.acquire()
        held = time.perf_counter()
        try:
            if lock.needs_repair() is not None:
                TornPutRepair(shared.appender, lock)()
            shared._lead(parts)
        finally:
            lock.release()
            shared.takeover_lock_ms = (time.perf_counter() - held) * 1000
    log.info("%s: the takeover held the append lock %.3f ms", shared.cfg.store_path_root_dir, shared.takeover_lock_ms)
    _catch_up_in_steps(parts.commitlog, lock)
    return parts


def _sync_what_the_leader_wrote(cfg: StoreConfig) -> None:
    """A takeover trusts the page cache (``take_over``), but what the dead leader wrote and had not flushed yet
    (the commit log under ASYNC_FLUSH, consume-queue units, index entries, a full index file whose flush the
    checkpoint was about to count, the timer files) is only there: this process's files open as flushed to their
    ends, so its services would never sync those pages, and its checkpoint would soon claim them durable (a power
    cut then loses them under a checkpoint that says otherwise: a full index file kept though empty, keys not
    found). So every file of the store is synced first, whoever dirtied its pages."""
    t0 = time.monotonic()
    root = cfg.store_path_root_dir
    n = sync_tree([*cfg.commit_log_paths(), cfg.consume_queue_path(), cfg.index_path(), cfg.checkpoint_path(),
                   timer_log_path(root), timer_wheel_path(root)])
    log.info("%s: %d files synced for the takeover in %.3f s", root, n, time.monotonic() - t0)


#: bytes of records a takeover's catch-up walks per step (a few milliseconds), the GIL free between steps
_CATCH_UP_STEP = 2 << 20
#: bytes of records the leader's follow walks and dispatches per pass at most (a pass a millisecond, or at once
#: while a backlog remains)
_PASS_STEP = 2 << 20
#: ... and while more than ``_BACKLOG_AT`` bytes wait: each step holds the GIL, and between two steps this process's
#: put thread keeps it until the step's thread has asked for a switch interval (5 ms); 2 MiB steps (about 2 ms)
#: then get a third of the process's time, and three writers putting flat out left the dispatch a gigabyte
#: (seconds) behind; 16 MiB steps keep it within tens of megabytes, at the price of this process's puts waiting
#: a step (about 10 ms) while a backlog lasts
_BACKLOG_STEP = 16 << 20
_BACKLOG_AT = 8 * _PASS_STEP


def _catch_up_in_steps(commitlog: CommitLog, lock: SharedLock) -> None:
    """The new leader's commit log walks what the others put during its recovery (hundreds of milliseconds of
    puts), before this process's puts move to it: in steps, so that its put thread, still putting through the
    appender, waits for the GIL a step at most, not the whole walk (the first put would make it, GIL held)."""
    core = commitlog.core
    end = -1
    while True:
        before, end = end, core.catch_up(_CATCH_UP_STEP)
        if end == before or lock.published_end - end <= _CATCH_UP_STEP:
            return
        time.sleep(0)               # the GIL offered to this process's put thread between steps


def _flush_before_returning(appender: CommitLog) -> Callable[[PutMessageResult, Message | MessageBatch],
                                                               PutMessageResult]:
    """A follower's SYNC_FLUSH: its put returns once the log is flushed past its record (by this process; the
    queue serialises concurrent flushes itself)."""

    def after_put(result: PutMessageResult, msg: Message | MessageBatch) -> PutMessageResult:
        flush_all(appender.queue)
        return result

    return after_put


class LeaderFollow(ServiceThread):
    """(The leader.) Catch the commit log up on every writer's records and dispatch them; publish how far."""

    def __init__(self, commitlog: CommitLog, reput: ReputService, lock: SharedLock, sync_flush: bool,
                 clock: Callable[[], int], stuck_ms: int = 5_000) -> None:
        super().__init__("LeaderFollow", clock)
        self.commitlog = commitlog
        self.reput = reput
        self.lock = lock
        self.sync_flush = sync_flush
        self.stuck_ns = stuck_ms * 1_000_000
        #: the last pass stopped at its step's end with more to take
        self._backlog = False
        #: the holder reported as stuck in its present hold (0: none)
        self._reported = 0

    def run(self) -> None:
        # one pass a millisecond while the log moves: each takes what the writers published meanwhile in one walk,
        # leaving the GIL to this process's puts in between; an idle log is looked at less and less often, down
        # to every ``_FOLLOW_IDLE_MS`` (the first message after a quiet spell is dispatched that much later)
        wait = _FOLLOW_MS
        while not self.is_stopped():
            wait = _FOLLOW_MS if self.pass_once() else min(wait * 2, _FOLLOW_IDLE_MS)
            if self._backlog:
                time.sleep(0)           # the next step at once, the GIL offered to this process's puts first
            else:
                self.wait_for_running(wait)
        last = self.lock.published_end
        while self.reput.reput_from < last and self.pass_once(wait=True):       # to the end, a step at a time
            pass

    def report_stuck(self) -> None:
        """Log, once per hold, a live holder that has kept the append lock past ``stuck_ms`` (never broken
        into: a holder that is alive may be paged out or stopped in a debugger; a dead one's lock passes on)."""
        held, holder = self.lock.held_for_ns, self.lock.holder_pid
        if held < self.stuck_ns or holder == 0:
            self._reported = 0
        elif self._reported != holder:
            self._reported = holder
            log.warning("the writers' append lock has been held by pid %d for %.1f s: puts of every writer wait "
                        "for it (it is not taken from a live process)", holder, held / 1e9)

    def pass_once(self, wait: bool = False) -> bool:
        """One catch-up and dispatch, of ``_PASS_STEP`` bytes at most, ``_BACKLOG_STEP`` while more than
        ``_BACKLOG_AT`` wait (each compiled walk holds the GIL: a backlog, such as what the writers put during a
        takeover's recovery, is taken in steps between which this process's puts get the GIL: a put holding the
        append lock while it waits for the GIL holds every writer); True when it moved. ``wait``: wait for this
        process's put lock (the last passes, at shutdown); else, while one of its puts holds it, the log's view is
        taken as it is (that put moves it on)."""
        self.report_stuck()
        try:
            behind = self.lock.published_end - self.lock.dispatched_end
            step = _BACKLOG_STEP if behind > _BACKLOG_AT else _PASS_STEP
            # not waiting for this process's put lock (but at the end): a put under way moves the view on itself
            end = caught = int(self.commitlog.core.catch_up(step, wait))
            if self.sync_flush:
                # queues follow the flushed offset under SYNC_FLUSH: nobody reads what a crash could take back
                end = min(end, flush_all(self.commitlog.queue))
            reached = self.reput.dispatch_step(end, step)
            moved = reached != self.lock.dispatched_end
            # more to take at once only while a step moves (a record the dispatch cannot pass is waited on)
            self._backlog = moved and (reached < end or self.lock.published_end - caught > _PASS_STEP)
            self.lock.dispatched_end = reached
            return moved
        except Exception:
            self._backlog = False
            log.exception("the leader's catch-up or dispatch failed")
            return False


class LeaderWatch(ServiceThread):
    """(A follower.) Take the lead when the leader's lock is free (its holder died or shut down); meanwhile let go
    of the commit-log files the leader's cleaning deleted."""

    def __init__(self, shared: SharedWriting, take_over: Callable[[], None]) -> None:
        super().__init__("LeaderWatch")
        self.shared = shared
        self.take_over = take_over

    def run(self) -> None:
        dropped_at = time.monotonic()
        while not self.is_stopped():
            self.wait_for_running(int(_WATCH_S * 1000))
            if self.is_stopped():
                return
            appender = self.shared.appender
            if appender is not None and time.monotonic() - dropped_at >= _DROP_DELETED_S:
                dropped_at = time.monotonic()
                appender.queue.drop_deleted_head()      # what the leader's cleaning deleted
            try:
                if self.shared.try_lead():
                    dead = self.shared.lock.leader_pid if self.shared.lock is not None else 0
                    if dead:
                        log.warning("%s: the leader (pid %d) is gone; this process (pid %d) takes over",
                                    self.shared.cfg.store_path_root_dir, dead, os.getpid())
                    else:       # the leader shut down (it clears its pid): not a death
                        log.info("%s: the leader shut down; this process (pid %d) takes over",
                                 self.shared.cfg.store_path_root_dir, os.getpid())
                    self.take_over()
                    return
            except Exception:
                # the lead is left to the others a while: a takeover holds every writer's puts while it recovers
                log.exception("taking over as the leader failed; trying again in %d s", _RETRY_S)
                ofd_unlock(self.shared.state.fd, LEADER)
                self.wait_for_running(_RETRY_S * 1000)
