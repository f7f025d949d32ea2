"""The table of a store's consume queues (``ConsumeQueueStore``): every ``consumequeue/<topic>/<queue_id>/``
queue (``consume_queue.ConsumeQueue``) keyed by (topic, queue id), with what is done to all of them at once:
loading the folders (a queue whose files cannot be trusted is rebuilt by a writer, refused by a reader),
recovery, cutting units past the commit log's end (a damaged queue of a store with an archive keeps its units of
archived messages: ``keep_below``), flushing, following a live writer from a read-only store,
and making each busy queue's next file ahead.

The next file made ahead (``keep_ready``): the flush makes a queue's next file once its last file is half
full, under a private name in the ready folder beside the queues' folder (``<root>/consumequeue.ready/``,
``READY_DIR_SUFFIX``), and hands it to the queue's core; the roll renames it into the queue's folder and
publishes it in C (``ConsumeQueueCore``), so dispatch does not stop to create a file or call into Python. A
file is in the queue's folder only once it is the queue's: readers, recovery and RocketMQ never see a
made-ahead file (RocketMQ makes queue files inline; a broker taking the store over ignores the ready folder,
which pystore empties when a writer opens the store). The rename is durable by the queue's next flush, as a
file made inline is.

Thread-safety: the table is guarded by a lock; each queue has one writer (see ``consume_queue``).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable

from pystore.engine.queue_damage import QueueAction, repair
from pystore.engine.recovery_plan import Refusal
from pystore.errors import StoreCorruptedError
from pystore.queue._units import ConsumeQueueCore
from pystore.queue.consume_queue import ConsumeQueue, queue_id_of
from pystore.system.durable import fsync_dir
from pystore.system.service import Clock

__all__ = ["READY_DIR_SUFFIX", "ConsumeQueueStore"]

log = logging.getLogger(__name__)

#: the ready folder is the queues' folder's path with this appended (``consumequeue.ready``)
READY_DIR_SUFFIX = ".ready"


class ConsumeQueueStore:
    """Every consume queue of a store, keyed by (topic, queue id)."""

    def __init__(self, store_path: str, file_size: int, read_only: bool = False,
                 on_error: Callable[[str], None] | None = None, window: int = -1, clock: Clock | None = None) -> None:
        self.store_path = store_path
        #: the store's clock, handed to each queue's files (the destroys' forcing time)
        self.clock = clock
        self.file_size = file_size
        self.read_only = read_only
        #: disk blocks allocated ahead of each queue's writer (``MappedFile(window=)``)
        self.window = window
        self.on_error = on_error
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: the same keys to the queues' compiled cores (``table``), changed with ``_queues`` under the lock
        self._cores: dict[tuple[str, int], ConsumeQueueCore] = {}
        self._lock = threading.Lock()
        #: where queues' next files are made ahead (``keep_ready``), or None: made inline when needed
        self.ready_dir: str | None = None
        self._ready_made = 0
        #: queues whose files could not be trusted, deleted to be rebuilt from the commit log (load, recover)
        self.rebuilt: list[ConsumeQueue] = []
        #: (a writer with an archive) the local commit log's first offset: a queue rebuilt from the local log keeps
        #: its units below it (``ConsumeQueue.keep_units_below``), which no walk of the local log can write again
        self.keep_below = 0
        self.load_error: StoreCorruptedError | None = None
        #: folders skipped as not a queue id, each warned about once
        self._skipped: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return len(self._queues)

    def queues(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def items(self) -> list[tuple[tuple[str, int], ConsumeQueue]]:
        return list(self._queues.items())

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    @property
    def table(self) -> dict[tuple[str, int], ConsumeQueueCore]:
        """The live table of the queues' compiled cores, for the compiled reader's lookups without a Python frame
        (``_queue_reader.QueueReader``) and recovery's gap walk: read it, never change it (this class adds and
        removes, under its lock)."""
        return self._cores

    def find_or_create_core(self, topic: str, queue_id: int) -> ConsumeQueueCore:
        """``find_or_create``'s queue's core: what dispatch's ``create_queue`` hands a cell (once per queue)."""
        return self.find_or_create(topic, queue_id).core

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    if topic in ("", ".", "..") or "/" in topic or "\0" in topic:
                        # only a damaged record can carry such a topic (puts refuse it); never let it name a
                        # folder outside consumequeue/
                        raise ValueError("topic %r cannot name a consume-queue folder" % topic)
                    cq = ConsumeQueue(topic, queue_id, self.store_path, self.file_size, self.read_only, self.window,
                                      self.clock)
                    cq.on_error = self.on_error
                    self._cores[key] = cq.core
                    self._queues[key] = cq
        return cq

    def load(self) -> bool:
        """Map every ``<topic>/<int queue id>`` folder (other names are skipped, as RocketMQ does).

        A queue whose files cannot be trusted as a whole (``ConsumeQueue.load``: a hole, a file cut short or
        grown) is not read as it is: a writer deletes its files and lists it in ``rebuilt``, and recovery
        builds it again from the commit log, the source of truth; a read-only opener cannot rebuild, so the
        open fails with ``load_error`` (a ``StoreCorruptedError`` naming the file): ``rebuild_or_refuse``."""
        self.rebuilt = []
        self.load_error = None
        for topic, qid in self._folders():
            cq = self.find_or_create(topic, qid)
            if not cq.load():
                self.load_error = self.rebuild_or_refuse(cq)
                if self.load_error is not None:
                    log.error("%s", self.load_error)
                    return False
        return True

    def rebuild_or_refuse(self, cq: ConsumeQueue, damage: Refusal | None = None) -> StoreCorruptedError | None:
        """A queue whose files cannot be trusted (``damage``, else ``cq.damage``), as ``queue_damage.repair``
        decides: a writer deletes them, to be rebuilt from the commit log (``rebuilt``); a reader cannot
        rebuild, and gets the error to refuse the store with."""
        damage = damage if damage is not None else cq.damage
        assert damage is not None
        decision = repair(damage, read_only=self.read_only)
        why = decision.why
        if decision.action is QueueAction.REFUSE:
            return StoreCorruptedError(why.path if why.path is not None else cq.folder, why.offset, why.reason)
        if self.keep_below > 0:
            kept = cq.keep_units_below(self.keep_below)
            if kept > 0:
                log.warning("consume queue %s/%d: %s at offset %d; its units up to queue offset %d (archived "
                            "messages below the local commit log) are kept, the rest is rebuilt from the commit log",
                            cq.topic, cq.queue_id, why.reason, why.offset, kept)
                self.rebuilt.append(cq)
                return None
        gone = cq.discard_files()
        log.warning("consume queue %s/%d: %s at offset %d; its %d file(s) are deleted and the queue is rebuilt from "
                    "the commit log", cq.topic, cq.queue_id, why.reason, why.offset, len(gone))
        self.rebuilt.append(cq)
        return None

    def _folders(self) -> list[tuple[str, int]]:
        """``(topic, queue id)`` of every queue folder. A name that is not a Java int (RocketMQ's
        ``Integer.parseInt`` fails) is skipped with a warning, as RocketMQ skips it."""
        found: list[tuple[str, int]] = []
        if not os.path.isdir(self.store_path):
            return found
        for topic in sorted(os.listdir(self.store_path)):
            tdir = os.path.join(self.store_path, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                qid = queue_id_of(qname)
                if qid is None:
                    if qname.lstrip("-").isdigit() and (topic, qname) not in self._skipped:
                        # once: a reader lists the folders again at every refresh
                        self._skipped.add((topic, qname))
                        log.warning("%s: not a queue id (beyond 32 bits, or not written as a store writes one); skipped",
                                    os.path.join(tdir, qname))
                    continue
                if os.path.isdir(os.path.join(tdir, qname)):
                    found.append((topic, qid))
        return found

    def recover(self) -> int:
        """Recover every queue; the highest commit-log offset any of them references (-1 if none). A queue
        whose units have a hole (``ConsumeQueue.recover``) is rebuilt like one whose files could not be
        loaded; a read-only opener refuses it (``StoreCorruptedError``)."""
        max_phy = -1
        for cq in self.queues():
            if not cq.recover():
                error = self.rebuild_or_refuse(cq)
                if error is not None:
                    raise error
            if cq.get_max_offset_in_queue() > 0:
                max_phy = max(max_phy, cq.max_physic_offset)
        return max_phy

    def truncate_dirty(self, phy_offset: int) -> list[int]:
        """Cut units pointing at or past ``phy_offset``; returns where each queue that was cut now ends (its
        records after that point, if a damaged unit rather than a crash put it there, are re-dispatched)."""
        cut = []
        for cq in self.queues():
            if cq.max_physic_offset > phy_offset:
                cq.truncate_dirty_logic_files(phy_offset)
                cut.append(cq.max_physic_offset)
        return cut

    def keep_ready(self) -> None:
        """(A writer, holding the store's lock, before its services start.) Make queues' next files ahead,
        in the ready folder, from the next flush on; what an earlier process left there is deleted."""
        if self.read_only:
            return
        self.ready_dir = os.path.normpath(self.store_path) + READY_DIR_SUFFIX
        if os.path.isdir(self.ready_dir):
            shutil.rmtree(self.ready_dir, ignore_errors=True)

    def fill_ready(self) -> None:
        """(The flush service, after a flush.) Each queue's next file made ahead once its last is half full."""
        ready_dir = self.ready_dir
        if ready_dir is None:
            return
        for cq in self.queues():
            try:
                cq.fill_ready(ready_dir, self._ready_name)
            except OSError:
                # the roll makes the file inline then, as without a ready folder; a full disk says so there
                log.warning("cannot make the next file of consume queue %s/%d ahead", cq.topic, cq.queue_id,
                            exc_info=True)

    def _ready_name(self) -> str:
        """A made-ahead file's name in the ready folder: this process's, never given twice."""
        self._ready_made += 1
        return "%d-%d" % (os.getpid(), self._ready_made)

    def flush(self, least_pages: int) -> bool:
        """Flush each queue's file at its flushed position. A full flush (``least_pages`` 0: the thorough
        one, whose checkpoint claims every unit built before it began, and shutdown's) goes on file by file
        to each queue's end: RocketMQ flushes one file a call, so a queue more than a file ahead of its
        flusher had units the checkpoint claimed that no sync had written. False when a queue's flush failed
        (logged): the checkpoint must then not claim the queues."""
        ok = True
        for cq in self.queues():
            try:
                for _ in range(len(cq.queue.files) + 1 if least_pages == 0 else 1):
                    if cq.flush(least_pages):
                        break
            except OSError:
                ok = False
                log.exception("flushing consume queue %s/%d failed", cq.topic, cq.queue_id)
        self.fill_ready()
        return ok

    def remove(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        with self._lock:
            self._cores.pop((topic, queue_id), None)
            cq = self._queues.pop((topic, queue_id), None)
        if cq is not None:
            cq.drop_ready()
        return cq

    def destroy_all(self) -> None:
        with self._lock:
            for cq in self._queues.values():
                cq.destroy()
            self._queues.clear()
            self._cores.clear()
        if not self.read_only:
            shutil.rmtree(self.store_path, ignore_errors=True)
            if self.ready_dir is not None:
                shutil.rmtree(self.ready_dir, ignore_errors=True)
            fsync_dir(os.path.dirname(os.path.abspath(self.store_path)))

    def close(self) -> None:
        with self._lock:
            for cq in self._queues.values():
                cq.close()
        if self.ready_dir is not None:
            try:
                os.rmdir(self.ready_dir)       # empty now; a store that never made a file ahead has none
            except OSError:
                pass

    def refresh_read_only(self, min_commit_log_offset: int = -1) -> None:
        self.load_new()
        for cq in self.queues():
            cq.refresh_read_only(min_commit_log_offset)

    def refresh_queue_read_only(self, topic: str, queue_id: int,
                                min_commit_log_offset: int = -1) -> ConsumeQueue | None:
        """Read-only: follow one queue (mapping it if the writer created it since)."""
        cq = self._queues.get((topic, queue_id))
        if cq is None:
            if not os.path.isdir(os.path.join(self.store_path, topic, str(queue_id))):
                return None
            cq = self.find_or_create(topic, queue_id)
            _load_live(cq)
        cq.refresh_read_only(min_commit_log_offset)
        return cq

    def load_new(self) -> None:
        """Read-only: map queues created since load (a queue whose files cannot be trusted stays unmapped)."""
        for key in self._folders():
            if key not in self._queues:
                cq = self.find_or_create(*key)
                _load_live(cq)


#: times a reader's recovery of a queue looks again at a hole with units after it
_LIVE_RECOVER_TRIES = 3


def _load_live(cq: ConsumeQueue) -> None:
    """A reader maps a queue a live writer may be filling: its recovery walks the units while the writer adds
    more, so an empty unit it stopped at may be written by the time it finds the valid ones after it (a hole,
    to a recovery that assumes nobody writes). It looks again before it leaves the queue damaged."""
    if not cq.load():
        return
    tries = _LIVE_RECOVER_TRIES
    while not cq.recover() and tries:
        tries -= 1
        cq.damage = None
