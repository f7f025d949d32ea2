"""A commit log appended by several writer processes (``pystore.log.shared_append``, the shared append lock of
``_shared_lock``): real processes (``tests/shared_writer.py``) put at once, are SIGKILLed at random moments and at
named points (the lock held with nothing written, the record written and not published, mid catch-up, mid
roll, mid repair), and the log must stay one serial history: every record whole and checked (CRC included)
from offset 0 to its end, every acknowledged put in it exactly once at the offset it was told, and each queue's
offsets 0..n-1 in log order without a gap or a duplicate."""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from writer_procs import stderr_of

from pystore import Message
from pystore.config import StoreConfig
from pystore.log.commitlog import CommitLog
from pystore.log.mapped_file_queue import MappedFileQueue
from pystore.log.shared_append import TornPutRepair, share
from pystore.log.shared_state import QUEUE_SLOTS, SharedState, describe
from pystore.tools import iter_commitlog

TESTS = Path(__file__).resolve().parent
WRITER = str(TESTS / "shared_writer.py")
FILE_SIZE = 64 * 1024


def _start(procs, root, name, count, body=64, batch=1, crashpoint=None, file_size=FILE_SIZE):
    script = "import runpy; runpy.run_path(%r, run_name='__main__')" % WRITER
    return procs.start(str(root), name, str(count), str(file_size), str(body), str(batch), script=script,
                       crashpoint=crashpoint)


def _read_acks(p, acks, until_done=True, limit_s=120.0):
    """Read ``p``'s lines into ``acks`` ({(name, i): (topic, queue, queue offset, phy, size)}) until it says
    done or its output ends (it was killed)."""
    deadline = time.monotonic() + limit_s
    for raw in p.stdout:
        parts = raw.decode().split()
        if parts[0] == "ack":
            acks[(parts[1], int(parts[2]))] = (parts[3], int(parts[4]), int(parts[5]), int(parts[6]), int(parts[7]))
        elif parts[0] == "done":
            return True
        elif parts[0] == "failed":
            raise AssertionError("writer %s: %s\n%s" % (parts[1], raw, stderr_of(p)))
        assert time.monotonic() < deadline, "writer %r ran past %ss" % (p.args, limit_s)
    return False


def _check_log(root, acks):
    """The log is one serial history of whole records, holding every acknowledged put where it was told."""
    folder = os.path.join(str(root), "commitlog")
    seen: dict[tuple[str, int], tuple[str, int, int, int, int]] = {}
    offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    end = 0
    for m in iter_commitlog(folder, verify_crc=True):
        body = m.body.rstrip(b".").decode()
        name, i, _ = body.split("-")
        key = (name, int(i))
        assert key not in seen, "%s stored twice" % (key,)
        seen[key] = (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.store_size)
        offsets[(m.topic, m.queue_id)].append(m.queue_offset)
        end = m.commit_log_offset + m.store_size
    for key, want in acks.items():
        assert seen.get(key) == want, "acknowledged %s as %s, the log holds %s" % (key, want, seen.get(key))
    for q, offs in offsets.items():
        assert offs == list(range(len(offs))), "queue %s offsets are not 0..n-1 in log order" % (q,)
    return seen, end


def _published_end(root):
    """``(published end, reserved end, recoveries, generation)`` as the page holds them (read from the file: an
    opener would be alone now and write a fresh page)."""
    page = describe(str(root))
    assert page is not None
    return page["published_end"], page["reserved_end"], page["recoveries"], page["generation"]


@contextmanager
def _log_in_this_process(root: Path, slots: int = QUEUE_SLOTS) -> Iterator[tuple[CommitLog, SharedState, TornPutRepair]]:
    """A commit log of this process appended under the writers' lock of ``root`` (its first opener, so the page and
    its table of ``slots`` are this one's): ``(commit log, state, its repair)``; unshared and closed after."""
    root.mkdir()
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE_SIZE)
    cl = CommitLog(cfg, MappedFileQueue(cfg.commit_log_paths(), FILE_SIZE))
    state = SharedState(str(root), queue_slots=slots)
    try:
        repair = share(cl, state.open(0))
        cl.core.writeable = True
        yield cl, state, repair
    finally:
        cl.core.share(None, None)
        state.close()


@pytest.mark.parametrize("slots", [16384, 4, 0], ids=["table", "table-fills-up", "walk"])
@pytest.mark.parametrize("batch", [1, 8])
def test_four_writers_append_one_serial_history(tmp_path, procs, batch, slots):
    """With the queue-offset table; with one that fills up after three of the four queues (the fourth's offsets
    kept by walking from there); with none (every writer walks the others' records)."""
    root = tmp_path / "store"
    root.mkdir()
    holder = SharedState(str(root), queue_slots=slots)      # the first opener: its table is everyone's
    holder.open(0)
    try:
        ps = [_start(procs, root, "w%d" % k, 600, batch=batch) for k in range(4)]
        acks: dict = {}
        for p in ps:
            assert _read_acks(p, acks), stderr_of(p)
            p.wait()
        assert len(acks) == 2400
        seen, end = _check_log(root, acks)
        assert len(seen) == 2400
        assert len(os.listdir(root / "commitlog")) > 3          # the writers rolled files for each other
        published, reserved, _, _ = _published_end(root)
        assert published == reserved == end
        page = describe(str(root))
        assert page is not None and page["queue_slots"] == slots
        if slots == 16384:
            assert page["walk_from"] == -1 and page["queue_slots_used"] == 4
            counts: dict[tuple[str, int], int] = defaultdict(int)
            for topic, queue_id, _, _, _ in seen.values():
                counts[(topic, queue_id)] += 1
            assert holder.lock is not None and holder.lock.queue_offsets() == counts
        else:
            assert page["walk_from"] >= 0 and page["queue_slots_used"] == min(slots, 3)
    finally:
        holder.close()


def test_a_late_joiner_catches_up_on_everything_before_its_first_put(tmp_path, procs):
    root = tmp_path / "store"
    acks: dict = {}
    first = _start(procs, root, "a", 500)
    assert _read_acks(first, acks)
    first.wait()
    second = _start(procs, root, "b", 40)
    assert _read_acks(second, acks)
    second.wait()
    seen, _ = _check_log(root, acks)
    # the joiner's first put in each queue took the offset after the first writer's last
    assert seen[("b", 0)][2] == 125 and seen[("b", 1)][2] == 125


@pytest.mark.parametrize("slots", [16384, 0], ids=["table", "walk"])
def test_catch_up_in_process_follows_other_writers(tmp_path, procs, slots):
    """A process that puts nothing (a reader or the flusher) catches up with ``core.catch_up()``: its files'
    positions follow the others', passing their records unread where the queue-offset table holds their queues'
    offsets, walking them where there is none; its next put takes the next offset of its queue either way."""
    root = tmp_path / "store"
    acks: dict = {}
    with _log_in_this_process(root, slots) as (cl, _, _):        # first: the writer joins this page
        p = _start(procs, root, "w", 300)
        assert _read_acks(p, acks)
        p.wait()
        end = cl.core.catch_up()
        assert end == max(phy + size for (_, _, _, phy, size) in acks.values())
        assert cl.get_max_offset() == end
        if slots:
            assert cl.core.caught_up == 0 and cl.core.jumped == end
        else:
            assert cl.core.caught_up == 300 and cl.core.jumped == 0
            assert cl.get_cell("Orders", 0).next_offset == 75 and cl.get_cell("Audit", 3).next_offset == 75
        r = cl.put_message(Message("Audit", b"mine", queue_id=3))
        assert r.is_ok() and r.append_message_result.logics_offset == 75
        assert r.append_message_result.wrote_offset == end


def test_a_queue_dropped_by_cleaning_keeps_its_offsets_in_the_table(tmp_path):
    """The leader's cleaning forgets a queue's cell (``remove_cell``); its next put still takes the offset after
    the last one every writer knows (the table's), not 0."""
    with _log_in_this_process(tmp_path / "store") as (cl, state, _):
        for _ in range(3):
            assert cl.put_message(Message("T", b"x", queue_id=0)).is_ok()
        cl.remove_cell("T", 0)
        r = cl.put_message(Message("T", b"x", queue_id=0))
        assert r.is_ok() and r.append_message_result.logics_offset == 3
        assert state.lock is not None and state.lock.queue_offsets() == {("T", 0): 4}


def test_a_repair_that_fails_leaves_the_repair_to_the_next_locker(tmp_path):
    """A locker whose repair of a dead writer's put raises publishes nothing: the torn put stays marked for the next
    locker (it neither moves the published end nor erases the mark), and the next put repairs it and goes on."""
    with _log_in_this_process(tmp_path / "store") as (cl, state, repair):
        first = cl.put_message(Message("T", b"one", queue_id=0))
        assert first.is_ok()
        end = first.append_message_result.wrote_offset + first.append_message_result.wrote_bytes
        lock = state.lock
        assert lock is not None
        with lock:
            lock.reserve_end(end + 500)             # what a writer killed mid-put leaves

        def failing() -> None:
            raise OSError(5, "the disk failed while zeroing")

        cl.core.shared_repair = failing
        with pytest.raises(OSError):
            cl.put_message(Message("T", b"two", queue_id=0))
        assert (lock.published_end, lock.reserved_end) == (end, end + 500)
        cl.core.shared_repair = repair
        r = cl.put_message(Message("T", b"three", queue_id=0))
        assert r.is_ok() and r.append_message_result.wrote_offset == end
        assert r.append_message_result.logics_offset == 1 and lock.generation == 1


def _first_ack(p, acks):
    """Read ``p``'s lines until its first acknowledgement (it has the store open and puts)."""
    raw = p.stdout.readline().decode().split()
    assert raw and raw[0] == "ack", (raw, stderr_of(p))
    acks[(raw[1], int(raw[2]))] = (raw[3], int(raw[4]), int(raw[5]), int(raw[6]), int(raw[7]))


@pytest.mark.parametrize("point", ["shared.reserved", "shared.copied", "shared.catching_up", "commitlog.roll"])
def test_a_writer_killed_at_a_named_point_loses_nothing_acknowledged(tmp_path, procs, point):
    """One writer kills itself at the point while another keeps putting;
    the others get the lock at once, repair what it left, and go on; nothing acknowledged is lost and the log
    stays whole."""
    root = tmp_path / "store"
    acks: dict = {}
    keeper = _start(procs, root, "k", 0, body=200)
    _first_ack(keeper, acks)
    # the 37th arrival; the 2nd roll; the 1st catch-up (the keeper puts until its unread output fills its pipe:
    # the victim's first hold passes its records, unread, as its only catch-up)
    nth = {"commitlog.roll": 2, "shared.catching_up": 1}.get(point, 37)
    victim = _start(procs, root, "v", 0, body=200, crashpoint="%s:%d" % (point, nth))
    assert not _read_acks(victim, acks), "the victim was not killed at %s" % point
    assert victim.wait() == -9
    after = _start(procs, root, "w", 300, body=200)
    assert _read_acks(after, acks), stderr_of(after)
    after.wait()
    keeper.kill()
    keeper.wait()
    _read_acks(keeper, acks)
    _check_log(root, acks)
    published, reserved, _, generation = _published_end(root)
    if point in ("shared.reserved", "shared.copied"):
        # it died holding the lock with bytes reserved: the next locker repaired them (a new generation)
        assert generation >= 1


def test_a_repairer_killed_mid_repair_leaves_the_repair_to_the_next_locker(tmp_path, procs):
    """The page holds the repair's state: a repairer killed before it published the repair leaves the same
    repair to the next locker. (A process that only holds the store open keeps the page alive meanwhile.)"""
    root = tmp_path / "store"
    root.mkdir()
    acks: dict = {}
    holder = SharedState(str(root))
    holder.open(0)
    try:
        victim = _start(procs, root, "v", 0, crashpoint="shared.copied:20")
        assert not _read_acks(victim, acks)
        victim.wait()
        assert _published_end(root)[1] > _published_end(root)[0]         # reserved past published: torn
        repairer = _start(procs, root, "r", 10, crashpoint="shared.repairing")
        assert not _read_acks(repairer, acks)
        assert repairer.wait() == -9
        last = _start(procs, root, "z", 50)
        assert _read_acks(last, acks), stderr_of(last)
        last.wait()
        seen, end = _check_log(root, acks)
        assert [k for k in seen if k[0] == "r"] == [] and len([k for k in seen if k[0] == "v"]) == 19
        published, reserved, recoveries, generation = _published_end(root)
        assert (published, reserved) == (end, end) and generation == 1 and recoveries >= 1
    finally:
        holder.close()


def test_writers_killed_at_random_moments(tmp_path, procs):
    """Three writers, each putting single messages or batches (2-16) with bodies up to 37 KB (copied without the
    GIL), one SIGKILLed at a random moment and replaced, 50 times: the log stays one serial history holding every
    acknowledged put once, each queue's offsets without a gap or a duplicate (a property of any interleaving of
    puts, batches and kills)."""
    import threading

    root = tmp_path / "store"
    acks: dict = {}
    rng = random.Random(36)
    lock = threading.Lock()

    errors: list[BaseException] = []

    def reader(p):
        local: dict = {}
        try:
            _read_acks(p, local)
        except BaseException as e:  # noqa: BLE001 - the test fails with it below
            errors.append(e)
        finally:
            with lock:
                acks.update(local)

    def start(name):
        # 4 MiB files: a writer maps every file of the log (one descriptor each), and these run for seconds
        batch = rng.choice([1, 1, 2, 16])
        p = _start(procs, root, name, 0, body=rng.choice([100, 5000, 37_500] if batch == 1 else [100, 2000]),
                   batch=batch, file_size=4 << 20)
        t = threading.Thread(target=reader, args=(p,))
        t.start()
        return p, t

    live = [start("s%d" % k) for k in range(3)]
    for r in range(50):
        time.sleep(rng.uniform(0.02, 0.15))
        victim, t = live.pop(rng.randrange(len(live)))
        victim.kill()
        victim.wait()
        t.join()
        live.append(start("n%d" % r))
    for p, t in live:
        p.kill()
        p.wait()
        t.join()
    assert not errors, errors
    assert len(acks) > 100
    _check_log(root, acks)
