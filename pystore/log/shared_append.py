"""A commit log that several writer processes append to (``share``), and the repair of a put whose writer died
holding the append lock (``TornPutRepair``).

Every process maps the same files. Appends are serialised by the writers' append lock (``_shared_lock``, in the
store's state file, ``shared_state``), taken inside each process's own put lock. Under it a process first moves
its view of the log to the published end, and takes its queue's next offset from the writers' queue-offset table
(in the same file), so that every put gets the next queue offset of its queue whichever process makes it, without
reading the others' records (``CommitLogCore._advance``, ``_take_offset``). Records from before the table began,
and from where it filled up, are walked instead, in C, as before the table: their headers give their queues'
offsets (``CommitLogCore._catch_up``). Then it writes as a sole writer does, with two marks in the page:
``reserved end`` before the bytes are written and ``published end`` once they are whole, the queue's new offset
stored in its slot just before (``CommitLogCore._reserve``, ``_shared_exit``).

A writer killed between the two marks leaves ``reserved end`` past ``published end``: the bytes between may be
a torn record, a blank written before a roll, or a record complete but never acknowledged. The next locker
(the robust mutex hands it over at once; an OFD lock is dropped by the kernel) zeroes them, file by file, as far
as the files exist, so that no reader and no later catch-up ever takes them for a record, gives the dead put's
queue back the offset it had taken (noted in the page before it reserved) and publishes the published end again
(a new generation). The records below the published end are whole: each was published
only after it was written (a release store), and each process's next catch-up walks and checks them.

RocketMQ has one writer per store; this is pystore's own (docs/format.md, "The writers' state page"). One
difference follows from it: a queue whose consume queue the leader's cleaning destroyed
(``clean_expired_consumer_queue``, ``clean_unused_topic``) keeps its next offset in the writers' table, where a
single writer (and RocketMQ) would start it at 0 again: every process would have to forget it at the same moment,
and offsets never go back.

Files made by another writer are mapped on the walk through the core's ``roll_file`` hook (the file queue
opens the existing file). The allocate service, file warming and the transient store pool write into files
outside the append lock, so a shared log makes its files inline, under the lock, and uses neither.
"""

from __future__ import annotations

import logging
import os

from pystore.log._shared_lock import SharedLock
from pystore.log.commitlog import CommitLog
from pystore.system.crashpoint import crashpoint

__all__ = ["TornPutRepair", "share", "unshare"]

log = logging.getLogger(__name__)

#: zeroes written per call when a torn put is repaired
_ZERO_CHUNK = 1 << 20


class TornPutRepair:
    """``repair()``: under the append lock, after its last holder died mid-put: zero ``[published, reserved)``
    and publish the published end again. Called by the core (``CommitLogCore.shared_repair``)."""

    def __init__(self, commitlog: CommitLog, lock: SharedLock) -> None:
        self.commitlog = commitlog
        self.lock = lock

    def __call__(self) -> None:
        torn = self.lock.needs_repair()
        if torn is None:
            return
        published, reserved = torn
        if reserved > published:
            self._zero(published, reserved)
        crashpoint("shared.repairing")
        log.warning("a writer died in the middle of a put: the %d bytes it reserved at commit-log offset %d are "
                    "zeroed (that put was never acknowledged)", max(0, reserved - published), published)
        self.lock.repaired(published)

    def _zero(self, start: int, end: int) -> None:
        queue = self.commitlog.queue
        size = queue.mapped_file_size
        off = start
        while off < end:
            file_start = off - off % size
            stop = min(end, file_start + size)
            path = queue.path_for(file_start)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                off = stop          # the writer died before it made the file: nothing of it was written
                continue
            try:
                # never past the file's size: a file whose creation was cut short is not grown here (its
                # next opener sizes it)
                limit = min(stop - file_start, os.fstat(fd).st_size)
                pos = off - file_start
                while pos < limit:
                    n = min(_ZERO_CHUNK, limit - pos)
                    pos += os.pwrite(fd, bytes(n), pos)
            finally:
                os.close(fd)
            off = stop


def share(commitlog: CommitLog, lock: SharedLock) -> TornPutRepair:
    """Append to ``commitlog`` under ``lock`` with other processes from now on; the caller has stopped the
    allocate service's made-ahead files (``commitlog.queue.allocate`` is None) and uses no transient pool."""
    if commitlog.queue.allocate is not None:
        raise ValueError("a shared commit log makes its files inline: stop the allocate service first")
    repair = TornPutRepair(commitlog, lock)
    commitlog.core.share(lock, repair)
    return repair


def unshare(commitlog: CommitLog) -> None:
    commitlog.core.share(None, None)
