"""The replication master (``pystore.ha.master``) against hand-made slaves on loopback TCP: the wire protocol
it speaks, SYNC_MASTER statuses with a silent, lagging or absent slave, slaves it drops, heartbeats by the
store's clock, and a shutdown that leaves no thread and frees the port.

Waits poll a condition with a generous deadline (a loaded CI machine is slow), never a fixed sleep followed by
an assertion."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from ha_helpers import (
    DEADLINE,
    REPORT,
    TOPIC,
    F,
    after_clock_moves,
    fake_slave,
    ha_threads,
    in_call,
    log_bytes,
    put_mix,
    recv_exact,
    recv_transfer,
    small,
    wait_until,
)

from pystore import BrokerRole, Message, PutMessageStatus
from pystore.engine.store import MessageStore
from pystore.errors import StoreError


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


def test_ha_port_in_use_fails_start_and_leaves_the_store_closed(store_factory):
    master = small(store_factory, "master", ha_listen_port=0)
    with pytest.raises(StoreError, match="HA listener"):
        MessageStore.open(str(store_factory.path("other")), mapped_file_size_commit_log=F,
                          ha_listen_port=master.ha_port)
    again = small(store_factory, "other")                              # the folder was released
    assert again.put_message(Message(TOPIC, b"x")).is_ok()
    store_factory.expect_messages(1, "other")


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
