"""Several writer processes on one store (``MessageStore.open(root, shared_writers=True)``,
``pystore.engine.shared_writers``): the two open modes refuse each other naming the mode and the holder's pid;
real processes (``tests/shared_store_writer.py``) put at once and every process serves every process's messages
with continuous queue offsets; the leader SIGKILLed, another process takes over and dispatches what comes after;
a store reopened by a single writer afterwards holds every acknowledged message where it was told."""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from writer_procs import stderr_of

from pystore import GetMessageStatus, Message, MessageStore
from pystore.config import StoreConfig
from pystore.errors import ConfigError, StoreLockedError

TESTS = Path(__file__).resolve().parent
SCRIPT = "import runpy; runpy.run_path(%r, run_name='__main__')" % str(TESTS / "shared_store_writer.py")
GEOMETRY = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 64}


def _start(procs, root, name, count, flush="ASYNC_FLUSH", hold=True):
    p = procs.start(str(root), name, str(count), flush, "hold" if hold else "", script=SCRIPT, stdin=True)
    line = p.stdout.readline().decode().split()
    assert line and line[0] == "open", stderr_of(p)
    p.leader = line[2] == "1"  # type: ignore[attr-defined]
    return p


def _acks(p, acks):
    for raw in p.stdout:
        parts = raw.decode().split()
        if parts[0] == "ack":
            acks[(parts[1], int(parts[2]))] = (parts[3], int(parts[4]), int(parts[5]), int(parts[6]))
        elif parts[0] == "done":
            return True
        else:
            raise AssertionError("%s\n%s" % (raw, stderr_of(p)))
    return False


def _ask(p, line):
    p.stdin.write(line.encode() + b"\n")
    p.stdin.flush()
    return p.stdout.readline().decode().split()


def _count_until(p, topic, qid, want, limit_s=20.0):
    deadline = time.monotonic() + limit_s
    while True:
        got = int(_ask(p, "count %s %d" % (topic, qid))[1])
        if got >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _quit(p):
    p.stdin.write(b"quit\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == b"closed", stderr_of(p)
    assert p.wait() == 0


def _check_store(root, acks):
    """A single writer reopening the store serves every acknowledged message where it was told, and each queue
    is 0..n-1 without a gap or a duplicate."""
    by_queue: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    with MessageStore.open(str(root), **GEOMETRY) as store:
        for topic, qid in [("Orders", 0), ("Orders", 1), ("Audit", 0), ("Audit", 3)]:
            offset = 0
            while True:
                r = store.get_message("G", topic, qid, offset, 256)
                if r.status is not GetMessageStatus.FOUND:
                    break
                for m in r.messages:
                    by_queue[(topic, qid)][m.queue_offset] = m.body.rstrip(b".").decode()
                offset = r.next_begin_offset
    for q, offs in by_queue.items():
        assert sorted(offs) == list(range(len(offs))), q
    for (name, i), (topic, qid, qoff, _) in acks.items():
        assert by_queue[(topic, qid)].get(qoff) == "%s-%d-" % (name, i), (name, i, topic, qid, qoff)
    return by_queue


def test_the_two_modes_refuse_each_other_naming_mode_and_pid(tmp_path):
    root = str(tmp_path / "store")
    with MessageStore.open(root, **GEOMETRY):
        with pytest.raises(StoreLockedError, match=r"only writer \(pid %d\).*shared_writers=True" % os.getpid()):
            MessageStore.open(root, shared_writers=True, **GEOMETRY)
    with MessageStore.open(root, shared_writers=True, **GEOMETRY) as shared:
        assert shared.writer_info()["shared"] is True and shared.writer_info()["leader_pid"] == os.getpid()
        with pytest.raises(StoreLockedError, match=r"shared_writers=True \(pid %d\).*as its only writer" % os.getpid()):
            MessageStore.open(root, **GEOMETRY)
        with MessageStore.open(root, read_only=True, **GEOMETRY) as reader:      # readers work with both
            assert reader.get_max_phy_offset() == 0


def test_settings_a_shared_store_cannot_have_are_refused(tmp_path):
    for bad in ({"transient_store_pool_enable": True}, {"broker_role": "SLAVE"}, {"warm_mapped_file_enable": True}):
        with pytest.raises(ConfigError):
            MessageStore.open(str(tmp_path / "s"), shared_writers=True, **bad, **GEOMETRY)
    assert StoreConfig(shared_writers=True).shared_writers is True


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_three_writer_processes_share_one_store(tmp_path, procs, flush):
    root = tmp_path / "store"
    acks: dict = {}
    ps = [_start(procs, root, "w%d" % k, 300, flush) for k in range(3)]
    assert [p.leader for p in ps] == [True, False, False]
    for p in ps:
        assert _acks(p, acks)
    # every process serves every process's messages (the followers read what the leader dispatched)
    for p in ps:
        assert [_count_until(p, "Orders", 0, 225), _count_until(p, "Audit", 3, 225)] == [225, 225]
    for p in reversed(ps):
        _quit(p)
    by_queue = _check_store(root, acks)
    assert sum(len(v) for v in by_queue.values()) == 900


def test_a_killed_leader_is_replaced_and_dispatch_goes_on(tmp_path, procs):
    root = tmp_path / "store"
    acks: dict = {}
    leader = _start(procs, root, "L", 100)
    follower = _start(procs, root, "F", 100)
    assert leader.leader and not follower.leader
    assert _acks(leader, acks) and _acks(follower, acks)
    leader.kill()
    leader.wait()
    deadline = time.monotonic() + 5
    while _ask(follower, "info")[1] != "1":
        assert time.monotonic() < deadline, "no takeover within 5 s"
        time.sleep(0.05)
    late = _start(procs, root, "N", 100)          # joins the new leader
    assert not late.leader and _acks(late, acks)
    assert _count_until(follower, "Orders", 0, 75) == 75 and _count_until(late, "Audit", 3, 75) == 75
    _quit(late)
    _quit(follower)
    _check_store(root, acks)


def test_a_takeover_recovers_from_the_dead_leaders_dispatched_end_not_from_the_checkpoint(tmp_path, procs):
    """A takeover follows a process's death, not the machine's: every page the leader wrote is in the page cache,
    so the recovery is not abnormal (no index file dropped, nothing rebuilt from a checkpoint whose queue time
    moves once a minute) and its walk starts at the file holding the leader's dispatched end. Everything stays
    served, by queue offset and by key."""
    root = tmp_path / "store"
    acks: dict = {}
    leader = _start(procs, root, "L", 1500)
    assert leader.leader and _acks(leader, acks)
    follower = MessageStore.open(str(root), shared_writers=True, **GEOMETRY)
    try:
        for i in range(30):
            assert follower.put_message(Message("K", b"keyed-%d" % i, keys="key-%d" % i)).is_ok()
        dispatched = follower._shared.lock
        deadline = time.monotonic() + 10
        while dispatched.dispatched_end != dispatched.published_end:
            assert time.monotonic() < deadline, "the leader did not dispatch"
            time.sleep(0.02)
        end = dispatched.published_end
        leader.kill()
        leader.wait()
        deadline = time.monotonic() + 10
        while not follower.writer_info()["leader"]:
            assert time.monotonic() < deadline, "no takeover"
            time.sleep(0.02)
        rec = follower.recovery
        assert rec is not None and not rec.abnormal
        files = sorted(int(n) for n in os.listdir(root / "commitlog"))
        holding = max(f for f in files if f <= end)
        assert len(files) > 3 and rec.start_file is not None and int(os.path.basename(rec.start_file)) == holding
        assert rec.records < 500            # one 64 KiB file's records (about 300), not the log's 1,530
        for i in range(30):
            r = follower.query_message("K", "key-%d" % i)
            assert [m.body for m in r.messages] == [b"keyed-%d" % i]
        assert follower.put_message(Message("K", b"after")).append_message_result.logics_offset == 30
    finally:
        follower.shutdown()
    _check_store(root, acks)


def test_a_killed_follower_loses_nothing_acknowledged(tmp_path, procs):
    root = tmp_path / "store"
    acks: dict = {}
    leader = _start(procs, root, "L", 0)
    follower = _start(procs, root, "F", 0)
    time.sleep(0.3)
    follower.kill()
    follower.wait()
    _acks(follower, acks)
    assert len([k for k in acks if k[0] == "F"]) > 0
    leader.stdin.close()
    leader.kill()
    leader.wait()
    _acks(leader, acks)
    _check_store(root, acks)


def test_a_single_process_in_shared_mode_puts_and_reads_as_a_writer(tmp_path):
    root = str(tmp_path / "store")
    with MessageStore.open(root, shared_writers=True, **GEOMETRY) as store:
        for i in range(50):
            assert store.put_message(Message("T", b"m%d" % i)).is_ok()
        deadline = time.monotonic() + 5
        while store.get_max_offset_in_queue("T", 0) < 50 and time.monotonic() < deadline:
            time.sleep(0.01)
        r = store.get_message("G", "T", 0, 0, 64)
        assert r.status is GetMessageStatus.FOUND and [m.body for m in r.messages] == [b"m%d" % i for i in range(32)]
        info = store.writer_info()
        assert info["writers"] == 1 and info["leader"] is True and info["lock"] in ("robust-mutex", "ofd")
    with MessageStore.open(root, **GEOMETRY) as store:
        assert store.get_max_offset_in_queue("T", 0) == 50 and store.writer_info()["shared"] is False


def test_a_store_on_a_network_file_system_is_refused_with_that_reason(tmp_path, monkeypatch):
    from pystore.log import shared_state

    mounts = tmp_path / "mounts"
    mounts.write_text("server:/export %s nfs4 rw 0 0\n/dev/sda1 / ext4 rw 0 0\n" % tmp_path)
    assert shared_state.network_file_system(str(tmp_path / "store"), str(mounts)) == "nfs4"
    assert shared_state.network_file_system("/elsewhere", str(mounts)) is None
    monkeypatch.setattr(shared_state, "network_file_system", lambda path: "nfs4")
    with pytest.raises(shared_state.SharedStateError, match="nfs4 file system"):
        MessageStore.open(str(tmp_path / "store"), shared_writers=True, **GEOMETRY)
    with MessageStore.open(str(tmp_path / "store"), **GEOMETRY) as store:     # a single writer is fine there
        assert store.put_message(Message("T", b"x")).is_ok()


def test_inspect_and_the_log_report_a_holder_stuck_with_the_lock(tmp_path, caplog):
    from click.testing import CliRunner

    from pystore.cli import cli
    from pystore.log.shared_state import describe

    root = str(tmp_path / "store")
    with MessageStore.open(root, shared_writers=True, shared_writers_stuck_ms=300, **GEOMETRY) as store:
        assert store.put_message(Message("T", b"x")).is_ok()
        lock = store._shared.lock
        lock.acquire()                      # a holder that keeps the lock (alive, never broken into)
        try:
            time.sleep(1.1)
            page = describe(root)
            assert page["holder_pid"] == os.getpid() and page["held_for_s"] >= 1.0
            assert page["leader_pid"] == os.getpid() and page["lock"] == store.writer_info()["lock"]
            r = CliRunner().invoke(cli, ["inspect", root])
            assert r.exit_code == 0, r.output
            assert "shared writers" in r.output and "has held the append lock" in r.output
        finally:
            lock.release()
        reports = [rec.getMessage() for rec in caplog.records if "append lock has been held" in rec.getMessage()]
        assert len(reports) == 1 and "pid %d" % os.getpid() in reports[0]     # once per hold, naming the holder
        assert store.put_message(Message("T", b"after")).is_ok()
    assert describe(str(tmp_path / "nothing")) is None


def test_a_delayed_message_put_by_a_follower_is_delivered_by_the_leader(tmp_path, procs):
    root = tmp_path / "store"
    leader = _start(procs, root, "L", 4)
    follower = _start(procs, root, "F", 4)
    acks: dict = {}
    assert _acks(leader, acks) and _acks(follower, acks)
    status = _ask(follower, "delayed Late 2")
    assert status[:2] == ["delayed", "PUT_OK"]
    assert _count_until(follower, "Late", 2, 1, limit_s=15) == 1        # due after level 1 (1 s)
    _quit(follower)
    _quit(leader)


def test_a_follower_in_the_same_process_puts_reads_and_refuses_the_leaders_work(tmp_path):
    """Two stores of one root in one process (each its own open files, so its own locks): the second follows.
    Its puts (single, batch, async under SYNC_FLUSH, columns) land in the one log with continuous offsets; it
    serves what the leader dispatched; cleaning, listeners and offset commits are the leader's."""
    from pystore import MessageBatch
    from pystore.errors import StoreError

    root = str(tmp_path / "store")
    with MessageStore.open(root, shared_writers=True, flush_disk_type="SYNC_FLUSH", **GEOMETRY) as leader, \
            MessageStore.open(root, shared_writers=True, flush_disk_type="SYNC_FLUSH", **GEOMETRY) as follower:
        assert leader.writer_info()["leader"] and not follower.writer_info()["leader"]
        assert leader.writer_info()["writers"] == 2
        assert leader.put_message(Message("T", b"l0")).append_message_result.logics_offset == 0
        assert follower.put_message(Message("T", b"f1")).append_message_result.logics_offset == 1
        r = follower.put_messages(MessageBatch([Message("T", b"f2"), Message("T", b"f3")]))
        assert r.append_message_result.logics_offset == 2
        assert follower.async_put_message(Message("T", b"f4")).result(5).append_message_result.logics_offset == 4
        assert follower.put_columns("T", [b"f5", b"f6"]).status.name == "PUT_OK"
        assert leader.put_message(Message("T", b"l7")).append_message_result.logics_offset == 7
        deadline = time.monotonic() + 5
        while follower.get_max_offset_in_queue("T", 0) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = follower.get_message("G", "T", 0, 0, 32)
        assert [m.body for m in got.messages] == [b"l0", b"f1", b"f2", b"f3", b"f4", b"f5", b"f6", b"l7"]
        for refused in (follower.clean_files, lambda: follower.add_arriving_listener(lambda *a: None)):
            with pytest.raises(StoreError, match="does not lead"):
                refused()
        # whole queues go only in the only process: the follower would keep reading a removed queue's files,
        # and a queue made again under its name (its new messages too) would be hidden from it
        for refused in (leader.clean_expired_consumer_queue, lambda: leader.clean_unused_topic({"Other"})):
            with pytest.raises(StoreError, match="other writer processes"):
                refused()
        assert leader.get_max_offset_in_queue("T", 0) == 8
        # committed offsets from either: the follower's go through the journal into the leader's file
        follower.commit_offset("G", "T", 0, 3)
        assert follower.fetch_offset("G", "T", 0) == 3 and leader.fetch_offset("G", "T", 0) == 3
        leader.commit_offset("G", "T", 1, 9)
        leader._writer.offsets.persist()
        assert os.path.getsize(os.path.join(root, "config", "consumerOffset.journal")) == 0
        follower.commit_offset("G", "T", 0, 5)
        assert follower.fetch_offset("G", "T", 1) == 9 and follower.fetch_offset("G", "T", 0) == 5
        assert leader.fetch_offset("G", "T", 0) == 5
        c = follower.consumer("C", "T", [0])
        got = c.poll()
        assert [m.body for m in got][:2] == [b"l0", b"f1"]
        c.commit()
        handed = len(got)
    with MessageStore.open(root, **GEOMETRY) as single:        # the file holds every process's commits
        assert single.fetch_offset("G", "T", 0) == 5 and single.fetch_offset("G", "T", 1) == 9
        assert single.fetch_offset("C", "T", 0) == handed


def test_a_follower_lets_go_of_the_files_the_leaders_cleaning_deleted(tmp_path):
    root = str(tmp_path / "store")
    opts = dict(GEOMETRY, file_reserved_time=0, mapped_file_size_commit_log=16 * 1024)
    with MessageStore.open(root, shared_writers=True, **opts) as leader, \
            MessageStore.open(root, shared_writers=True, **opts) as follower:
        for i in range(300):
            assert follower.put_message(Message("T", b"x" * 200)).is_ok()
        appender = follower._shared.appender
        assert len(appender.queue.files) >= 4
        deadline = time.monotonic() + 5
        while leader.get_max_offset_in_queue("T", 0) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        leader.execute_delete_files_manually()
        deleted, _ = leader.clean_files()
        assert deleted >= 2
        while time.monotonic() < deadline and any(not os.path.exists(f.file_name) for f in appender.queue.files):
            time.sleep(0.05)
        assert all(os.path.exists(f.file_name) for f in appender.queue.files)
        assert follower.put_message(Message("T", b"after")).is_ok()


def test_destroy_is_refused_while_another_process_writes(tmp_path, procs):
    from pystore.errors import StoreError

    root = tmp_path / "store"
    other = _start(procs, root, "o", 3)
    acks: dict = {}
    assert _acks(other, acks)
    store = MessageStore.open(str(root), shared_writers=True, **GEOMETRY)
    try:
        with pytest.raises(StoreError, match="beside other writer processes"):
            store.destroy()
    finally:
        store.shutdown()
    _quit(other)
    _check_store(root, acks)


# -- a property: any interleaving of writers, batches and kills is one serial history ----------------------

_ROUNDS = itertools.count()
_STEP = st.one_of(
    st.tuples(st.just("start"), st.sampled_from([1, 1, 3, 32])),
    st.tuples(st.just("kill"), st.integers(0, 3)),
    st.tuples(st.just("run"), st.integers(5, 250)),
    st.tuples(st.just("cut-open"), st.integers(0, 400)),
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)
@given(steps=st.lists(_STEP, min_size=3, max_size=9), flush=st.sampled_from(["SYNC_FLUSH", "ASYNC_FLUSH"]))
def test_any_schedule_of_writers_batches_and_kills_is_one_serial_history(tmp_path, procs, steps, flush):
    """Writer processes started (putting single messages or batches, for ever) and SIGKILLed (the leader among
    them: another takes over) in an order hypothesis draws, with waits between: a single writer reopening the
    store afterwards serves every acknowledged message at the queue offset its put was told, and each queue's
    offsets are 0..n-1 without a gap or a duplicate (an acknowledged put is never lost nor stored twice, an
    unacknowledged one is whole or absent)."""
    import threading

    root = tmp_path / ("store%d" % next(_ROUNDS))
    acks: dict = {}
    lock = threading.Lock()
    live: list = []
    started = 0

    errors: list[BaseException] = []

    def reader(p):
        # a writer prints each put's lines in one write of under PIPE_BUF bytes: a kill never tears a line
        local: dict = {}
        try:
            _acks(p, local)
        except BaseException as e:  # noqa: BLE001 - a refused put or a stray line: the test fails with it
            errors.append(e)
        with lock:
            acks.update(local)

    def start(batch):
        nonlocal started
        p = procs.start(str(root), "w%d" % started, "0", flush, "", str(batch), script=SCRIPT, stdin=True)
        started += 1
        line = p.stdout.readline().decode().split()
        assert line and line[0] == "open", stderr_of(p)
        t = threading.Thread(target=reader, args=(p,))
        t.start()
        live.append((p, t))

    def cut_open(ms):
        # a writer SIGKILLed a moment after it starts: importing, opening (the first opener recovers the store
        # holding the dead-man byte), or already putting
        nonlocal started
        p = procs.start(str(root), "c%d" % started, "0", flush, "", "1", script=SCRIPT, stdin=True)
        started += 1
        time.sleep(ms / 1000)
        p.kill()
        p.wait()
        for raw in p.stdout:
            parts = raw.decode().split()
            if parts[0] == "ack":
                with lock:
                    acks[(parts[1], int(parts[2]))] = (parts[3], int(parts[4]), int(parts[5]), int(parts[6]))

    def kill(i):
        p, t = live.pop(i % len(live))
        p.kill()
        p.wait()
        t.join()

    start(1)
    for step in steps:
        if step[0] == "start" and len(live) < 4:
            start(step[1])
        elif step[0] == "kill" and len(live) > 1:
            kill(step[1])
        elif step[0] == "cut-open":
            cut_open(step[1])
        else:
            time.sleep(step[1] / 1000 if step[0] == "run" else 0.05)
    time.sleep(0.1)
    while live:
        kill(0)
    assert not errors, errors
    assert acks, "no put was acknowledged"
    by_queue = _check_store(root, acks)
    bodies = [b for offs in by_queue.values() for b in offs.values()]
    assert len(bodies) == len(set(bodies)), "a message stored twice"


def test_a_takeover_recovers_while_the_other_writers_go_on_putting(tmp_path, monkeypatch):
    """The new leader's recovery (the store opened as a writer up to the published end, re-dispatch included)
    runs without the writers' append lock: a put made meanwhile returns at once (under the lock, every
    writer's puts waited the whole recovery), and the new leader's log takes it in after, with the offsets
    continuous."""
    import threading

    root = str(tmp_path / "store")
    opts = {"mapped_file_size_commit_log": 64 << 20}      # a descriptor a file: few files for the hammer
    leader = MessageStore.open(root, shared_writers=True, **opts)
    follower = MessageStore.open(root, shared_writers=True, **opts)
    try:
        for i in range(200):
            assert leader.put_message(Message("T", b"l%d" % i)).is_ok()
        seen: list = []
        opened = threading.Event()
        real = follower._open_parts

        def open_parts(config=None, log_end=None, dispatched_end=None):
            if log_end is not None:
                seen.append(log_end)
                t = threading.Thread(target=lambda: seen.append(follower.put_message(Message("T", b"during"))))
                t.start()
                t.join(5)
                seen.append(not t.is_alive())
            parts = real(config, log_end, dispatched_end)
            opened.set()
            return parts

        monkeypatch.setattr(follower, "_open_parts", open_parts)
        # another thread of the follower puts all along: none is refused across the switch to the new log (puts
        # moved to it before its services ran were refused), and the takeover does not wait for the 5 s retry
        stop, refused, hammered = threading.Event(), [], []

        def hammer():
            while not stop.is_set():
                r = follower.put_message(Message("H", b"h"))
                (hammered if r.is_ok() else refused).append(r.status)

        t = threading.Thread(target=hammer)
        t.start()
        time.sleep(0.05)
        started = time.monotonic()
        leader.shutdown()
        try:
            assert opened.wait(10), "no takeover"
            deadline = time.monotonic() + 10
            while not follower.writer_info()["leader"] and time.monotonic() < deadline:
                time.sleep(0.01)
            assert follower.writer_info()["leader"] and time.monotonic() - started < 4
            # reported: how long the takeover held the others' puts (the repair check and sharing the new log; its
            # size is the bench's to measure, bench/shared_writers.py --takeover)
            assert follower.writer_info()["takeover_lock_ms"] > 0
            assert leader.writer_info()["takeover_lock_ms"] == 0
            time.sleep(0.05)
        finally:
            stop.set()
            t.join()
        assert not refused and len(hammered) > 100
        end, put, in_time = seen
        assert in_time, "a put during the takeover's recovery waited for it"
        assert put.is_ok() and put.append_message_result.logics_offset == 200 and end > 0
        assert follower.put_message(Message("T", b"after")).append_message_result.logics_offset == 201
        deadline = time.monotonic() + 5
        while follower.get_max_offset_in_queue("T", 0) < 202 and time.monotonic() < deadline:
            time.sleep(0.01)
        bodies = [m.body for m in follower.get_message("G", "T", 0, 195, 32).messages]
        assert bodies == [b"l195", b"l196", b"l197", b"l198", b"l199", b"during", b"after"]
    finally:
        follower.shutdown()
        leader.shutdown()
