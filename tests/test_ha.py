"""Master→slave replication (``pystore.ha``): the wire protocol against hand-made peers, a slave holding the
master's bytes and serving reads, SYNC_MASTER statuses, restarts, and SIGKILL of either side.

Peers talk over loopback TCP with real sockets. Waits poll a condition with a generous deadline (a loaded
CI machine is slow), never a fixed sleep followed by an assertion."""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
import time

import pytest
from conftest import make_message
from smaps import mapped_ranges, read_ahead_off, requires_visible_advice

from pystore import BrokerRole, FlushDiskType, GetMessageStatus, Message, MessageBatch, PutMessageStatus
from pystore.errors import StoreError
from pystore.store import MessageStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_writer as cw  # noqa: E402
from writer_procs import kill, read_line  # noqa: E402

TOPIC = "HATopic"
F = 16384            # commit-log files: small, so a few hundred messages roll several
HEADER = struct.Struct(">qi")
REPORT = struct.Struct(">q")
DEADLINE = 60.0


@pytest.fixture
def fast_reconnect(monkeypatch):
    """A slave tries again after 50 ms instead of a second (tests that make it reconnect)."""
    import pystore.ha_slave

    monkeypatch.setattr(pystore.ha_slave, "_RECONNECT_S", 0.05)


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


# -- a slave holds the master's bytes --------------------------------------------------------------------


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_slave_holds_the_masters_bytes_and_serves_reads(store_factory, flush):
    master, slave = master_and_slave(store_factory, flush=flush)
    n = put_mix(master, 600)
    assert master.get_max_phy_offset() > 3 * F          # several files, rolled with blanks
    wait_until(lambda: caught_up(master, slave), what="the slave catching up")
    end = master.get_max_phy_offset()
    assert slave.get_min_phy_offset() == 0
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    # queues and index are built on the slave (under SYNC_FLUSH after its own flush)
    wait_until(lambda: slave.get_topic_queue_table() == master.get_topic_queue_table(), what="the slave's queues")
    for qid in range(3):
        assert queue_view(slave, TOPIC, qid) == queue_view(master, TOPIC, qid)
    found = slave.query_message(TOPIC, "key100", 32)
    assert [m.body for m in found.messages] == [b"m100" * 101]
    # a slave refuses puts
    r = slave.put_message(Message(TOPIC, b"x"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not r.is_ok()
    assert slave.ha_port is None
    store_factory.expect_messages(n, "master")
    store_factory.expect_messages(n, "slave")


def test_a_fresh_slave_starts_at_the_masters_last_file(store_factory):
    master = small(store_factory, "master", ha_listen_port=0)
    n = put_mix(master, 500)
    last_start = master.get_max_phy_offset() - master.get_max_phy_offset() % F
    assert last_start >= 2 * F
    slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:%d" % master.ha_port)
    wait_until(lambda: caught_up(master, slave), what="the slave catching up")
    put_mix(master, 100, start=n)
    wait_until(lambda: caught_up(master, slave), what="the slave catching up again")
    end = master.get_max_phy_offset()
    assert slave.get_min_phy_offset() == last_start
    assert log_bytes(slave, last_start, end) == log_bytes(master, last_start, end)
    # the messages it holds read back by queue on the slave, at the master's queue offsets
    wait_until(lambda: slave.get_max_offset_in_queue(TOPIC, 0) == master.get_max_offset_in_queue(TOPIC, 0))
    tail = [u for u in queue_view(master, TOPIC, 0) if u[1] >= last_start]
    assert tail and queue_view(slave, TOPIC, 0) == tail


def test_a_restarted_slave_resumes_where_it_stopped(store_factory):
    master, slave = master_and_slave(store_factory)
    n = put_mix(master, 200)
    wait_until(lambda: caught_up(master, slave))
    slave.shutdown()
    wait_until(lambda: master._ha.connection_count == 0, what="the master noticing the slave left")
    n = put_mix(master, 300, start=n)
    slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:%d" % master.ha_port)
    assert slave.last_exit_ok
    wait_until(lambda: caught_up(master, slave))
    end = master.get_max_phy_offset()
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    wait_until(lambda: slave.get_topic_queue_table() == master.get_topic_queue_table())
    assert queue_view(slave, TOPIC, 1) == queue_view(master, TOPIC, 1)
    store_factory.expect_messages(n, "slave")


# -- SYNC_MASTER -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_sync_master_put_returns_once_the_slave_holds_it(store_factory, flush):
    master, slave = master_and_slave(store_factory, role=BrokerRole.SYNC_MASTER, flush=flush, slave_timeout=60_000)
    for i in range(200):
        r = master.put_message(Message(TOPIC, b"sync%d" % i * 10, queue_id=i % 2))
        assert r.status is PutMessageStatus.PUT_OK, r
        assert slave.get_max_phy_offset() >= r.next_offset
    r = master.put_messages(MessageBatch([Message(TOPIC, b"b%d" % i) for i in range(20)]))
    assert r.status is PutMessageStatus.PUT_OK
    assert slave.get_max_phy_offset() >= r.next_offset
    fut = master.async_put_message(Message(TOPIC, b"async"))
    r = fut.result(DEADLINE)
    assert r.status is PutMessageStatus.PUT_OK
    assert slave.get_max_phy_offset() >= r.next_offset
    store_factory.expect_messages(221, "master")


def test_sync_master_without_a_slave(store_factory):
    master = small(store_factory, "master", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0)
    r = master.put_message(Message(TOPIC, b"alone"))
    assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert r.is_ok()                                             # stored all the same
    assert master.look_message_by_offset(r.wrote_offset).body == b"alone"
    assert master.async_put_message(Message(TOPIC, b"a2")).result(DEADLINE).status is \
        PutMessageStatus.SLAVE_NOT_AVAILABLE
    r = master.put_message(Message(TOPIC, b"no-wait", wait_store_msg_ok=False))
    assert r.status is PutMessageStatus.PUT_OK                   # a put that does not wait, does not wait
    # a SYNC_MASTER that does not listen can never have a slave
    lone = small(store_factory, "lone", broker_role=BrokerRole.SYNC_MASTER)
    assert lone.ha_port is None
    assert lone.put_message(Message(TOPIC, b"x")).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    store_factory.expect_messages(3, "master")


def fake_slave(port: int, report: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    sock.sendall(REPORT.pack(report))
    return sock


def test_a_silent_slave_times_a_put_out_and_a_lagging_one_is_not_available(store_factory):
    master = small(store_factory, "master", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0, slave_timeout=200,
                           ha_slave_fallbehind_max=1000)
    with fake_slave(master.ha_port, 0):                           # connected, never acknowledges
        wait_until(lambda: master._ha.connection_count == 1)
        r = master.put_message(Message(TOPIC, b"x" * 10))
        assert r.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and r.is_ok()
        r = master.async_put_message(Message(TOPIC, b"y" * 10)).result(DEADLINE)
        assert r.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        master.put_message(Message(TOPIC, b"z" * 1000))          # now more than 1000 bytes behind the slave
        r = master.put_message(Message(TOPIC, b"w"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert master.get_max_offset_in_queue(TOPIC, 0) == 4
    store_factory.expect_messages(4, "master")


# -- the wire protocol, against hand-made peers --------------------------------------------------------------


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


def test_master_wire_protocol(store_factory, fake_clock):
    # heartbeats follow the store's clock: the test moves it once the writer caught up (no real 100 ms wait)
    master = small(store_factory, "master", ha_listen_port=0, ha_transfer_batch_size=1000, clock=fake_clock)
    put_mix(master, 300)
    end = master.get_max_phy_offset()
    assert end > F
    # a slave with data asks for its offset: transfers run from there, contiguous, capped, within one file
    start = master.look_message_by_offset(0).store_size           # a record boundary
    with fake_slave(master.ha_port, start) as sock:
        got = bytearray()
        pos = start
        while pos < end:
            offset, body = recv_transfer(sock)
            assert offset == pos
            if not body:
                continue                                         # a heartbeat while the writer catches up
            assert len(body) <= 1000
            assert offset // F == (offset + len(body) - 1) // F   # never across a file
            got += body
            pos += len(body)
        assert bytes(got) == log_bytes(master, start, end)
        # caught up: a heartbeat once the interval passed on the clock, carrying the next offset
        heartbeat = master.config.ha_send_heartbeat_interval
        assert after_clock_moves(fake_clock, heartbeat, sock, lambda: recv_transfer(sock)) == (end, b"")
        # the reports move the acknowledged offset
        sock.sendall(REPORT.pack(end))
        wait_until(lambda: master._ha.push2slave_max_offset == end)
    # a slave with nothing starts at the master's last file
    with fake_slave(master.ha_port, 0) as sock:
        offset, body = recv_transfer(sock)
        assert offset == end - end % F and body == log_bytes(master, offset, offset + len(body))
    # a slave that claims more than the master has is dropped
    with fake_slave(master.ha_port, end + 100) as sock:
        sock.settimeout(DEADLINE)
        while True:
            data = sock.recv(65536)
            if not data:
                break


def test_master_drops_a_slave_that_stops_reporting(store_factory):
    master = small(store_factory, "master", ha_listen_port=0, ha_housekeeping_interval=300)
    t0 = time.monotonic()                                         # before the master's clock starts
    with fake_slave(master.ha_port, 0) as sock:
        wait_until(lambda: master._ha.connection_count == 1)
        sock.settimeout(DEADLINE)
        while sock.recv(65536):
            pass
        assert time.monotonic() - t0 >= 0.29
        wait_until(lambda: master._ha.connection_count == 0)


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


def test_slave_wire_protocol_torn_records_and_a_wrong_offset(store_factory, fast_reconnect):
    source = small(store_factory, "source")
    n = put_mix(source, 80)
    end = source.get_max_phy_offset()
    assert end < F                                      # one transfer: within one file
    data = log_bytes(source, 0, end)
    cut = source.look_message_by_offset(0).store_size * 3 + 17   # inside the fourth record
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address)
        sock = fake.accept()
        assert fake.report() == 0                               # an empty slave asks for the start
        # one transfer sent in pieces, then a heartbeat
        frame = HEADER.pack(0, cut) + data[:cut]
        for i in range(0, len(frame), 7):
            sock.sendall(frame[i:i + 7])
        assert fake.report_reaching(cut) == cut                 # it acknowledges what it holds
        sock.sendall(HEADER.pack(cut, 0))
        # only whole records are readable by queue
        whole = [m for m in source.get_message("g", TOPIC, 0, 0, 32).messages if m.commit_log_offset + m.store_size
                 <= cut]
        wait_until(lambda: len(queue_view(slave, TOPIC, 0)) == len(whole))
        assert [u[2] for u in queue_view(slave, TOPIC, 0)] == [m.body for m in whole]
        # a transfer that does not start at the slave's end drops the connection
        sock.sendall(HEADER.pack(cut + 1, 4) + b"abcd")
        while sock.recv(65536):
            pass
        assert slave.get_max_phy_offset() == cut
        # it reconnects and asks again for the end of what it holds (the master must show it holds those bytes
        # too), never 0 (an empty slave's report); the rest arrives
        sock = fake.accept()
        asked = fake.report()
        assert 0 < asked < cut
        sock.sendall(HEADER.pack(asked, end - asked) + data[asked:])
        assert fake.report_reaching(end) == end
        wait_until(lambda: slave.get_topic_queue_table() == source.get_topic_queue_table())
        assert log_bytes(slave, 0, end) == data
    finally:
        fake.close()
    store_factory.expect_messages(n, "slave")


def test_a_slave_shut_down_inside_a_record_ends_at_a_record_boundary(store_factory):
    source = small(store_factory, "source")
    put_mix(source, 20)
    data = log_bytes(source, 0, source.get_max_phy_offset())
    first = source.look_message_by_offset(0).store_size
    second = source.look_message_by_offset(first).store_size
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address)
        sock = fake.accept()
        assert fake.report() == 0
        cut = first + second // 2
        sock.sendall(HEADER.pack(0, cut) + data[:cut])
        assert fake.report_reaching(cut) == cut
        slave.shutdown()
    finally:
        fake.close()
    reopened = small(store_factory, "slave", broker_role=BrokerRole.SLAVE)
    assert reopened.last_exit_ok and reopened.recovery.damage is None
    assert reopened.get_max_phy_offset() == first
    assert log_bytes(reopened, 0, first) == data[:first]
    assert [u[2] for u in queue_view(reopened, TOPIC, 0)] == [source.look_message_by_offset(0).body]
    store_factory.expect_messages(1, "slave")


def test_ha_port_in_use_fails_start_and_leaves_the_store_closed(store_factory):
    master = small(store_factory, "master", ha_listen_port=0)
    with pytest.raises(StoreError, match="HA listener"):
        MessageStore.open(str(store_factory.path("other")), mapped_file_size_commit_log=F,
                          ha_listen_port=master.ha_port)
    again = small(store_factory, "other")                              # the folder was released
    assert again.put_message(Message(TOPIC, b"x")).is_ok()
    store_factory.expect_messages(1, "other")


def test_a_slave_emptied_by_a_trim_follows_a_master_that_starts_later(store_factory):
    """A first transfer that ends inside the first record leaves, after the shutdown trim, a lone empty file at
    0; the slave reports 0, and its next master sends its last file, which starts later: the slave must
    start its log there instead of refusing every transfer."""
    source = small(store_factory, "source")
    put_mix(source, 5)
    head = log_bytes(source, 0, source.look_message_by_offset(0).store_size)
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address)
        sock = fake.accept()
        assert fake.report() == 0
        sock.sendall(HEADER.pack(0, 50) + head[:50])
        assert fake.report_reaching(50) == 50
        slave.shutdown()
    finally:
        fake.close()
    assert os.path.getsize(os.path.join(slave.config.commit_log_paths()[0], "%020d" % 0)) == F   # the lone file
    master = small(store_factory, "master", ha_listen_port=0)
    put_mix(master, 300)
    last_start = master.get_max_phy_offset() - master.get_max_phy_offset() % F
    assert last_start > 0
    slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:%d" % master.ha_port)
    assert slave.get_max_phy_offset() == 0
    wait_until(lambda: caught_up(master, slave), what="the emptied slave following")
    end = master.get_max_phy_offset()
    assert slave.get_min_phy_offset() == last_start
    assert log_bytes(slave, last_start, end) == log_bytes(master, last_start, end)


def test_a_damaged_record_is_left_for_recovery_not_trimmed(store_factory):
    """Only a record cut by the end of the data is trimmed at shutdown: damage followed by data stays."""
    source = small(store_factory, "source")
    put_mix(source, 30)
    end = source.get_max_phy_offset()
    data = bytearray(log_bytes(source, 0, end))
    third = source.look_message_by_offset(0).store_size + source.look_message_by_offset(
        source.look_message_by_offset(0).store_size).store_size
    data[third + 4:third + 8] = b"\x00\x00\x00\x01"                  # the third record's magic code
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address)
        sock = fake.accept()
        assert fake.report() == 0
        sock.sendall(HEADER.pack(0, end) + bytes(data))
        assert fake.report_reaching(end) == end
        wait_until(lambda: len(queue_view(slave, TOPIC, 0)) == 1)    # dispatch stops at the damage
        slave.shutdown()
    finally:
        fake.close()
    folder = slave.config.commit_log_paths()[0]
    with open(os.path.join(folder, "%020d" % 0), "rb") as f:
        assert f.read(end) == bytes(data)                          # nothing was cut
    assert os.path.exists(slave.config.abort_path())               # recovery will judge it on the next open
    store_factory.skip_check("slave")


def test_sync_flush_slave_records_its_store_time_in_the_checkpoint(store_factory):
    from pystore.checkpoint import StoreCheckpoint

    master, slave = master_and_slave(store_factory, flush=FlushDiskType.SYNC_FLUSH)
    put_mix(master, 50)
    wait_until(lambda: slave.get_topic_queue_table() == master.get_topic_queue_table())
    last = master.look_message_by_offset(master.get_commit_log_offset_in_queue(
        TOPIC, 1, master.get_max_offset_in_queue(TOPIC, 1) - 1))
    slave.shutdown()
    cp = StoreCheckpoint(slave.config.checkpoint_path(), read_only=True)
    assert cp.physic_msg_timestamp >= last.store_timestamp > 0
    assert cp.logics_msg_timestamp > 0


@requires_visible_advice
def test_sync_flush_slave_gives_read_ahead_back_to_the_files_it_filled(store_factory):
    """A SYNC_FLUSH slave writes its commit log page by page as its master does (new files from the allocate
    service); a file a transfer fills (its blank included) gets read-ahead back for the slave's readers."""
    master, slave = master_and_slave(store_factory, flush=FlushDiskType.SYNC_FLUSH)
    put_mix(master, 600)
    wait_until(lambda: caught_up(master, slave), what="the slave catching up")
    for store in (master, slave):
        files = list(store._commitlog.queue.files)
        assert len(files) >= 3
        for mf in files[:-1]:
            assert not any(rr for _, _, rr in mapped_ranges(mf.file_name)), (store.root, mf.file_name)
        last = files[-1]
        assert read_ahead_off(last.file_name, last.file_size - 1), (store.root, last.file_name)


def test_shutdown_releases_puts_waiting_for_a_slave(store_factory):
    import threading

    master = small(store_factory, "master", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0,
                   slave_timeout=600_000)
    got = []
    with fake_slave(master.ha_port, 0):                           # connected, never acknowledges
        wait_until(lambda: master._ha.connection_count == 1)
        waiter = threading.Thread(target=lambda: got.append(master.put_message(Message(TOPIC, b"sync"))))
        waiter.start()
        fut = master.async_put_message(Message(TOPIC, b"async"))
        threads = []
        fut.add_done_callback(lambda _f: threads.append(threading.current_thread().name))
        wait_until(lambda: master._ha._pending and master.get_max_offset_in_queue(TOPIC, 0) == 2)
        t0 = time.monotonic()
        master.shutdown()
        waiter.join(DEADLINE)
        assert not waiter.is_alive() and time.monotonic() - t0 < 30
    assert got[0].status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert fut.result(0).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert threads and "ReadSocket" not in threads[0]              # never on a connection's reader thread
    store_factory.expect_messages(2, "master")


# -- SIGKILL ---------------------------------------------------------------------------------------------


FILE = 32768


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_killed_sync_master_every_acknowledged_message_is_on_the_slave(tmp_path, procs, mode):
    master_root, slave_root, ack = tmp_path / "master", tmp_path / "slave", str(tmp_path / "acks")
    p = procs.start("write", str(master_root), "--ack", ack, "--mode", mode, "--threads", "2", "--sync-master",
                    "--file-size", str(FILE), "--max-seconds", "60")
    port = int(read_line(p, "READY").split()[2])
    slave = cw.open_store(slave_root, FILE, broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:%d" % port)
    try:
        wait_until(lambda: len(cw.read_acks(ack)) >= 400, what="400 acknowledged messages")
        kill(p)
        acks = cw.read_acks(ack)
    finally:
        slave.shutdown()
    assert acks
    summary = cw.verify_recovered(str(slave_root), acks, FILE)
    assert summary["records"] >= len(acks) and not summary["abnormal"]


def test_killed_slave_recovers_and_catches_up(store_factory, procs):
    master = store_factory("master", ha_listen_port=0, mapped_file_size_commit_log=FILE, **cw.SMALL_FILES)
    slave_root = store_factory.path("slave")
    p = procs.start("follow", str(slave_root), "--master", "127.0.0.1:%d" % master.ha_port, "--file-size", str(FILE))
    read_line(p, "READY")
    wait_streaming(master)
    i = put_mix(master, 300)
    wait_until(lambda: master._ha.push2slave_max_offset > 0, what="the slave's first acknowledgement")
    stop = time.monotonic() + 0.3
    while time.monotonic() < stop:                                # the slave is killed while data flows
        i = put_mix(master, 20, start=i)
    kill(p)
    i = put_mix(master, 50, start=i)
    slave = store_factory("slave", broker_role=BrokerRole.SLAVE, ha_master_address="127.0.0.1:%d" % master.ha_port,
                          mapped_file_size_commit_log=FILE, **cw.SMALL_FILES)
    assert not slave.last_exit_ok                                 # recovered from the kill
    wait_until(lambda: caught_up(master, slave))
    end = master.get_max_phy_offset()
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    wait_until(lambda: slave.get_topic_queue_table() == master.get_topic_queue_table())
    for qid in range(3):
        assert queue_view(slave, TOPIC, qid) == queue_view(master, TOPIC, qid)
    store_factory.expect_messages(i, "slave")


# -- review: lifecycle, framing, divergence ----------------------------------------------------------------


def ha_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("pystore-HA", "pystore-GroupTransfer"))]


def test_shutdown_joins_a_connection_that_already_closed_itself(store_factory, monkeypatch):
    """A connection whose reader hung up leaves the service's list at once, but its writer may still be in a
    commit-log read: shutdown must wait for it too, or a transfer thread outlives the store."""
    master = small(store_factory, "master", ha_listen_port=0)
    put_mix(master, 20)
    entered, release = threading.Event(), threading.Event()
    read = master._ha.read                         # the service's reader of the commit log

    def held_read(offset):
        entered.set()
        release.wait(DEADLINE)
        return read(offset)

    monkeypatch.setattr(master._ha, "read", held_read)
    sock = fake_slave(master.ha_port, 0)
    assert entered.wait(DEADLINE)                                  # the writer is inside the read
    sock.sendall(REPORT.pack(-1))                                  # the reader drops the connection
    wait_until(lambda: master._ha.connection_count == 0)
    writers = [t for t in ha_threads() if "Write" in t.name]
    assert len(writers) == 1
    alive_after = []
    stopper = threading.Thread(target=lambda: (master.shutdown(), alive_after.append(writers[0].is_alive())))
    stopper.start()
    stopper.join(0.3)                  # a shutdown that does not wait for the writer has returned by now
    release.set()
    stopper.join(DEADLINE)
    sock.close()
    assert alive_after == [False]
    assert not ha_threads()


def in_call(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is inside ``function`` now (its stack names it)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_shutdown_mid_transfer_leaves_no_thread_and_frees_the_port(store_factory):
    """Slaves that never read, so the master's writers block in send, and one that sent half a report:
    shutdown is prompt, ends every HA thread, and the port can be bound again at once."""
    big = 1 << 20
    master = small(store_factory, "master", ha_listen_port=0, mapped_file_size_commit_log=big,
                   ha_transfer_batch_size=big)
    for i in range(24):                                            # more than loopback's socket buffers hold
        assert master.put_message(Message(TOPIC, bytes([i]) * (big - 4096))).is_ok()
    port = master.ha_port
    stuck = [fake_slave(port, 1), fake_slave(port, 2)]
    half = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    half.sendall(b"\x00\x00\x00")
    wait_until(lambda: sum(in_call(t, "send_all") for t in ha_threads() if "Write" in t.name) == 2,
               what="two writers blocked in send")
    t0 = time.monotonic()
    master.shutdown()
    assert time.monotonic() - t0 < 10
    assert not ha_threads()
    again = small(store_factory, "again", ha_listen_port=port)     # the same port, at once
    assert again.ha_port == port
    for s in stuck + [half]:
        s.close()
    store_factory.expect_messages(24, "master")


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


@pytest.mark.parametrize("case", ["huge", "crosses_a_file", "wrong_offset"])
def test_slave_drops_a_frame_header_it_could_never_apply(store_factory, case):
    """A header that promises a body the slave cannot apply (larger than a file, across a file's end, or not
    at the slave's end) drops the connection at once, before the body: the slave never buffers it."""
    source = small(store_factory, "source")
    put_mix(source, 5)
    first = source.look_message_by_offset(0).store_size
    data = log_bytes(source, 0, first)
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address)
        sock = fake.accept()
        assert fake.report() == 0
        sock.sendall(HEADER.pack(0, first) + data)
        assert fake.report_reaching(first) == first
        header = {"huge": HEADER.pack(first, 2**31 - 1), "crosses_a_file": HEADER.pack(first, F - first + 1),
                  "wrong_offset": HEADER.pack(first + 8, 100)}[case]
        sock.sendall(header + b"\x00" * 16)                     # the start of a body that never ends
        assert closed_by_peer(sock, 10), "the slave waits for a body it can never apply"
        assert slave.get_max_phy_offset() == first
    finally:
        fake.close()
    store_factory.expect_messages(1, "slave")


def test_a_reconnecting_slave_checks_the_master_still_holds_its_tail(store_factory, fast_reconnect):
    """On every connection a slave holding data asks again for the last bytes of its log (up to 64 KiB, within
    its last file) and compares them with what it holds: a master whose log differs there (it lost data the slave
    holds and wrote other records since) is refused before anything is appended or acknowledged; a master
    that holds the same bytes goes on where the slave's log ends, even inside a record, without duplicating
    or skipping a byte."""
    good = small(store_factory, "good")
    n = put_mix(good, 80)
    end = good.get_max_phy_offset()
    assert end < F
    data = log_bytes(good, 0, end)
    other = small(store_factory, "other")
    put_mix(other, 80, start=1000)                                 # another history of the same offsets
    lost = log_bytes(other, 0, other.get_max_phy_offset())
    cut = good.look_message_by_offset(0).store_size * 5 + 21       # inside the sixth record
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address)
        sock = fake.accept()
        assert fake.report() == 0
        sock.sendall(HEADER.pack(0, cut) + data[:cut])
        assert fake.report_reaching(cut) == cut
        sock.sendall(HEADER.pack(cut, end - cut) + data[cut:cut + 10])
        sock.close()                                               # the master goes away in mid-transfer
        # a master with another history: it sends from where the slave asks
        sock = fake.accept()
        asked = fake.report()
        assert asked < cut
        sock.sendall(HEADER.pack(asked, len(lost) - asked) + lost[asked:])
        assert closed_by_peer(sock), "the slave took a master whose log differs from its own"
        assert slave.get_max_phy_offset() == cut and log_bytes(slave, 0, cut) == data[:cut]
        assert slave._ha_client.current_reported_offset <= asked   # it never acknowledged the other bytes
        # the right master again: it resends the slave's tail, then the rest
        sock = fake.accept()
        asked = fake.report()
        assert asked < cut
        sock.sendall(HEADER.pack(asked, end - asked) + data[asked:])
        assert fake.report_reaching(end) == end
        assert log_bytes(slave, 0, end) == data
        wait_until(lambda: slave.get_topic_queue_table() == good.get_topic_queue_table())
    finally:
        fake.close()
    store_factory.expect_messages(n, "slave")


def test_a_slave_ahead_of_a_master_that_lost_data_is_not_silently_overwritten(store_factory, fast_reconnect):
    """The master is replaced by one that holds less (it lost its tail: an ASYNC_FLUSH power cut, a restored
    backup): RocketMQ drops the slave while its log is longer, then, once the new master's log has grown past
    it, would ship the new master's bytes after the slave's old ones and count them as replicated. The slave
    must find out that the logs differ, keep its own, and acknowledge nothing it does not hold."""
    master, slave = master_and_slave(store_factory)
    for i in range(60):
        assert master.put_message(Message(TOPIC, b"old%03d" % i * 10, queue_id=1)).is_ok()
    wait_until(lambda: caught_up(master, slave))
    held = slave.get_max_phy_offset()
    before = log_bytes(slave, 0, held)
    port = master.ha_port
    master.shutdown()
    client = slave._ha_client
    lost = small(store_factory, "lost", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=port, slave_timeout=300)
    for i in range(70):                                            # same sizes: record boundaries line up
        lost.put_message(Message(TOPIC, b"new%03d" % i * 10, queue_id=1))
    assert lost.get_max_phy_offset() > held
    seen = getattr(client, "divergences", 0)
    wait_until(lambda: slave.get_max_phy_offset() != held or getattr(client, "divergences", 0) > seen + 1,
               what="the slave following or refusing the new master")
    assert slave.get_max_phy_offset() == held
    assert log_bytes(slave, 0, held) == before
    r = lost.put_message(Message(TOPIC, b"sync", queue_id=1))
    assert r.status is not PutMessageStatus.PUT_OK               # no slave holds it
    assert lost._ha.push2slave_max_offset < r.next_offset
    store_factory.expect_messages(71, "lost")


def test_a_callback_that_waits_for_another_async_put_does_not_stall_the_others(store_factory):
    """An async SYNC_MASTER put's callbacks run on the thread that completes and times out such puts. One that
    makes another async put and waits for it (``.result()``) must see it time out after ``slave_timeout``
    like any other, not wait for the very thread it is blocking."""
    master = small(store_factory, "master", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0, slave_timeout=200)
    got = []
    with fake_slave(master.ha_port, 0):                            # connected, never acknowledges
        wait_until(lambda: master._ha.connection_count == 1)

        def chained(_f):
            t0 = time.monotonic()
            try:
                got.append((master.async_put_message(Message(TOPIC, b"inner")).result(10).status,
                            time.monotonic() - t0))
            except Exception as e:                                 # reported by the assertion below
                got.append((e, time.monotonic() - t0))

        first = master.async_put_message(Message(TOPIC, b"outer"))
        first.add_done_callback(chained)
        assert first.result(DEADLINE).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        other = master.async_put_message(Message(TOPIC, b"other"))         # meanwhile, from another thread
        assert other.result(DEADLINE).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        wait_until(lambda: got, what="the chained put")
    assert got[0][0] is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and got[0][1] < 5
    master.shutdown()
    assert not ha_threads()                                        # the thread that handed the loop over too
    store_factory.expect_messages(3, "master")


def test_a_slave_follows_its_master_through_a_restart(store_factory, fast_reconnect):
    """The master restarts (same root, same port) while its slave runs: the slave reconnects by itself, shows
    the master holds its tail and goes on, byte for byte."""
    master, slave = master_and_slave(store_factory)
    n = put_mix(master, 150)
    wait_until(lambda: caught_up(master, slave))
    port = master.ha_port
    master.shutdown()
    master = small(store_factory, "master", ha_listen_port=port)
    n = put_mix(master, 150, start=n)
    wait_until(lambda: caught_up(master, slave), what="the slave following the restarted master")
    end = master.get_max_phy_offset()
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
    assert slave._ha_client.divergences == 0
    store_factory.expect_messages(n, "slave")


def test_concurrent_sync_puts_never_wait_past_slave_timeout(store_factory):
    """Threads put to a SYNC_MASTER (sync and async puts) while its slave acknowledges, then while it is silent
    and disconnects under the waiting puts, then with no slave: every put returns within ``slave_timeout``
    (plus scheduling) with the status of its phase, and every message is stored."""
    import concurrent.futures

    timeout_ms = 300
    master = small(store_factory, "master", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0,
                   slave_timeout=timeout_ms)
    sock = fake_slave(master.ha_port, 0)
    wait_until(lambda: master._ha.connection_count == 1)
    acking = threading.Event()
    acking.set()

    def slave():                                    # acknowledges what arrives while ``acking`` is set
        try:
            while True:
                offset, body = recv_transfer(sock)
                if body and acking.is_set():
                    sock.sendall(REPORT.pack(offset + len(body)))
        except (AssertionError, OSError):
            return                                  # the test closed the socket

    follower = threading.Thread(target=slave)
    follower.start()

    def put(i):
        t0 = time.monotonic()
        if i % 2:
            r = master.put_message(Message(TOPIC, b"s%d" % i))
        else:
            r = master.async_put_message(Message(TOPIC, b"a%d" % i)).result(DEADLINE)
        return r.status, time.monotonic() - t0

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        acked = list(pool.map(put, range(160)))
        acking.clear()
        silent = [pool.submit(put, i) for i in range(8)]
        wait_until(lambda: master.get_max_offset_in_queue(TOPIC, 0) == 168, what="the puts waiting")
        sock.shutdown(socket.SHUT_RDWR)             # the slave goes away under them
        silent = [f.result(DEADLINE) for f in silent]
        follower.join(DEADLINE)
        sock.close()
        wait_until(lambda: master._ha.connection_count == 0)
        alone = list(pool.map(put, range(16)))
    limit = timeout_ms / 1000 + 2.0
    assert {st for st, _ in acked} <= {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_SLAVE_TIMEOUT}
    assert PutMessageStatus.PUT_OK in {st for st, _ in acked}
    assert {st for st, _ in silent} <= {PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE}
    assert {st for st, _ in alone} == {PutMessageStatus.SLAVE_NOT_AVAILABLE}
    assert max(d for _, d in acked + silent + alone) < limit
    assert master.get_max_offset_in_queue(TOPIC, 0) == 184
    store_factory.expect_messages(184, "master")


def test_a_slave_that_reports_but_never_reads_is_dropped_and_puts_go_on(store_factory):
    """A slave whose reports keep coming but which reads nothing: the master buffers no more than the socket
    does, puts neither block nor wait past ``slave_timeout``, and once a transfer has been stuck for
    ``ha_housekeeping_interval`` the connection is closed (the slave is then not available)."""
    big = 1 << 20
    master = small(store_factory, "master", broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0, slave_timeout=200,
                   ha_housekeeping_interval=500, mapped_file_size_commit_log=big, ha_transfer_batch_size=big)
    for i in range(24):
        assert master.put_message(Message(TOPIC, bytes([i]) * (big - 4096), wait_store_msg_ok=False)).is_ok()
    sock = fake_slave(master.ha_port, 1)
    stop = threading.Event()

    def report():
        while not stop.wait(0.05):                  # every 50 ms, well within the housekeeping interval
            try:
                sock.sendall(REPORT.pack(1))
            except OSError:
                return

    reporter = threading.Thread(target=report)
    reporter.start()
    try:
        wait_until(lambda: any(in_call(t, "send_all") for t in ha_threads() if "Write" in t.name),
                   what="the writer blocked in send")
        t0 = time.monotonic()
        r = master.put_message(Message(TOPIC, b"sync"))
        assert r.status in (PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE)
        assert master.put_message(Message(TOPIC, b"no-wait", wait_store_msg_ok=False)).status is \
            PutMessageStatus.PUT_OK
        assert time.monotonic() - t0 < 2.2
        wait_until(lambda: master._ha.connection_count == 0, what="the stuck connection closed")
        assert master.put_message(Message(TOPIC, b"alone")).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    finally:
        stop.set()
        reporter.join(DEADLINE)
        sock.close()
    store_factory.expect_messages(27, "master")


def test_master_takes_split_and_backward_reports_and_cleans_up_a_slave_leaving_mid_frame(store_factory):
    master = small(store_factory, "master", ha_listen_port=0)
    put_mix(master, 300)
    end = master.get_max_phy_offset()
    sock = socket.create_connection(("127.0.0.1", master.ha_port), timeout=DEADLINE)
    first = REPORT.pack(1)
    sock.sendall(first[:3])                                        # a report in two pieces
    sock.sendall(first[3:])
    offset, body = recv_transfer(sock)
    assert offset == 1 and body
    sock.sendall(REPORT.pack(end))
    wait_until(lambda: master._ha.push2slave_max_offset == end)
    sock.sendall(REPORT.pack(100))                                 # backwards: the best acknowledgement stays
    conn = master._ha._connections[0]
    wait_until(lambda: conn.slave_ack_offset == 100)
    assert master._ha.push2slave_max_offset == end and master._ha.connection_count == 1
    recv_exact(sock, 5)                                            # part of the next header, then gone
    sock.close()
    wait_until(lambda: master._ha.connection_count == 0 and not conn.running(), what="the connection's end")
    # running() turns false in the threads' last lines; they leave threading.enumerate() when they return
    wait_until(lambda: not [t for t in ha_threads() if "Socket" in t.name], what="the connection's threads' end")


def test_master_heartbeats_follow_the_stores_clock(store_factory, fake_clock):
    """An idle connection gets a heartbeat when ``ha_send_heartbeat_interval`` has passed on the store's
    clock, not before, however long the real wait."""
    master = small(store_factory, "master", ha_listen_port=0, clock=fake_clock)
    put_mix(master, 20)
    end = master.get_max_phy_offset()
    with fake_slave(master.ha_port, end) as sock:           # holds everything: only heartbeats may come
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):                    # the clock has not moved: nothing is due
            sock.recv(1)
        heartbeat = master.config.ha_send_heartbeat_interval
        assert after_clock_moves(fake_clock, heartbeat, sock, lambda: recv_transfer(sock)) == (end, b"")


def test_slave_reports_and_gives_up_on_a_silent_master_by_the_stores_clock(store_factory, fake_clock,
                                                                          fast_reconnect):
    """The slave's heartbeat report and its ``ha_housekeeping_interval`` expiry are policy time: a fake clock
    moved by the test makes them happen (the loop reads the clock at least once a second)."""
    fake = FakeMaster()
    try:
        slave = small(store_factory, "slave", broker_role=BrokerRole.SLAVE, ha_master_address=fake.address,
                      clock=fake_clock)
        sock = fake.accept()
        assert fake.report() == 0                            # at once on connecting
        assert after_clock_moves(fake_clock, slave.config.ha_send_heartbeat_interval, sock, fake.report) == 0
        fake_clock.advance(slave.config.ha_housekeeping_interval + 1)
        while sock.recv(65536):                              # the slave closes the silent connection ...
            pass
        sock.close()
        fake.accept()                                        # ... and connects again
        assert fake.report() == 0
    finally:
        fake.close()
