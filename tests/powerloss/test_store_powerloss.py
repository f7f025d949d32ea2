"""pystore through a power cut: a writer process runs on the power-cut layer (``powercut.py``), is killed
(SIGKILL at a random moment, or by a named crash point of ``pystore.system.crashpoint``), the power is cut (the
       layer's ``crash``: drop / torn / subset+torn) and the store is reopened from what the disk holds.

Checked after every cut (docs/powerloss.md, "What pystore promises through a power cut"):

* SYNC_FLUSH: every put acknowledged ``PUT_OK`` (the writer's ack log) is at its offset with its own body;
* ASYNC_FLUSH: the recovered log is a gap-free prefix of what was written, holding every message whose put
  returned after the flushed offset had passed it (the ack log's fourth column);
* both: the log is a chain of whole records (no torn record is ever returned), the consume queues and the
  key index agree with it (``crash_writer.check_queues`` / ``check_index``), no consume-queue unit points
  past the recovered log, and recovery is idempotent;
* the checkpoint is never ahead of the data, judged on the raw files *before* any recovery rewrites them:
  some record of the durable log carries the physicMsgTimestamp (or a later time), and every durable record
  stored before the logicsMsgTimestamp has its unit in the surviving consume-queue files.

Crash points: ``RANDOM_KILLS`` seeded random moments per model (the seed is printed, and
``PYSTORE_POWERLOSS_SEED`` replays it), plus the named points (file roll, group commit, recovery, shutdown)
and a cut after a clean shutdown, each under the journal and the strict model.

``PYSTORE_POWERLOSS_BROKEN=1`` runs every writer with ``PYSTORE_TEST_SKIP_GROUP_COMMIT_FSYNC=1`` (a build
whose group commit acknowledges without msync): the SYNC_FLUSH tests must then fail, which shows the layer
catches a missing fsync. ``test_broken_group_commit_is_caught`` checks the same inside the normal run.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import crash_writer as cw  # noqa: E402
from writer_procs import kill, read_line, stderr_of, wait_killed_by_crashpoint  # noqa: E402

pytestmark = pytest.mark.powerloss

WRITER = TESTS / "crash_writer.py"
WORKTREE = TESTS.parent
FILE_SIZE = 64 * 1024          # commit-log files: a writer rolls several in a second
CUT_MODES = ("drop", "torn", "subset+torn")
RANDOM_KILLS = int(os.environ.get("PYSTORE_POWERLOSS_KILLS", "5"))   # per model and flush mode
SEED = int(os.environ.get("PYSTORE_POWERLOSS_SEED", str(random.SystemRandom().randrange(1 << 30))))
BROKEN = os.environ.get("PYSTORE_POWERLOSS_BROKEN") == "1"
SKIP_FSYNC_ENV = "PYSTORE_TEST_SKIP_GROUP_COMMIT_FSYNC"
CQ_UNIT = struct.Struct(">qiq")

#: what every test of this module checked, summed up at the end (the README quotes these figures)
TALLY: dict[str, int] = {"crash_points": 0, "cuts": 0, "acked_checked": 0, "acked_lost": 0}


def setup_module() -> None:
    print("\npower-cut seed %d (PYSTORE_POWERLOSS_SEED=%d replays it)%s" % (
        SEED, SEED, "; BROKEN build: group commit skips its msync" if BROKEN else ""))


def teardown_module() -> None:
    print("\npower-cut tally: %s" % TALLY)


# ----------------------------------------------------------------------------------------------
# writer processes on the mount
# ----------------------------------------------------------------------------------------------


def writer_env(fs, crashpoint: str | None = None, broken: bool = BROKEN) -> dict[str, str]:
    """The environment of a process on the mount: the layer's preload, our tree, a crash point (for
    ``run_open``; ``procs.start`` sets the writers' own) and the broken build's switch."""
    env = fs.writer_env({k: v for k, v in os.environ.items() if k not in ("PYSTORE_CRASHPOINT", SKIP_FSYNC_ENV)})
    env["PYTHONPATH"] = str(WORKTREE)
    if crashpoint:
        env["PYSTORE_CRASHPOINT"] = crashpoint
    if broken:
        env[SKIP_FSYNC_ENV] = "1"
    return env


def start_writer(procs, fs, mode: str, seed: int, *extra: str, crashpoint: str | None = None,
                 broken: bool = BROKEN, threads: int = 2) -> tuple[subprocess.Popen, Path]:
    """A ``crash_writer.py write`` on the mount (``procs``: the test's writer processes); returns it once it
    printed READY, and its ack log (kept outside the mount: the ack log is what the client was told, not part
    of the disk)."""
    ack = fs.base / ("ack-%d" % seed)
    p = procs.start("write", str(fs.mount / "store"), "--ack", str(ack), "--mode", mode, "--threads", str(threads),
                    "--file-size", str(FILE_SIZE), "--seed", str(seed), "--max-seconds", "60", *extra,
                    env=writer_env(fs, broken=broken), crashpoint=crashpoint)
    read_line(p, "READY", 60.0)
    return p, ack


def run_open(fs, crashpoint: str | None = None) -> int:
    """``crash_writer.py open`` (recovery only) on the mount; its exit status."""
    argv = [sys.executable, str(WRITER), "open", str(fs.mount / "store"), "--file-size", str(FILE_SIZE)]
    r = subprocess.run(argv, capture_output=True, env=writer_env(fs, crashpoint), cwd=WORKTREE, timeout=120)
    if crashpoint is None:
        assert r.returncode == 0, r.stderr.decode()[-3000:]
    return r.returncode


# ----------------------------------------------------------------------------------------------
# the raw files of a cut (before recovery)
# ----------------------------------------------------------------------------------------------


def store_timestamps(root: Path, w: cw.Walk) -> list[int]:
    """The STORETIMESTAMP of each record of ``w``, read from the raw files."""
    out = []
    d = root / "commitlog"
    cache: dict[str, bytes] = {}
    for r in w.records:
        name = "%020d" % (r.offset - r.offset % FILE_SIZE)
        buf = cache.get(name)
        if buf is None:
            buf = cache[name] = (d / name).read_bytes()
        pos = r.offset % FILE_SIZE
        (sysflag,) = struct.unpack_from(">i", buf, pos + 36)
        born_host = 20 if sysflag & 0x10 else 8
        out.append(struct.unpack_from(">q", buf, pos + 48 + born_host)[0])
    return out


def raw_unit(root: Path, topic: str, qid: int, queue_offset: int) -> tuple[int, int, int] | None:
    """The unit at ``queue_offset`` in the raw consume-queue files, or None when its file is missing/short."""
    per_file = cw.SMALL_FILES["mapped_file_size_consume_queue"]
    pos = queue_offset * CQ_UNIT.size
    path = root / "consumequeue" / topic / str(qid) / ("%020d" % (pos - pos % per_file))
    try:
        with open(path, "rb") as f:
            f.seek(pos % per_file)
            data = f.read(CQ_UNIT.size)
    except FileNotFoundError:
        return None
    return CQ_UNIT.unpack(data) if len(data) == CQ_UNIT.size else None


def read_checkpoint(root: Path) -> tuple[int, int, int] | None:
    try:
        data = (root / "checkpoint").read_bytes()
    except FileNotFoundError:
        return None
    return struct.unpack_from(">qqq", data) if len(data) >= 24 else None


def check_checkpoint_not_ahead(root: Path) -> dict[str, int]:
    """On the raw files of a cut, before recovery: the checkpoint claims nothing the disk does not hold.

    * physicMsgTimestamp P is the store time of a flushed message: some durable record is stored at P or
      later (the store times grow along the log), else the message the checkpoint names was lost;
    * logicsMsgTimestamp L is the store time of the last message built into a queue before a full queue
      flush: each durable record stored before L (strictly: the same millisecond may hold a message
      dispatched after the flush began) has its unit, pointing at it, in the consume-queue files."""
    cp = read_checkpoint(root)
    if cp is None:
        return {"checked": 0}
    physic, logics, _index = cp
    w = cw.walk_log(str(root))
    ts = store_timestamps(root, w)
    if physic > 0:
        assert ts and max(ts) >= physic, "checkpoint physicMsgTimestamp %d, the durable log ends at time %s" % (
            physic, max(ts) if ts else None)
    checked = 0
    for r, t in zip(w.records, ts):
        if t >= logics:
            continue
        want = (r.offset, r.size, cw.java_hash(r.tags) if r.tags else 0)
        got = raw_unit(root, r.topic, r.queue_id, r.queue_offset)
        assert got == want, ("checkpoint logicsMsgTimestamp %d, but record %d at %d (stored %d) has unit %s in "
                             "%s/%d offset %d, want %s" % (logics, r.idx, r.offset, t, got, r.topic, r.queue_id,
                                                           r.queue_offset, want))
        checked += 1
    return {"checked": checked, "physic": physic, "logics": logics}


def check_units_within_log(root: Path, end: int) -> None:
    """After recovery no consume-queue unit, in any file, points past the recovered log's end."""
    cq = root / "consumequeue"
    if not cq.is_dir():
        return
    for path in cq.glob("*/*/*"):
        data = path.read_bytes()
        for pos in range(0, len(data) - CQ_UNIT.size + 1, CQ_UNIT.size):
            off, size, _ = CQ_UNIT.unpack_from(data, pos)
            if size > 0:
                assert off + size <= end, "%s unit %d points at %d+%d, past the recovered end %d" % (
                    path.relative_to(root), pos // CQ_UNIT.size, off, size, end)


# ----------------------------------------------------------------------------------------------
# checking one cut
# ----------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    acked: int = 0
    lost: list[cw.Ack] = field(default_factory=list)
    records: int = 0


def promised(acks: list[cw.Ack], mode: str) -> list[cw.Ack]:
    """The acknowledged messages the store promised to keep: all under SYNC_FLUSH; under ASYNC_FLUSH those
    the flushed offset had passed when their put returned."""
    if mode == "sync":
        return acks
    return [a for a in acks if a.offset + a.size <= a.flushed]


def verify_cut(out: Path, acks: list[cw.Ack], mode: str, strict_acks: bool = True) -> Verdict:
    """Check the store a cut left in ``out`` (see the module docstring); with ``strict_acks`` False the
    promised messages that were lost are returned instead of failing (the broken build's test)."""
    root = out / "store"
    TALLY["cuts"] += 1
    keep = promised(acks, mode)
    # the raw files first, before recovery touches them: what the disk holds of the promised messages
    raw = {r.offset: r for r in cw.walk_log(str(root)).records}
    lost = [a for a in keep if a.offset not in raw or raw[a.offset].size != a.size or raw[a.offset].idx != a.idx]
    if strict_acks:
        assert not lost, "%d of %d promised (acknowledged) messages lost by the power cut, first: %s" % (
            len(lost), len(keep), lost[:3])
        check_checkpoint_not_ahead(root)
    store = cw.open_store(root, FILE_SIZE)
    try:
        w = cw.walk_log(str(root))
        cw.check_chain(w)
        end = store.get_max_phy_offset()
        assert end == w.end, "store max offset %d, the log ends at %d" % (end, w.end)
        by_offset = cw.index_records(w)
        if strict_acks:
            cw.check_acked(by_offset, keep)     # and recovery kept them
        # a gap-free prefix: every acknowledged message below the end is there, at its offset
        cw.check_acked(by_offset, [a for a in acks if a.offset + a.size <= w.end])
        cw.check_unique(w)
        for r in w.records[-20:]:            # no torn record returned: the store reads what the walk read
            m = store.look_message_by_offset(r.offset)
            assert m is not None and m.store_size == r.size
            cw.check_message(m, r.idx)
        assert store.look_message_by_offset(end) is None
        cw.check_queues(store, w)
        cw.check_index(store, w)
    finally:
        store.shutdown()
    check_units_within_log(root, end)
    again = cw.open_store(root, FILE_SIZE)
    try:
        assert again.get_max_phy_offset() == end, "recovery is not idempotent"
    finally:
        again.shutdown()
    TALLY["acked_checked"] += len(keep)
    TALLY["acked_lost"] += len(lost)
    return Verdict(acked=len(keep), lost=lost, records=len(w.records))


def cut_and_verify(fs, acks: list[cw.Ack], mode: str, seed: int, modes=CUT_MODES) -> list[Verdict]:
    out = []
    for i, cut in enumerate(modes):
        path = fs.crash(mode=cut, seed=seed * 7 + i, keep_prob=0.5)
        out.append(verify_cut(path, acks, mode))
    return out


# ----------------------------------------------------------------------------------------------
# random moments
# ----------------------------------------------------------------------------------------------


MODELS = pytest.mark.parametrize("model", ["journal", "strict"])


@MODELS
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_random_kills_then_power_cut(powercut, procs, model, mode):
    """``RANDOM_KILLS`` writers, each SIGKILLed at a seeded random moment (0.1 to 1 s into its puts), then
    the power cut under drop / torn / subset+torn: nothing promised is lost, the rest is consistent."""
    rng = random.Random("%d-%s-%s" % (SEED, model, mode))
    total = 0
    for k in range(RANDOM_KILLS):
        fs = powercut(model, name="r%d-%s-%s" % (k, model, mode))
        seed = rng.randrange(1 << 20)
        p, ack = start_writer(procs, fs, mode, seed, "--batch-prob", "0.3")
        time.sleep(rng.uniform(0.1, 1.0))
        kill(p)
        acks = cw.read_acks(str(ack))
        assert acks, "the writer acknowledged nothing before the kill"
        TALLY["crash_points"] += 1
        cut_and_verify(fs, acks, mode, seed)
        total += len(acks)
        fs.close()
    assert total > 0


# ----------------------------------------------------------------------------------------------
# named crash points
# ----------------------------------------------------------------------------------------------


@MODELS
@pytest.mark.parametrize("point,mode", [
    ("commitlog.roll", "sync"), ("allocate.created", "sync"), ("groupcommit.flushed", "sync"),
    ("commitlog.roll", "async"), ("checkpoint.written", "sync"), ("checkpoint.written", "async"),
])
def test_crash_point_then_power_cut(powercut, procs, model, point, mode):
    """The writer kills itself at a named point (a file roll, a new file's creation, between the group
    commit's msync and its acknowledgements, between the checkpoint's write and its sync), the n-th time it
    gets there, n seeded; then the power cut."""
    rng = random.Random("%d-%s-%s-%s" % (SEED, model, point, mode))
    nth = rng.randint(1, 4) if point != "groupcommit.flushed" else rng.randint(5, 400)
    fs = powercut(model)
    p, ack = start_writer(procs, fs, mode, rng.randrange(1 << 20), crashpoint="%s:%d" % (point, nth))
    wait_killed_by_crashpoint(p, 60.0)
    acks = cw.read_acks(str(ack))
    TALLY["crash_points"] += 1
    cut_and_verify(fs, acks, mode, nth)


@MODELS
@pytest.mark.parametrize("point", ["recovery.scanned", "recovery.truncated"])
def test_power_cut_during_recovery(powercut, procs, model, point):
    """A SYNC_FLUSH writer is killed; a second process recovers the store on the same (still powered) disk
    and is killed at a recovery point; then the power is cut and the store recovered again. Recovery ran on
    bytes the cut then took back (the killed writer's unsynced tail), so what it wrote for them (consume
    queue units, truncations) must not survive as a claim on data that is gone."""
    rng = random.Random("%d-%s-%s" % (SEED, model, point))
    fs = powercut(model)
    p, ack = start_writer(procs, fs, "sync", rng.randrange(1 << 20))
    time.sleep(rng.uniform(0.3, 1.2))
    kill(p)
    rc = run_open(fs, crashpoint=point)
    assert rc == -signal.SIGKILL, "recovery did not reach %s (exit %s)" % (point, rc)
    acks = cw.read_acks(str(ack))
    TALLY["crash_points"] += 1
    cut_and_verify(fs, acks, "sync", rng.randrange(1 << 20))


@MODELS
@pytest.mark.parametrize("point", ["shutdown.flushed", "shutdown.checkpoint", None])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_power_cut_at_shutdown(powercut, procs, model, point, mode):
    """A writer makes a fixed number of puts and shuts down; it is killed inside the shutdown (after the
    final flush, after the checkpoint write) or the shutdown completes; then the power is cut. A shutdown
    flushes everything, so under both flush modes every acknowledged message must survive (once the
    shutdown's final flush is done), and the checkpoint must not claim what no sync made durable."""
    rng = random.Random("%d-%s-%s-%s" % (SEED, model, point, mode))
    fs = powercut(model)
    p, ack = start_writer(procs, fs, mode, rng.randrange(1 << 20), "--max-puts", str(rng.randint(100, 400)), "--shutdown",
                          crashpoint=point)
    if point is None:
        read_line(p, "DONE", 120.0)
        assert p.wait(timeout=120) == 0, stderr_of(p)
        assert not (fs.mount / "store" / "abort").exists()
    else:
        wait_killed_by_crashpoint(p, 60.0)
    acks = cw.read_acks(str(ack))
    TALLY["crash_points"] += 1
    # every mode's acks count as promised: the shutdown flushed them all before either point
    for i, cut in enumerate(CUT_MODES):
        verify_cut(fs.crash(mode=cut, seed=i), acks, "sync")


# ----------------------------------------------------------------------------------------------
# the deliberately broken build
# ----------------------------------------------------------------------------------------------


def test_broken_group_commit_is_caught(powercut, procs):
    """With ``PYSTORE_TEST_SKIP_GROUP_COMMIT_FSYNC=1`` the group commit acknowledges without msync: the same
    SYNC_FLUSH scenario must then lose acknowledged messages on the layer (proof that the layer, and so the
    tests above, would catch a missing fsync)."""
    fs = powercut("journal")
    p, ack = start_writer(procs, fs, "sync", 1, broken=True)
    time.sleep(1.0)
    kill(p)
    acks = cw.read_acks(str(ack))
    assert len(acks) > 50
    verdict = verify_cut(fs.crash(mode="drop"), acks, "sync", strict_acks=False)
    TALLY["acked_checked"] -= verdict.acked     # not part of the figures of the correct build
    TALLY["acked_lost"] -= len(verdict.lost)
    assert verdict.lost, "the broken build lost nothing: the layer does not see the missing msync"
    assert len(verdict.lost) > len(acks) // 2

