"""Crash tests: a real writer process (``tests/crash_writer.py``) is SIGKILLed, at random moments and at the
named crash points of ``pystore.system.crashpoint``, and the store is checked afterwards (docs/architecture.md "What the store
       promises", docs/format.md §6.2, §8).

After every kill:

* the raw files, before any recovery, hold a gap-free chain of whole records that ends in zeros: at most
  one record whose TOTALSIZE was not yet published (the writer stores it last), never a torn record;
  ``iter_commitlog(verify_crc=True)`` reads them without error;
* every message whose put returned ``PUT_OK`` (the writer's ack log) is at its offset with its own body,
  and under SYNC_FLUSH the flushed offset had passed it when the put returned;
* reopening recovers exactly that chain, in a new process or in this one; two more reopens change
  neither the max offset nor a byte of the log (recovery is idempotent).

Kills accumulate on one store: each writer run recovers what the previous one left, and the ack log of
every earlier run must still hold.

* the consume queues agree with the recovered log (``crash_writer.check_queues``): in each queue the
  records' queue offsets run 0, 1, 2 ... across writer runs, every unit points at its whole record (size,
  tags code), ``get_message`` returns exactly the queue's records in order, and the topic-queue table is
  the same after every reopen.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import crash_writer as cw  # noqa: E402
from writer_procs import Procs, kill, read_line, stderr_of, wait_killed_by_crashpoint  # noqa: E402

from pystore.tools import iter_commitlog  # noqa: E402

MAX_BATCH = 6  # crash_writer batches hold at most this many messages


# ----------------------------------------------------------------------------------------------
# running writers
# ----------------------------------------------------------------------------------------------


def write_args(
    root,
    ack,
    *,
    mode="sync",
    threads=1,
    sizes="mixed",
    file_size=32768,
    run=0,
    seed=0,
    batch_prob=0.25,
    max_puts=-1,
    shutdown=False,
    async_window=0,
) -> list[str]:
    argv = [
        "write",
        str(root),
        "--ack",
        str(ack),
        "--mode",
        mode,
        "--threads",
        str(threads),
        "--sizes",
        sizes,
        "--file-size",
        str(file_size),
        "--run",
        str(run),
        "--seed",
        str(seed),
        "--batch-prob",
        str(batch_prob),
        "--max-puts",
        str(max_puts),
        "--max-seconds",
        "240",
        "--async-window",
        str(async_window),
    ]
    if shutdown:
        argv.append("--shutdown")
    return argv


def kill_delay(rng: random.Random) -> float:
    """Seconds: log-uniform from 5 ms to 0.6 s (a writer puts thousands of messages a second: longer runs
    only make more data to check)."""
    return math.exp(rng.uniform(math.log(0.005), math.log(0.6)))


# ----------------------------------------------------------------------------------------------
# checks after a kill
# ----------------------------------------------------------------------------------------------


def check_crashed(root, acks: list[cw.Ack], sync: bool) -> cw.Walk:
    """The raw files a killed writer left, before any recovery."""
    w = cw.walk_log(str(root))
    cw.check_chain(w, allow_torn_tail=True)
    # SIGKILL keeps the page cache: the only unfinished thing is a record (or blank) whose TOTALSIZE the
    # writer had not stored yet, so it reads as zero. Anything else would be a torn record.
    assert w.stop in ("end", "zero TOTALSIZE followed by data"), "the crashed log stops at %d: %s" % (
        w.stop_offset,
        w.stop,
    )
    cw.check_acked(cw.index_records(w), acks)
    cw.check_unique(w)
    if sync:
        for a in acks:
            assert a.flushed >= a.offset + a.size, (
                "message %d (offset %d, %d bytes) was acknowledged under SYNC_FLUSH, the log flushed to %d"
                % (a.idx, a.offset, a.size, a.flushed)
            )
    if os.path.isdir(cw.commitlog_dir(str(root))):
        got = [(m.commit_log_offset, m.store_size) for m in iter_commitlog(str(root), verify_crc=True)]
        assert got == [(r.offset, r.size) for r in w.records]
    return w


def check_read_only(root, acks: list[cw.Ack], file_size: int) -> None:
    """A read-only opener of the crashed, unrecovered store sees every acknowledged message and writes
    nothing."""
    before = cw.log_digest(str(root))
    store = cw.open_store(root, file_size, read_only=True)
    try:
        for a in acks:
            m = store.look_message_by_offset(a.offset)
            assert m is not None, "read-only: acknowledged message %d at %d not found" % (a.idx, a.offset)
            cw.check_message(m, a.idx)
    finally:
        store.shutdown()
    assert cw.log_digest(str(root)) == before, "a read-only open changed the commit log"


def verify_in_new_process(procs: Procs, root, ack, file_size: int) -> None:
    p = procs.start("verify", str(root), str(ack), "--file-size", str(file_size))
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 0, "verification in a new process failed:\n%s" % stderr_of(p)
    assert out.decode().startswith("{")


def run_kills(
    procs: Procs,
    tmp_path,
    *,
    kills: int,
    seed: int,
    mode: str,
    threads: int,
    sizes: str,
    file_size: int,
    async_window: int = 0,
) -> dict:
    """``kills`` writer runs on one store, each SIGKILLed after a random delay, checked after each kill."""
    rng = random.Random(seed)
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    sync = mode == "sync"
    stats = {"acked": 0, "kills": 0, "abnormal": 0}
    for run in range(kills):
        p = procs.start(
            *write_args(
                root,
                ack,
                mode=mode,
                threads=threads,
                sizes=sizes,
                file_size=file_size,
                run=run,
                seed=seed,
                async_window=async_window,
            )
        )
        try:
            if run % 5 != 4:  # most kills while putting; every fifth one while starting/recovering
                read_line(p, "READY")
            time.sleep(kill_delay(rng))
        finally:
            kill(p)
        stats["kills"] += 1
        acks = cw.read_acks(str(ack))
        check_crashed(root, acks, sync)
        how = run % 4
        if how == 0:
            summary = cw.verify_recovered(str(root), acks, file_size, reopen=1)
            stats["abnormal"] += summary["abnormal"]
        elif how == 1:
            verify_in_new_process(procs, root, ack, file_size)
        else:
            # leave the crashed store to the next writer, which recovers it itself
            check_read_only(root, acks, file_size)
    acks = cw.read_acks(str(ack))
    summary = cw.verify_recovered(str(root), acks, file_size)
    stats["acked"] = len(acks)
    stats["records"] = summary["records"]
    stats["files"] = summary["files"]
    print("kills on one store:", stats)
    return stats


# ----------------------------------------------------------------------------------------------
# random kills
# ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "sizes,file_size,seed", [("small", 16384, 11), ("mixed", 32768, 12), ("big", 65536, 13)]
)
def test_sync_flush_random_kills(procs, tmp_path, sizes, file_size, seed):
    """SYNC_FLUSH, one writer thread: 10 kills per store, 30 over the three stores."""
    stats = run_kills(
        procs, tmp_path, kills=10, seed=seed, mode="sync", threads=1, sizes=sizes, file_size=file_size
    )
    assert stats["kills"] == 10
    assert stats["acked"] > 0 and stats["files"] > 1, stats


@pytest.mark.slow
def test_sync_flush_four_threads_random_kills(procs, tmp_path):
    """SYNC_FLUSH with 4 putting threads sharing the group commit: every acknowledged message survives."""
    stats = run_kills(
        procs, tmp_path, kills=10, seed=21, mode="sync", threads=4, sizes="mixed", file_size=32768
    )
    assert stats["acked"] > 0 and stats["files"] > 1, stats


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_sync_flush_async_put_futures_random_kills(procs, tmp_path, threads):
    """SYNC_FLUSH through ``async_put_message(s)`` with 16 futures outstanding per thread: a message is
    acknowledged once its future, completed by the group commit, says PUT_OK; every one survives."""
    stats = run_kills(
        procs,
        tmp_path,
        kills=6,
        seed=25 + threads,
        mode="sync",
        threads=threads,
        sizes="mixed",
        file_size=32768,
        async_window=16,
    )
    assert stats["acked"] > 0 and stats["files"] > 1, stats


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 3])
def test_async_flush_random_kills(procs, tmp_path, threads):
    """ASYNC_FLUSH: what survives a kill is a gap-free prefix of whole records holding every acknowledged
    message (a SIGKILL does not lose the page cache, so normally everything written survives)."""
    stats = run_kills(
        procs,
        tmp_path,
        kills=6,
        seed=31 + threads,
        mode="async",
        threads=threads,
        sizes="mixed",
        file_size=16384,
    )
    assert stats["acked"] > 0, stats


@pytest.mark.slow
def test_async_flush_lost_unflushed_tail(procs, tmp_path):
    """ASYNC_FLUSH after a power cut: the pages not flushed yet are gone. Simulated on a copy of a killed
    store by zeroing from a page boundary near the end: recovery keeps exactly the whole records before
    the cut, and every acknowledged message that lies there."""
    rng = random.Random(41)
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    file_size = 16384
    p = procs.start(*write_args(root, ack, mode="async", file_size=file_size, seed=41))
    try:
        read_line(p, "READY")
        time.sleep(0.4)  # thousands of puts here; a loaded machine may not have run the writer much yet
        deadline = time.monotonic() + 60
        while len(cw.read_acks(str(ack))) <= 20:
            assert p.poll() is None and time.monotonic() < deadline, stderr_of(p)
            time.sleep(0.01)
    finally:
        kill(p)
    acks = cw.read_acks(str(ack))
    w = check_crashed(root, acks, sync=False)
    assert len(w.records) > 20
    last_start = w.end - w.end % file_size if w.end % file_size else w.end - file_size
    for trial in range(6):
        cut = rng.randrange(max(last_start, w.end - 3 * 4096), w.end)
        cut -= cut % 4096
        cut = max(cut, last_start)
        copy = tmp_path / ("power-cut-%d" % trial)
        shutil.copytree(root, copy)
        path = os.path.join(cw.commitlog_dir(str(copy)), "%020d" % last_start)
        with open(path, "r+b") as f:
            f.seek(cut - last_start)
            f.write(bytes(file_size - (cut - last_start)))
        kept = [r for r in w.records if r.offset + r.size <= cut]
        # a previous file ends with its blank, so the log reaches at least the start of the cut file
        expect_end = max(kept[-1].offset + kept[-1].size if kept else 0, last_start)
        # the killed writer may have just closed the cut file with its blank (w.end is then that file's end):
        # a cut past the blank's 8-byte header leaves it whole, and the log reaches the file's end
        blank = max((r.offset + r.size for r in w.records if r.offset >= last_start), default=last_start)
        if w.end == last_start + file_size and blank < w.end and cut >= blank + 8:
            expect_end = w.end
        summary = cw.verify_recovered(
            str(copy), [a for a in acks if a.offset + a.size <= cut], file_size, reopen=1
        )
        assert summary["max_offset"] == expect_end, (cut, summary)
        assert summary["records"] == len(kept)
        shutil.rmtree(copy)


# ----------------------------------------------------------------------------------------------
# named crash points
# ----------------------------------------------------------------------------------------------

#: The points of ``pystore.system.crashpoint.POINTS`` the tests below kill at (``checkpoint.written``: the power-cut
       #: tests of tests/powerloss, where a write not yet synced is lost; a SIGKILL alone keeps it in the page cache).
COVERED_POINTS = {
    "checkpoint.written",
    "commitlog.roll",
    "allocate.created",
    "groupcommit.flushed",
    "shutdown.flushed",
    "shutdown.checkpoint",
    "recovery.scanned",
    "recovery.truncated",
    # several writers: tests/test_shared_append.py kills at each
    "shared.reserved",
    "shared.copied",
    "shared.catching_up",
    "shared.repairing",
    # timers: tests/powerloss/test_timer_powerloss.py kills a timer writer at each, then cuts the power
    "timer.delivered",
    "timer.flushed",
    "timer.checkpoint",
}


def test_every_crash_point_has_a_test():
    from pystore.system.crashpoint import POINTS

    missing = set(POINTS) - COVERED_POINTS
    assert not missing, "crash points no test kills at: %s" % sorted(missing)


def _records_vs_acks(w: cw.Walk, acks: list[cw.Ack], threads: int = 1) -> int:
    """Records in the log that were never acknowledged: the put(s) in flight at the kill."""
    extra = len(w.records) - len(acks)
    assert 0 <= extra <= threads * MAX_BATCH, (len(w.records), len(acks))
    return extra


@pytest.mark.parametrize("mode,nth,file_size", [("sync", 2, 16384), ("sync", 7, 16384), ("async", 4, 32768)])
def test_crashpoint_commitlog_roll(procs, tmp_path, mode, nth, file_size):
    """Killed exactly at a file roll: the old file ends with its blank, the message that did not fit is
    not stored (its put never returned), and after recovery the next put starts the next file."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    p = procs.start(
        *write_args(root, ack, mode=mode, file_size=file_size, seed=nth), crashpoint="commitlog.roll:%d" % nth
    )
    wait_killed_by_crashpoint(p)
    acks = cw.read_acks(str(ack))
    w = check_crashed(root, acks, sync=mode == "sync")
    # the first roll creates file 0; the nth moves from file nth-2 to file nth-1
    assert w.end == (nth - 1) * file_size, (w.end, w.stop)
    assert w.stop == "end"
    assert len(w.records) == len(acks), "one thread: every stored message was acknowledged before the kill"
    summary = cw.verify_recovered(str(root), acks, file_size)
    assert summary["abnormal"] and summary["max_offset"] == (nth - 1) * file_size
    with cw.open_store(root, file_size) as store:
        from pystore import Message

        r = store.put_message(Message("AfterRoll", b"x" * 100))
        assert r.is_ok() and r.wrote_offset == (nth - 1) * file_size
    assert cw.walk_log(str(root)).stop == "end"


@pytest.mark.parametrize("nth", [1, 2, 5])
def test_crashpoint_allocate_created(procs, tmp_path, nth):
    """Killed right after the allocate service created a commit-log file (the put path has not taken it
    yet): the new, empty file is handled by recovery and nothing acknowledged is lost."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    file_size = 16384
    p = procs.start(
        *write_args(root, ack, file_size=file_size, seed=100 + nth), crashpoint="allocate.created:%d" % nth
    )
    wait_killed_by_crashpoint(p)
    acks = cw.read_acks(str(ack))
    w = check_crashed(root, acks, sync=True)
    assert len(cw.log_files(str(root))) >= nth  # the nth file exists (pre-created files are zeros)
    _records_vs_acks(w, acks)
    summary = cw.verify_recovered(str(root), acks, file_size)
    assert summary["max_offset"] == w.end


@pytest.mark.parametrize("threads,nth", [(1, 3), (1, 60), (4, 40), (4, 300)])
def test_crashpoint_groupcommit_flushed(procs, tmp_path, threads, nth):
    """Killed when the group commit has flushed but not yet told the waiting puts: the flushed messages
    survive although nobody acknowledged them; every acknowledged one survives too."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    p = procs.start(
        *write_args(root, ack, threads=threads, file_size=16384, seed=200 + nth),
        crashpoint="groupcommit.flushed:%d" % nth,
    )
    wait_killed_by_crashpoint(p)
    acks = cw.read_acks(str(ack))
    w = check_crashed(root, acks, sync=True)
    _records_vs_acks(w, acks, threads)
    summary = cw.verify_recovered(str(root), acks, 16384)
    assert summary["records"] == len(w.records), "a flushed but unacknowledged message was dropped"


@pytest.mark.parametrize("point", ["shutdown.flushed", "shutdown.checkpoint"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_crashpoint_shutdown(procs, tmp_path, point, mode):
    """Killed during a clean shutdown: the abort file is still there, so the next open recovers abnormally
    and keeps every message (all puts had returned before the shutdown began)."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    file_size = 16384
    p = procs.start(
        *write_args(root, ack, mode=mode, file_size=file_size, seed=7, max_puts=250, shutdown=True),
        crashpoint=point,
    )
    read_line(p, "READY")
    wait_killed_by_crashpoint(p)
    acks = cw.read_acks(str(ack))
    w = check_crashed(root, acks, sync=mode == "sync")
    assert w.stop == "end"
    assert len(w.records) == len(acks) > 250, "every put returned before the shutdown: all are acknowledged"
    assert w.end == acks[-1].offset + acks[-1].size
    assert os.path.exists(root / "abort"), "the abort file must survive a shutdown that did not finish"
    from pystore.engine.checkpoint import StoreCheckpoint

    cp = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
    last = cw.walk_log(str(root)).records[-1]
    with cw.open_store(root, file_size, read_only=True) as ro:
        last_ts = ro.look_message_by_offset(last.offset).store_timestamp
    if point == "shutdown.checkpoint":
        assert cp.trusted and cp.physic_msg_timestamp == last_ts, (cp, last_ts)
    else:
        # the flush services may have written it already (once a second); it never claims more than the
        # log holds
        assert cp.trusted and cp.physic_msg_timestamp <= last_ts, (cp, last_ts)
    summary = cw.verify_recovered(str(root), acks, file_size)
    assert summary["abnormal"] and summary["records"] == len(acks)
    assert summary["max_offset"] == w.end
    assert not os.path.exists(root / "abort")


def _store_needing_truncation(root, file_size: int, abort: bool) -> list[cw.RawRecord]:
    """A store of whole records followed by a torn record (its first 60 bytes, TOTALSIZE and magic included)
    and, after it, an empty pre-created file, as a writer killed mid-append while the next file was being
    prepared would leave. Returns the whole records."""
    from pystore import Message
    from pystore.config import FlushDiskType
    from pystore.format._codec import encode_record

    with cw.open_store(root, file_size, flush_disk_type=FlushDiskType.SYNC_FLUSH) as store:
        for i in range(120):
            store.put_message(
                Message("Torn", cw.make_body(i, "Torn", 0, 40 + (i * 37) % 300), keys="k%d" % i)
            )
        end = store.get_max_phy_offset()
    rec = encode_record(Message("Torn", cw.make_body(999, "Torn", 0, 200), keys="k999"), 120, end, 1)
    last = os.path.join(cw.commitlog_dir(str(root)), "%020d" % (end - end % file_size))
    assert file_size - end % file_size >= len(rec) + 8, (
        "the torn record must be one the writer could have put"
    )
    with open(last, "r+b") as f:
        f.seek(end % file_size)
        f.write(rec[:60])
    with open(
        os.path.join(cw.commitlog_dir(str(root)), "%020d" % (end - end % file_size + file_size)), "wb"
    ) as f:
        f.truncate(file_size)
    if abort:
        (root / "abort").write_bytes(b"12345")
    w = cw.walk_log(str(root))
    assert w.stop.startswith("bad") and w.stop_offset == end, (w.stop, w.stop_offset, end)
    return w.records


@pytest.mark.parametrize("abort", [True, False], ids=["abnormal", "normal"])
@pytest.mark.parametrize("point", ["recovery.scanned", "recovery.truncated"])
def test_crashpoint_recovery(procs, tmp_path, point, abort):
    """Killed during recovery itself (the valid end found, nothing cut yet / the log cut): opening again
    gives exactly what an uninterrupted recovery gives, byte for byte."""
    file_size = 16384
    root, ref = tmp_path / "store", tmp_path / "reference"
    records = _store_needing_truncation(root, file_size, abort)
    damaged = cw.log_digest(str(root))
    shutil.copytree(root, ref)
    with cw.open_store(ref, file_size) as store:  # uninterrupted
        ref_max = store.get_max_phy_offset()
    assert ref_max == records[-1].offset + records[-1].size
    p = procs.start("open", str(root), "--file-size", str(file_size), crashpoint=point)
    wait_killed_by_crashpoint(p)
    if point == "recovery.scanned":
        assert cw.log_digest(str(root)) == damaged, "nothing may change before the truncation"
    else:
        assert cw.log_digest(str(root)) == cw.log_digest(str(ref)), (
            "truncated exactly as an uninterrupted recovery"
        )
    summary = cw.verify_recovered(str(root), [], file_size)
    assert summary["max_offset"] == ref_max and summary["records"] == len(records)
    assert cw.log_digest(str(root)) == cw.log_digest(str(ref))
    got = [r.body for r in cw.walk_log(str(root)).records]
    assert got == [r.body for r in records]


@pytest.mark.slow
def test_crash_during_writer_recovery_repeatedly(procs, tmp_path):
    """Writers killed again and again while recovering a store a killed writer left (``*:n`` kills at the
    nth crash point of any name): the store converges and keeps every acknowledged message."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    file_size = 16384
    p = procs.start(*write_args(root, ack, file_size=file_size, seed=51))
    try:
        read_line(p, "READY")
        time.sleep(0.3)
    finally:
        kill(p)
    acks = cw.read_acks(str(ack))
    check_crashed(root, acks, sync=True)
    for run, spec in enumerate(["recovery.scanned", "recovery.truncated", "*:1", "*:2", "*:3"], start=1):
        p = procs.start(*write_args(root, ack, file_size=file_size, seed=51, run=run), crashpoint=spec)
        wait_killed_by_crashpoint(p)
        acks = cw.read_acks(str(ack))
        check_crashed(root, acks, sync=True)
    summary = cw.verify_recovered(str(root), cw.read_acks(str(ack)), file_size)
    assert summary["records"] >= len(acks)


# ----------------------------------------------------------------------------------------------
# a reader in another process
# ----------------------------------------------------------------------------------------------


def _blank_at(root, offset: int, file_size: int) -> bool:
    path = os.path.join(cw.commitlog_dir(str(root)), "%020d" % (offset - offset % file_size))
    with open(path, "rb") as f:
        f.seek(offset % file_size)
        head = f.read(8)
    return len(head) == 8 and int.from_bytes(head[4:], "big") == cw.BLANK_MAGIC_CODE


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_reader_follows_a_writer_that_is_killed(procs, tmp_path, mode):
    """A read-only reader (this process) follows a live writer (another process), which is then SIGKILLed
    under it: every record the reader gets is whole and intact, at the offset it asked for; afterwards it
    has read exactly the log the raw files hold, every acknowledged message included."""
    root, ack = tmp_path / "store", tmp_path / "ack.log"
    file_size = 16384
    p = procs.start(*write_args(root, ack, mode=mode, sizes="small", file_size=file_size, seed=61, threads=2))
    read_line(p, "READY")
    while not cw.read_acks(str(ack)):
        assert p.poll() is None, stderr_of(p)
        time.sleep(0.005)
    ro = cw.open_store(root, file_size, read_only=True)
    seen: list[tuple[int, int]] = []
    off = 0
    stop_at = time.monotonic() + 1.0
    idle = 0
    try:
        while idle < 30:  # after the kill: stop once nothing new shows up for 30 polls
            progressed = False
            mx = ro.get_max_phy_offset()
            while off < mx:
                m = ro.look_message_by_offset(off)
                if m is None:
                    if _blank_at(root, off, file_size):
                        off += file_size - off % file_size
                        continue
                    break  # not written yet (the reader's max offset may run ahead of the writer)
                assert m.commit_log_offset == off
                cw.check_message(m)
                seen.append((off, m.store_size))
                off += m.store_size
                progressed = True
            if p.poll() is None:
                if time.monotonic() > stop_at:
                    kill(p)
            else:
                idle = 0 if progressed else idle + 1
            time.sleep(0.005)
    finally:
        ro.shutdown()
    acks = cw.read_acks(str(ack))
    w = check_crashed(root, acks, sync=mode == "sync")
    assert seen == [(r.offset, r.size) for r in w.records]
    assert len(seen) >= len(acks) > 0


def test_read_only_max_offset_of_a_live_writer(tmp_path):
    """A read-only reader follows a live writer across a roll: when, between two refreshes, the writer rolls
    into file N and the allocate service pre-creates N+1, the reader scans N (it is new to the reader, not
    complete) and its max offset is the end of the writer's whole records, not N+1's start."""
    from pystore import Message
    from pystore.config import FlushDiskType

    root = tmp_path / "store"
    fs = 16384
    writer = cw.open_store(root, fs, flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    try:
        for i in range(10):
            assert writer.put_message(Message("T", cw.make_body(i, "T", 0, 300), keys="k%d" % i)).is_ok()
        with cw.open_store(root, fs, read_only=True) as ro:
            assert ro.get_max_phy_offset() == writer.get_max_phy_offset()
            i = 10
            while writer.get_max_phy_offset() < fs + 1000:  # roll into file 1
                assert writer.put_message(Message("T", cw.make_body(i, "T", 0, 300), keys="k%d" % i)).is_ok()
                i += 1
            nxt = os.path.join(cw.commitlog_dir(str(root)), "%020d" % (2 * fs))
            deadline = time.monotonic() + 60
            while not (os.path.exists(nxt) and os.path.getsize(nxt) == fs) and time.monotonic() < deadline:
                time.sleep(0.01)  # the allocate service pre-creates file 2
            assert os.path.getsize(nxt) == fs
            assert ro.get_max_phy_offset() == writer.get_max_phy_offset()
            last = writer.get_max_phy_offset()
            for off in (fs, last - 1):
                m = ro.look_message_by_offset(off)
                assert off == last - 1 or (m is not None and m.commit_log_offset == fs)
    finally:
        writer.shutdown()


# ----------------------------------------------------------------------------------------------
# the corruption guard after a crash
# ----------------------------------------------------------------------------------------------


def _checkpoint_physic(root) -> int:
    from pystore.engine.checkpoint import StoreCheckpoint

    cp = StoreCheckpoint(str(root / "checkpoint"), read_only=True)
    return cp.physic_msg_timestamp if cp.trusted else 0


def test_corruption_guard_after_a_crash(procs, tmp_path):
    """A SYNC_FLUSH writer puts 600 messages and is SIGKILLed after its flush services wrote the checkpoint
    (docs/format.md §4.1: at most a second after the data reached disk); then a bit flips in the body of a record
    in the middle of the log, with hundreds of acknowledged messages after it. Recovery must refuse with
    StoreCorruptedError naming the file and the offset, dropping nothing.

    (Damage to records flushed within the last second before a crash, which the checkpoint on disk does not
    cover yet, cannot be told from a torn tail: recovery then cuts there, as RocketMQ does.)"""
    import test_corruption as tc

    from pystore.errors import StoreCorruptedError

    root, ack = tmp_path / "store", tmp_path / "ack.log"
    fs = tc.FILE_SIZE
    p = procs.start(
        *write_args(root, ack, sizes="small", file_size=fs, batch_prob=0, max_puts=600), "--linger", "120"
    )
    read_line(p, "READY")
    read_line(p, "DONE")
    acks = cw.read_acks(str(ack))
    assert len(acks) == 600
    with cw.open_store(root, fs, read_only=True) as ro:
        last_ts = ro.look_message_by_offset(acks[-1].offset).store_timestamp
    deadline = time.monotonic() + 60
    while _checkpoint_physic(root) < last_ts and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _checkpoint_physic(root) >= last_ts, "the flush services did not write the checkpoint"
    kill(p)
    w = cw.walk_log(str(root))
    files = tc.files_with_records(w)
    assert len(files) >= 4
    v = tc.victim_in_file(w, files[-2], random.Random(6))
    tc.flip_bit(root, tc.body_offset(v) + 2, 4)
    after = [a for a in acks if a.offset > v.offset]
    assert len(after) > 50
    before = tc.tree_digest(root)
    with pytest.raises(StoreCorruptedError) as ei:
        cw.open_store(root, fs)
    assert (ei.value.path, ei.value.offset) == (tc.file_of(root, v.offset), v.offset)
    assert tc.tree_digest(root) == before


# ----------------------------------------------------------------------------------------------
# SYNC_FLUSH: the put waits for the group commit, consumers only see flushed data
# ----------------------------------------------------------------------------------------------


def test_sync_flush_timeout_and_dispatch_follows_the_flush(tmp_path):
    """With the group commit held back, a SYNC_FLUSH put returns FLUSH_DISK_TIMEOUT after
    ``sync_flush_timeout`` (the message is in the log: ``is_ok()``), so does an ``async_put_message``
    future, and no consumer sees the message (docs/format.md §7.2: dispatch follows the flushed offset); once the
    group commit runs, the queue serves it and later puts return PUT_OK."""
    import threading

    from pystore import Message
    from pystore.config import FlushDiskType
    from pystore.status import GetMessageStatus, PutMessageStatus

    store = cw.open_store(
        tmp_path / "store", 16384, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200
    )
    gc = store._flush_service  # white-box: hold the group commit back
    gate = threading.Event()
    real = gc.do_commit

    def held() -> None:
        gate.wait(60)  # the test opens the gate (in its finally at the latest): 60 s is only a guard
        real()

    try:
        assert store.put_message(Message("Sync", b"first", tags="A")).status == PutMessageStatus.PUT_OK
        gc.do_commit = held
        with gc._state:
            gc._flushing = True  # a put finds a (held) flush under way: it must wait
        time.sleep(0.05)  # the service thread is now waiting at the gate
        t0 = time.monotonic()
        r = store.put_message(Message("Sync", b"second", tags="A"))
        waited = time.monotonic() - t0
        assert r.status == PutMessageStatus.FLUSH_DISK_TIMEOUT and r.is_ok(), r
        assert 0.15 <= waited < 5, waited
        fut = store.async_put_message(Message("Sync", b"third", tags="A"))
        assert fut.result(60).status == PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert store.look_message_by_offset(r.append_message_result.wrote_offset).body == b"second"
        res = store.get_message("g", "Sync", 0, 1, 32)
        assert res.status != GetMessageStatus.FOUND and store.get_max_offset_in_queue("Sync", 0) == 1, res
        gate.set()
        gc.do_commit = real
        gc._lead(0, by_put=False)  # the held flush ends
        deadline = time.monotonic() + 60
        while store.get_max_offset_in_queue("Sync", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        res = store.get_message("g", "Sync", 0, 0, 32)
        assert [m.body for m in res.messages] == [b"first", b"second", b"third"]
        assert store.put_message(Message("Sync", b"fourth", tags="A")).status == PutMessageStatus.PUT_OK
    finally:
        gate.set()
        store.shutdown()


def test_reader_of_a_torn_tail_follows_the_next_writer(tmp_path):
    """A reader opens a crashed store whose last record is torn: it sees the whole records before it. A
    writer then recovers the store (cutting the torn record) and appends: the reader's next look finds the
    new messages where the torn record was (a torn tail is not a fence; damage with records after it is:
    test_corruption.py::test_middle_damage_raises_store_corrupted)."""
    from pystore import Message

    file_size = 16384
    root = tmp_path / "store"
    records = _store_needing_truncation(root, file_size, abort=True)
    end = records[-1].offset + records[-1].size
    with cw.open_store(root, file_size, read_only=True) as ro:
        assert ro.get_max_phy_offset() == end
        assert ro.look_message_by_offset(end) is None
        with cw.open_store(root, file_size) as writer:
            assert writer.get_max_phy_offset() == end
            rs = [
                writer.put_message(Message("After", cw.make_body(i, "After", 0, 50), keys="k%d" % i))
                for i in range(5)
            ]
            assert rs[0].wrote_offset == end and all(r.is_ok() for r in rs)
            last = writer.get_max_phy_offset()
        assert ro.get_max_phy_offset() == last
        for i, r in enumerate(rs):
            cw.check_message(ro.look_message_by_offset(r.wrote_offset), i)
