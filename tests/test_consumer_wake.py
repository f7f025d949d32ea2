"""Consumers across processes: a read-only store of a live writer in another process waits on the store's
``wakeup`` file (``pystore.read.arrival``, ``pystore.system._notify``; its layout is in docs/format.md
§15). Tested with real processes: every message reaches the waiting reader, in order; a reader outlives a
SIGKILLed writer and follows the restarted one; the file's bytes are the documented layout; a reader writes
nothing else. No assertion on how fast (bench/bench_consumer.py measures that); timeouts only bound hangs."""

from __future__ import annotations

import os
import select
import struct
import subprocess
import time
from pathlib import Path

import pytest
from conftest import _files_state
from ha_helpers import master_and_slave
from writer_procs import kill, stderr_of

from pystore import GetMessageStatus, Message, MessageBatch
from pystore.config import FlushDiskType
from pystore.read.arrival import WAKE_FILE, open_wake_file

HEADER = b"PSWAKEUP" + struct.pack("<I", 1)

READER = r"""
import sys
from pystore import MessageStore
root, total, spin = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
file_size = int(sys.argv[4]) if len(sys.argv) > 4 else 64 * 1024
store = MessageStore.open(root, read_only=True, mapped_file_size_commit_log=file_size)
c = store.consumer("g", "T", queue_ids=[0], auto_commit=False, spin_us=spin)
print("READY", flush=True)
for m in c:
    print("GOT %d %s" % (m.queue_offset, m.body.decode()), flush=True)
    if m.queue_offset + 1 >= total:
        break
print("END", flush=True)
"""

WRITER = r"""
import sys, time
from pystore import Message
from pystore import MessageStore
root, n = sys.argv[1], int(sys.argv[2])
store = MessageStore.open(root, mapped_file_size_commit_log=64 * 1024)
base = store.get_max_offset_in_queue("T", 0)
for i in range(base, base + n):
    store.put_message(Message("T", b"m%d" % i))
print("PUT %d" % (base + n), flush=True)
time.sleep(600)
"""


def word(root: str) -> tuple[int, int, bool]:
    """(seq, waiters, sleeping) as the file's bytes say."""
    with open(os.path.join(root, WAKE_FILE), "rb") as f:
        data = f.read()
    (w,) = struct.unpack_from("<Q", data, 16)
    return w & 0xFFFFFFFF, (w >> 32) & 0x7FFFFFFF, bool(w >> 63)


def wait_until(cond, what: str, timeout: float = 120.0, p=None) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "no %s within %ss%s" % (what, timeout, "" if p is None else stderr_of(p))
        time.sleep(0.01)


class Lines:
    """A process's stdout lines, each awaited at most ``timeout`` s (read from the pipe itself: several lines
    that arrive at once stay here, not in a buffer that ``select`` cannot see)."""

    def __init__(self, p: subprocess.Popen[bytes]) -> None:
        self.p = p
        self.buf = b""

    def next(self, prefix: str, timeout: float = 120.0) -> str:
        assert self.p.stdout is not None
        fd = self.p.stdout.fileno()
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0]
            chunk = os.read(fd, 65536) if ready else b""
            assert chunk, "no %s from the process (%s); stderr:\n%s" % (
                prefix, "it ended" if ready else "timeout", self.stderr())
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        text = line.decode()
        assert text.startswith(prefix), "process said %r, expected %s; stderr:\n%s" % (text, prefix, self.stderr())
        return text

    def stderr(self) -> str:
        if hasattr(self.p, "err_path"):
            return stderr_of(self.p)
        if self.p.stderr is not None and self.p.poll() is not None:
            return self.p.stderr.read().decode(errors="replace")
        return "(still running)"

    def got(self, first: int, last: int) -> None:
        for i in range(first, last):
            assert self.next("GOT").split() == ["GOT", str(i), "m%d" % i]


# -- the file -----------------------------------------------------------------------------------------------------


def test_wake_file_bytes_follow_the_documented_layout(store_factory) -> None:
    writer = store_factory()
    path = Path(writer.root) / WAKE_FILE
    light = writer._dispatcher.wake.light                                   # membarrier(2) allowed here
    flags = struct.pack("<I", 1 if light else 0)
    assert path.read_bytes() == HEADER + flags + bytes(48)
    reader = open_wake_file(writer.root, create=False)
    assert reader is not None
    seen = reader.register()
    assert seen == 0
    assert path.read_bytes()[16:24] == struct.pack("<Q", 1 << 32)          # one waiter, seq 0
    writer.put_message(Message("T", b"x"))
    assert path.read_bytes()[16:24] == struct.pack("<Q", 1)                # the writer took it: seq 1
    reader.unregister(seen)                                                 # nothing left to take back
    assert word(writer.root) == (1, 0, False)
    seen = reader.register()
    assert reader.wait(seen, 0, 1) == 0                                     # timed out, asleep meanwhile
    assert word(writer.root) == (1, 1, True)
    reader.unregister(seen)
    assert path.read_bytes() == HEADER + flags + struct.pack("<Q", 1) + bytes(40)
    # a batch wakes once, after its units
    seen = reader.register()
    writer.put_messages(MessageBatch([Message("T", b"a"), Message("T", b"b")]))
    assert reader.wait(seen, 0, 60_000) == 1
    reader.unregister(seen)
    assert word(writer.root) == (2, 0, False)
    # a restarted writer keeps the file (a reader's mapping stays the one it waits on)
    ino = path.stat().st_ino
    writer.shutdown()
    again = store_factory()
    assert path.stat().st_ino == ino and word(again.root) == (2, 0, False)
    assert path.read_bytes()[12:16] == flags


def test_no_waiter_no_write(store_factory) -> None:
    writer = store_factory()
    before = Path(writer.root, WAKE_FILE).read_bytes()
    for i in range(20):
        writer.put_message(Message("T", b"%d" % i))
    assert Path(writer.root, WAKE_FILE).read_bytes() == before


def test_a_damaged_wake_file_means_polling(store_factory, caplog) -> None:
    writer = store_factory()
    writer.shutdown()
    Path(writer.root, WAKE_FILE).write_bytes(b"not ours")
    assert open_wake_file(writer.root, create=False) is None
    assert "not a pystore wake file" in caplog.text
    reader = store_factory(read_only=True)
    r = reader.get_message("g", "T", 0, 0, timeout_ms=50)
    assert r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE


def test_a_reader_writes_nothing_but_its_registration(store_factory) -> None:
    """A read-only store's waiting gets leave every file as it was (the wake word's registration is taken back);
    without a wake file it creates none and polls."""
    writer = store_factory()
    writer.put_message(Message("T", b"x"))
    writer.shutdown()
    root = writer.root
    wake = os.path.join(root, WAKE_FILE)
    state = {k: v for k, v in _files_state(root).items() if k != wake}     # its mtime moves: it is written
    wake_bytes = Path(root, WAKE_FILE).read_bytes()
    reader = store_factory(read_only=True)
    for _ in range(3):
        r = reader.get_message("g", "T", 0, 1, timeout_ms=30)
        assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert reader._reads.arrivals()._wake is not None                         # it did wait on the word
    reader.shutdown()
    assert {k: v for k, v in _files_state(root).items() if k != wake} == state
    assert Path(root, WAKE_FILE).read_bytes() == wake_bytes
    os.unlink(os.path.join(root, WAKE_FILE))
    reader = store_factory(read_only=True)
    r = reader.get_message("g", "T", 0, 1, timeout_ms=30)
    assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert not os.path.exists(os.path.join(root, WAKE_FILE))


# -- processes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spin_us, flush", [(0, FlushDiskType.ASYNC_FLUSH), (200, FlushDiskType.ASYNC_FLUSH),
                                            (0, FlushDiskType.SYNC_FLUSH)])
def test_reader_process_blocks_and_wakes_for_every_message(store_factory, procs, spin_us: float,
                                                           flush: FlushDiskType) -> None:
    writer = store_factory(flush_disk_type=flush)
    total = 300
    p = procs.start(writer.root, str(total), str(spin_us), script=READER)
    out = Lines(p)
    out.next("READY")
    for i in range(total):
        if i % 25 == 0:
            # let the reader catch up and go to sleep on the word
            wait_until(lambda: word(writer.root)[1] > 0, "registered reader", p=p)
        writer.put_message(Message("T", b"m%d" % i))
    out.got(0, total)
    out.next("END")
    p.wait(60)
    seq, waiters, _ = word(writer.root)
    assert seq >= total // 25 and waiters == 0                 # woken through the word (a reader's end unregisters)


@pytest.mark.parametrize("spin_us", [0, 300_000])
def test_a_reader_outlives_a_sigkilled_writer_and_follows_the_next(procs, tmp_path: Path, spin_us: int) -> None:
    """Blocking on the word, or spinning on the place of the queue's next unit (registered on the word only
    once a spin ran out): the writer's SIGKILL leaves the reader waiting, and the restarted writer's unit
    there (or its wake-up) reaches it."""
    root = str(tmp_path / "store")
    a = procs.start(root, "5", script=WRITER)
    assert Lines(a).next("PUT").split() == ["PUT", "5"]
    p = procs.start(root, "10", str(spin_us), script=READER)
    out = Lines(p)
    out.next("READY")
    out.got(0, 5)
    if spin_us:
        time.sleep(0.05)                   # killed while the reader spins
    else:
        wait_until(lambda: word(root)[1] > 0, "registered reader", p=p)
    kill(a)
    b = procs.start(root, "5", script=WRITER)
    assert Lines(b).next("PUT").split() == ["PUT", "10"]
    out.got(5, 10)
    out.next("END")
    kill(b)


def test_a_reader_of_a_slave_wakes_on_the_slaves_dispatch(store_factory, procs) -> None:
    master, slave = master_and_slave(store_factory)
    total = 60
    p = procs.start(slave.root, str(total), "0", str(slave.config.mapped_file_size_commit_log), script=READER)
    out = Lines(p)
    out.next("READY")
    for i in range(total):
        if i % 20 == 0:
            wait_until(lambda: word(slave.root)[1] > 0, "registered reader", p=p)
        master.put_message(Message("T", b"m%d" % i))
    out.got(0, total)
    out.next("END")
    assert word(slave.root)[0] > 0
    assert word(master.root) == (0, 0, False)                  # nobody waits on the master


