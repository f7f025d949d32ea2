"""Shared by the replication tests (test_ha.py end to end, test_ha_master.py and test_ha_slave.py against
hand-made peers): small stores, polling waits, the commit log's bytes, a mixed load, and the fake peers.

Waits poll a condition with a generous deadline (a loaded CI machine is slow), never a fixed sleep followed by
an assertion."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time

from conftest import make_message

from pystore import BrokerRole, FlushDiskType, GetMessageStatus, Message, MessageBatch
from pystore.engine.store import MessageStore

TOPIC = "HATopic"
F = 16384            # commit-log files: small, so a few hundred messages roll several
HEADER = struct.Struct(">qi")
REPORT = struct.Struct(">q")
DEADLINE = 60.0


def small(store_factory, name: str, **overrides) -> MessageStore:
    """A store of the factory with ``F``-byte commit-log files."""
    overrides.setdefault("mapped_file_size_commit_log", F)
    return store_factory(name, **overrides)


def wait_until(cond, timeout: float = DEADLINE, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("%s not reached within %ss" % (what, timeout))
        time.sleep(0.005)


def log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    """The commit log's bytes in ``[start, end)``, read from its files."""
    size = store.config.mapped_file_size_commit_log
    folder = store.config.commit_log_paths()[0]
    out = bytearray()
    pos = start
    while pos < end:
        base = pos - pos % size
        with open(os.path.join(folder, "%020d" % base), "rb") as f:
            f.seek(pos - base)
            chunk = f.read(min(end, base + size) - pos)
        out += chunk
        pos += len(chunk)
    return bytes(out)


def queue_view(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, bytes]]:
    """Every message of a queue as (queue offset, commit-log offset, body), page after page from its min
    offset (a slave keeps the offset asked for on OFFSET_TOO_SMALL: it does not correct it)."""
    out = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        got = store.get_message("g", topic, queue_id, offset, 32)
        if got.status is not GetMessageStatus.FOUND:
            return out
        out += [(m.queue_offset, m.commit_log_offset, m.body) for m in got.messages]
        # a found page moves the offset on, on a slave too (only corrections keep it there)
        assert got.next_begin_offset == offset + len(got.messages), (offset, got)
        offset = got.next_begin_offset


def caught_up(master: MessageStore, slave: MessageStore) -> bool:
    return slave.get_max_phy_offset() == master.get_max_phy_offset()


def wait_streaming(master: MessageStore, slaves: int = 1) -> None:
    """Until ``slaves`` slaves are connected and the master fixed where each one's transfers start (an empty
    slave starts at the master's last file *as it is then*: data put before that moment may be skipped)."""
    wait_until(lambda: len(master._ha._connections) == slaves
               and all(c.next_transfer_from >= 0 for c in master._ha._connections), what="the slave's stream")


def master_and_slave(store_factory, role=BrokerRole.ASYNC_MASTER, flush=FlushDiskType.ASYNC_FLUSH, **kw):
    master = small(store_factory, "master", broker_role=role, ha_listen_port=0, flush_disk_type=flush, **kw)
    slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, flush_disk_type=flush,
                          ha_master_address="127.0.0.1:%d" % master.ha_port, **kw)
    wait_streaming(master)
    return master, slave


def put_mix(store: MessageStore, n: int, start: int = 0) -> int:
    """At least ``n`` messages numbered from ``start``: single puts with keys and tags, and batches of five,
    over three queues; record sizes vary. Returns the next number (a batch may overshoot ``n``)."""
    results = []
    i = start
    while i < start + n:
        if i % 7 == 3:
            batch = MessageBatch([Message(TOPIC, b"batch-%d-%d" % (i, j) * (1 + j), tags="TagB", queue_id=2)
                                  for j in range(5)])
            results.append(store.put_messages(batch))
            i += 5
        else:
            results.append(store.put_message(make_message(i, TOPIC, i % 2, body=b"m%d" % i * (1 + i % 120),
                                                          tags="Tag%d" % (i % 3))))
            i += 1
    assert all(r.is_ok() for r in results), [r for r in results if not r.is_ok()][:3]
    return i


def fake_slave(port: int, report: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    sock.sendall(REPORT.pack(report))
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "the peer closed the connection"
        buf += chunk
    return bytes(buf)


def recv_transfer(sock: socket.socket) -> tuple[int, bytes]:
    offset, size = HEADER.unpack(recv_exact(sock, HEADER.size))
    return offset, recv_exact(sock, size)


def after_clock_moves(clock, ms: int, sock: socket.socket, receive):
    """``receive()`` once the peer sent, moving ``clock`` by ``ms`` until it does: the peer's loop may read the
    clock for its last send just after the test moved it (a race the test cannot see), so it moves again
    (each move is a whole interval: what arrives was due)."""
    sock.settimeout(2.0)
    try:
        for _ in range(30):
            clock.advance(ms)
            try:
                return receive()
            except TimeoutError:
                continue
        raise AssertionError("nothing was sent though the clock moved")
    finally:
        sock.settimeout(DEADLINE)


class FakeMaster:
    """A listening socket a slave connects to; the test plays the master."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.settimeout(DEADLINE)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.sock: socket.socket | None = None

    def accept(self) -> socket.socket:
        self.sock, _ = self.listener.accept()
        self.sock.settimeout(DEADLINE)
        return self.sock

    def report(self) -> int:
        assert self.sock is not None
        return REPORT.unpack(recv_exact(self.sock, 8))[0]

    def report_reaching(self, offset: int) -> int:
        while True:
            got = self.report()
            if got >= offset:
                return got

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.listener.close()


def ha_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("pystore-HA", "pystore-GroupTransfer"))]


def in_call(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside ``function`` now (its stack names it)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def closed_by_peer(sock: socket.socket, timeout: float = DEADLINE) -> bool:
    """Read (and drop: a slave's reports) until the peer closes (True) or ``timeout`` passes with the
    connection open (False)."""
    end = time.monotonic() + timeout
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return False
            sock.settimeout(left)
            if not sock.recv(65536):
                return True
    except TimeoutError:
        return False
    except OSError:
        return True              # reset
