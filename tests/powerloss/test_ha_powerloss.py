"""Power cuts of a SYNC_MASTER pair, one side at a time, on the power-cut layer (``docs/powerloss.md``).

A SYNC_MASTER acknowledges a put (PUT_OK) once a slave reported holding it. Each test runs a
``crash_writer.py write --sync-master`` process and a ``crash_writer.py follow`` slave process, one of them on
a layer, the other on a plain folder; it SIGKILLs both at a random moment (seeded, printed) and cuts the
power of the layer's side (``drop``: every unsynced write lost; ``torn``: the last write of one file cut at a
sector), then reopens what the disk holds and checks it with ``crash_writer.verify_recovered`` (a gap-free
log of whole records, queues and index agreeing with it, recovery idempotent) against the ack log.

* Master cut: every acknowledged message is on the (living) slave. The master reopened from the cut holds
  a gap-free prefix of the slave's log (or the slave's is a prefix of the master's: records the master flushed before a slave
  held them were never acknowledged); with SYNC_FLUSH every acknowledged message, with ASYNC_FLUSH only
  those its flush had reached when the put returned (the ack log's fourth column): SYNC_MASTER's ack means
  "on the slave", not "durable on the master". The test counts what the master lost.
* Slave cut: a SYNC_FLUSH slave reports an offset only after it flushed what it appended
  (``pystore/ha/__init__.py``), so every acknowledged message is in what its disk holds. An ASYNC_FLUSH slave reports
  on receipt, as RocketMQ's does: the cut takes the acknowledged messages past its last flush (a tail; the
  test prints how many), and what remains is a consistent store.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest
from writer_procs import kill, read_line

pytestmark = pytest.mark.powerloss

FILE = 32768
MODELS = ("journal", "strict")


def wait_acks(ack: str, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(cw.read_acks(ack)) < n:
        assert time.monotonic() < deadline, "fewer than %d acknowledged messages in %ss" % (n, timeout)
        time.sleep(0.01)


def start_pair(procs, tmp_path: Path, master_root: Path, slave_root: Path, mode: str,
               master_env=None, slave_env=None, slave_mode: str = "async"):
    ack = str(tmp_path / "acks")
    pm = procs.start("write", str(master_root), "--ack", ack, "--mode", mode, "--threads", "2", "--sync-master",
                      "--file-size", str(FILE), "--max-seconds", "60", env=master_env)
    port = int(read_line(pm, "READY", 60.0).split()[2])
    ps = procs.start("follow", str(slave_root), "--master", "127.0.0.1:%d" % port, "--file-size", str(FILE),
                      "--mode", slave_mode, env=slave_env)
    read_line(ps, "READY", 60.0)
    return pm, ps, ack


def run_until_cut(rng: random.Random, ack: str) -> None:
    """Let the pair run: at least 50 acknowledged messages, then a random 0-0.8 s more."""
    wait_acks(ack, 50)
    time.sleep(rng.uniform(0.0, 0.8))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_master_power_cut_every_ack_is_on_the_slave(powercut, procs, tmp_path, model, mode):
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    fs = powercut(model)
    slave_root = tmp_path / "slave"
    pm, ps, ack = start_pair(procs, tmp_path, fs.mount / "master", slave_root, mode, master_env=fs.writer_env())
    run_until_cut(rng, ack)
    kill(pm)
    acks = cw.read_acks(ack)
    kill(ps)                                                 # on a plain folder: its page cache survives
    slave = cw.verify_recovered(str(slave_root), acks, FILE, reopen=0)
    assert slave["records"] >= len(acks) > 0
    slave_walk = cw.walk_log(str(slave_root))
    slave_bytes = {r.offset: (r.size, r.body) for r in slave_walk.records}
    for crash_mode in ("drop", "torn"):
        out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
        root = str(out / "master")
        # the master's own disk holds what its flush reached: the highest flushed offset a put saw on return
        flushed = max(a.flushed for a in acks)
        durable = [a for a in acks if a.offset + a.size <= flushed]
        if mode == "sync":
            assert durable == acks
        summary = cw.verify_recovered(root, durable, FILE, reopen=0)
        walk = cw.walk_log(root)
        held = {r.offset for r in walk.records}
        lost = [a for a in acks if a.offset not in held]
        # master and slave agree record for record up to the shorter one's end (the master may hold records
        # it flushed before a slave had them: never acknowledged, so allowed)
        for r in walk.records:
            if r.offset < slave_walk.end:
                assert slave_bytes.get(r.offset) == (r.size, r.body), "master record at %d differs" % r.offset
        print("%s %s %s: %d acked, slave holds all %d records; master after the cut: %d records, %d acked lost"
              % (model, mode, crash_mode, len(acks), slave["records"], summary["records"], len(lost)))
        if mode == "sync":
            assert not lost


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("slave_mode", ["sync", "async"])
def test_slave_power_cut(powercut, procs, tmp_path, model, slave_mode):
    """A SYNC_FLUSH slave flushes before it reports: nothing it acknowledged is lost. An ASYNC_FLUSH slave
    reports on receipt (RocketMQ): the cut loses the acknowledged messages past its last flush, a tail;
    what it keeps is a consistent store holding every acknowledged message below its end."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    fs = powercut(model)
    pm, ps, ack = start_pair(procs, tmp_path, tmp_path / "master", fs.mount / "slave", "async",
                             slave_env=fs.writer_env(), slave_mode=slave_mode)
    run_until_cut(rng, ack)
    kill(ps)
    time.sleep(0.05)                    # puts the slave reported before it died write their ack lines
    kill(pm)
    acks = cw.read_acks(ack)
    assert acks
    for crash_mode in ("drop", "torn"):
        out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
        root = str(out / "slave")
        end = cw.walk_log(root).end
        kept = [a for a in acks if a.offset + a.size <= end]
        lost = len(acks) - len(kept)
        print("%s %s slave %s: %d acked, %d acked lost (log end after the cut %d)"
              % (model, crash_mode, slave_mode, len(acks), lost, end))
        summary = cw.verify_recovered(root, kept, FILE, reopen=0)
        assert summary["max_offset"] <= end
        if slave_mode == "sync":
            assert not lost
