"""The put fast path of e0c1142: ``put_message``/``put_messages`` bound to the commit log's compiled methods,
untracked put results, index lookups only for messages with keys, the prefault worker, and new consume-queue
files mapped without read-ahead until full. Behaviour only: nothing here measures time."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback

import pytest
from conftest import SMALL_FILE, SMALL_INDEX, make_message

from pystore import AppendMessageResult, AppendMessageStatus, Message, MessageBatch, PutMessageResult, PutMessageStatus
from pystore.engine.store import MessageStore
from pystore.log._warm import populate_past_writer, prefault_stats
from pystore.tools import iter_commitlog, iter_consume_queue

SNA = PutMessageStatus.SERVICE_NOT_AVAILABLE
CQ_UNIT = 20


def batch(first: int, n: int, **kwargs) -> MessageBatch:
    return MessageBatch([make_message(i, **kwargs) for i in range(first, first + n)])


def read_queue(store: MessageStore, topic: str, queue_id: int = 0) -> list:
    """Every message of a queue through get_message, 32 at a time."""
    out: list = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while offset < store.get_max_offset_in_queue(topic, queue_id):
        r = store.get_message("g", topic, queue_id, offset, 32)
        assert r.messages, (offset, r.status)
        out.extend(r.messages)
        offset = r.next_begin_offset
    return out


def check_contents(store: MessageStore, topic: str, results: list, bodies: list[bytes], queue_id: int = 0) -> None:
    """Queue offsets 0..n-1, each unit pointing at its put's record, which holds the right body."""
    msgs = read_queue(store, topic, queue_id)
    assert [m.queue_offset for m in msgs] == list(range(len(bodies)))
    assert [m.body for m in msgs] == bodies
    assert [m.commit_log_offset for m in msgs] == [r.append_message_result.wrote_offset for r in results]
    for i, r in enumerate(results):
        amr = r.append_message_result
        assert store.get_commit_log_offset_in_queue(topic, queue_id, i) == amr.wrote_offset
        m = store.look_message_by_offset(amr.wrote_offset)
        assert (m.topic, m.queue_id, m.queue_offset, m.body) == (topic, queue_id, i, bodies[i])
    units = iter_consume_queue(os.path.join(store.config.consume_queue_path(), topic, str(queue_id)))
    assert [u[:2] for u in units] == [(r.append_message_result.wrote_offset, r.append_message_result.wrote_bytes)
                                      for r in results]


# -- 1. put_message / put_messages bound to the commit log ------------------------------------------------


def test_put_before_load_and_before_start_is_refused(store_factory):
    store = store_factory.track(MessageStore(store_factory.config(**SMALL_INDEX)))
    assert "put_message" not in vars(store)                # nothing loaded: the Python method answers
    for state in ("new", "loaded"):
        r = store.put_message(make_message(0))
        assert r.status is SNA and not r.is_ok() and r.append_message_result is None, state
        assert store.put_messages(batch(0, 3)).status is SNA, state
        with pytest.raises(TypeError):
            store.put_message("not a message")
        with pytest.raises(TypeError):
            store.put_messages(None)
        assert state == "loaded" or store.load()
    assert store._puts is store._commitlog.core and not {"put_message", "put_messages"} & set(vars(store))
    store.start()
    assert store.put_message(make_message(0)).append_message_result.logics_offset == 0
    store_factory.expect_messages(1)


def test_put_through_an_old_reference_after_shutdown(store_factory):
    store = store_factory()
    put, puts = store.put_message, store.put_messages
    assert put(make_message(0)).is_ok() and puts(batch(1, 2)).is_ok()
    store.shutdown()
    for _ in range(3):
        assert put(make_message(3)).status is SNA
        assert puts(batch(3, 2)).status is SNA
        assert store.put_message(make_message(3)).status is SNA
        with pytest.raises(TypeError):
            put("not a message")
    store_factory.expect_messages(3)
    reader = store_factory(read_only=True)                 # started, but read-only: refused the same way
    assert reader.get_max_offset_in_queue("TopicTest", 0) == 3
    assert reader.put_message(make_message(3)).status is SNA and reader.put_messages(batch(3, 2)).status is SNA


def test_wrong_types_raise_and_take_no_offset(store_factory):
    store = store_factory()
    for bad in ("a str", b"bytes", None, 42, batch(0, 2)):
        with pytest.raises(TypeError):
            store.put_message(bad)
    for bad in ("a str", None, make_message(0), [make_message(0)]):
        with pytest.raises(TypeError):
            store.put_messages(bad)
    r = store.put_message(make_message(0))
    assert r.is_ok() and r.append_message_result.logics_offset == 0
    store_factory.expect_messages(1)


class RecordingStore(MessageStore):
    seen: list

    def put_message(self, msg):
        self.seen.append(msg)
        return super().put_message(msg)


def test_subclass_overrides_survive_open(store_factory):
    store = store_factory.track(RecordingStore.open(store_factory.path("a"), mapped_file_size_commit_log=SMALL_FILE,
                                                    **SMALL_INDEX))
    store.seen = []
    assert "put_message" not in vars(store)
    m = make_message(0)
    assert store.put_message(m).is_ok() and store.seen == [m]
    assert store.put_messages(batch(1, 2)).is_ok()            # not overridden: the compiled method
    assert store._puts is store._commitlog.core and store.seen == [m]
    store.shutdown()
    assert store.put_message(make_message(3)).status is SNA and len(store.seen) == 2
    store_factory.expect_messages(3, "a")


def test_put_messages_gives_consecutive_queue_offsets(store_factory):
    store = store_factory()
    first = store.put_messages(batch(0, 10))
    single = store.put_message(make_message(10))
    second = store.put_messages(batch(11, 5))
    amrs = [r.append_message_result for r in (first, single, second)]
    assert [(a.logics_offset, a.msg_num) for a in amrs] == [(0, 10), (10, 1), (11, 5)]
    assert amrs[0].wrote_offset + amrs[0].wrote_bytes == amrs[1].wrote_offset
    msgs = read_queue(store, "TopicTest")
    assert [m.queue_offset for m in msgs] == list(range(16))
    assert [m.body for m in msgs] == [b"Hello RocketMQ %d" % i for i in range(16)]
    assert amrs[0].msg_id.split(",") == [m.msg_id for m in msgs[:10]]
    store_factory.expect_messages(16)


# -- 2. put results are not tracked by the GC -------------------------------------------------------------


def test_put_results_are_untracked_and_with_status_works(store_factory):
    store = store_factory()
    results = [store.put_message(make_message(0)), store.put_messages(batch(1, 3)),
               PutMessageResult(PutMessageStatus.PUT_OK, AppendMessageResult(AppendMessageStatus.PUT_OK, 5, 7))]
    for r in results:
        assert not gc.is_tracked(r) and not gc.is_tracked(r.append_message_result)
    r = results[0]
    timed_out = r.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
    assert timed_out.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.status is PutMessageStatus.PUT_OK
    assert repr(timed_out.append_message_result) == repr(r.append_message_result) and not gc.is_tracked(timed_out)
    store.shutdown()
    refused = store.put_message(make_message(9))
    assert refused.status is SNA and not gc.is_tracked(refused)
    store_factory.expect_messages(4)


# -- 3. index keys set after construction -----------------------------------------------------------------


def found(store: MessageStore, key: str, topic: str = "KeyTopic") -> list[bytes]:
    return [m.body for m in store.query_message(topic, key, 32, 0, 2**63 - 1).messages]


def test_keys_set_after_construction_are_indexed(store_factory):
    store = store_factory()

    def put(body: bytes, change) -> None:
        m = Message("KeyTopic", body)
        change(m)
        assert store.put_message(m).is_ok()

    put(b"keys-setter", lambda m: setattr(m, "keys", ["ka", "kb"]))
    put(b"put-property", lambda m: m.put_property("KEYS", "kc"))
    put(b"properties", lambda m: setattr(m, "properties", {"KEYS": "kd", "x": "y"}))
    put(b"uniq-only", lambda m: m.put_property("UNIQ_KEY", "u1"))
    put(b"uniq-dict", lambda m: setattr(m, "properties", {"UNIQ_KEY": "u2"}))
    put(b"cleared", lambda m: (m.put_property("KEYS", "gone"), m.clear_property("KEYS")))
    put(b"keys-none", lambda m: (setattr(m, "keys", ["gone2"]), setattr(m, "keys", None)))
    put(b"replaced", lambda m: (m.put_property("KEYS", "gone3"), setattr(m, "properties", {"a": "b"})))
    expected = {"ka": b"keys-setter", "kb": b"keys-setter", "kc": b"put-property", "kd": b"properties",
                "u1": b"uniq-only", "u2": b"uniq-dict", "gone": None, "gone2": None, "gone3": None}
    for key, body in expected.items():
        assert found(store, key) == ([] if body is None else [body]), key

    reused = Message("KeyTopic", b"reused")           # put without keys, then with, then without again
    assert store.put_message(reused).is_ok()
    reused.keys = "again"
    assert store.put_message(reused).is_ok()
    reused.clear_property("KEYS")
    reused.put_property("UNIQ_KEY", "u3")
    assert store.put_message(reused).is_ok()
    assert len(found(store, "again")) == 1 and len(found(store, "u3")) == 1

    late = [Message("KeyTopic", b"b%d" % i) for i in range(3)]
    for i, m in enumerate(late):                      # keys set after the batch's messages were built
        m.keys = ["bk%d" % i, "bshared"]
    assert store.put_messages(MessageBatch(late)).is_ok()
    assert found(store, "bk1") == [b"b1"] and found(store, "bshared") == [b"b0", b"b1", b"b2"]
    store_factory.expect_messages(14)


# -- 4. the prefault worker -------------------------------------------------------------------------------


def wait_for_prefault(before: dict, grow: int = 1, idle: bool = False) -> dict:
    """Stats once ``bytes`` grew by ``grow`` (or the worker failed), and with ``idle`` once no request is
    queued or running either: it is asynchronous, so it gets time to report (a liveness bound, not a
    timing assertion). ``bytes`` counts every request of the process, an earlier test's included: at idle
    priority on a busy machine the worker may still be on those when a test starts."""
    deadline = time.monotonic() + 60
    while True:
        stats = prefault_stats()
        if idle and stats["pending"] and time.monotonic() <= deadline:
            time.sleep(0.01)
            continue
        if (stats["bytes"] >= before["bytes"] + grow or stats["failed"] > before["failed"]
                or stats["dropped"] > before["dropped"] or not stats["supported"]
                or time.monotonic() > deadline):
            return stats
        time.sleep(0.01)


@pytest.mark.parametrize("warm", [False, True], ids=["default", "warmed-commit-log"])
def test_prefault_worker_keeps_contents_exact(store_factory, warm):
    stats = prefault_stats()
    assert set(stats) == {"bytes", "skipped", "dropped", "failed", "pending", "supported"}
    n = 4000                                               # 80,000 bytes of units: past the 64 KiB lead
    store = store_factory(warm_mapped_file_enable=warm)    # warmed: only the consume queue asks the worker
    assert store.config.mapped_file_size_consume_queue > n * CQ_UNIT
    bodies = [b"prefault %d " % i * (1 + i % 7) for i in range(n)]
    results = [store.put_message(make_message(i, topic="PF", body=bodies[i], keys=None)) for i in range(n)]
    assert all(r.is_ok() for r in results)
    # warmed commit log: only the consume queue asks, 2 * 64 KiB at its first unit, more once past 64 KiB
    grow = 2 * 65536 + 1 if warm else 1
    after = wait_for_prefault(stats, grow)
    if after["supported"] and after["dropped"] == stats["dropped"]:   # a request may be dropped by design
        assert after["bytes"] >= stats["bytes"] + grow, after
    check_contents(store, "PF", results, bodies)
    store.shutdown()
    check_contents(store_factory(), "PF", results, bodies)
    store_factory.expect_messages(n)


MIB = 1024 * 1024


def test_consume_queue_prefault_lead_grows_only_as_the_queue_uses_it(store_factory):
    # a queue asks the worker for 2 x 64 KiB at its first unit and doubles its lead (to 1 MiB at most) each
    # time its writer used the last one up: a quiet queue dirties few zero pages, a busy one gets far ahead
    store = store_factory(mapped_file_size_commit_log=64 * MIB)
    assert store.config.mapped_file_size_consume_queue == 300_000 * CQ_UNIT
    for i in range(50):
        assert store.put_message(make_message(i, topic="Quiet", keys=None)).is_ok()
    quiet = store._cq_store.find("Quiet", 0).last_file
    assert quiet.prefaulted_position == 2 * 65536
    n = 80_000                                                # 1.6 MB of units
    asked: list[int] = []
    hot = None
    for i in range(n):
        assert store.put_message(make_message(i, topic="Hot", body=b"h", keys=None)).is_ok()
        hot = hot or store._cq_store.find("Hot", 0).last_file
        if not asked or hot.prefaulted_position != asked[-1]:
            asked.append(hot.prefaulted_position)
            assert hot.prefaulted_position - hot.wrote_position <= 2 * MIB + 4096   # rounded up to a page
    assert hot.wrote_position == n * CQ_UNIT
    assert asked[0] == 2 * 65536
    assert len(asked) <= 6, asked                             # 128 K, 320 K, 704 K, 1.4 M, 2.9 M
    assert asked[-1] - hot.wrote_position >= MIB
    assert len(list(iter_consume_queue(os.path.join(store.config.consume_queue_path(), "Hot", "0")))) == n
    store_factory.expect_messages(50 + n)


@pytest.mark.skipif(not hasattr(__import__("resource"), "RUSAGE_THREAD"), reason="Linux RUSAGE_THREAD")
def test_a_warmed_file_written_back_is_prefaulted_again_ahead_of_the_writer(store_factory):
    # The kernel writes a warmed file's zeros back once they have been dirty for 30 s and write-protects them:
    # the writer would then take a fault on every page. It keeps asking the worker for the pages ahead
    # instead (2 MiB ahead, 2 MiB at a time), so where the worker has been it takes none.
    import resource

    store = store_factory(mapped_file_size_commit_log=8 * MIB, warm_mapped_file_enable=True)
    msg = Message("Warm", b"w" * 4000)

    def put_until(pos: int) -> None:
        while mf.wrote_position < pos:
            assert store.put_message(msg).is_ok()

    assert store.put_message(msg).is_ok()
    mf = store._commitlog.last_file
    put_until(2 * MIB - 8192)
    fd = os.open(mf.file_name, os.O_RDONLY)                   # what the kernel does after 30 s: write the
    try:                                                      # zeros back, write-protecting every page
        os.fdatasync(fd)
    finally:
        os.close(fd)
    # the worker's byte count is the process's: wait out requests left by earlier files (a busy machine
    # starves the idle-priority worker), then for the whole of [4, 6) MiB, not just 2 MiB of anything
    before = wait_for_prefault(prefault_stats(), 0, idle=True)
    put_until(2 * MIB + 8192)                                 # past 2 MiB: the writer asks for [4, 6) MiB
    after = wait_for_prefault(before, 2 * MIB, idle=True)
    if not after["supported"] or after["dropped"] > before["dropped"]:
        pytest.skip("no prefault worker here, or the request was dropped (allowed by design)")
    assert mf.prefaulted_position >= 6 * MIB
    put_until(4 * MIB)                                        # [2, 4) MiB was written back after it was asked
    r0 = resource.getrusage(resource.RUSAGE_THREAD)
    put_until(6 * MIB - 8192)                                 # ~500 pages the worker made writable again
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    faults = r1.ru_minflt - r0.ru_minflt + r1.ru_majflt - r0.ru_majflt
    assert faults < 64, "the writer took %d page faults in pages the worker had made writable" % faults
    store_factory.expect_messages(store.get_topic_queue_table()[("Warm", 0)])


CHILD_N = 10_000


def child_main(root: str) -> int:
    before = prefault_stats()
    store = MessageStore.open(root, mapped_file_size_commit_log=SMALL_FILE, **SMALL_INDEX)
    try:
        bodies = [b"child %d" % i for i in range(CHILD_N)]
        results = [store.put_message(Message("Fork", b, keys="c%d" % i)) for i, b in enumerate(bodies)]
        assert all(r.is_ok() for r in results)
        check_contents(store, "Fork", results, bodies)     # an assertion failing here: exit code 2
        assert [m.body for m in store.query_message("Fork", "c9999").messages] == [b"child 9999"]
        after = wait_for_prefault(before)
        if after["supported"] and after["bytes"] <= before["bytes"] and after["dropped"] == before["dropped"]:
            return 3                                       # no worker in the child: requests pile up
    finally:
        store.shutdown()
    return 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_forked_child_can_open_and_fill_a_store(store_factory):
    parent = store_factory()                               # start the worker in the parent first
    for i in range(200):
        parent.put_message(make_message(i))
    wait_for_prefault({"bytes": 0, "failed": 0})
    parent.shutdown()
    store_factory.expect_messages(200)
    root = str(store_factory.path("child"))
    pid = os.fork()
    if pid == 0:                                           # the child: never return into pytest
        code = 2
        try:
            code = child_main(root)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + 300                      # a hang guard, not a timing assertion
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    status = done[1]
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(list(iter_consume_queue(os.path.join(root, "consumequeue", "Fork", "0")))) == CHILD_N


# -- 5. consume-queue files created without read-ahead, settled when full ----------------------------------


def test_small_consume_queue_files_roll_and_read_back(store_factory):
    units = 150
    geometry = {"mapped_file_size_consume_queue": units * CQ_UNIT}
    store = store_factory(**geometry)
    n = units * 6 + 37                                     # six full files and part of a seventh per queue
    bodies = {q: [b"q%d-%d" % (q, i) for i in range(n)] for q in (0, 1)}
    results: dict[int, list] = {0: [], 1: []}
    for i in range(n):
        for q in (0, 1):
            results[q].append(store.put_message(make_message(i, topic="Roll", queue_id=q, body=bodies[q][i])))
    folder = os.path.join(store.config.consume_queue_path(), "Roll")
    assert len(os.listdir(os.path.join(folder, "0"))) == 7
    for q in (0, 1):
        check_contents(store, "Roll", results[q], bodies[q], q)
    store.shutdown()
    reopened = store_factory(**geometry)
    for q in (0, 1):
        check_contents(reopened, "Roll", results[q], bodies[q], q)
        more = [b"more %d" % i for i in range(units)]     # go on writing past the reopened last file
        results[q] += [reopened.put_message(make_message(i, topic="Roll", queue_id=q, body=b)) for i, b in
                       enumerate(more)]
        bodies[q] += more
        check_contents(reopened, "Roll", results[q], bodies[q], q)
    assert len(os.listdir(os.path.join(folder, "1"))) == 8
    store_factory.expect_messages(2 * (n + units))


def test_batches_from_bodies_fill_small_consume_queue_files_across_their_ends(store_factory):
    # a batch's units go in as one run where they fit in the open queue file, unit by unit across its end
    units = 150                                            # 150 is no multiple of the batch sizes below
    store = store_factory(mapped_file_size_consume_queue=units * CQ_UNIT)
    bodies: list[bytes] = []
    results = []
    for i, n in enumerate([1, 32, 100, 17, 64, 128, 3, 33] * 3):
        chunk = [b"run %d-%d " % (i, j) * (1 + j % 3) for j in range(n)]
        r = store.put_messages(MessageBatch.from_bodies("Runs", chunk))
        assert r.is_ok() and r.append_message_result.logics_offset == len(bodies)
        bodies += chunk
        results.append(r)
    n = len(bodies)
    folder = os.path.join(store.config.consume_queue_path(), "Runs", "0")
    assert len(os.listdir(folder)) == -(-n // units)
    units_read = list(iter_consume_queue(folder))
    assert len(units_read) == n
    msgs = read_queue(store, "Runs")
    assert [m.body for m in msgs] == bodies
    assert [m.queue_offset for m in msgs] == list(range(n))
    assert [(u[0], u[1]) for u in units_read] == [(m.commit_log_offset, m.store_size) for m in msgs]
    store.shutdown()
    assert [m.body for m in read_queue(store_factory(mapped_file_size_consume_queue=units * CQ_UNIT), "Runs")] \
        == bodies
    store_factory.expect_messages(n)


# -- a message changed by another thread while its put waits for the lock -----------------------------------


def wait_spinning_on_the_put_lock(t, started) -> None:
    """Return once thread ``t``, which set ``started`` right before its put, spins on the put lock (the
    default lock spins): it has then burnt 50 ms of its own CPU time since, where the put itself, sizing and
    CRC of a short message, takes microseconds. A fixed sleep is no such proof: a loaded machine may not run
    the thread for that long, and the put then sizes the message as changed and goes in."""
    assert started.wait(60), "the putting thread did not start within 60 s"
    clock = time.pthread_getcpuclockid(t.ident)
    cpu0 = time.clock_gettime(clock)
    deadline = time.monotonic() + 60
    while time.clock_gettime(clock) - cpu0 < 0.05:
        assert t.is_alive() and time.monotonic() < deadline, "the put did not wait for the lock"
        time.sleep(0.001)


@pytest.mark.parametrize("as_batch", [False, True], ids=["put_message", "put_messages"])
def test_message_changed_while_the_put_waits_is_refused_not_overrun(store_factory, as_batch):
    """The put reserves room for the record before the lock; a body made longer meanwhile must not be
    written past that room (MESSAGE_ILLEGAL instead), and the log stays whole."""
    import threading

    store = store_factory()
    assert store.put_message(make_message(0)).is_ok()
    msg = make_message(1, body=b"short")
    target = MessageBatch([make_message(2), msg]) if as_batch else msg
    put = store.put_messages if as_batch else store.put_message
    out: list = []
    started = threading.Event()

    def putter():
        started.set()
        out.append(put(target))

    lock = store._commitlog.put_lock
    lock.acquire()
    try:
        t = threading.Thread(target=putter)
        t.start()
        wait_spinning_on_the_put_lock(t, started)   # the put has sized its record and waits for the lock
        assert not out
        msg.body = b"x" * 5000
    finally:
        lock.release()
    t.join(60)
    assert out and out[0].status is PutMessageStatus.MESSAGE_ILLEGAL
    r = put(target)                          # the changed message, sized again, goes in whole
    assert r.is_ok()
    got = read_queue(store, "TopicTest")
    assert [m.body for m in got][-1] == b"x" * 5000
    store_factory.expect_messages(1 + (2 if as_batch else 1))


_REINIT_WHILE_WAITING = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[2])
from test_put_fast_path import wait_spinning_on_the_put_lock
from pystore import Message
from pystore import MessageBatch
from pystore import PutMessageStatus
from pystore.engine.store import MessageStore

with MessageStore.open(sys.argv[1], mapped_file_size_commit_log=1 << 20) as store:
    # queue id 99: past the keys a topic caches, so the batch's topic-queue key is a string of its own
    ms = [Message("TopicK", b"a", queue_id=99), Message("TopicK", b"b", queue_id=99)]
    batch, out, started = MessageBatch(ms), [], threading.Event()

    def putter():
        started.set()
        out.append(store.put_messages(batch))

    lock = store._commitlog.put_lock
    lock.acquire()
    try:
        t = threading.Thread(target=putter)
        t.start()
        wait_spinning_on_the_put_lock(t, started)
        # drop every other reference to the key the waiting put checks the batch against
        batch.__init__([Message("Other", b"x")])
        ms[0].__init__("TopicK", b"a", queue_id=98)
        del ms
    finally:
        lock.release()
    t.join(60)
    assert out and out[0].status is PutMessageStatus.MESSAGE_ILLEGAL, out
print("ok")
"""


def test_a_batch_put_keeps_its_key_when_the_batch_is_reinitialised_while_it_waits(tmp_path):
    # The put checks each message against the batch's topic-queue key after it got the lock, while another
    # thread may have run the batch's __init__ again and dropped the key: the put must hold the key itself.
    # In a child process with Python's debug allocator, which makes a read of freed memory fail every time.
    import subprocess

    env = dict(os.environ, PYTHONMALLOC="debug")
    r = subprocess.run([sys.executable, "-c", _REINIT_WHILE_WAITING, str(tmp_path / "s"),
                        os.path.dirname(os.path.abspath(__file__))],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_message_subclasses_are_built_and_put_alongside_the_free_list(store_factory):
    # Message keeps a free list of dropped instances; subclasses (heap types) never use it
    class Sub(Message):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.extra = 1

    class Slots(Message):
        __slots__ = ()

    store = store_factory()
    for r in range(200):
        ms = [(Sub, Slots, Message)[i % 3]("TopicSub", b"%d-%d" % (r, i)) for i in range(9)]
        assert [type(m) for m in ms[:3]] == [Sub, Slots, Message] and ms[0].extra == 1
        assert store.put_messages(MessageBatch(ms)).is_ok()
        del ms
    got = list(iter_commitlog(store.config.commit_log_paths()))
    assert [m.body for m in got if m.topic == "TopicSub"] == [b"%d-%d" % (r, i) for r in range(200) for i in range(9)]
    store_factory.expect_messages(1800)


# -- a message changed by another thread while its big body is copied (the GIL is released for it) ---------

NOGIL_BODY = 256 * 1024                                    # a body this big is copied without the GIL
BIG_BODY = 300 * 1024


def _mutate_while(stop: threading.Event, change) -> threading.Thread:
    def run() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            change(i)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("as_batch", [False, True], ids=["put_message", "put_messages"])
def test_a_message_changed_while_its_big_body_is_copied_is_stored_whole(store_factory, as_batch):
    # While a body of 256 KiB or more is copied, other threads run. One that replaces a field of a message being
    # encoded (its topic, properties, body) must not change the record half-way: the record is stored as the
    # message was when its put took it (sizes and bytes of one state), never with a topic read past its end
    # or a record longer than the room it was given.
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)                             # hand the GIL over as soon as it is released
    store = store_factory(mapped_file_size_commit_log=32 * 1024 * 1024)
    big = [bytes([65 + i]) * BIG_BODY for i in range(2)]
    topics = ("Race", "R" * 120)
    msg = Message(topics[0], big[0], tags="t0")
    small = Message(topics[0], b"s", tags="t0")
    stop = threading.Event()

    def change(i: int) -> None:
        if as_batch:                                        # the second message of the batch, mid-put
            small.body = b"s" if i % 2 else b"tt" * 2000
            small.tags = "t%d" % (i % 7)
        else:
            msg.topic = topics[i % 2]
            msg.tags = "t%d" % (i % 7)
            msg.body = big[i % 2]

    t = _mutate_while(stop, change)
    ok = 0
    try:
        for _ in range(150):
            if as_batch:
                r = store.put_messages(MessageBatch([Message(topics[0], big[1], tags="t0"), small]))
            else:
                r = store.put_message(msg)
            ok += r.status == PutMessageStatus.PUT_OK
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old_switch)
    from pystore.format._codec import tags_code

    stored = list(iter_commitlog(os.path.join(store.root, "commitlog"), verify_crc=True))
    assert len(stored) == (2 * ok if as_batch else ok) and ok > 0
    units = {}
    for topic in topics:
        folder = os.path.join(store.config.consume_queue_path(), topic, "0")
        if os.path.isdir(folder):
            units.update({u[0]: u for u in iter_consume_queue(folder)})
    for m in stored:                                        # every record one whole state of its message
        assert m.topic in topics
        assert m.body in (big[0], big[1], b"s", b"tt" * 2000)
        assert m.tags in ["t%d" % k for k in range(7)]
        assert units[m.commit_log_offset][:2] == (m.commit_log_offset, m.store_size)
        if not as_batch:                                    # a single put's unit is made from that same state
            assert units[m.commit_log_offset][2] == tags_code(m.raw)
    store_factory.skip_check()                              # counted above


def test_a_body_grown_big_while_its_put_waits_keeps_its_unit_and_record_of_one_state(store_factory):
    # The put decides on its private copy before the lock; a body that grows past 256 KiB while the put waits
    # for the lock (its properties shrunk by as much, so the size checked under the lock is unchanged) must
    # not be copied without the GIL from the shared message: another thread changing its tags meanwhile would
    # give the unit another tags code than the record.
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    store = store_factory(mapped_file_size_commit_log=64 * 1024 * 1024)
    lock = store._commitlog.put_lock
    try:
        for _ in range(20):
            msg = Message("Grown", b"a" * (NOGIL_BODY - 16), tags="tA", properties={"pad": "x" * 64})
            lock.acquire()                                  # the put waits for the lock, the GIL released
            res: list = []
            started = threading.Event()

            def put(m=msg, started=started, res=res) -> None:
                started.set()
                res.append(store.put_message(m))

            putter = threading.Thread(target=put)
            putter.start()
            wait_spinning_on_the_put_lock(putter, started)
            msg.body = b"b" * (NOGIL_BODY + 16)               # now a big body ...
            msg.put_property("pad", "x" * 32)               # ... and the same size in all
            stop = threading.Event()
            flipper = _mutate_while(stop, lambda i, m=msg: setattr(m, "tags", "tB" if i % 2 else "tA"))
            lock.release()
            putter.join()
            stop.set()
            flipper.join()
            assert res[0].status == PutMessageStatus.PUT_OK
    finally:
        sys.setswitchinterval(old_switch)
    from pystore.format._codec import tags_code

    units = {u[0]: u for u in iter_consume_queue(os.path.join(store.config.consume_queue_path(), "Grown", "0"))}
    stored = list(iter_commitlog(os.path.join(store.root, "commitlog"), verify_crc=True))
    assert len(stored) == 20
    for m in stored:
        assert len(m.body) == NOGIL_BODY + 16
        assert units[m.commit_log_offset][2] == tags_code(m.raw), "a unit of another state than its record"
    store_factory.expect_messages(20)


def test_the_commit_log_writer_tells_the_prefault_worker_where_it_is(store_factory):
    # A writer that outruns the worker (a cold file) must not meet it on the same pages: it would sleep on
    # the locks of pages the worker is faulting. The worker starts each piece 64 KiB past the writer's
    # published position; here the worker's loop runs in this thread on the file being written.
    store = store_factory(mapped_file_size_commit_log=8 * MIB)
    for size in (100, 3000, 70_000):
        assert store.put_message(Message("Cursor", b"c" * size)).is_ok()
        mf = store._commitlog.last_file
        past = (mf.wrote_position + 64 * 1024 + 4095) // 4096 * 4096
        end = past + MIB
        try:
            populated, skipped = populate_past_writer(mf, 0, end)
        except OSError as e:      # MADV_POPULATE_WRITE is Linux 5.14+
            pytest.skip(str(e))
        assert (populated, skipped) == (end - past, past)
    store_factory.expect_messages(3)


def test_a_refused_put_says_why(store_factory):
    """``PutMessageResult.reason``: the check the message failed, in words (None for a stored message), from
    the compiled put path as from the Python one; a batch names its first refused message."""
    store = store_factory(max_message_size=1024)
    assert store.put_message(Message("T", b"ok")).reason is None
    big = store.put_message(Message("T", b"x" * 2000))
    assert big.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert big.reason == "body of 2000 bytes is larger than max_message_size (1024)"
    bad_topic = store.put_message(Message("T", b"x", queue_id=-1))
    assert bad_topic.reason == "queue id -1 is negative"
    batch = store.put_messages(MessageBatch([Message("T", b"a"), Message("T", b"y" * 3000)]))
    assert batch.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert batch.reason == "body of 3000 bytes is larger than max_message_size (1024)"
    store.shutdown()
    closed = store.put_message(Message("T", b"a"))
    assert closed.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "takes no puts now" in closed.reason
