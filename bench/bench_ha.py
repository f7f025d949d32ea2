"""Replication (``pystore.ha``): master and slave in this process, over loopback TCP.

* ``sync_master_put_N_threads``: SYNC_MASTER (ASYNC_FLUSH) single puts of 128 B from 1 or 16 threads; each
  put returns once the slave acknowledged it, so this is the replication round trip (two Python threads on
  each side and a TCP hop) shared by the puts in flight, as group commit shares a flush;
* ``slave_catch_up``: a fresh slave copies 64 MiB of 32 x 128 B batches and builds its consume queue; the
  rate is commit-log bytes per second from connecting to a dispatched, queue-complete slave.

Checks: every put returned ``PUT_OK``; after each round the slave holds the master's max offset; the caught-up
slave's queue table equals the master's and a CRC-checked scan of its commit log finds the master's records.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import benchlib
import pytest
from benchlib import MIB, TOPIC

API = benchlib.store_api()
Message = API["Message"]
MessageBatch = API["MessageBatch"]
MessageStore = API["MessageStore"]
PUT_OK = API["PutMessageStatus"].PUT_OK

from pystore import BrokerRole  # noqa: E402

MSG128 = Message(TOPIC, benchlib.payloads(1, 128)[0])
DEADLINE = 120.0


def _wait(cond, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError("%s not reached within %ss" % (what, DEADLINE))
        time.sleep(0.0005)


def _slave(root: str, master: object, file_size: int) -> object:
    return MessageStore.open(root, mapped_file_size_commit_log=file_size, broker_role=BrokerRole.SLAVE,
                             ha_master_address="127.0.0.1:%d" % master.ha_port)


@pytest.mark.parametrize("threads", [1, 16])
def test_sync_master_put_message(benchmark, tmp_root, record, threads):
    total, rounds = 1024, 5
    per = total // threads
    size = benchlib.file_size_for((rounds + 2) * total * 300)
    master = MessageStore.open(os.path.join(tmp_root, "master"), mapped_file_size_commit_log=size,
                               broker_role=BrokerRole.SYNC_MASTER, ha_listen_port=0)
    slave = _slave(os.path.join(tmp_root, "slave"), master, size)
    try:
        _wait(lambda: master._ha.connection_count == 1, "the slave's connection")
        failures: list[object] = []

        def worker(barrier: threading.Barrier) -> None:
            barrier.wait()
            for _ in range(per):
                r = master.put_message(MSG128)
                if r.status is not PUT_OK:
                    failures.append(r)

        def run() -> int:
            barrier = threading.Barrier(threads)
            ts = [threading.Thread(target=worker, args=(barrier,)) for _ in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            # every put returned after the slave held it: the slave is at the master's end already
            assert slave.get_max_phy_offset() == master.get_max_phy_offset()
            return threads * per

        benchmark.group = "replication"
        assert benchmark.pedantic(run, rounds=rounds, warmup_rounds=1) == total
        assert not failures, failures[:3]
        record("sync_master_put_%d_threads" % threads, total, total * 128, threads=threads)
    finally:
        slave.destroy()
        master.destroy()


def test_slave_catch_up(benchmark, tmp_root, record):
    data = 64 * MIB
    size = benchlib.file_size_for(data)
    master = MessageStore.open(os.path.join(tmp_root, "master"), mapped_file_size_commit_log=size,
                               ha_listen_port=0)
    batch = MessageBatch([Message(TOPIC, b) for b in benchlib.payloads(32, 128)])
    while master.get_max_phy_offset() < data:
        assert master.put_messages(batch).is_ok()
    master.flush()
    end = master.get_max_phy_offset()
    table = master.get_topic_queue_table()
    records, _ = benchlib.scan_store(master)
    slaves: list[object] = []
    n = [0]

    def setup() -> tuple[tuple, dict]:
        for s in slaves:                     # the previous round's slave goes before the next one starts
            s.destroy()
        slaves.clear()
        n[0] += 1
        root = os.path.join(tmp_root, "slave-%d" % n[0])
        shutil.rmtree(root, ignore_errors=True)
        os.sync()
        return (root,), {}

    def run(root: str) -> int:
        slave = _slave(root, master, size)
        slaves.append(slave)
        _wait(lambda: slave.get_max_phy_offset() == end and slave.get_topic_queue_table() == table,
              "the slave's copy and queues")
        return end

    benchmark.group = "replication"
    try:
        assert benchmark.pedantic(run, setup=setup, rounds=3, warmup_rounds=0) == end
        assert benchlib.scan_store(slaves[-1]) == (records, end)
        msgs = table[(TOPIC, 0)]
        record("slave_catch_up", msgs, msgs * 128, bytes_per_op=end)
    finally:
        for s in slaves:
            s.destroy()
        master.destroy()
