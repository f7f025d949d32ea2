"""Adversarial tests of the planning of a commit-log read (``pystore.spark.batch.plan_commit_log_slices``, cut at
records the consume queues point at) and of its readers (``read_slice``): random stores of several topics and
queues, batches and many small files, then damaged consume queues, deleted head files, lagging queues and files
made ahead of the writer. Every plan must read every record of the log exactly once, in order, or refuse with
``StoreCorruptedError``: never a duplicate, a foreign row or a silent gap.

Needs pyspark and pyarrow importable (the data source's module), not a Spark session nor Java."""

from __future__ import annotations

import os
import random
import shutil
import struct

import pytest

pytest.importorskip("pyspark", reason="the spark extra (pyspark) is not installed")
pytest.importorskip("pyarrow", reason="the spark extra (pyarrow) is not installed")

import pystore.spark.batch as batch  # noqa: E402
from pystore import Message, MessageBatch, MessageStore  # noqa: E402
from pystore.columns._arrow_plan import split_points  # noqa: E402
from pystore.errors import StoreCorruptedError  # noqa: E402
from pystore.log._mapped_file import MappedFile  # noqa: E402
from pystore.spark import layout  # noqa: E402
from pystore.spark.batch import Filters, plan_commit_log_slices, read_slice  # noqa: E402
from pystore.spark.schema import arrow_schema  # noqa: E402


@pytest.fixture(autouse=True)
def _plan_from_queues(monkeypatch):
    """These stores are small: without this, the planner would walk them (``_WALK_BELOW``) instead of asking
    the consume queues, which is what these tests are about."""
    monkeypatch.setattr(batch, "_WALK_BELOW", 0)

CL_FILE = 64 * 1024

# -----------------------------------------------------------------------------------------------------------
# helpers
# -----------------------------------------------------------------------------------------------------------


def _random_store(root, seed: int, n: int = 400, cq_units: int = 32, topics: int = 3, queues: int = 3) -> None:
    """``n`` messages of random sizes (some in MessageBatch puts) over ``topics`` x ``queues``, in 64 KiB
    commit-log files and consume-queue files of ``cq_units`` units."""
    rng = random.Random(seed)
    with MessageStore.open(str(root), mapped_file_size_commit_log=CL_FILE,
                           mapped_file_size_consume_queue=20 * cq_units, max_hash_slot_num=64,
                           max_index_num=256) as s:
        i = 0
        while i < n:
            topic, q = "T%d" % rng.randrange(topics), rng.randrange(queues)
            if rng.random() < 0.2:
                k = rng.randint(1, 6)
                bodies = [rng.randbytes(rng.choice([1, 5, 50, 300, 2000])) for _ in range(k)]
                r = s.put_messages(MessageBatch([Message(topic, b, queue_id=q) for b in bodies]))
                i += k
            else:
                r = s.put_message(Message(topic, rng.randbytes(rng.choice([1, 7, 60, 400, 3000, 9000])), queue_id=q))
                i += 1
            assert r.append_message_result.wrote_offset >= 0


def _record_offsets(root) -> list[int]:
    """Every record's commit-log offset, by walking every file's record headers."""
    out = []
    for path in layout.commit_log_files(str(root)):
        mf = MappedFile(path, -1, read_only=True)
        try:
            starts, end, _code = split_points(mf, 1)
            if end > 0:
                out.extend(mf.file_from_offset + s for s in starts)
        finally:
            mf.close()
    return out


def _read(parts) -> list[int]:
    out = []
    for part in parts:
        for b in read_slice(part, Filters([], -1, None, None, True), arrow_schema()):
            out.extend(b.column("commit_log_offset").to_pylist())
    return out


def _check_every_plan(root, expected, bpps=(700, 3000, 8192, 30000, 1 << 30), targets=(1, 4, 33)) -> int:
    """Plan and read ``root`` with each bytes-per-partition and target: the rows are ``expected`` exactly,
    or the read refuses with StoreCorruptedError. Returns how many reads refused."""
    refused = 0
    for bpp in bpps:
        for target in targets:
            parts = plan_commit_log_slices(str(root), bpp, target)
            try:
                got = _read(parts)
            except StoreCorruptedError:
                refused += 1
                continue
            assert len(got) == len(set(got)), "a record served twice (bpp %d, target %d)" % (bpp, target)
            assert got == expected, "rows differ from the log (bpp %d, target %d): missing %s, foreign %s" % (
                bpp, target, sorted(set(expected) - set(got))[:5], sorted(set(got) - set(expected))[:5])
    return refused


def _cq_files(root) -> list[str]:
    return [p for t, q in layout.list_queues(str(root)) for p in layout.queue_files(str(root), t, q)]


def _units(data) -> list[tuple[int, int]]:
    return [struct.unpack_from(">qi", data, u * 20) for u in range(len(data) // 20)]


def _damage_queues(root, rng: random.Random, mode: str, log_end: int) -> None:
    files = _cq_files(root)
    for path in rng.sample(files, max(1, len(files) // 2)):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        n = len(data) // 20
        if n == 0:
            continue
        if mode == "bytes":
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif mode == "swap":
            for _ in range(3):
                a, b = rng.randrange(n), rng.randrange(n)
                data[a * 20:a * 20 + 20], data[b * 20:b * 20 + 20] = data[b * 20:b * 20 + 20], data[a * 20:a * 20 + 20]
        elif mode == "shift":
            for u, (phy, size) in enumerate(_units(data)):
                if size > 0 and rng.random() < 0.5:
                    moved = phy + rng.choice([-8, -4, -1, 1, 4, 8, 20, 100])
                    struct.pack_into(">q", data, u * 20, max(-(2**63), min(2**63 - 1, moved)))
        elif mode == "garbage_phy":
            for u in range(n):
                if rng.random() < 0.3:
                    struct.pack_into(">q", data, u * 20,
                                     rng.choice([-1, 0, 2**62, 2**63 - 1, -(2**63), rng.randrange(2**40)]))
        elif mode == "anywhere":
            for u in range(n):
                if rng.random() < 0.3:
                    struct.pack_into(">q", data, u * 20, rng.randrange(log_end + 100))
        elif mode == "size":
            for u in range(n):
                if rng.random() < 0.3:
                    struct.pack_into(">i", data, u * 20 + 8, rng.choice([-(2**31), -2, -1, 0, 1, 3, 2**31 - 1]))
        elif mode == "zeroed":
            a = rng.randrange(n)
            b = rng.randrange(a, n + 1)
            data[a * 20:b * 20] = bytes((b - a) * 20)
        elif mode == "truncated":
            data = data[:rng.randrange(1, len(data) + 1)]        # often not a multiple of 20
        else:
            raise AssertionError(mode)
        with open(path, "wb") as f:
            f.write(data)


def _drop_head(root, k: int) -> None:
    """The cleaner's work, by hand: the ``k`` oldest commit-log files gone, and every consume-queue file but a
    queue's last whose units all point below the new min."""
    logs = layout.commit_log_files(str(root))
    for p in logs[:k]:
        os.remove(p)
    new_min = int(os.path.basename(logs[k]))
    for t, q in layout.list_queues(str(root)):
        for path in layout.queue_files(str(root), t, q)[:-1]:
            with open(path, "rb") as f:
                real = [(p, s) for p, s in _units(f.read()) if s > 0]
            if real and all(p + s <= new_min for p, s in real):
                os.remove(path)


def _lag_queues(root, below: int) -> None:
    """Units of records at or above ``below`` zeroed in every queue: the queues lag the commit log."""
    for path in _cq_files(root):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        for u, (phy, size) in enumerate(_units(data)):
            if size > 0 and phy >= below:
                data[u * 20:u * 20 + 20] = bytes(20)
        with open(path, "wb") as f:
            f.write(data)


def _files_ahead(root, n: int) -> None:
    """``n`` empty full-size commit-log files after the last (made ahead of the writer)."""
    logs = layout.commit_log_files(str(root))
    last = int(os.path.basename(logs[-1]))
    for i in range(1, n + 1):
        with open(os.path.join(os.path.dirname(logs[-1]), "%020d" % (last + i * CL_FILE)), "wb") as f:
            f.truncate(CL_FILE)


# -----------------------------------------------------------------------------------------------------------
# what holds
# -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_random_stores_every_plan_reads_every_record_once(tmp_path, seed, monkeypatch):
    rng = random.Random(seed)
    _random_store(tmp_path, seed, n=rng.randrange(400, 800), cq_units=rng.choice([4, 16, 1000]),
                  topics=rng.randint(1, 4), queues=rng.randint(1, 4))
    expected = _record_offsets(tmp_path)
    assert len(layout.commit_log_files(str(tmp_path))) >= 5
    walked = []
    walk = batch.split_points
    monkeypatch.setattr(batch, "split_points", lambda mf, chunk: walked.append(mf.file_name) or walk(mf, chunk))
    assert _check_every_plan(tmp_path, expected) == 0
    parts = plan_commit_log_slices(str(tmp_path), 3000)
    # the queues cut the files (a walk only of the last one, where the queues may end before the data)
    cut = {p.path for p in parts if p.start > 0}
    assert len(cut) > 3 and len(cut - set(walked)) >= len(cut) - 1


@pytest.mark.no_verify
@pytest.mark.parametrize("mode", ["bytes", "swap", "shift", "garbage_phy", "anywhere", "size", "zeroed", "truncated"])
@pytest.mark.parametrize("seed", range(3))
def test_damaged_consume_queues_never_make_a_wrong_read(tmp_path, seed, mode):
    _random_store(tmp_path, 10 + seed, n=300, cq_units=random.Random(seed).choice([8, 1000]))
    expected = _record_offsets(tmp_path)
    _damage_queues(tmp_path, random.Random(seed), mode, expected[-1])
    _check_every_plan(tmp_path, expected, bpps=(900, 8192, 1 << 30), targets=(1, 9))


@pytest.mark.no_verify
@pytest.mark.parametrize("scenario", ["head1", "head3", "lag_in_last_file", "lag_by_files", "no_unit_at_all",
                                      "ahead", "head_lag_ahead", "no_consume_queue"])
@pytest.mark.parametrize("seed", range(2))
def test_cleaned_lagging_and_ahead_stores_read_every_record_once(tmp_path, seed, scenario):
    rng = random.Random(seed)
    _random_store(tmp_path, 100 + seed, n=500, cq_units=rng.choice([8, 64]))
    end = _record_offsets(tmp_path)[-1]
    if scenario.startswith("head"):
        _drop_head(tmp_path, 3 if scenario == "head3" else 1)
    if scenario in ("lag_in_last_file", "head_lag_ahead"):
        _lag_queues(tmp_path, end - rng.randrange(1, 20000))
    if scenario == "lag_by_files":
        _lag_queues(tmp_path, end - 3 * CL_FILE)
    if scenario == "no_unit_at_all":
        _lag_queues(tmp_path, 0)
    if scenario in ("ahead", "head_lag_ahead"):
        _files_ahead(tmp_path, 2)
    if scenario == "no_consume_queue":
        shutil.rmtree(tmp_path / "consumequeue")
    expected = _record_offsets(tmp_path)
    assert _check_every_plan(tmp_path, expected) == 0


@pytest.mark.no_verify
def test_a_queue_unit_at_a_forged_record_inside_a_body_is_refused(tmp_path):
    """A body carrying a whole record whose PHYSICALOFFSET names the very place it lands (so record_size_at
    accepts it), and a damaged unit pointing at it: if the planner cuts there, the readers on either side
    refuse (their walks do not land on it); no row of the forged record is ever served."""
    with MessageStore.open(str(tmp_path), mapped_file_size_commit_log=CL_FILE, max_hash_slot_num=64,
                           max_index_num=256) as s:
        rs = [s.put_message(Message("T", b"a%d" % i * 50, queue_id=0)).append_message_result for i in range(40)]
        probe = s.put_message(Message("T", bytes(3000), queue_id=1)).append_message_result
        path = layout.commit_log_files(str(tmp_path))[0]
        with open(path, "rb") as f:
            raw = f.read()
        body_at = raw.index(bytes(3000), probe.wrote_offset) - probe.wrote_offset
        where = probe.wrote_offset + probe.wrote_bytes                  # the next record's offset
        forged = bytearray(raw[rs[3].wrote_offset:rs[3].wrote_offset + rs[3].wrote_bytes])
        fake_at = where + body_at + 1000
        struct.pack_into(">q", forged, 28, fake_at)
        body = bytes(1000) + bytes(forged) + bytes(2000 - len(forged))
        r = s.put_message(Message("T", body, queue_id=1)).append_message_result
        assert r.wrote_offset == where
        for i in range(40):
            s.put_message(Message("T", b"z%d" % i * 50, queue_id=0))
    expected = _record_offsets(tmp_path)
    assert fake_at not in expected
    cq = layout.queue_files(str(tmp_path), "T", 1)[0]
    with open(cq, "r+b") as f:
        f.seek(20)
        f.write(struct.pack(">q", fake_at))
    for bpp in (1000, 2000, 4000):
        parts = plan_commit_log_slices(str(tmp_path), bpp)
        if any(p.start == fake_at for p in parts):
            # cut there: the readers on either side refuse
            for p in parts:
                if p.start == fake_at or p.end == fake_at:
                    with pytest.raises(StoreCorruptedError):
                        _read([p])
            with pytest.raises(StoreCorruptedError):
                _read(parts)
        else:
            # the walk from a record below the wanted offsets went past it: the log read whole and right
            assert _read(parts) == expected


# -----------------------------------------------------------------------------------------------------------
# defects found in review, fixed
# -----------------------------------------------------------------------------------------------------------


@pytest.mark.no_verify
def test_a_damaged_offset_field_at_a_file_start_is_not_a_silent_gap(tmp_path):
    _random_store(tmp_path, 1, n=400)
    expected = _record_offsets(tmp_path)
    path = layout.commit_log_files(str(tmp_path))[2]
    with open(path, "r+b") as f:
        f.seek(28)
        phy = struct.unpack(">q", f.read(8))[0]
        f.seek(28)
        f.write(struct.pack(">q", phy + 1))                            # one field, outside the body CRC
    parts = plan_commit_log_slices(str(tmp_path), 8192)
    try:
        got = _read(parts)
    except StoreCorruptedError:
        return
    first = int(os.path.basename(path))
    assert [o for o in expected if first < o < first + CL_FILE] == [o for o in got if first < o < first + CL_FILE]


@pytest.mark.no_verify
def test_a_damaged_first_record_of_a_middle_file_is_refused(tmp_path):
    _random_store(tmp_path, 1, n=400)
    path = layout.commit_log_files(str(tmp_path))[2]
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(b"\0\0\0\1")                                           # the magic
    with pytest.raises(StoreCorruptedError):
        _read(plan_commit_log_slices(str(tmp_path), 8192))


@pytest.mark.no_verify
def test_a_zeroed_header_inside_a_file_is_refused_by_every_plan(tmp_path):
    _random_store(tmp_path, 1, n=400)
    path = layout.commit_log_files(str(tmp_path))[2]
    mf = MappedFile(path, -1, read_only=True)
    try:
        starts = split_points(mf, 1)[0]
    finally:
        mf.close()
    with open(path, "r+b") as f:
        f.seek(starts[len(starts) // 2])
        f.write(bytes(4))
    for bpp in (4096, 1 << 30):
        with pytest.raises(StoreCorruptedError):
            _read(plan_commit_log_slices(str(tmp_path), bpp))


def test_planning_work_is_bounded_by_the_records_not_the_bytes(tmp_path, monkeypatch):
    with MessageStore.open(str(tmp_path), mapped_file_size_commit_log=256 * 1024, max_hash_slot_num=64,
                           max_index_num=256) as s:
        for i in range(3000):
            s.put_message(Message("T", b"x" * 300, queue_id=i % 4))
    records = len(_record_offsets(tmp_path))
    asked = []
    boundaries = batch.queue_boundaries
    monkeypatch.setattr(batch, "queue_boundaries",
                        lambda paths, xs, below: asked.append(len(xs)) or boundaries(paths, xs, below))
    for bpp, target in ((1, 1), (1 << 28, 10**9)):
        asked.clear()
        parts = plan_commit_log_slices(str(tmp_path), bpp, target)
        assert len(parts) == records
        assert max(asked, default=0) <= 2 * records


def test_a_consume_queue_file_deleted_while_planning_does_not_fail_the_plan(tmp_path, monkeypatch):
    _random_store(tmp_path, 3, n=400, cq_units=8)
    expected = _record_offsets(tmp_path)
    boundaries = batch.queue_boundaries

    def racing(paths, xs, below):
        if len(paths) > 1 and os.path.exists(paths[0]):
            os.remove(paths[0])                             # the cleaner, between the listing and the mapping
        return boundaries(paths, xs, below)

    monkeypatch.setattr(batch, "queue_boundaries", racing)
    parts = plan_commit_log_slices(str(tmp_path), 8192)
    assert _read(parts) == expected


def test_a_small_log_is_walked_without_listing_the_queues(tmp_path, monkeypatch):
    """Below ``_WALK_BELOW`` bytes of files the plan walks the records (cheaper than the queues of a store of
    many queues), and gives the slices a walk gives."""
    _random_store(tmp_path, 5, n=400)
    expected = _record_offsets(tmp_path)
    monkeypatch.setattr(batch, "_WALK_BELOW", 1 << 40)
    monkeypatch.setattr(batch.layout, "list_queues", lambda *a: pytest.fail("the plan listed the queues"))
    for bpp, target in ((8192, 1), (1 << 30, 5)):
        parts = plan_commit_log_slices(str(tmp_path), bpp, target)
        assert len(parts) >= min(target, len(expected)) and _read(parts) == expected
        for p in parts:
            mf = MappedFile(p.path, -1, read_only=True)
            try:
                assert p.start in split_points(mf, 1)[0]
            finally:
                mf.close()


def test_a_file_the_queues_know_few_records_of_is_walked(tmp_path, monkeypatch):
    """When the queues asked point at too few records of a file to cut it as asked, the file is walked: as
    many slices as a walk makes."""
    with MessageStore.open(str(tmp_path), mapped_file_size_commit_log=64 * 1024, max_hash_slot_num=64,
                           max_index_num=256) as s:
        for i in range(900):
            s.put_message(Message("T", b"y%d" % i * 20, queue_id=0 if i % 100 == 0 else 1))
    expected = _record_offsets(tmp_path)
    sparse = layout.queue_files(str(tmp_path), "T", 0)
    monkeypatch.setattr(batch, "_planning_queues", lambda root: [sparse])
    parts = plan_commit_log_slices(str(tmp_path), 4096)
    monkeypatch.setattr(batch, "_WALK_BELOW", 1 << 40)
    walked = plan_commit_log_slices(str(tmp_path), 4096)
    assert len(parts) >= len(walked) - 2 * len({p.path for p in parts})
    assert len(parts) > 3 * len({p.path for p in parts}) and _read(parts) == expected
