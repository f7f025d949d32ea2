"""The power-cut FUSE filesystem (test-only): a pass-through mount that remembers what is not yet durable.

Job: the tests run a writer (a pystore store) on the mount, kill it, then "cut the power": this process
writes into an output folder exactly what a machine that lost power at that moment could show after reboot,
given the metadata model chosen at mount time. It runs as its own process (started by
``tests/powerloss/powercut.py``), so a test never serves FUSE requests for its own I/O and cannot deadlock.

Layout (all folders are given on the command line):

* ``live/`` -- the backing folder; every request passes through to it, every read is served from it. It is
  what the page cache of a running machine would show.
* ``scratch/data/<ino>`` -- the durable bytes of each file (by our own inode number, never reused), as the
  "disk" holds them; absent means empty.
* in memory: the durable namespace (``durable_dirs``: for each directory inode the entries the disk holds,
  name -> inode) and each file's pending list: the operations on it since it was last made durable.

A pending operation is ``("w", offset, bytes)`` (a write: through ``write(2)``, or a dirty mmap page the
kernel wrote back, which reaches us as the same FUSE write), ``("t", size)`` (a size change) or
``("x", size)`` (an extension to at least ``size``: see :meth:`PowerCutOps.write`).

Durability of data, in both models: a file's pending list is applied to its durable bytes, in order, by
``fsync``/``fdatasync`` of that file (``msync(MS_SYNC)`` on a mapping reaches FUSE as write-back of the
dirty pages then FSYNC). ``sync``/``syncfs`` write dirty pages back but send no FUSE request that says
"durable" (the kernel only forwards SYNCFS to virtiofs), so they make nothing durable here.

Metadata models (``--model``):

* ``journal`` -- a journaling file system: create, unlink, rename, mkdir, rmdir and explicit size changes
  (``ftruncate``, ``O_TRUNC``, a ``posix_fallocate``) are durable at once and in order; data only after
  the file's fsync. A size growth by an appending write goes with that write (ext4 ``data=ordered``: the
  size is committed with the data it covers).
* ``strict`` -- bare POSIX: a directory's entries become durable only by an fsync of that directory (FUSE
  ``fsyncdir``: ``fsync`` of a directory fd); the durable entry list of the directory is then replaced by
  its live one. A file's size change (truncate, fallocate) is a pending operation of that file. A rename
  across two directories of which only the target is fsynced leaves the name in both (a simplification:
  each directory is made durable on its own).

``fallocate``: pyfuse3 (3.5) does not implement the FUSE FALLOCATE op, so the kernel answers EOPNOTSUPP.
``fallocate(FALLOC_FL_ZERO_RANGE)`` then fails and pystore falls back to writing zeros through its mapping;
glibc's ``posix_fallocate`` falls back to writing one zero byte per 4 KiB block past the end of the file.
Those one-byte zero writes at or past the end of the file are recorded as one ``("x", size)`` extension
(coalesced), not as thousands of writes: writing zeros past the end changes nothing but the size. In the
journal model such an extension is durable at once (as a real ``fallocate`` would be). A writer killed
inside glibc's loop leaves a short file, which a real fallocate never does: writer processes preload
``fallocate_shim.c`` (``PowerCutFS.writer_env``), which turns the fallback into one ``ftruncate``.

Crash (control command ``crash``): the layer freezes (every later request still reaches ``live/`` but
no longer changes the durable state or the pending lists -- the kernel writes the dead writer's dirty pages
back at close and unmount, and those must be lost), then materializes the durable namespace into an output
folder, each file from its durable bytes plus the pending operations the crash mode keeps:

* ``drop`` -- none (every unsynced write lost);
* ``all`` -- all (a clean shutdown of the "disk"; a control);
* ``subset`` -- each pending operation kept with probability ``keep_prob``, independently, from
  ``random.Random(seed)`` (write-back in any order);
* ``torn`` -- all, except the last pending write of one file (``torn_file``, else chosen by the seed among
  files with pending writes), of which only a prefix ending at a 512-byte sector boundary (absolute in the
  file) survives: a torn write;
* ``subset+torn`` -- ``subset``, then the last kept write of one file torn.

Pending namespace changes (strict model) are always lost. ``crash`` can be called again after the first
time: each call materializes the same frozen state into a new folder (so one killed writer gives several
outcomes).

Control channel: a unix stream socket, one JSON object per line each way (see :meth:`Control.handle`).

Usage: ``python fuse_server.py --live L --scratch S --mount M --control SOCK --model journal|strict``.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import random
import shutil
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyfuse3
import trio

log = logging.getLogger("powercut.server")

SECTOR = 512
ROOT = pyfuse3.ROOT_INODE
#: Kernel caches of names and attributes: every change goes through this mount, so the kernel's view is
#: never stale; a second keeps lookups cheap.
CACHE_TIMEOUT = 1.0
#: open(2) flags not passed to the backing file: O_APPEND because the kernel already turned the append into
#: an offset (and pwrite with O_APPEND would ignore it); O_TRUNC because a truncate must be recorded.
_STRIP = os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_TRUNC | os.O_NOCTTY


Op = tuple  # ("w", off, bytes) | ("t", size) | ("x", size)


@dataclass
class Node:
    ino: int
    is_dir: bool
    parent: int | None  # None once unlinked (the inode lives on while open, and in the durable namespace)
    name: bytes
    children: dict[bytes, int] = field(default_factory=dict)
    fds: set[int] = field(default_factory=set)


@dataclass
class Stats:
    writes: int = 0
    write_bytes: int = 0
    extensions: int = 0
    fsync: int = 0
    fdatasync: int = 0
    fsyncdir: int = 0
    truncates: int = 0
    ignored_after_crash: int = 0
    crashes: int = 0


def apply_op(fd: int, op: Op) -> None:
    """Apply one pending operation to an open file (durable bytes or an output copy)."""
    kind = op[0]
    if kind == "w":
        data = op[2]
        done = 0
        while done < len(data):
            done += os.pwrite(fd, data[done:] if done else data, op[1] + done)
    elif kind == "t":
        os.ftruncate(fd, op[1])
    elif kind == "x":
        if os.fstat(fd).st_size < op[1]:
            os.ftruncate(fd, op[1])
    else:  # pragma: no cover - a programming error
        raise ValueError("unknown pending op %r" % (kind,))


class PowerCutOps(pyfuse3.Operations):
    """Pass-through operations that record the pending state (see the module docstring)."""

    enable_writeback_cache = False  # write-through: every write(2) reaches us at once, in order

    def __init__(self, live: Path, scratch: Path, model: str) -> None:
        super().__init__()
        if model not in ("journal", "strict"):
            raise ValueError("model must be journal or strict, not %r" % model)
        self.live = live
        self.data_dir = scratch / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.model = model
        self.nodes: dict[int, Node] = {ROOT: Node(ROOT, True, None, b"")}
        self.next_ino = ROOT + 1
        self.fh_ino: dict[int, int] = {}
        self.durable_dirs: dict[int, dict[bytes, int]] = {}
        self.pending: dict[int, list[Op]] = {}
        self.crashed = False
        self.stats = Stats()
        self._scan(ROOT, live)

    # -- inodes and paths ----------------------------------------------------------------------

    def _scan(self, ino: int, path: Path) -> None:
        """Adopt what ``live/`` already holds as durable (a test may start from an existing store)."""
        node = self.nodes[ino]
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            child = self._new_node(entry.is_dir(follow_symlinks=False), ino, os.fsencode(entry.name))
            node.children[child.name] = child.ino
            if child.is_dir:
                self._scan(child.ino, Path(entry.path))
            else:
                shutil.copyfile(entry.path, self._data_path(child.ino))
        self.durable_dirs[ino] = dict(node.children)

    def _new_node(self, is_dir: bool, parent: int, name: bytes) -> Node:
        node = Node(self.next_ino, is_dir, parent, name)
        self.next_ino += 1
        self.nodes[node.ino] = node
        return node

    def _node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _path(self, node: Node) -> bytes:
        if node.ino == ROOT:
            return os.fsencode(self.live)
        parts = []
        while node.ino != ROOT:
            if node.parent is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            parts.append(node.name)
            node = self.nodes[node.parent]
        return os.path.join(os.fsencode(self.live), *reversed(parts))

    def _child_path(self, parent: Node, name: bytes) -> bytes:
        return os.path.join(self._path(parent), name)

    def _data_path(self, ino: int) -> str:
        return str(self.data_dir / str(ino))

    def _stat(self, node: Node) -> os.stat_result:
        if node.parent is None and node.ino != ROOT:
            for fd in node.fds:  # unlinked but open: the open descriptor still knows it
                return os.fstat(fd)
            raise pyfuse3.FUSEError(errno.ENOENT)
        return os.lstat(self._path(node))

    def _attr(self, node: Node) -> pyfuse3.EntryAttributes:
        st = self._stat(node)
        attr = pyfuse3.EntryAttributes()
        for name in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize", "st_blocks",
                     "st_atime_ns", "st_mtime_ns", "st_ctime_ns"):
            setattr(attr, name, getattr(st, name))
        attr.st_ino = node.ino
        attr.generation = 0
        attr.entry_timeout = CACHE_TIMEOUT
        attr.attr_timeout = CACHE_TIMEOUT
        return attr

    # -- the durable model ---------------------------------------------------------------------

    def _frozen(self) -> bool:
        if self.crashed:
            self.stats.ignored_after_crash += 1
        return self.crashed

    def _namespace_changed(self, *dirs: int) -> None:
        """Journal model: a directory change is durable at once (strict: only at the directory's fsync)."""
        if self.model == "journal" and not self._frozen():
            for d in dirs:
                self.durable_dirs[d] = dict(self.nodes[d].children)

    def _record(self, ino: int, op: Op) -> None:
        if self._frozen():
            return
        ops = self.pending.setdefault(ino, [])
        if op[0] == "x" and ops and ops[-1][0] == "x":
            ops[-1] = op  # posix_fallocate's emulation: one extension, not one op per block
        else:
            ops.append(op)

    def _apply_durable(self, ino: int, ops: list[Op]) -> None:
        fd = os.open(self._data_path(ino), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for op in ops:
                apply_op(fd, op)
        finally:
            os.close(fd)

    def _size_changed(self, ino: int, op: Op) -> None:
        """An explicit size change: durable at once in the journal model, pending in the strict one."""
        if self.model == "strict":
            self._record(ino, op)
            return
        if self._frozen():
            return
        self._apply_durable(ino, [op])
        if op[0] == "t":  # writes still pending past the new end were cut off with the page cache
            size = op[1]
            kept: list[Op] = []
            for p in self.pending.get(ino, []):
                if p[0] == "w" and p[1] + len(p[2]) > size:
                    if p[1] < size:
                        kept.append(("w", p[1], p[2][: size - p[1]]))
                elif p[0] == "x" and p[1] > size:
                    kept.append(("x", size))
                else:
                    kept.append(p)
            self.pending[ino] = kept

    def _sync(self, ino: int) -> None:
        if self._frozen():
            return
        ops = self.pending.pop(ino, [])
        self._apply_durable(ino, ops)

    # -- FUSE operations -----------------------------------------------------------------------

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        if name == b".":
            return self._attr(parent)
        if name == b"..":
            return self._attr(self.nodes[parent.parent or ROOT])
        ino = parent.children.get(name)
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(self.nodes[ino])

    async def forget(self, inode_list: Any) -> None:
        pass  # inodes are kept for the life of the mount: the durable namespace may still name them

    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        return self._attr(self._node(inode))

    async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        target: int | bytes = fh if fh is not None else self._path(node)
        if fields.update_size:
            os.truncate(target, attr.st_size)
            self.stats.truncates += 1
            self._size_changed(inode, ("t", attr.st_size))
        if fields.update_mode:
            os.chmod(target, stat.S_IMODE(attr.st_mode))
        if fields.update_uid or fields.update_gid:
            os.chown(target, attr.st_uid if fields.update_uid else -1, attr.st_gid if fields.update_gid else -1)
        if fields.update_atime or fields.update_mtime:
            st = self._stat(node)
            atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
            mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
            os.utime(target, ns=(atime, mtime))
        return self._attr(node)

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        os.mkdir(self._child_path(parent, name), mode)
        node = self._new_node(True, parent_inode, name)
        parent.children[name] = node.ino
        self._namespace_changed(parent_inode)
        return self._attr(node)

    def _detach(self, parent: Node, name: bytes) -> None:
        ino = parent.children.pop(name)
        self.nodes[ino].parent = None

    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        parent = self._node(parent_inode)
        os.unlink(self._child_path(parent, name))
        self._detach(parent, name)
        self._namespace_changed(parent_inode)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        parent = self._node(parent_inode)
        os.rmdir(self._child_path(parent, name))
        self._detach(parent, name)
        self._namespace_changed(parent_inode)

    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx: Any) -> None:
        old_parent, new_parent = self._node(parent_inode_old), self._node(parent_inode_new)
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)  # not needed by pystore; not modelled
        if flags & pyfuse3.RENAME_NOREPLACE and name_new in new_parent.children:
            raise pyfuse3.FUSEError(errno.EEXIST)
        os.rename(self._child_path(old_parent, name_old), self._child_path(new_parent, name_new))
        if name_new in new_parent.children:
            self._detach(new_parent, name_new)
        ino = old_parent.children.pop(name_old)
        new_parent.children[name_new] = ino
        self.nodes[ino].parent, self.nodes[ino].name = parent_inode_new, name_new
        self._namespace_changed(*dict.fromkeys((parent_inode_old, parent_inode_new)))

    def _open_fd(self, path: bytes, flags: int, mode: int = 0o644) -> int:
        # a write-only open is made read-write: the kernel may read pages through any handle of the inode
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        return os.open(path, flags & ~_STRIP | (os.O_CREAT if flags & os.O_CREAT else 0), mode)

    def _opened(self, node: Node, fd: int, flags: int) -> pyfuse3.FileInfo:
        self.fh_ino[fd] = node.ino
        node.fds.add(fd)
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
            self.stats.truncates += 1
            self._size_changed(node.ino, ("t", 0))
        # never direct I/O: a shared writable mmap needs the page cache; keep_cache because nobody else
        # changes live/ behind the kernel's back
        return pyfuse3.FileInfo(fh=fd, direct_io=False, keep_cache=True)

    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if node.parent is None and node.ino != ROOT:
            raise pyfuse3.FUSEError(errno.ENOENT)
        fd = self._open_fd(self._path(node), flags)
        return self._opened(node, fd, flags)

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: Any) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent = self._node(parent_inode)
        fd = self._open_fd(self._child_path(parent, name), flags | os.O_CREAT, mode)
        ino = parent.children.get(name)
        if ino is None:
            node = self._new_node(False, parent_inode, name)
            parent.children[name] = node.ino
            self._namespace_changed(parent_inode)
        else:
            node = self.nodes[ino]
        return self._opened(node, fd, flags), self._attr(node)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(fh, size, off)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        ino = self.fh_ino[fh]
        # posix_fallocate's fallback writes one zero byte per block past the end: an extension, not data
        if buf and buf[0] == 0 and buf.count(0) == len(buf) and off >= os.fstat(fh).st_size:
            n = os.pwrite(fh, buf, off)
            self.stats.extensions += 1
            self._size_changed(ino, ("x", off + n))
            return n
        n = os.pwrite(fh, buf, off)
        self.stats.writes += 1
        self.stats.write_bytes += n
        self._record(ino, ("w", off, bytes(buf[:n])))
        return n

    async def flush(self, fh: int) -> None:
        pass  # close(2) is not a durability point

    async def release(self, fh: int) -> None:
        ino = self.fh_ino.pop(fh)
        self.nodes[ino].fds.discard(fh)
        os.close(fh)

    async def fsync(self, fh: int, datasync: bool) -> None:
        if datasync:
            self.stats.fdatasync += 1
        else:
            self.stats.fsync += 1
        self._sync(self.fh_ino[fh])

    async def opendir(self, inode: int, ctx: Any) -> int:
        self._node(inode)
        return inode

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        entries = sorted(self.nodes[fh].children.items())
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            if not pyfuse3.readdir_reply(token, name, self._attr(self.nodes[ino]), i + 1):
                break

    async def releasedir(self, fh: int) -> None:
        pass

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        self.stats.fsyncdir += 1
        if self.model == "strict" and not self._frozen():
            self.durable_dirs[fh] = dict(self.nodes[fh].children)

    async def statfs(self, ctx: Any) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.live)
        out = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
                     "f_namemax"):
            setattr(out, name, getattr(st, name))
        return out

    async def access(self, inode: int, mode: int, ctx: Any) -> bool:
        return True  # root runs the tests; default_permissions has the kernel check modes anyway

    # -- crash ---------------------------------------------------------------------------------

    def pending_summary(self) -> dict[str, int]:
        ops = [op for lst in self.pending.values() for op in lst]
        return {
            "pending_files": sum(1 for lst in self.pending.values() if lst),
            "pending_ops": len(ops),
            "pending_writes": sum(1 for op in ops if op[0] == "w"),
            "pending_bytes": sum(len(op[2]) for op in ops if op[0] == "w"),
        }

    def _durable_files(self) -> dict[str, int]:
        """Relative path -> inode of every file in the durable namespace."""
        out: dict[str, int] = {}

        def walk(dir_ino: int, prefix: str) -> None:
            for name, ino in sorted(self.durable_dirs.get(dir_ino, {}).items()):
                rel = os.path.join(prefix, os.fsdecode(name))
                if self.nodes[ino].is_dir:
                    walk(ino, rel)
                else:
                    out[rel] = ino

        walk(ROOT, "")
        return out

    def _live_ino(self, rel: str) -> int | None:
        node = self.nodes[ROOT]
        for part in Path(rel).parts:
            ino = node.children.get(os.fsencode(part))
            if ino is None:
                return None
            node = self.nodes[ino]
        return node.ino

    def crash(self, out: Path, mode: str = "drop", seed: int = 0, keep_prob: float = 0.5,
              torn_file: str | None = None) -> dict[str, Any]:
        """Freeze, and write into ``out`` what the disk holds under ``mode`` (module docstring)."""
        if mode not in ("drop", "all", "subset", "torn", "subset+torn"):
            raise ValueError("unknown crash mode %r" % mode)
        if not self.crashed:
            log.info("power cut: %s", self.pending_summary())
        self.crashed = True
        self.stats.crashes += 1
        rng = random.Random(seed)
        files = self._durable_files()
        inos = sorted(set(files.values()))
        kept: dict[int, list[Op]] = {}
        dropped = 0
        for ino in inos:
            ops = self.pending.get(ino, [])
            if mode == "drop":
                keep: list[Op] = []
            elif mode.startswith("subset"):
                keep = [op for op in ops if rng.random() < keep_prob]
            else:
                keep = list(ops)
            dropped += len(ops) - len(keep)
            kept[ino] = keep
        torn: dict[str, Any] | None = None
        if mode.endswith("torn"):
            candidates = [ino for ino in inos if any(op[0] == "w" for op in kept[ino])]
            if torn_file is not None:
                ino = self._live_ino(torn_file)
                if ino is None:
                    ino = files.get(torn_file)
                candidates = [ino] if ino in candidates else []
            if candidates:
                ino = rng.choice(candidates)
                ops = kept[ino]
                last = max(i for i, op in enumerate(ops) if op[0] == "w")
                _, off, data = ops[last]
                first = (off // SECTOR + 1) * SECTOR
                cuts = list(range(first, off + len(data), SECTOR))  # sector boundaries strictly inside
                cut = rng.choice(cuts) if cuts else off
                ops[last] = ("w", off, data[: cut - off])
                torn = {"ino": ino, "paths": sorted(p for p, i in files.items() if i == ino), "offset": off,
                        "length": len(data), "kept": cut - off}
        out.mkdir(parents=True, exist_ok=False)
        self._materialize(ROOT, out, kept)
        summary = {"output": str(out), "mode": mode, "seed": seed, "kept_ops": sum(len(v) for v in kept.values()),
                   "dropped_ops": dropped, "torn": torn, "files": sorted(files)}
        log.info("crash materialized: %s", summary)
        return summary

    def _materialize(self, dir_ino: int, out: Path, kept: dict[int, list[Op]]) -> None:
        for name, ino in sorted(self.durable_dirs.get(dir_ino, {}).items()):
            path = out / os.fsdecode(name)
            if self.nodes[ino].is_dir:
                path.mkdir()
                self._materialize(ino, path, kept)
                continue
            src = self._data_path(ino)
            if os.path.exists(src):
                shutil.copyfile(src, path)
            else:
                path.touch()
            fd = os.open(path, os.O_RDWR)
            try:
                for op in kept.get(ino, []):
                    apply_op(fd, op)
            finally:
                os.close(fd)


class Control:
    """The control channel: one JSON request per line, one JSON reply per line.

    Requests: ``{"cmd": "ping"}``, ``{"cmd": "stats"}``, ``{"cmd": "crash", "out": PATH, "mode": ..., "seed":
    ..., "keep_prob": ..., "torn_file": ...}``, ``{"cmd": "quit"}`` (unmount and exit). Replies: ``{"ok":
    true, ...}`` or ``{"ok": false, "error": "..."}``.
    """

    def __init__(self, ops: PowerCutOps, path: str) -> None:
        self.ops = ops
        self.path = path

    async def serve(self) -> None:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(self.path)
        sock.listen(8)
        await trio.serve_listeners(self._client, [trio.SocketListener(sock)])

    async def _client(self, stream: trio.SocketStream) -> None:
        buf = b""
        async with stream:
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        reply = self.handle(json.loads(line))
                    except Exception as e:  # the test wants the reason, not a dead server
                        log.exception("control request %r failed", line)
                        reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
                    await stream.send_all(json.dumps(reply).encode() + b"\n")

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        if cmd == "ping":
            return {"ok": True, "pid": os.getpid()}
        if cmd == "stats":
            return {"ok": True, "model": self.ops.model, "crashed": self.ops.crashed,
                    **vars(self.ops.stats), **self.ops.pending_summary()}
        if cmd == "crash":
            summary = self.ops.crash(Path(req["out"]), mode=req.get("mode", "drop"), seed=int(req.get("seed", 0)),
                                     keep_prob=float(req.get("keep_prob", 0.5)), torn_file=req.get("torn_file"))
            return {"ok": True, **summary}
        if cmd == "quit":
            log.info("quit requested")
            pyfuse3.terminate()
            return {"ok": True}
        raise ValueError("unknown command %r" % (cmd,))


async def _run(control: Control) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(control.serve)

        async def on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                async for signum in signals:
                    log.info("signal %d: unmounting", signum)
                    pyfuse3.terminate()

        nursery.start_soon(on_signal)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--live", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--mount", required=True)
    p.add_argument("--control", required=True)
    p.add_argument("--model", choices=("journal", "strict"), default="journal")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    ops = PowerCutOps(Path(args.live), Path(args.scratch), args.model)
    options = set(pyfuse3.default_options) | {"fsname=powercut", "subtype=powercut"}
    started = time.monotonic()
    pyfuse3.init(ops, args.mount, options)
    log.info("mounted %s on %s (model %s) in %.3f s", args.live, args.mount, args.model, time.monotonic() - started)
    try:
        trio.run(_run, Control(ops, args.control))
    finally:
        pyfuse3.close(unmount=True)
        log.info("unmounted %s; stats %s", args.mount, vars(ops.stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
