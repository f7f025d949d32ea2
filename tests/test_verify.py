"""``pystore verify`` on damaged stores: every damage is reported with its file and offset, in bounded time
(each check runs ``python -m pystore verify --json`` in a child process with a timeout, so a regression
fails instead of hanging the suite), and a log that merely ends mid-record is not damage."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from conftest import make_message

from pystore import Message, MessageStore
from pystore.engine.verify import verify_store
from pystore.errors import StoreCorruptedError
from pystore.tools import iter_commitlog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE = 64 * 1024
SLOTS, ENTRIES = 64, 256
GEOMETRY = {
    "mapped_file_size_commit_log": FILE,
    "mapped_file_size_consume_queue": 640,
    "max_hash_slot_num": SLOTS,
    "max_index_num": ENTRIES,
}
OPTS = [x for k, v in GEOMETRY.items() for x in ("-o", "%s=%d" % (k, v))]

pytestmark = pytest.mark.no_verify  # every store here is damaged on purpose


def verify_in_child(root, timeout: float = 120) -> tuple[int, dict, str]:
    """``pystore verify ROOT --json`` in a child process: (exit code, report, stderr)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        r = subprocess.run([sys.executable, "-m", "pystore", "verify", str(root), "--json", *OPTS],
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("pystore verify did not end within %d s" % timeout)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else {}, r.stderr


def make_store(root, n: int = 200, body_size: int = 900) -> list[int]:
    """A closed store of ``n`` keyed messages over several commit-log files; their offsets."""
    offsets = []
    with MessageStore.open(root, **GEOMETRY) as s:
        for i in range(n):
            r = s.put_message(make_message(i, body_size=body_size, queue_id=i % 2))
            assert r.is_ok()
            offsets.append(r.append_message_result.wrote_offset)
    return offsets


def cl_path(root, k: int) -> str:
    return os.path.join(str(root), "commitlog", "%020d" % (k * FILE))


def test_sound_store_is_ok(tmp_path):
    make_store(tmp_path / "s")
    code, rep, _ = verify_in_child(tmp_path / "s")
    assert code == 0 and rep["ok"] and rep["records"] == 200 and rep["keys_checked"] == rep["keys_sampled"] > 0


# -- defect: a looping index chain --------------------------------------------------------------------------


def _index_file(root) -> str:
    d = os.path.join(str(root), "index")
    (name,) = sorted(os.listdir(d))
    return os.path.join(d, name)


def test_looping_index_chain_is_reported_with_file_and_offset(tmp_path):
    root = tmp_path / "s"
    make_store(root, 30, 100)
    path = _index_file(root)
    data = bytearray(open(path, "rb").read())
    count = struct.unpack_from(">i", data, 36)[0]
    x, y = count - 1, 1
    entry = 40 + SLOTS * 4
    struct.pack_into(">i", data, entry + x * 20 + 16, y)
    struct.pack_into(">i", data, entry + y * 20 + 16, x)      # y -> x -> y ...
    open(path, "wb").write(data)
    code, rep, _ = verify_in_child(root)
    assert code == 1 and not rep["ok"]
    index = [p for p in rep["problems"] if p["kind"] == "index" and p["path"] == path]
    assert entry + y * 20 + 16 in [p["offset"] for p in index]
    assert any("links to entry %d" % x in p["detail"] for p in index)


def test_index_header_count_past_the_file_is_reported(tmp_path):
    root = tmp_path / "s"
    make_store(root, 30, 100)
    path = _index_file(root)
    with open(path, "r+b") as fh:
        fh.seek(36)
        fh.write(struct.pack(">i", 1 << 30))
    code, rep, _ = verify_in_child(root)
    assert code == 1
    assert any(p["kind"] == "index" and p["path"] == path and p["offset"] == 36 for p in rep["problems"])


# -- defect: commit-log files of the wrong size, or missing ---------------------------------------------------


@pytest.mark.parametrize("case", ["missing", "short", "grown"])
def test_wrong_commit_log_file_is_reported_in_bounded_time(tmp_path, case):
    root = tmp_path / "s"
    offsets = make_store(root)
    assert os.path.exists(cl_path(root, 3))
    victim = cl_path(root, 1)
    if case == "missing":
        os.remove(victim)
        where = victim, FILE
    elif case == "short":
        os.truncate(victim, FILE // 2)
        where = victim, max(o for o in offsets if o < FILE + FILE // 2)
    else:
        with open(victim, "ab") as fh:
            fh.write(bytes(4096))
        where = victim, 2 * FILE
    code, rep, _ = verify_in_child(root)
    assert code == 1 and not rep["ok"]
    cl = [(p["path"], p["offset"]) for p in rep["problems"] if p["kind"] == "commitlog"]
    assert cl[0] == where
    # the walk went on after the damage: every record of the later files was read
    assert rep["end_offset"] > 3 * FILE
    assert rep["records"] >= len([o for o in offsets if o >= 2 * FILE])


# -- defect: a live log ends mid-record ------------------------------------------------------------------------


def _append_half_record(root, keep: int) -> int:
    """Write the first ``keep`` bytes of one more record after the last one (a writer or a replication
    transfer that has not finished it); its offset."""
    last = list(iter_commitlog(root))[-1]
    end = last.commit_log_offset + last.store_size
    raw = last.raw
    rec = bytearray(raw)
    struct.pack_into(">q", rec, 28, end)                        # PHYSICALOFFSET names its own place
    path = cl_path(root, end // FILE)
    with open(path, "r+b") as fh:
        fh.seek(end % FILE)
        fh.write(bytes(rec[:keep]))
    return end


@pytest.mark.parametrize("keep", [8, 40, 120])
def test_log_ending_mid_record_is_not_damage(tmp_path, keep):
    root = tmp_path / "s"
    offsets = make_store(root)
    _append_half_record(root, keep)
    assert [m.commit_log_offset for m in iter_commitlog(root)] == offsets
    rep = verify_store(root, **GEOMETRY)
    assert rep.ok, [str(p) for p in rep.problems]
    assert rep.records == len(offsets)


def test_damage_followed_by_valid_records_is_still_reported(tmp_path):
    root = tmp_path / "s"
    offsets = make_store(root)
    k = 50
    path = cl_path(root, offsets[k] // FILE)
    with open(path, "r+b") as fh:                              # TOTALSIZE of record k disagrees with its fields
        fh.seek(offsets[k] % FILE)
        fh.write(struct.pack(">i", 200))
    rep = verify_store(root, **GEOMETRY)
    first = rep.problems[0]
    assert (first.kind, first.path, first.offset) == ("commitlog", path, offsets[k])
    assert rep.records == len(offsets) - 1


# -- defect: a consume-queue folder named beyond 64 bits ------------------------------------------------------


def test_queue_id_of():
    from pystore.engine.verify import queue_id_of

    assert queue_id_of("0") == 0 and queue_id_of("17") == 17 and queue_id_of("-3") == -3
    for bad in ("99999999999999999999999", "2147483648", "--5", "-", "", "1e3", "٣", "x"):
        assert queue_id_of(bad) is None, bad


def test_queue_folder_beyond_64_bits_prints_no_traceback(tmp_path):
    root = tmp_path / "s"
    make_store(root, 20, 100)
    bad = os.path.join(str(root), "consumequeue", "TopicTest", "99999999999999999999999")
    os.makedirs(bad)
    with open(os.path.join(bad, "%020d" % 0), "wb") as fh:
        fh.write(bytes(640))
    rep = verify_store(root, **GEOMETRY)
    assert any(bad in n for n in rep.notes)
    assert rep.units_checked == 20
    code, out, err = verify_in_child(root)                     # asserts no traceback
    assert code in (0, 1)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pystore", "inspect", str(root), *OPTS], capture_output=True,
                       text=True, timeout=120, env=env)
    assert "Traceback" not in r.stderr + r.stdout
    assert r.returncode in (0, 1)
    if r.returncode:
        assert len(r.stderr.strip().splitlines()) <= 3    # one error line (rich may wrap it)


def test_verify_of_a_message_without_keys(tmp_path):
    root = tmp_path / "s"
    with MessageStore.open(root, **GEOMETRY) as s:
        s.put_message(Message("T", b"no keys"))
    assert verify_store(root).ok


# -- the suite's after-test check (tests/conftest.py) -----------------------------------------------------------


def test_after_test_check_finds_a_lying_unit_and_leaves_changed_files_alone(tmp_path):
    from conftest import _StoreWatch

    root = tmp_path / "s"
    with MessageStore.open(root, **GEOMETRY) as s:
        for i in range(10):
            s.put_message(make_message(i))
    before = _StoreWatch()
    before.shut_down(s)                                        # the files as the store left them
    assert before.problems() == []
    cq = os.path.join(str(root), "consumequeue", "TopicTest", "0", "%020d" % 0)
    with open(cq, "r+b") as fh:                                # unit 4's tags code
        fh.seek(4 * 20 + 12)
        fh.write((777).to_bytes(8, "big"))
    assert before.problems() == []                             # changed after the shutdown: not checked
    after = _StoreWatch()
    after.shut_down(s)                                         # as if the store had written it
    (found,) = after.problems()
    assert "tags code 777" in found and str(root) in found


def test_store_clock_going_back_is_not_an_index_problem(tmp_path):
    from conftest import FakeClock

    root = tmp_path / "s"
    clock = FakeClock()
    with MessageStore.open(root, clock=clock, **GEOMETRY) as s:
        s.put_message(make_message(0))
        clock.advance(-60_000)                                 # stored before its index file's start
        s.put_message(make_message(1))
    rep = verify_store(root, **GEOMETRY)
    assert rep.ok, [str(p) for p in rep.problems]
    assert rep.keys_out_of_window == 1 and rep.keys_checked == 2


def test_messages_older_than_the_index_are_not_index_problems(tmp_path):
    root = tmp_path / "s"
    with MessageStore.open(root, **dict(GEOMETRY, message_index_enable=False)) as s:
        for i in range(5):
            s.put_message(make_message(i))
    with MessageStore.open(root, **GEOMETRY) as s:
        for i in range(5, 8):
            s.put_message(make_message(i))
    rep = verify_store(root, **GEOMETRY)
    assert rep.ok, [str(p) for p in rep.problems]
    assert rep.keys_before_index == 5 and rep.keys_checked == 3


def test_truncated_last_file_is_damage_not_a_torn_tail(tmp_path):
    root = tmp_path / "s"
    offsets = make_store(root)
    last = sorted(os.listdir(os.path.join(str(root), "commitlog")))[-1]
    path = os.path.join(str(root), "commitlog", last)
    start = int(last)
    k = max(i for i, o in enumerate(offsets) if o >= start) - 1
    os.truncate(path, offsets[k] - start + 50)                # ends inside record k
    with pytest.raises(StoreCorruptedError) as ei:
        list(iter_commitlog(root))
    assert (ei.value.path, ei.value.offset) == (path, offsets[k])
