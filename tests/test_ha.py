"""Master→slave replication end to end (``pystore.ha``: a real master and a real slave): a slave holding the
master's bytes and serving reads, SYNC_MASTER statuses, SYNC_FLUSH slaves, restarts, divergence, and SIGKILL of
either side. Each side against hand-made peers: test_ha_master.py, test_ha_slave.py; the frames:
test_ha_protocol.py.

Peers talk over loopback TCP with real sockets. Waits poll a condition with a generous deadline (a loaded
CI machine is slow), never a fixed sleep followed by an assertion."""

from __future__ import annotations

import os
import sys
import time

import pytest
from ha_helpers import (
    DEADLINE,
    TOPIC,
    F,
    caught_up,
    log_bytes,
    master_and_slave,
    put_mix,
    queue_view,
    small,
    wait_streaming,
    wait_until,
)
from smaps import mapped_ranges, read_ahead_off, requires_visible_advice

from pystore import BrokerRole, FlushDiskType, Message, MessageBatch, PutMessageStatus

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_writer as cw  # noqa: E402
from writer_procs import kill, read_line  # noqa: E402

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


# -- SYNC_FLUSH slaves ----------------------------------------------------------------------------------------


def test_sync_flush_slave_records_its_store_time_in_the_checkpoint(store_factory):
    from pystore.engine.checkpoint import StoreCheckpoint

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


# -- review: divergence, restarts ----------------------------------------------------------------------------


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


