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
from collections.abc import Callable

from pystore.errors import StoreError
from pystore.log._shared_lock import DEAD_MAN, PAGE_SIZE, SharedLock, ofd_try_lock, ofd_unlock, ofd_wait_lock

log = logging.getLogger("pystore.log.shared_state")

#: the state file's name under the store root
FILE_NAME = "writers"


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
    it with ``lock.repaired``/``publish_end`` before puts begin)."""

    def __init__(self, root: str, prefer_mutex: bool = True) -> None:
        self.path = os.path.join(root, FILE_NAME)
        self.prefer_mutex = prefer_mutex
        self.fd = -1
        self.map: mmap.mmap | None = None
        self.lock: SharedLock | None = None
        self.first = False

    def open(self, published_end: int = 0, recover_end: Callable[[], int] | None = None) -> SharedLock:
        """Map the page and return its lock; a sole opener writes a fresh page whose ends are
        ``recover_end()`` (called while it still holds the dead-man byte exclusively, so that nobody else can
        open the store, let alone put, before the end of the log is known), or ``published_end``. Raises
        ``SharedStateError`` for a file system without OFD locks or a page this version does not know; what
        ``recover_end`` raises leaves the page for the next sole opener."""
        remote = network_file_system(os.path.dirname(self.path))
        if remote is not None:
            raise SharedStateError(self.path, "the store is on a %s file system: several writers need a local file "
                                   "system (its locks and shared mappings are per machine)" % remote)
        fd = self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                alone = ofd_try_lock(fd, DEAD_MAN, True)
            except OSError as e:
                if e.errno in (errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise SharedStateError(self.path, "the file system offers no open-file-description locks (%s): "
                                           "several writers need a local file system" % e.strerror) from None
                raise
            if alone:
                # nobody else has the store open: the page is ours to write
                if os.fstat(fd).st_size < PAGE_SIZE:
                    os.ftruncate(fd, PAGE_SIZE)
                m = mmap.mmap(fd, PAGE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                lock = SharedLock(m, fd)
                try:
                    lock.init_page(recover_end() if recover_end is not None else published_end, self.prefer_mutex)
                except BaseException:
                    del lock
                    m.close()
                    raise
                m.flush()
                # a shared lock replaces the exclusive one at once (no moment without either)
                ofd_wait_lock(fd, DEAD_MAN, False)
                self.first = True
                log.info("%s: writers' state page initialised (%s lock)", self.path, lock.kind_name)
            else:
                ofd_wait_lock(fd, DEAD_MAN, False)
                if os.fstat(fd).st_size < PAGE_SIZE:
                    raise SharedStateError(self.path, "the writers' state page is %d bytes (%d expected)"
                                           % (os.fstat(fd).st_size, PAGE_SIZE))
                m = mmap.mmap(fd, PAGE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                lock = SharedLock(m, fd)
                why = lock.check_page()
                if why is not None:
                    del lock
                    m.close()
                    raise SharedStateError(self.path, why)
        except BaseException:
            ofd_unlock(fd, DEAD_MAN)
            os.close(fd)
            self.fd = -1
            raise
        self.fd, self.map, self.lock = fd, m, lock
        return lock

    def alone(self) -> bool:
        """Whether no other process has the store open now (a moment's exclusive try of the dead-man byte,
        given back at once)."""
        assert self.fd >= 0
        if ofd_try_lock(self.fd, DEAD_MAN, True):
            ofd_wait_lock(self.fd, DEAD_MAN, False)
            return True
        return False

    def close(self) -> None:
        if self.fd < 0:
            return
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
    if copy.check_page() is not None:
        return None
    return {"lock": copy.kind_name, "generation": copy.generation, "published_end": copy.published_end,
            "reserved_end": copy.reserved_end, "dispatched_end": copy.dispatched_end,
            "holder_pid": copy.holder_pid, "held_for_s": round(copy.held_for_ns / 1e9, 3),
            "leader_pid": copy.leader_pid, "acquisitions": copy.acquisitions, "recoveries": copy.recoveries}
