"""pystore.tools.iter_commitlog over folders, single files and store roots, on live stores and on
commit logs written without pystore (a struct-based writer below, docs/format.md §1.2-1.8)."""

from __future__ import annotations

import collections
import ipaddress
import os
import struct
import zlib

import pytest
from conftest import SMALL_FILE, make_message

from pystore import tools
from pystore.errors import FileCleanedError, StoreCorruptedError, StoreError
from pystore.tools import commit_log_files, iter_commitlog, iter_consume_queue

MAGIC_V1, MAGIC_V2, BLANK_MAGIC = 0xDAA320A7, 0xDAA320AB, 0xCBD43194
FILE = 4096


# -- a RocketMQ commit-log writer that does not use pystore ----------------------------------------


def host_bytes(host: tuple[str, int]) -> tuple[bytes, bool]:
    ip = ipaddress.ip_address(host[0])
    return ip.packed + struct.pack(">i", host[1]), ip.version == 6


def props_text(props: dict[str, str]) -> bytes:
    return "".join("%s\x01%s\x02" % kv for kv in props.items()).encode()


def encode(topic: str, body: bytes, props: dict[str, str] | bytes, *, phy: int, queue_id: int = 0,
           flag: int = 0, queue_offset: int = 0, sys_flag: int = 0, born_ts: int = 1_700_000_000_000,
           born_host=("127.0.0.1", 50000), store_ts: int = 1_700_000_000_100,
           store_host=("192.168.0.1", 10911), reconsume: int = 0, prepared: int = 0,
           version: int | None = None, crc: int | None = None) -> bytes:
    """One record, field by field (docs/format.md §1.2)."""
    t = topic.encode()
    p = props if isinstance(props, bytes) else props_text(props)
    bh, bv6 = host_bytes(born_host)
    sh, sv6 = host_bytes(store_host)
    sys_flag |= (0x10 if bv6 else 0) | (0x20 if sv6 else 0)
    v2 = version == 2 or (version is None and len(topic) > 127)
    crc = zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc
    size = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(bh) + 8 + len(sh) + 4 + 8 + 4 + len(body) \
        + (2 if v2 else 1) + len(t) + 2 + len(p)
    rec = struct.pack(">iIiiiqqiq", size, MAGIC_V2 if v2 else MAGIC_V1, crc, queue_id, flag, queue_offset,
                      phy, sys_flag, born_ts)
    rec += bh + struct.pack(">q", store_ts) + sh + struct.pack(">iqi", reconsume, prepared, len(body)) + body
    rec += (struct.pack(">h", len(t)) if v2 else struct.pack(">b", len(t))) + t
    rec += struct.pack(">h", len(p)) + p
    assert len(rec) == size
    return rec


class CommitLogWriter:
    """Builds RocketMQ commit-log files: records in order, an 8-byte blank where the next one does not fit
    (RocketMQ's maxBlank rule: record + 8 must fit), 20-digit names. ``tail`` fills what follows each
    blank header (4.9+/5.x: zeros; 4.8: stale bytes)."""

    def __init__(self, folder, file_size: int = FILE, first_offset: int = 0, tail: bytes = b"") -> None:
        self.folder = str(folder)
        self.file_size = file_size
        self.tail = tail
        self.files: list[bytearray] = [bytearray()]
        self.first_offset = first_offset
        self.records: list[tuple[int, dict]] = []      # (phy offset, fields)

    @property
    def file_start(self) -> int:
        return self.first_offset + (len(self.files) - 1) * self.file_size

    def add(self, topic: str = "TopicTest", body: bytes = b"body", props=None, **fields) -> int:
        props = {} if props is None else props
        size = len(encode(topic, body, props, phy=0, **fields))
        cur = self.files[-1]
        if size + 8 > self.file_size - len(cur):
            self._close_file()
            cur = self.files[-1]
        phy = self.file_start + len(cur)
        cur += encode(topic, body, props, phy=phy, **fields)
        self.records.append((phy, dict(fields, topic=topic, body=body, props=props, size=size)))
        return phy

    def _close_file(self) -> None:
        cur = self.files[-1]
        left = self.file_size - len(cur)
        cur += struct.pack(">iI", left, BLANK_MAGIC)
        if self.tail:
            cur += (self.tail * (left // len(self.tail) + 1))[:left - 8]
        else:
            cur += bytes(left - 8)
        self.files.append(bytearray())

    def write(self) -> list[str]:
        os.makedirs(self.folder, exist_ok=True)
        paths = []
        for k, data in enumerate(self.files):
            path = os.path.join(self.folder, "%020d" % (self.first_offset + k * self.file_size))
            with open(path, "wb") as fh:
                fh.write(bytes(data) + bytes(self.file_size - len(data)))
            paths.append(path)
        return paths


def check_fields(m, phy: int, f: dict) -> None:
    assert m.commit_log_offset == phy
    assert m.topic == f["topic"]
    assert m.body == f["body"]
    assert m.store_size == f["size"]
    assert m.properties == f["props"]
    assert m.queue_id == f.get("queue_id", 0)
    assert m.flag == f.get("flag", 0)
    assert m.queue_offset == f.get("queue_offset", 0)
    assert m.born_timestamp == f.get("born_ts", 1_700_000_000_000)
    assert m.store_timestamp == f.get("store_ts", 1_700_000_000_100)
    born = f.get("born_host", ("127.0.0.1", 50000))
    store = f.get("store_host", ("192.168.0.1", 10911))
    assert m.born_host == (ipaddress.ip_address(born[0]).compressed, born[1])
    assert m.store_host == (ipaddress.ip_address(store[0]).compressed, store[1])
    v6 = (0x10 if ":" in born[0] else 0) | (0x20 if ":" in store[0] else 0)
    assert m.sys_flag == f.get("sys_flag", 0) | v6
    assert m.reconsume_times == f.get("reconsume", 0)
    assert m.prepared_transaction_offset == f.get("prepared", 0)
    assert m.body_crc == zlib.crc32(f["body"]) & 0x7FFFFFFF
    sh, _ = host_bytes(store)
    assert m.msg_id == (sh + struct.pack(">q", phy)).hex().upper()


def test_hexdump_vector_of_format_md(tmp_path):
    """docs/format.md §1.2's worked hexdump (a record as RocketMQ's MessageDecoder.encode writes it)."""
    rec = bytes.fromhex(
        "0000009b daa320a7 248c774f 00000000"
        "00000000 00000000 00000000 00000000"
        "00000000 00000000 0000018b cfe56800"
        "7f000001 0000c350 0000018b cfe56864"
        "c0a80001 00002a9f 00000000 00000000"
        "00000000 00000010".replace(" ", "")
    ) + b"Hello RocketMQ 0" + b"\x09TopicTest" + b"\x00\x27" \
        + b"a\x011\x02KEYS\x01key0\x02UNIQ_KEY\x01UNIQ0\x02TAGS\x01TagA\x02"
    assert len(rec) == 155
    props = {"a": "1", "KEYS": "key0", "UNIQ_KEY": "UNIQ0", "TAGS": "TagA"}
    assert rec == encode("TopicTest", b"Hello RocketMQ 0", props, phy=0)       # the writer agrees
    path = tmp_path / ("%020d" % 0)
    path.write_bytes(rec + bytes(FILE - len(rec)))
    (m,) = list(iter_commitlog(path))
    check_fields(m, 0, dict(topic="TopicTest", body=b"Hello RocketMQ 0", props=props, size=155))
    assert (m.tags, m.keys, m.uniq_key) == ("TagA", ["key0"], "UNIQ0")
    assert m.body_crc == 0x248C774F
    assert m.msg_id == "C0A8000100002A9F0000000000000000"


def build_foreign(folder, tail: bytes = b"") -> CommitLogWriter:
    w = CommitLogWriter(folder, tail=tail)
    w.add(body=b"plain v1", props={"TAGS": "TagA", "KEYS": "k1 k2"}, queue_offset=0,
          store_ts=1_700_000_000_200)
    w.add(body=b"", props={}, queue_id=3, flag=-7, queue_offset=0, reconsume=2)
    w.add(body=b"from v6", born_host=("2001:db8::7", 4321), queue_offset=1, props={"UNIQ_KEY": "U1"})
    w.add(topic="%RETRY%" + "g" * 150, body=b"long topic", props={"REAL_TOPIC": "T"})      # V2 record
    w.add(body=b"v6 store host", store_host=("fe80::1", 10911), sys_flag=0x8, prepared=1234)
    w.add(body=bytes(range(256)) * 6, queue_offset=2)
    for i in range(16):                                  # roll into a third file
        w.add(topic="T%d" % (i % 3), body=b"m%d" % i * 150, queue_id=i % 2, queue_offset=i,
              props={"TAGS": "t%d" % i, "KEYS": "key%d" % i, "WAIT": "false"})
    assert len(w.files) >= 3
    w.write()
    return w


@pytest.mark.parametrize("tail", [b"", b"\x00\x00\x00\x9b\xda\xa3\x20\xa7garbage"], ids=["zeros", "stale"])
def test_foreign_commit_log_decodes_every_field(tmp_path, tail):
    w = build_foreign(tmp_path / "commitlog", tail)
    got = list(iter_commitlog(tmp_path / "commitlog"))
    assert len(got) == len(w.records)
    for m, (phy, f) in zip(got, w.records):
        check_fields(m, phy, f)
    assert got[3].version == 2 and got[3].magic_code == MAGIC_V2 - (1 << 32)
    assert got[0].version == 1
    assert got[2].born_host == ("2001:db8::7", 4321) and got[2].sys_flag & 0x10
    assert got[4].store_host == ("fe80::1", 10911) and len(got[4].msg_id) == 56
    assert got[0].keys == ["k1", "k2"]
    assert got[1].body == b"" and got[1].body_crc == 0


def test_foreign_commit_log_from_a_store_root(tmp_path):
    w = build_foreign(tmp_path / "broker" / "store" / "commitlog")
    (tmp_path / "broker" / "store" / "consumequeue" / "T" / "0").mkdir(parents=True)
    (tmp_path / "broker" / "store" / "checkpoint").write_bytes(bytes(4096))
    got = list(iter_commitlog(tmp_path / "broker" / "store"))
    assert [m.commit_log_offset for m in got] == [phy for phy, _ in w.records]


def test_single_file(tmp_path):
    w = build_foreign(tmp_path / "cl")
    second = os.path.join(w.folder, "%020d" % FILE)
    got = list(iter_commitlog(second))
    expected = [phy for phy, _ in w.records if FILE <= phy < 2 * FILE]
    assert expected and [m.commit_log_offset for m in got] == expected


def test_folder_starting_at_a_non_zero_offset(tmp_path):
    w = CommitLogWriter(tmp_path / "cl", first_offset=5 * FILE)
    for i in range(60):
        w.add(body=b"x%d" % i * 10, queue_offset=i)
    w.write()
    got = list(iter_commitlog(tmp_path / "cl"))
    assert [m.commit_log_offset for m in got] == [phy for phy, _ in w.records]
    assert got[0].commit_log_offset == 5 * FILE


def test_start_offset(tmp_path):
    w = build_foreign(tmp_path / "cl")
    phys = [phy for phy, _ in w.records]
    for k in (0, 1, 5, 8, len(phys) - 1):
        got = [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl", start_offset=phys[k])]
        assert got == phys[k:]
    assert list(iter_commitlog(tmp_path / "cl", start_offset=len(w.files) * FILE)) == []
    assert [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl", start_offset=FILE)] == \
        [p for p in phys if p >= FILE]


def test_start_offset_before_the_first_file(tmp_path):
    w = CommitLogWriter(tmp_path / "cl", first_offset=2 * FILE)
    for i in range(3):
        w.add(body=b"%d" % i)
    w.write()
    assert len(list(iter_commitlog(tmp_path / "cl", start_offset=0))) == 3


def test_missing_and_empty_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(iter_commitlog(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    assert list(iter_commitlog(tmp_path / "empty")) == []


def test_zero_length_and_foreign_files_are_skipped(tmp_path):
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(3):
        w.add(body=b"%d" % i)
    w.write()
    (tmp_path / "cl" / ("%020d" % FILE)).write_bytes(b"")          # creation interrupted
    (tmp_path / "cl" / "notes.txt").write_bytes(b"\xda\xa3\x20\xa7")
    assert [m.body for m in iter_commitlog(tmp_path / "cl")] == [b"0", b"1", b"2"]


# -- corruption ------------------------------------------------------------------------------------


def _flip(path: str, pos: int, bit: int = 0x01) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ bit]))


def test_crc_bit_flip_raises_with_path_and_absolute_offset(tmp_path):
    w = build_foreign(tmp_path / "cl")
    k = next(i for i, (phy, f) in enumerate(w.records) if phy >= FILE + 100 and f["body"])
    phy, f = w.records[k]
    path = os.path.join(w.folder, "%020d" % (phy - phy % FILE))
    tail_len = 2 + len(props_text(f["props"])) + 1 + len(f["topic"])          # a V1 record
    body_pos = phy % FILE + f["size"] - tail_len - len(f["body"])
    _flip(path, body_pos + len(f["body"]) // 2, 0x10)
    seen = []
    with pytest.raises(StoreCorruptedError) as ei:
        for m in iter_commitlog(tmp_path / "cl"):
            seen.append(m.commit_log_offset)
    err = ei.value
    assert isinstance(err, StoreError)
    assert err.path == path
    assert err.offset == phy                                        # file start + position
    assert path in str(err) and str(phy) in str(err)
    assert seen == [p for p, _ in w.records[:k]]                    # never yielded
    got = list(iter_commitlog(tmp_path / "cl", verify_crc=False))
    assert len(got) == len(w.records)
    assert got[k].commit_log_offset == phy and got[k].body != f["body"]
    assert got[k].body_crc == zlib.crc32(f["body"]) & 0x7FFFFFFF     # as stored


def test_crc_error_in_the_first_record_of_a_file(tmp_path):
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(40):
        w.add(body=b"payload-%d" % i)
    w.write()
    phy, f = next((p, f) for p, f in w.records if p == FILE)
    path = os.path.join(w.folder, "%020d" % FILE)
    _flip(path, f["size"] - 2 - 1 - len("TopicTest") - 1, 0x80)     # last body byte
    with pytest.raises(StoreCorruptedError) as ei:
        list(iter_commitlog(tmp_path / "cl"))
    assert (ei.value.path, ei.value.offset) == (path, FILE)
    with pytest.raises(StoreCorruptedError):
        list(iter_commitlog(tmp_path / "cl", start_offset=FILE))
    assert len(list(iter_commitlog(tmp_path / "cl", start_offset=FILE, verify_crc=False))) == \
        len([p for p, _ in w.records if p >= FILE])


@pytest.mark.parametrize("verify", [True, False])
def test_bad_magic_is_corruption_either_way(tmp_path, verify):
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(5):
        w.add(body=b"b%d" % i)
    w.write()
    phy = w.records[2][0]
    path = os.path.join(w.folder, "%020d" % 0)
    _flip(path, phy + 4 + 3, 0xFF)                                  # the magic's last byte
    seen = []
    with pytest.raises(StoreCorruptedError) as ei:
        for m in iter_commitlog(tmp_path / "cl", verify_crc=verify):
            seen.append(m.body)
    assert ei.value.offset == phy and ei.value.path == path
    assert seen == [b"b0", b"b1"]


def test_file_without_a_blank_while_later_files_hold_data(tmp_path):
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(80):
        w.add(body=b"n%d" % i * 20)
    w.write()
    assert len(w.files) >= 3
    first = os.path.join(w.folder, "%020d" % 0)
    end0 = max(p + f["size"] for p, f in w.records if p < FILE)
    with open(first, "r+b") as fh:                                  # the blank was never written
        fh.seek(end0)
        fh.write(bytes(8))
    in0 = [p for p, _ in w.records if p < FILE]
    seen = []
    with pytest.raises(StoreCorruptedError) as ei:
        for m in iter_commitlog(tmp_path / "cl", verify_crc=True):
            seen.append(m.commit_log_offset)
    assert seen == in0
    assert ei.value.path == first and ei.value.offset == end0
    got = [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl", verify_crc=False)]
    assert got == [p for p, _ in w.records]                         # skipped to the next file


def test_last_file_without_a_blank_is_the_normal_end(tmp_path):
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(30):
        w.add(body=b"q%d" % i * 30)
    w.write()
    assert len(list(iter_commitlog(tmp_path / "cl"))) == 30


@pytest.mark.parametrize("verify", [True, False])
def test_torn_last_record_ends_the_iteration(tmp_path, verify):
    """A record whose TOTALSIZE runs past the file, with nothing valid after it: a torn tail, the end of
    the data (as recovery judges it); with a record after it, corruption with the file and offset."""
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(3):
        w.add(body=b"t%d" % i)
    w.write()
    path = os.path.join(w.folder, "%020d" % 0)
    last = w.records[-1][0]
    with open(path, "r+b") as fh:
        fh.seek(last)
        fh.write(struct.pack(">i", FILE * 2))
    assert [m.body for m in iter_commitlog(tmp_path / "cl", verify_crc=verify)] == [b"t0", b"t1"]
    w.write()
    mid = w.records[1][0]
    with open(path, "r+b") as fh:
        fh.seek(mid)
        fh.write(struct.pack(">i", FILE * 2))
    with pytest.raises(StoreCorruptedError) as ei:                    # valid t2 follows: damage
        list(iter_commitlog(tmp_path / "cl", verify_crc=verify))
    assert (ei.value.path, ei.value.offset) == (path, mid)


def _cut_mid_record(w, path: str, k: int, keep: int) -> int:
    """Zero record ``k`` from its ``keep``-th byte on and everything after it in its file (a writer or a
    replication transfer stopped there); the record's offset."""
    phy = w.records[k][0]
    with open(path, "r+b") as fh:
        fh.seek(phy % FILE + keep)
        fh.write(bytes(FILE - phy % FILE - keep))
    return phy


@pytest.mark.parametrize("keep", [4, 30, 60, 93], ids=["size-only", "header", "lengths", "in-body"])
@pytest.mark.parametrize("verify", [True, False])
def test_log_ending_mid_record_ends_the_iteration(tmp_path, keep, verify):
    if keep == 93 and not verify:
        pytest.skip("zeros at a body's end pass every check but the CRC")
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(30):
        w.add(body=b"r%d-" % i * 12)
    w.write()
    k = max(i for i, (p, _) in enumerate(w.records) if p >= FILE)    # the last record, in the second file
    path = os.path.join(w.folder, "%020d" % FILE)
    _cut_mid_record(w, path, k, keep)
    for later in sorted(os.listdir(w.folder))[2:]:                    # a preallocated, empty next file
        with open(os.path.join(w.folder, later), "wb") as fh:
            fh.write(bytes(FILE))
    got = [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl", verify_crc=verify)]
    assert got == [p for p, _ in w.records[:k]]


def test_crc_mismatch_at_the_tail_ends_it_and_in_the_middle_raises(tmp_path):
    w = CommitLogWriter(tmp_path / "cl")
    for i in range(10):
        w.add(body=b"c%d-" % i * 10)
    w.write()
    path = os.path.join(w.folder, "%020d" % 0)
    last, f = w.records[-1]
    body_pos = last + f["size"] - (2 + 1 + len("TopicTest")) - len(f["body"])
    _flip(path, body_pos + 3, 0x04)                                   # only zeros after it
    assert [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl")] == [p for p, _ in w.records[:-1]]
    assert len(list(iter_commitlog(tmp_path / "cl", verify_crc=False))) == 10
    w.add(body=b"after")                                              # now a valid record follows it
    w.files[0][:last] = open(path, "rb").read()[:last]
    w.write()
    _flip(path, body_pos + 3, 0x04)
    seen = []
    with pytest.raises(StoreCorruptedError) as ei:
        for m in iter_commitlog(tmp_path / "cl"):
            seen.append(m.commit_log_offset)
    assert (ei.value.path, ei.value.offset) == (path, last)
    assert seen == [p for p, _ in w.records[:-2]]                    # never yielded


def test_record_finished_by_a_live_writer_is_read_on(tmp_path, monkeypatch):
    """A reader meets a record being written, and by the time it looks past it the writer has finished it
    and appended more: it reads the whole record and goes on."""
    import pystore.tools as tools

    w = CommitLogWriter(tmp_path / "cl")
    for i in range(6):
        w.add(body=b"w%d-" % i * 10)
    (path, *_) = w.write()
    good = open(path, "rb").read()
    k = 3
    _cut_mid_record(w, path, k, 30)
    real = tools._valid_after

    def writer_finishes(*args):
        with open(path, "r+b") as fh:
            fh.write(good)
        return real(*args)

    monkeypatch.setattr(tools, "_valid_after", writer_finishes)
    assert [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl")] == [p for p, _ in w.records]


def _log_of_files(tmp_path, n_files: int = 4):
    w = CommitLogWriter(tmp_path / "cl")
    i = 0
    while len(w.files) <= n_files:
        w.add(body=b"f%d-" % i * 20)
        i += 1
    w.files.pop()
    w.records = [(p, f) for p, f in w.records if p < n_files * FILE]
    return w, w.write()


@pytest.mark.parametrize("case", ["missing", "short", "short-at-a-record", "grown"])
def test_wrong_file_sequence_is_reported_and_the_walk_resumes(tmp_path, case):
    w, paths = _log_of_files(tmp_path)
    victim = paths[1]
    if case == "missing":
        os.remove(victim)
        where = (victim, FILE)
    elif case == "short":
        os.truncate(victim, FILE // 2)
        cut = max(p for p, _ in w.records if p < FILE + FILE // 2)
        where = (victim, cut)
    elif case == "short-at-a-record":
        end = next(p for p, _ in w.records if p >= FILE + FILE // 2)
        os.truncate(victim, end - FILE)
        where = (victim, end)
    else:
        with open(victim, "ab") as fh:
            fh.write(bytes(1000))
        where = (victim, 2 * FILE)
    with pytest.raises(StoreCorruptedError) as ei:
        list(iter_commitlog(tmp_path / "cl"))
    assert (ei.value.path, ei.value.offset) == where
    # a restart after the damage goes on (verify's walk depends on it), in bounded time
    rest = [m.commit_log_offset for m in iter_commitlog(tmp_path / "cl", start_offset=2 * FILE)]
    assert rest == [p for p, _ in w.records if p >= 2 * FILE]


# -- pystore stores --------------------------------------------------------------------------------


def test_iter_over_a_live_store(store_factory):
    s = store_factory()
    results = [s.put_message(make_message(i, body_size=2000, queue_id=i % 3)) for i in range(50)]
    assert s.get_max_phy_offset() > SMALL_FILE
    cl = os.path.join(s.root, "commitlog")
    before = sorted(os.listdir(cl))
    got = list(iter_commitlog(s.root))                              # writer still open
    assert [m.commit_log_offset for m in got] == [r.append_message_result.wrote_offset for r in results]
    assert [m.queue_offset for m in got] == [i // 3 for i in range(50)]
    assert got[7].body == make_message(7, body_size=2000).body
    more = [s.put_message(make_message(100 + i)) for i in range(5)]
    got2 = list(iter_commitlog(cl, start_offset=more[0].append_message_result.wrote_offset))
    assert [m.body for m in got2] == [b"Hello RocketMQ %d" % (100 + i) for i in range(5)]
    assert s.put_message(make_message(200)).is_ok()                # no lock was taken
    assert sorted(os.listdir(cl))[:len(before)] == before
    store_factory.expect_messages(56)


def test_iter_over_a_store_single_file_and_start_offset(store_factory):
    s = store_factory()
    results = [s.put_message(make_message(i, body_size=3000)) for i in range(50)]
    s.shutdown()
    second = os.path.join(s.root, "commitlog", "%020d" % SMALL_FILE)
    in_second = [r.append_message_result.wrote_offset for r in results
                 if SMALL_FILE <= r.append_message_result.wrote_offset < 2 * SMALL_FILE]
    assert [m.commit_log_offset for m in iter_commitlog(second)] == in_second
    mid = results[20].append_message_result.wrote_offset
    assert [m.commit_log_offset for m in iter_commitlog(s.root, start_offset=mid)] == \
        [r.append_message_result.wrote_offset for r in results[20:]]
    store_factory.expect_messages(50)


def test_iter_commitlog_writes_nothing(store_factory):
    s = store_factory()
    for i in range(30):
        s.put_message(make_message(i, body_size=3000))
    s.shutdown()
    state = {}
    for folder, _, files in os.walk(s.root):
        for n in files:
            st = os.stat(os.path.join(folder, n))
            state[os.path.join(folder, n)] = (st.st_size, st.st_mtime_ns)
    assert len(list(iter_commitlog(s.root))) == 30
    after = {}
    for folder, _, files in os.walk(s.root):
        for n in files:
            st = os.stat(os.path.join(folder, n))
            after[os.path.join(folder, n)] = (st.st_size, st.st_mtime_ns)
    assert after == state
    store_factory.expect_messages(30)


def test_iter_over_a_multi_folder_commit_log(store_factory, tmp_path):
    a, b = tmp_path / "d1", tmp_path / "d2"
    s = store_factory(store_path_commit_log="%s;%s" % (a, b))
    bodies = [make_message(i, body_size=4000).body for i in range(40)]
    for i in range(40):
        s.put_message(make_message(i, body_size=4000))
    s.shutdown()
    assert [m.body for m in iter_commitlog([a, b])] == bodies      # both folders, merged in offset order
    with pytest.raises(StoreCorruptedError):                       # one folder alone has holes
        list(iter_commitlog(a))
    store_factory.expect_messages(40)


def test_multi_folder_commit_log_given_as_any_sequence(store_factory, tmp_path):
    # the signature takes a Sequence of folders: not only a list or a tuple
    a, b = tmp_path / "d1", tmp_path / "d2"
    s = store_factory(store_path_commit_log="%s;%s" % (a, b))
    for i in range(40):
        s.put_message(make_message(i, body_size=4000))
    s.shutdown()
    folders = collections.UserList([a, b])
    assert [m.body for m in iter_commitlog(folders)] == [make_message(i, body_size=4000).body for i in range(40)]
    store_factory.expect_messages(40)


# -- a live store whose cleaning deletes the log's head under an iteration -------------------------------


HOUR = 3_600_000


def _cleaned_store(store_factory, fake_clock, n=400):
    """A started store of ~6 commit-log files (and 7 consume-queue files) whose next cleaning pass deletes every
    commit-log file but the last, and the consume-queue files that only point below it."""
    s = store_factory(clock=fake_clock, mapped_file_size_consume_queue=20 * 64, delete_commit_log_files_interval=0,
                      delete_consume_queue_files_interval=0, clean_resource_interval=HOUR,
                      disk_usage=lambda path: 0.10)
    store_factory.skip_check()
    for i in range(n):
        assert s.put_message(make_message(i, body_size=1000)).is_ok()
    s.flush()
    folder = os.path.join(s.root, "commitlog")
    t = (fake_clock() - 73 * HOUR) / 1000
    for name in os.listdir(folder):
        os.utime(os.path.join(folder, name), (t, t))
    s.execute_delete_files_manually()
    return s


def _clean(s):
    files = sorted(os.listdir(os.path.join(s.root, "commitlog")))
    deleted, _ = s.clean_files()
    assert deleted >= 4
    return files


def test_iter_commitlog_raises_a_typed_error_at_a_file_cleaned_after_records_were_yielded(store_factory, fake_clock):
    """Cleaning deletes the next files while the iteration is in the first: the records of those files are gone;
    the iteration says so at the first of them (a ``FileCleanedError`` naming it) instead of a bare
    ``FileNotFoundError``, and never goes on with a later file past the records it could not read."""
    s = _cleaned_store(store_factory, fake_clock)
    it = iter_commitlog(s.root)
    first = next(it)
    assert first.commit_log_offset == 0
    files = _clean(s)
    rest = []
    with pytest.raises(FileCleanedError) as ei:
        for m in it:
            rest.append(m)
    assert isinstance(ei.value, StoreError)
    # the file being read when cleaning ran is read to its end (its mapping stays valid); the next one is named
    assert ei.value.path == os.path.join(s.root, "commitlog", files[1]) and ei.value.offset == int(files[1])
    assert len(rest) > 0 and all(m.commit_log_offset < int(files[1]) for m in rest)


def test_iter_commitlog_cleaned_before_its_first_message_begins_at_the_oldest_file_left(store_factory, fake_clock,
                                                                                       monkeypatch):
    """Files cleaned after the iteration listed them but before its first message: it starts at the log's new
    head, as an iteration begun after the cleaning does (nothing yielded yet, so nothing skipped in the middle)."""
    s = _cleaned_store(store_factory, fake_clock)
    listed = []

    def list_then_clean(path):
        listed.extend(commit_log_files(path))
        _clean(s)
        return list(listed)

    monkeypatch.setattr(tools, "commit_log_files", list_then_clean)
    got = [m.commit_log_offset for m in iter_commitlog(s.root)]
    monkeypatch.undo()
    assert len(listed) >= 5 and not os.path.exists(listed[0])
    after = [m.commit_log_offset for m in iter_commitlog(s.root)]
    assert got == after and got[0] == s.get_min_phy_offset() > int(os.path.basename(listed[1]))


def test_iter_consume_queue_raises_a_typed_error_at_a_file_cleaned_after_units_were_yielded(store_factory,
                                                                                             fake_clock):
    s = _cleaned_store(store_factory, fake_clock)
    folder = os.path.join(s.root, "consumequeue", "TopicTest", "0")
    files = sorted(os.listdir(folder))
    assert len(files) >= 5
    it = iter_consume_queue(folder)
    assert next(it)[0] == 0
    _clean(s)
    gone = [f for f in files if not os.path.exists(os.path.join(folder, f))]
    assert gone[0] == files[0] and len(gone) >= 2
    with pytest.raises(FileCleanedError) as ei:
        list(it)
    assert ei.value.path == os.path.join(folder, files[1]) and ei.value.offset == int(files[1])
    # a fresh iteration starts at the queue's first file left
    first_left = sorted(os.listdir(folder))[0]
    assert int(first_left) > int(files[1])
    assert list(iter_consume_queue(folder))[0] == next(iter_consume_queue(os.path.join(folder, first_left)))
