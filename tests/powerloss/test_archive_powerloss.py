"""Power cuts of a store that archives (issue 37; docs/powerloss.md, "The archive"): the store root and its
``file://`` archive both on the power-cut layer, a writer putting into 32 KiB commit-log files so that files seal
all the time, the archiving service copying each as it seals (``archive_on_seal``), and cleaning deleting the
copied local files while the writer runs (``archive_local_retention_bytes``: at most three local files).

Each point (seeded, printed) kills the writer: at a random moment, or inside a copy (the writer's copy of its
``k``-th file writes half the object and the process SIGKILLs itself: a ``copy-started`` record without its
``copy-finished`` one, and a half-written object, for certain). Then the power is cut (``drop`` and ``torn``)
and, on the folder the cut leaves:

* the archive, raw: no finished record names an object that is missing or differs from its size and CRC (read
  here, and by ``pystore.archive.verify``, which must report ok); records torn or changed are skipped (counted);
  no half-copied object is listed; every commit-log object also still local is the local file byte for byte;
* the store reopened in this process (root and archive of the cut): every acknowledged message that was durable
  before the cut (SYNC_FLUSH: every ack; ASYNC_FLUSH: those below the flushed offset the put saw) is read by
  ``get_message`` from its queue's min offset (which reports the archive's) with its own body, topic, queue and
  queue offset, from the local files or the archive, and no message is served twice;
* the reopened writer resumes: after a few puts that seal the files a cut copy lay in, its archiving service
  copies every ``copy-started`` commit-log file again and finishes it, and ``verify`` still reports ok.

A cut often leaves a consume-queue file full but unflushed before a later one: the reopening store rebuilds that
queue from the local commit log, keeping its units of archived messages below the local log
(``ConsumeQueue.keep_units_below``; before that fix, 14 of 64 cuts lost such messages). The queues rebuilt are
printed; any loss fails the test.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import crash_writer as cw  # tests/ is on sys.path (tests/conftest.py)
import pytest
from writer_procs import read_line

from .powercut import durable, seeded, stop_writer

pytestmark = pytest.mark.powerloss

FILE = 32768
TOPICS = cw.TOPICS[:2]
QUEUES = 2
#: the store's files, the same for the writer and the reopened store: 64-unit consume-queue files and small index
#: files, so that queue and index files seal (and are copied, then cleaned) within a run of a few seconds
GEOMETRY = {"mapped_file_size_consume_queue": 20 * 64, "max_hash_slot_num": 64, "max_index_num": 256}
#: the writer's archiving and cleaning: copies as files seal, cleaning every 50 ms deletes copied files beyond three
WRITER_OPTIONS = {"archive_local_retention_bytes": 3 * FILE, "file_reserved_time": 0, "clean_resource_interval": 50,
                  "delete_commit_log_files_interval": 0, "delete_consume_queue_files_interval": 0,
                  "flush_interval_commit_log": 200, "flush_commit_log_least_pages": 1}
#: per test: one kill at a random moment, one inside a copy
POINTS = ("random", "in-copy")

ARCHIVE_WRITER = r'''
import os, random, signal, sys
import crash_writer as cw
from pystore import Message
from pystore.config import FlushDiskType
root, archive, ack, seed, mode, die_in_copy = sys.argv[1:7]
seed, die_in_copy = int(seed), int(die_in_copy)
if die_in_copy:
    # the die_in_copy-th file copied to the archive: half of it written into the object's part file, then the
    # process dies (a copy-started record without its finish, for certain)
    from pystore.archive import target as _t
    _copy, _count = _t.ArchiveTarget._copy_local, [0]
    def _half_then_die(self, name, src, fd, chunk):
        _count[0] += 1
        if _count[0] == die_in_copy:
            data = src.read()
            os.write(fd, data[:len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return _copy(self, name, src, fd, chunk)
    _t.ArchiveTarget._copy_local = _half_then_die
flush = FlushDiskType.SYNC_FLUSH if mode == "sync" else FlushDiskType.ASYNC_FLUSH
store = cw.open_store(root, %(file)d, flush_disk_type=flush, archive_uri=archive, **%(options)r)
flushed_of = store._commitlog.queue
print("READY", flush=True)
fd = os.open(ack, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
rng = random.Random(seed)
topics = %(topics)r
for i in range(10**7):
    t, qid = rng.randrange(len(topics)), rng.randrange(%(queues)d)
    m = Message(topics[t], cw.make_body(i, topics[t], qid, rng.randint(0, 600)), tags="Tag%%d" %% (i %% 3),
                keys="k%%d" %% i, queue_id=qid)
    r = store.put_message(m)
    if r.status.name == "PUT_OK":
        a = r.append_message_result
        os.write(fd, b"%%d %%d %%d %%d %%d %%d %%d\n" %% (i, a.wrote_offset, a.wrote_bytes, flushed_of.flushed_where, t, qid,
                                                a.logics_offset))
''' % {"file": FILE, "options": {**GEOMETRY, **WRITER_OPTIONS}, "topics": TOPICS, "queues": QUEUES}


@dataclass(frozen=True)
class Ack:
    idx: int
    offset: int
    size: int
    flushed: int        # the commit log's flushed offset when the put returned
    topic: str
    queue_id: int
    queue_offset: int


def read_acks(path: Path) -> list[Ack]:
    """The whole lines of the writer's ack log (a line cut by the kill is ignored)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split(b"\n")[:-1]:
        p = [int(x) for x in line.split()]
        if len(p) == 7:
            out.append(Ack(p[0], p[1], p[2], p[3], TOPICS[p[4]], p[5], p[6]))
    return out


@pytest.mark.parametrize("model", ["journal", "strict"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_archiving_writer_power_cut(powercut, procs, tmp_path, model, mode):
    rng = seeded()
    for point in POINTS:
        fs = powercut(model)
        ack = tmp_path / ("acks-%s" % point)
        die_in_copy = rng.randint(3, 12) if point == "in-copy" else 0
        p = procs.start(str(fs.mount / "store"), "file://" + str(fs.mount / "archive"), str(ack),
                        str(rng.randrange(1 << 30)), mode, str(die_in_copy), env=fs.writer_env(), script=ARCHIVE_WRITER)
        read_line(p, "READY", 60.0)
        when = stop_writer(p, rng, "in copy %d" % die_in_copy if die_in_copy else None, (0.5, 3.0), 120.0)
        acks = read_acks(ack)
        promised = durable(acks, mode)
        for crash_mode in ("drop", "torn"):
            out = fs.crash(mode=crash_mode, seed=rng.randrange(1 << 30))
            what = "%s %s %s %s" % (model, mode, when, crash_mode)
            started = check_archive(out, what, expect_started=bool(die_in_copy))
            check_reopened(out, acks, promised, started, what)
        fs.close()


def _uri(out: Path) -> str:
    return "file://" + str(out / "archive")


def check_archive(out: Path, what: str, expect_started: bool) -> list[str]:
    """The archive the cut left, before anything opens it: see the module docstring. Returns the names whose last
    record is ``copy-started`` (their copy was cut)."""
    from pystore.archive.manifest import COPY_STARTED, Manifest
    from pystore.archive.target import open_target
    from pystore.archive.verify import verify_archive

    target = open_target(_uri(out))
    manifest = Manifest(target).load()
    visible = [*manifest.commitlog_files(), *(r for q in manifest.queues() for r in manifest.queue_files(*q)),
               *manifest.index_files()]
    listed = set(target.list(""))
    parts = [os.path.join(d, f) for d, _, fs in os.walk(out / "archive") for f in fs if ".part-" in f]
    assert not any(".part-" in n for n in listed), "a part file is listed as an object"
    for r in visible:
        assert r["name"] in listed, "%s: finished record %d names %s, which is missing" % (what, r["seq"], r["name"])
        data = target.read(r["name"])
        assert len(data) == r["size"] and zlib.crc32(data) == r["crc32"], (
            "%s: %s is %d bytes, CRC %08x; its finished record says %d bytes, CRC %08x"
            % (what, r["name"], len(data), zlib.crc32(data), r["size"], r["crc32"]))
        if r["kind"] == "commitlog":
            local = out / "store" / "commitlog" / r["name"].rsplit("/", 1)[1]
            if local.exists():
                assert local.read_bytes() == data, "%s: %s differs from the local file" % (what, r["name"])
    started = sorted(n for n in manifest._last if manifest.state_of(n) == COPY_STARTED)
    if expect_started:
        assert started, "%s: the writer died inside a copy, but no copy-started record is left" % what
    report = verify_archive(_uri(out))
    assert report.ok, "%s: verify --archive: %s" % (what, report.problems)
    assert report.skipped_records == manifest.skipped
    print("archive %s: %d records (%d torn or changed, skipped), %d finished objects (%d commit-log files from %d "
          "to %d), %d copies cut (%s), %d part files left"
          % (what, len(manifest._seen), manifest.skipped, len(visible), report.commitlog_files, report.min_phy_offset,
             report.end_phy_offset, len(started), ", ".join(started), len(parts)))
    return started


class _Rebuilt(logging.Handler):
    """The queues whose files the reopening store found damaged (a full consume-queue file with an empty unit: its
    pages never flushed) and rebuilt from the local commit log (keeping their units of archived messages)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.queues: set[tuple[str, int]] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if "rebuilt from the commit log" in record.getMessage():
            self.queues.add((str(record.args[0]), int(record.args[1])))  # type: ignore[index]


def check_reopened(out: Path, acks: list[Ack], promised: list[Ack], started: list[str], what: str) -> None:
    """Reopen the store the cut left (with its archive) for writing: every promised message read back exactly, once;
    then the cut copies resumed and finished."""
    from pystore import Message
    from pystore.archive.manifest import COPY_FINISHED, LOCAL_DELETED
    from pystore.archive.verify import verify_archive
    from pystore.status import GetMessageStatus

    # passes every 200 ms, no cleaning: the reads below meet the archive as the cut left it, plus copies
    rebuilt = _Rebuilt()
    logging.getLogger("pystore.queue.queue_store").addHandler(rebuilt)
    try:
        store = cw.open_store(out / "store", FILE, archive_uri=_uri(out), archive_interval_ms=200, **GEOMETRY)
    finally:
        logging.getLogger("pystore.queue.queue_store").removeHandler(rebuilt)
    try:
        found: dict[int, tuple[str, int, int, int]] = {}
        archived = 0
        local_min = store.get_min_phy_offset()
        for topic in TOPICS:
            for qid in range(QUEUES):
                lo, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
                offset = lo
                while offset < hi:
                    r = store.get_message("archive-check", topic, qid, offset, 32)
                    assert r.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
                                        GetMessageStatus.OFFSET_FOUND_NULL), (what, topic, qid, offset, r)
                    for m in r.messages:
                        idx = cw.check_message(m)
                        assert idx not in found, "%s: message %d served twice" % (what, idx)
                        found[idx] = (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset)
                        archived += m.commit_log_offset < local_min
                    assert r.next_begin_offset > offset, (what, topic, qid, offset, r)
                    offset = r.next_begin_offset
        lost = [a for a in promised if found.get(a.idx) != (a.topic, a.queue_id, a.queue_offset, a.offset)]
        assert not lost, "%s: %d of %d promised messages not read back as acknowledged, first %s: read as %s" % (
            what, len(lost), len(promised), lost[0], found.get(lost[0].idx))
        # the writer resumes: puts until the files of the cut copies are sealed, then its passes finish them
        rolled = store.get_max_phy_offset() + 2 * FILE
        i = 0
        while store.get_max_phy_offset() < rolled:
            topic, qid = TOPICS[i % len(TOPICS)], i % QUEUES
            idx = 10**8 + i
            assert store.put_message(Message(topic, cw.make_body(idx, topic, qid, 600), keys="k%d" % idx,
                                             queue_id=qid)).is_ok()
            i += 1
        store.flush()
        manifest = store._parts.archive.manifest
        pending = [n for n in started if n.startswith("commitlog/")]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(manifest.state_of(n) not in (COPY_FINISHED, LOCAL_DELETED)
                                                  for n in pending):
            time.sleep(0.05)
        unfinished = [n for n in pending if manifest.state_of(n) not in (COPY_FINISHED, LOCAL_DELETED)]
        assert not unfinished, "%s: the copies of %s were not resumed" % (what, unfinished)
        store.shutdown()
        report = verify_archive(_uri(out))
        assert report.ok, "%s: verify --archive after the resumed copies: %s" % (what, report.problems)
        others = [n for n in started if n not in pending]
        print("reopened %s: %d acked, %d promised, all read back (%d messages read, %d from the archive below %d; "
              "queues rebuilt: %s); %d cut copies resumed and finished%s"
              % (what, len(acks), len(promised), len(found), archived, local_min,
                 ", ".join("%s/%d" % q for q in sorted(rebuilt.queues)) or "none", len(pending),
                 "" if not others else "; not commit-log files: %s now %s" % (
                     others, [manifest.state_of(n) for n in others])))
    finally:
        store.shutdown()
