"""The timer store's files against RocketMQ 5's layouts (pystore/timer: TimerLog, TimerWheel, TimerCheckpoint;
RocketMQ store/timer TimerLog.java, TimerWheel.java, Slot.java, TimerCheckpoint.java, TimerMessageStore.java)."""

from __future__ import annotations

import os
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pystore.errors import StoreCorruptedError
from pystore.timer import (
    BLANK_MAGIC_CODE,
    EMPTY_SLOT,
    IGNORE,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_SIZE,
    TimerCheckpoint,
    TimerLog,
    TimerUnit,
    TimerWheel,
    checkpoint_path,
    encode_unit,
    precision_ms_of,
    roll_window_slots,
    timer_log_path,
    timer_wheel_path,
    topic_hash,
)
from pystore.timer.timer_checkpoint import CHECKPOINT_FILE_SIZE
from pystore.timer.timer_log import DEFAULT_FILE_SIZE, offset_for_last_unit
from pystore.timer.timer_wheel import DEFAULT_SLOTS_TOTAL, SLOT_SIZE

UNIT = ">iqiqiqiiq"             # size prevPos magic writeTimeMs delay commitLogOffset msgSize realTopicHash reserved
FILE = 300                      # 5 units (0..260), then a 40-byte blank: 52 + 16 > 300 - 260
PER_FILE = 5
NAME0 = "%020d" % 0


def java_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def unit(prev: int, i: int = 0, magic: int = MAGIC_DEFAULT, due: int = 10_000) -> bytes:
    return encode_unit(prev, magic, 1_000 + i, due, 4096 * (i + 1), 100 + i, topic_hash("T%d" % i))


def fill(tl: TimerLog, n: int) -> list[int]:
    """``n`` units all in one slot list, each linked to the one before."""
    out: list[int] = []
    for i in range(n):
        out.append(tl.append(unit(out[-1] if out else -1, i)))
    return out


@pytest.fixture
def tl(tmp_path):
    log = TimerLog.open(str(tmp_path / "timerlog"), FILE)
    yield log
    log.close()


def raw(path: str, pos: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(n)


def poke(path: str, pos: int, data: bytes) -> None:
    """Damage a file under an open log (the mapping is shared: the log sees it)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, pos)
    finally:
        os.close(fd)


# -- constants ---------------------------------------------------------------------------------------------------

def test_constants_are_rocketmqs():
    # Java: 0xBBCCDDEE ^ 1880681586 + 8, where + binds before ^
    assert BLANK_MAGIC_CODE == java_int(0xBBCCDDEE ^ (1880681586 + 8)) == -875286124
    assert UNIT_SIZE == struct.calcsize(UNIT) == 52
    assert (MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE) == (1, 2, 4)
    assert DEFAULT_FILE_SIZE == 100 * 1024 * 1024
    assert DEFAULT_SLOTS_TOTAL == 7 * 86400
    # getOffsetForLastUnit: the last unit a full file holds
    assert offset_for_last_unit(FILE) == (PER_FILE - 1) * UNIT_SIZE
    big = offset_for_last_unit(DEFAULT_FILE_SIZE)
    assert big % UNIT_SIZE == 0 and big + UNIT_SIZE + 16 <= DEFAULT_FILE_SIZE < big + 2 * UNIT_SIZE + 16
    assert topic_hash(None) == 0 and topic_hash("TopicA") == java_int(sum(ord(c) * 31 ** (5 - k) for k, c in
                                                                           enumerate("TopicA")))
    assert timer_log_path("/r") == "/r/timerlog" and timer_wheel_path("/r") == "/r/timerwheel"
    assert checkpoint_path("/r") == "/r/config/timercheck"


def test_precision_and_roll_window_rules():
    assert [precision_ms_of(v) for v in (1, 100, 199, 200, 499, 500, 999, 1000, 5000)] == \
        [100, 100, 100, 200, 200, 500, 500, 1000, 1000]
    assert roll_window_slots() == 2 * 86400
    assert roll_window_slots(1) == roll_window_slots(DEFAULT_SLOTS_TOTAL) == DEFAULT_SLOTS_TOTAL - 60
    assert roll_window_slots(2) == 2


# -- the timer log -----------------------------------------------------------------------------------------------

def test_a_unit_on_disk_field_by_field(tl):
    pos = tl.append(encode_unit(-1, MAGIC_DEFAULT | MAGIC_ROLL, 1_700_000_000_123, 1_700_000_060_000, 123_456, 321,
                                topic_hash("TopicA"), 0))
    assert pos == 0
    path = os.path.join(tl.store_path, NAME0)
    assert os.listdir(tl.store_path) == [NAME0] and os.path.getsize(path) == FILE
    assert struct.unpack(UNIT, raw(path, 0, 52)) == (
        52, -1, 3, 1_700_000_000_123, 59_877, 123_456, 321, topic_hash("TopicA"), 0)
    got = tl.read_unit(pos)
    assert got == TimerUnit(52, -1, 3, 1_700_000_000_123, 59_877, 123_456, 321, topic_hash("TopicA"), 0)
    assert got.delayed_time_ms == 1_700_000_060_000 and got.encode() == raw(path, 0, 52)
    assert raw(path, 52, FILE - 52) == bytes(FILE - 52)
    assert tl.max_offset == 52


def test_the_roll_writes_rocketmqs_blank(tl):
    pos = fill(tl, PER_FILE + 1)
    assert pos == [0, 52, 104, 156, 208, 300]
    first = os.path.join(tl.store_path, NAME0)
    assert sorted(os.listdir(tl.store_path)) == [NAME0, "%020d" % FILE]
    # size = what was left of the file, prevPos 0, the blank magic; zeros to the end
    assert struct.unpack(">iqi", raw(first, 260, 16)) == (FILE - 260, 0, BLANK_MAGIC_CODE)
    assert raw(first, 276, FILE - 276) == bytes(FILE - 276)
    assert struct.unpack(UNIT, raw(os.path.join(tl.store_path, "%020d" % FILE), 0, 52))[1] == 208


def test_a_slot_list_walks_back_across_files(tl):
    a: list[int] = []
    b: list[int] = []
    for i in range(3 * PER_FILE):
        lst = a if i % 3 else b
        lst.append(tl.append(unit(lst[-1] if lst else -1, i)))
    assert [p for p, _ in tl.walk(a[-1])] == a[::-1]
    assert [p for p, _ in tl.walk(b[-1])] == b[::-1]
    assert [u.commit_log_offset for _, u in tl.walk(b[-1])] == [4096 * (i + 1) for i in range(0, 15, 3)][::-1]
    assert list(tl.walk(-1)) == []


def test_append_refuses_what_is_not_a_unit(tl):
    with pytest.raises(ValueError):
        tl.append(b"\0" * 51)
    with pytest.raises(ValueError):
        tl.append(struct.pack(UNIT, 53, -1, 1, 0, 0, 0, 1, 0, 0))
    with pytest.raises(ValueError):
        tl.append(unit(0))                    # prevPos not before the unit (the log is empty)
    with pytest.raises(ValueError):
        encode_unit(-1, 1, 0, 1 << 31, 0, 1, 0)   # a delay past the int field


def test_recovery_finds_the_end_and_goes_on(tmp_path):
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    pos = fill(tl, 2 * PER_FILE + 2)
    end = tl.max_offset
    assert tl.flush() == end
    tl.close()
    seen: list[int] = []
    tl = TimerLog.open(path, FILE, last_flush_pos=end, on_unit=lambda p, u: seen.append(p))
    assert tl.max_offset == end == 2 * FILE + 2 * 52
    assert seen == pos[PER_FILE:]             # the scan starts one file before the flushed position
    assert tl.append(unit(pos[-1], 99)) == end
    assert [p for p, _ in tl.walk(end)] == [end] + pos[::-1]
    tl.close()


def test_recovery_of_a_full_last_file_goes_on_at_the_next_file(tmp_path):
    """The roll wrote the blank and made the next file, the flush synced the full file (the flushed position is the
    next file's start), and the next file never reached the disk: recovery goes on at the next file's start, as
    RocketMQ's (``position + size``), instead of refusing a log that lost nothing; the blank stays as it is."""
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    pos = fill(tl, PER_FILE)
    with tl.append_lock:
        tl.writable_tail()                     # the roll, no unit yet in the next file
    assert tl.flush() == FILE
    tl.close()
    os.unlink(os.path.join(path, "%020d" % FILE))      # as if the new file never reached the disk
    f0 = os.path.join(path, NAME0)
    before = raw(f0, 0, FILE)
    tl = TimerLog.open(path, FILE, last_flush_pos=FILE)
    assert tl.max_offset == FILE
    assert raw(f0, 0, FILE) == before          # the blank kept: nothing cut
    assert struct.unpack(">iqi", raw(f0, 260, 16)) == (40, 0, BLANK_MAGIC_CODE)
    assert tl.append(unit(pos[-1], 5)) == FILE         # the next append makes the next file
    assert [p for p, _ in tl.walk(FILE)] == [FILE] + pos[::-1]
    tl.close()


def test_an_empty_next_file_after_a_full_one_is_the_end(tmp_path):
    """The next file's name reached the disk, its size did not (an empty last file): the same end."""
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    fill(tl, PER_FILE)
    with tl.append_lock:
        tl.writable_tail()
    tl.flush()
    tl.close()
    with open(os.path.join(path, "%020d" % FILE), "wb"):
        pass
    tl = TimerLog.open(path, FILE, last_flush_pos=FILE)
    assert tl.max_offset == FILE
    tl.close()


def test_a_blank_that_does_not_reach_the_files_end_is_damage(tmp_path):
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    pos = fill(tl, PER_FILE + 1)               # the sixth rolled: the blank at 260
    end = tl.flush()
    tl.close()
    f0 = os.path.join(path, NAME0)
    poke(f0, 260, struct.pack(">i", 36))
    with pytest.raises(StoreCorruptedError) as e:
        TimerLog.open(path, FILE, last_flush_pos=end)
    assert e.value.path == f0 and e.value.offset == 260 and "a blank of 36 bytes where 40 remain" in str(e.value)
    # below the flushed position nothing is refused: the log is cut at the blank, the next append writes it again
    tl = TimerLog.open(path, FILE)
    assert tl.max_offset == 260
    assert tl.append(unit(pos[PER_FILE - 1], 7)) == FILE
    assert struct.unpack(">iqi", raw(f0, 260, 16)) == (40, 0, BLANK_MAGIC_CODE)
    tl.close()


def test_a_torn_tail_is_cut(tmp_path):
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    pos = fill(tl, 4)
    tl.flush()
    tl.close()
    f0 = os.path.join(path, NAME0)
    # the last unit's header reached the disk, the page with the rest of it did not
    poke(f0, pos[3] + 16, bytes(36))
    tl = TimerLog.open(path, FILE)
    assert tl.max_offset == pos[3]
    assert raw(f0, pos[3], FILE - pos[3]) == bytes(FILE - pos[3])      # zeroed from the cut
    assert [p for p, _ in tl.walk(pos[2])] == pos[2::-1]
    tl.close()


def test_recovery_refuses_a_cut_below_the_flushed_position(tmp_path):
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    pos = fill(tl, 4)
    end = tl.flush()
    tl.close()
    f0 = os.path.join(path, NAME0)
    poke(f0, pos[1], struct.pack(">i", 53))
    with pytest.raises(StoreCorruptedError) as e:
        TimerLog.open(path, FILE, last_flush_pos=end)
    assert e.value.path == f0 and e.value.offset == pos[1]
    assert raw(f0, pos[2], 52) != bytes(52)    # nothing was cut


def test_recovery_revises_the_wheel(tmp_path):
    path = str(tmp_path / "timerlog")
    tl = TimerLog.open(path, FILE)
    pos = fill(tl, 3)
    tl.flush()
    tl.close()
    wheel = TimerWheel(str(tmp_path / "timerwheel"), slots_total=16, precision_ms=1000)
    tl = TimerLog.open(path, FILE, on_unit=lambda p, u: wheel.revise_slot(u.delayed_time_ms, IGNORE, p, True))
    slot = wheel.get_slot(10_000)
    assert (slot.time_ms, slot.first_pos, slot.last_pos) == (10_000, pos[0], pos[2])
    assert [p for p, _ in tl.walk(slot.last_pos, slot_time_ms=10_000)] == pos[::-1]
    tl.close()
    wheel.close()


@pytest.mark.parametrize("field,value,reason", [
    (0, struct.pack(">i", 51), "size 51"),
    (12, struct.pack(">i", 0x10), "magic 16"),
    (12, struct.pack(">i", BLANK_MAGIC_CODE), "magic"),
    (36, struct.pack(">i", 0), "message size 0"),
])
def test_a_damaged_unit_is_refused(tl, field, value, reason):
    pos = fill(tl, 3)
    path = os.path.join(tl.store_path, NAME0)
    poke(path, pos[1] + field, value)
    with pytest.raises(StoreCorruptedError, match=reason) as e:
        list(tl.walk(pos[2]))
    assert (e.value.path, e.value.offset) == (path, pos[1])


def test_forward_links_and_loops_are_refused(tl):
    pos = fill(tl, PER_FILE + 2)
    f0 = os.path.join(tl.store_path, NAME0)
    # a loop: the unit at 52 links to 104, which links back to 52
    poke(f0, pos[1] + 4, struct.pack(">q", pos[2]))
    with pytest.raises(StoreCorruptedError, match="not before") as e:
        list(tl.walk(pos[2]))
    assert (e.value.path, e.value.offset) == (f0, pos[1])
    # a unit linked to itself
    poke(f0, pos[1] + 4, struct.pack(">q", pos[1]))
    with pytest.raises(StoreCorruptedError):
        list(tl.walk(pos[1]))
    # a link past the written log, a link to the middle of a unit, a negative link
    f1 = os.path.join(tl.store_path, "%020d" % FILE)
    for bad, where in ((tl.max_offset + 52, f1), (pos[0] + 10, f0), (-7, f1)):
        poke(f1, 52 + 4, struct.pack(">q", bad))
        with pytest.raises(StoreCorruptedError) as e:
            list(tl.walk(pos[-1]))
        assert e.value.path == where and e.value.offset in (pos[-1], bad)


def test_a_slot_past_the_end_is_refused(tl, tmp_path):
    pos = fill(tl, 2)
    with pytest.raises(StoreCorruptedError, match="past the timer log's end") as e:
        list(tl.walk(tl.max_offset))
    assert (e.value.path, e.value.offset) == (os.path.join(tl.store_path, NAME0), tl.max_offset)
    with pytest.raises(StoreCorruptedError, match="not a timer unit's position"):
        list(tl.walk(pos[1] + 1))
    wheel_file = str(tmp_path / "timerwheel")
    wheel = TimerWheel(wheel_file, slots_total=8, precision_ms=100)
    wheel.put_slot(1_000, pos[0], tl.max_offset + 52, 2, 0)
    with pytest.raises(StoreCorruptedError, match="past the timer log's end") as e:
        wheel.get_slot_checked(1_000, tl.max_offset)
    assert (e.value.path, e.value.offset) == (wheel_file, wheel.slot_index(1_000) * SLOT_SIZE)
    wheel.put_slot(1_000, pos[0], pos[1])
    assert wheel.get_slot_checked(1_000, tl.max_offset).last_pos == pos[1]
    wheel.close()


def test_a_walk_is_checked_against_its_slot(tl):
    a = tl.append(unit(-1, 0, due=10_000))
    b = tl.append(unit(a, 1, due=20_000))       # linked into the wrong slot's list
    with pytest.raises(StoreCorruptedError, match="in the list of the slot") as e:
        list(tl.walk(b, slot_time_ms=20_000, precision_ms=1000))
    assert e.value.offset == a


def test_cleaning_the_head(tl):
    pos = fill(tl, 3 * PER_FILE + 1)
    # deleteExpiredFileByOffsetForTimerLog: the last unit of file 0 points to 4096 * 5
    assert tl.delete_expired(4096 * 5) == 0
    assert tl.delete_expired(4096 * 5 + 1) == 1
    assert tl.min_offset == FILE
    assert [p for p, _ in tl.walk(pos[-1])] == pos[:PER_FILE - 1:-1]      # ends at the cleaned head
    assert tl.delete_files_before(2 * FILE - 1) == 0
    assert tl.delete_files_before(10 * FILE) == 2            # never the last file
    assert sorted(os.listdir(tl.store_path)) == ["%020d" % (3 * FILE)]


def test_a_file_of_another_size_is_refused(tmp_path):
    path = tmp_path / "timerlog"
    path.mkdir()
    (path / NAME0).write_bytes(bytes(FILE))
    (path / ("%020d" % FILE)).write_bytes(bytes(FILE + 1))
    with pytest.raises(StoreCorruptedError):
        TimerLog.open(str(path), FILE)


# -- the timer wheel ---------------------------------------------------------------------------------------------

def test_the_wheel_file_and_its_slots_byte_by_byte(tmp_path):
    path = str(tmp_path / "timerwheel")
    wheel = TimerWheel(path, slots_total=10, precision_ms=500)
    assert os.path.getsize(path) == 10 * 2 * 32 == wheel.wheel_length
    t = 1_700_000_012_345
    index = t // 500 % 20
    assert wheel.slot_index(t) == index
    assert wheel.get_slot(t) == EMPTY_SLOT
    wheel.put_slot(t, 52, 104, 2, 7)
    assert raw(path, index * 32, 32) == bytes(32)           # puts stay in memory until flushed
    wheel.flush()
    # the first field is time / precision (RocketMQ's compatibility with seconds)
    assert struct.unpack(">qqqii", raw(path, index * 32, 32)) == (t // 500, 52, 104, 2, 7)
    assert wheel.get_slot(t) == (t // 500 * 500, 52, 104, 2, 7)
    assert wheel.get_slot(t + 20 * 500) == EMPTY_SLOT        # same index, the next turn
    assert wheel.get_raw_slot(t + 20 * 500).first_pos == 52
    # the three-argument putSlot leaves num and magic
    wheel.put_slot(t, 0, 156)
    assert wheel.get_slot(t) == (t // 500 * 500, 0, 156, 2, 7)
    wheel.close()
    again = TimerWheel(path, slots_total=10, precision_ms=500)
    assert again.get_slot(t) == (t // 500 * 500, 0, 156, 2, 7)
    assert again.get_num(t) == 2 and again.get_all_num(t) == 2
    again.close()
    with pytest.raises(StoreCorruptedError, match="expected 320"):
        TimerWheel(path, slots_total=5, precision_ms=500)


def test_revise_slot_is_rocketmqs(tmp_path):
    wheel = TimerWheel(str(tmp_path / "w"), slots_total=4, precision_ms=1000)
    wheel.revise_slot(5_000, IGNORE, 52, False)
    assert wheel.get_slot(5_000) == EMPTY_SLOT
    wheel.put_slot(5_000, 0, 0, 1, 0)
    wheel.revise_slot(5_000, IGNORE, 52, False)
    assert wheel.get_slot(5_000) == (5_000, 0, 52, 1, 0)
    wheel.revise_slot(5_000, 104, IGNORE, False)
    assert wheel.get_slot(5_000) == (5_000, 104, 52, 1, 0)
    # force on a slot of another turn: first = last when first is IGNORE, num and magic untouched
    wheel.revise_slot(13_000, IGNORE, 208, True)
    assert wheel.get_slot(13_000) == (13_000, 208, 208, 1, 0) and wheel.get_slot(5_000) == EMPTY_SLOT
    wheel.close()


def test_scan_and_check_phy_pos(tmp_path):
    wheel = TimerWheel(str(tmp_path / "w"), slots_total=8, precision_ms=100)
    # 16 slots of 100 ms: 2_700 (index 11) is past the two turns that start at 1_000 (ticks 10 to 25)
    for i, t in enumerate((1_000, 1_300, 1_500, 2_700)):
        wheel.put_slot(t, 52 * i, 52 * i + 52, i + 1, 0)
    assert [s.time_ms for s in wheel.scan(1_000, 1_600)] == [1_000, 1_300, 1_500]
    assert [s.time_ms for s in wheel.scan(1_050, 1_500)] == [1_000, 1_300]   # the start is rounded down
    assert [s.time_ms for s in wheel.scan(100, 10**9)] == [1_000, 1_300, 1_500]  # two turns at most
    # RocketMQ's quirk: a new file's zeros are the slot of time 0 (real times are epoch milliseconds)
    assert wheel.get_slot(0) == (0, 0, 0, 0, 0)
    assert [s.time_ms for s in wheel.scan(2_000, 3_000)] == [2_700]
    assert wheel.check_phy_pos(1_000, 104) == 104 and wheel.check_phy_pos(1_000, 10**6) == (1 << 63) - 1
    assert wheel.get_all_num(1_000) == 1 + 2 + 3 and wheel.get_all_num(2_000) == 4
    wheel.close()


# -- the checkpoint ----------------------------------------------------------------------------------------------

def test_the_checkpoint_bytes_and_round_trip(tmp_path):
    root = str(tmp_path)
    path = checkpoint_path(root)
    cp = TimerCheckpoint(path, clock=lambda: 111)
    assert os.path.getsize(path) == CHECKPOINT_FILE_SIZE == 4096 and raw(path, 0, 4096) == bytes(4096)
    assert cp.data_version.timestamp == 111
    cp.last_read_time_ms = 1_700_000_000_000
    cp.last_timer_log_flush_pos = 5 * 52
    cp.last_timer_queue_offset = 42
    cp.master_timer_queue_offset = 43
    cp.update_data_version(9)
    cp.flush()
    assert struct.unpack(">7q", raw(path, 0, 56)) == (1_700_000_000_000, 260, 42, 43, 9, 111, 1)
    assert raw(path, 56, 4096 - 56) == bytes(4040) and os.path.getsize(path) == 4096
    assert cp.encode() == raw(path, 0, 56)
    again = TimerCheckpoint(path)
    assert again.encode() == cp.encode()
    assert TimerCheckpoint.decode(cp.encode()).encode() == cp.encode()
    old = TimerCheckpoint.decode(cp.encode()[:32])           # a master without the data version
    assert (old.last_read_time_ms, old.master_timer_queue_offset, old.data_version.counter) == (1_700_000_000_000, 43, 0)
    assert not os.path.exists(path + ".tmp")


def test_the_checkpoint_keeps_the_rest_of_the_page_and_reads_a_short_file(tmp_path):
    path = str(tmp_path / "timercheck")
    with open(path, "wb") as f:
        f.write(struct.pack(">4q", 7, 8, 9, 10))             # 32 bytes: the rest reads as zeros
    cp = TimerCheckpoint(path)
    assert cp.encode() == struct.pack(">7q", 7, 8, 9, 10, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(bytes(56) + b"\x01" * (4096 - 56))
    cp = TimerCheckpoint(path)
    cp.last_read_time_ms = 5
    cp.flush()
    assert raw(path, 56, 4040) == b"\x01" * 4040 and struct.unpack(">q", raw(path, 0, 8)) == (5,)
    assert not os.path.exists(str(tmp_path / "missing")) and TimerCheckpoint(str(tmp_path / "missing"),
                                                                             read_only=True).last_read_time_ms == 0
    assert not os.path.exists(str(tmp_path / "missing"))


# -- every slot's list, whatever the order of the units ----------------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(0, 40))
def test_each_slot_walks_back_to_exactly_its_units(slots, delete_flag):
    precision = 1000
    times = [10_000 + precision * k for k in range(6)]
    with tempfile.TemporaryDirectory() as d:
        tl = TimerLog.open(os.path.join(d, "timerlog"), FILE)
        wheel = TimerWheel(os.path.join(d, "timerwheel"), slots_total=8, precision_ms=precision)
        mine: dict[int, list[int]] = {t: [] for t in times}
        for i, k in enumerate(slots):
            t = times[k]
            slot = wheel.get_slot(t)                          # TimerMessageStore.doEnqueue
            delete = i == delete_flag
            pos = tl.append(encode_unit(slot.last_pos, MAGIC_DEFAULT | (MAGIC_DELETE if delete else 0), 5_000 + i,
                                        t, 1 << 20 | i, 10 + i, 0))
            wheel.put_slot(t, pos if slot.first_pos == -1 else slot.first_pos, pos,
                           slot.num - 1 if delete else slot.num + 1, slot.magic)
            mine[t].append(pos)
        for t in times:
            slot = wheel.get_slot_checked(t, tl.max_offset)
            if not mine[t]:
                assert slot == EMPTY_SLOT
                continue
            walked = list(tl.walk(slot.last_pos, slot_time_ms=t, precision_ms=precision))
            assert [p for p, _ in walked] == mine[t][::-1]
            assert slot.first_pos == mine[t][0]
            deleted_here = delete_flag < len(slots) and times[slots[delete_flag]] == t
            assert slot.num == len(mine[t]) - (2 if deleted_here else 0)      # a delete marker counts -1
        # the same lists after a reopen whose recovery rebuilds the wheel's last positions
        end = tl.flush()
        tl.close()
        fresh = TimerWheel(os.path.join(d, "fresh"), slots_total=8, precision_ms=precision)
        tl = TimerLog.open(os.path.join(d, "timerlog"), FILE, last_flush_pos=end,
                           on_unit=lambda p, u: fresh.revise_slot(u.delayed_time_ms, IGNORE, p, True))
        assert tl.max_offset == end
        scanned_from = max(0, end - FILE) // FILE * FILE      # recovery starts one file before the flushed end
        for t in times:
            if mine[t] and mine[t][-1] >= scanned_from:
                assert fresh.get_slot(t).last_pos == mine[t][-1]
                assert [p for p, _ in tl.walk(fresh.get_slot(t).last_pos)] == mine[t][::-1]
            else:
                assert fresh.get_slot(t) == EMPTY_SLOT
        tl.close()
        wheel.close()
        fresh.close()
