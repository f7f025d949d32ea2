"""The writers' state page of a store that several processes write (``<root>/writers``): opening it, and who
initialises it.

Initialisation follows LMDB's lock file and SQLite's shared-memory file: every process that has the store
open holds a shared OFD lock on the page's dead-man byte (``_shared_lock.DEAD_MAN``) for as long as it is
open. An opener first tries to take that byte exclusively: when it can, no other process has the store open
(the kernel dropped the locks of any that died), so the page is whatever the last of them left, perhaps a
mutex some dead process held, and the opener writes a fresh one (``SharedLock.init_page``) before it lets
anyone else in by turning its lock into a shared one. When it cannot, the page is live: it waits for the
shared lock (an initialiser may hold the byte exclusively for a moment) and checks the page's magic and
version, refusing one it does not know rather than guessing at its layout.

The lock itself, its page layout and the repair of a put its holder died in: ``_shared_lock.pyx``.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import random
import time
from collections.abc import Callable

from pystore.errors import StoreError
from pystore.log._shared_lock import DEAD_MAN, PAGE_SIZE, SLOT_SIZE, SharedLock, ofd_try_lock, ofd_unlock, ofd_wait_lock
from pystore.system import forksafe

log = logging.getLogger("pystore.log.shared_state")

#: the state file's name under the store root
FILE_NAME = "writers"
#: how long a process waits for a page a dead sole opener left blank to be written by another (s)
_BLANK_PAGE_WAIT_S = 10
#: slots of the queue-offset table a sole opener makes when not told (``StoreConfig.shared_writers_queue_slots``)
QUEUE_SLOTS = 16384


class SharedStateError(StoreError):
    """The writers' state page cannot be used: ``path`` and why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__("%s: %s" % (path, reason))


class SharedState:
    """One process's handle on the state page: ``open`` maps it (initialising it when alone), ``lock`` is the
    append lock, ``close`` lets go (the last process out leaves the page for the next sole opener).

    ``first`` is True when this opener was alone and wrote the page (it then recovers the store's end and sets
    it with ``lock.repaired``/``publish_end`` before puts begin). ``queue_slots``: the size of the queue-offset
    table when this opener writes the page (the page's own when it joins)."""

    def __init__(self, root: str, prefer_mutex: bool = True, queue_slots: int = QUEUE_SLOTS) -> None:
        self.path = os.path.join(root, FILE_NAME)
        self.prefer_mutex = prefer_mutex
        self.queue_slots = queue_slots
        self.fd = -1
        self.map: mmap.mmap | None = None
        self.lock: SharedLock | None = None
        self.first = False

    def open(self, published_end: int = 0, recover_end: Callable[[], int] | None = None) -> SharedLock:
        """Map the page and return its lock; a sole opener writes a fresh page whose ends are
        ``recover_end()`` (called while it still holds the dead-man byte exclusively, so that nobody else can
        open the store, let alone put, before the end of the log is known), or ``published_end``. Raises
        ``SharedStateError`` for a file system without OFD locks or a page this version does not know; what
        ``recover_end`` raises leaves the page as it was for the next sole opener."""
        remote = network_file_system(os.path.dirname(self.path))
        if remote is not None:
            raise SharedStateError(self.path, "the store is on a %s file system: several writers need a local file "
                                   "system (its locks and shared mappings are per machine)" % remote)
        fd = self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = -1.0
        try:
            while True:
                try:
                    alone = ofd_try_lock(fd, DEAD_MAN, True)
                except OSError as e:
                    if e.errno in (errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                        raise SharedStateError(self.path, "the file system offers no open-file-description locks "
                                               "(%s): several writers need a local file system" % e.strerror) from None
                    raise
                if alone:
                    # the magic cleared first: if this process dies (or its recovery fails) before the page is
                    # written again, whoever opens next finds it blank, never the old page over a log whose end
                    # the recovery may have moved (``_join``)
                    if os.fstat(fd).st_size >= PAGE_SIZE:
                        os.pwrite(fd, bytes(8), 0)
                    m, lock = self._initialise(fd, recover_end() if recover_end is not None else published_end)
                    break
                ofd_wait_lock(fd, DEAD_MAN, False)
                joined = self._join(fd)
                if joined is not None:
                    m, lock = joined
                    break
                # a sole opener died while it wrote the page: one of those waiting writes it (the others wait)
                ofd_unlock(fd, DEAD_MAN)
                if deadline < 0:
                    deadline = time.monotonic() + _BLANK_PAGE_WAIT_S
                elif time.monotonic() > deadline:
                    raise SharedStateError(self.path, "the writers' state page is blank and no process could write "
                                           "it in %d s" % _BLANK_PAGE_WAIT_S)
                time.sleep(random.uniform(0.001, 0.01))
        except BaseException:
            ofd_unlock(fd, DEAD_MAN)
            os.close(fd)
            self.fd = -1
            raise
        self.fd, self.map, self.lock = fd, m, lock
        forksafe.track(self)
        return lock

    def _map(self, size: int) -> mmap.mmap:
        """The page mapped through a descriptor of its own: Python's mmap keeps a duplicate of the descriptor it
        is given, and one of ``fd`` would share its open file description, so the locks on it (which the
        kernel releases when the last descriptor of that description closes) would live as long as the
        mapping, in a forked child too (``_drop_after_fork`` closes ``fd``, and cannot close the mapping)."""
        mfd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            return mmap.mmap(mfd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(mfd)

    def _initialise(self, fd: int, end: int) -> tuple[mmap.mmap, SharedLock]:
        """(Alone, the log's end known, the magic cleared.) A fresh page and an empty table: the table cut off and
        grown back, zeros, its blocks allocated (a slot first written on a full disk would otherwise kill its
        writer with SIGBUS, holding the append lock); the page written, its magic last (``init_page``)."""
        size = PAGE_SIZE + self.queue_slots * SLOT_SIZE
        os.ftruncate(fd, PAGE_SIZE)
        os.ftruncate(fd, size)
        if size > PAGE_SIZE:
            try:
                os.posix_fallocate(fd, PAGE_SIZE, size - PAGE_SIZE)
            except OSError as e:
                raise SharedStateError(self.path, "cannot allocate the writers' queue-offset table (%d bytes): %s"
                                       % (size - PAGE_SIZE, e.strerror)) from None
        m = self._map(size)
        lock = SharedLock(m, fd)
        try:
            lock.init_page(end, self.prefer_mutex, self.queue_slots)
        except BaseException:
            del lock
            m.close()
            raise
        m.flush()
        # a shared lock replaces the exclusive one at once (no moment without either)
        ofd_wait_lock(fd, DEAD_MAN, False)
        self.first = True
        log.info("%s: writers' state page initialised (%s lock, %d queue slots)", self.path, lock.kind_name,
                 self.queue_slots)
        return m, lock

    def _join(self, fd: int) -> tuple[mmap.mmap, SharedLock] | None:
        """(Holding the dead-man byte shared.) Map the page others wrote and check it; None when it is blank (its
        writer died before it was whole)."""
        size = os.fstat(fd).st_size
        if size < PAGE_SIZE:
            if size == 0:
                return None
            raise SharedStateError(self.path, "the writers' state page is %d bytes (%d expected)" % (size, PAGE_SIZE))
        m = self._map(size)
        if m[:8] == bytes(8):
            m.close()
            return None
        lock = SharedLock(m, fd)
        why = lock.check_page()
        if why is not None:
            del lock
            m.close()
            raise SharedStateError(self.path, why)
        return m, lock

    def alone(self) -> bool:
        """Whether no other process has the store open now (a moment's exclusive try of the dead-man byte,
        given back at once)."""
        assert self.fd >= 0
        if ofd_try_lock(self.fd, DEAD_MAN, True):
            ofd_wait_lock(self.fd, DEAD_MAN, False)
            return True
        return False

    def _drop_after_fork(self) -> None:
        """In a forked child: let go of the inherited descriptor, which holds the dead-man byte, the leader's
        byte and perhaps the append lock, without unlocking anything (they are the parent's;
        ``pystore.system.forksafe``). The page stays mapped: the child's copy of the store only reads, and takes no
        lock of the page."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        if self.fd < 0:
            return
        forksafe.untrack(self)
        if self.lock is not None:
            self.lock.detach()    # gives back the mapping's export
            self.lock = None
        if self.map is not None:
            self.map.close()
            self.map = None
        ofd_unlock(self.fd, DEAD_MAN)
        os.close(self.fd)
        self.fd = -1


#: file system types whose locks or shared mappings do not reach every process that maps the files
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "afs", "ceph", "glusterfs",
                        "fuse.glusterfs", "lustre", "gfs2", "ocfs2"})


def network_file_system(path: str, mounts: str = "/proc/mounts") -> str | None:
    """The type of the file system holding ``path`` when it is a network one (``NETWORK_FS``), else None (also
    when ``mounts`` cannot be read)."""
    try:
        with open(mounts) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    best, fstype = "", ""
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, fstype = mount, fields[2]
    return fstype if fstype in NETWORK_FS else None


def describe(root: str) -> dict[str, object] | None:
    """The writers' state page of the store at ``root`` as ``pystore inspect`` shows it (a copy of the file read
    through ``SharedLock``, so the layout has one reader: no lock is taken and nothing is written), or None when
    the store has no page this version knows. ``held_for_s``: how long the present holder of the append lock
    has held it (a live holder stuck for long shows here; it is never broken into)."""
    try:
        with open(os.path.join(root, FILE_NAME), "rb") as f:
            page = f.read(PAGE_SIZE)
    except OSError:
        return None
    if len(page) < PAGE_SIZE:
        return None
    copy = SharedLock(bytearray(page), -1)
    if copy.check_page(table=False) is not None:
        return None
    return {"lock": copy.kind_name, "generation": copy.generation, "published_end": copy.published_end,
            "reserved_end": copy.reserved_end, "dispatched_end": copy.dispatched_end,
            "holder_pid": copy.holder_pid, "held_for_s": round(copy.held_for_ns / 1e9, 3),
            "leader_pid": copy.leader_pid, "acquisitions": copy.acquisitions, "recoveries": copy.recoveries,
            "queue_slots": copy.queue_slots, "queue_slots_used": copy.queue_slots_used,
            "walk_from": copy.walk_from}
