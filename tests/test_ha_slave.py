"""The replication slave (``pystore.ha.slave``) against a hand-made master on loopback TCP (``FakeMaster``):
torn records and wrong offsets, a shutdown inside a record, frame headers it could never apply, the checks a
reconnecting slave makes, and reports and give-up by the store's clock.

Waits poll a condition with a generous deadline (a loaded CI machine is slow), never a fixed sleep followed by
an assertion."""

from __future__ import annotations

import os

import pytest
from ha_helpers import (
    HEADER,
    TOPIC,
    F,
    FakeMaster,
    after_clock_moves,
    caught_up,
    closed_by_peer,
    log_bytes,
    put_mix,
    queue_view,
    small,
    wait_until,
)

from pystore import BrokerRole


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
