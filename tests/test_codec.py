"""The commit-log record codec (docs/format.md §1, §2.2, §14): byte vectors, lengths, the compiled codec against
the pure-Python reference in ``reference_codec``, record checks, scans and corrupt input."""

from __future__ import annotations

import ipaddress
import os
import platform
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest
import reference_codec as ref
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pystore import AppendMessageResult, Message, PutMessageResult
from pystore.errors import StoreCorruptedError
from pystore.format._codec import (
    BLANK_CODE,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    MIN_BLANK,
    POS_BODYCRC,
    POS_BORNHOST,
    POS_BORNTIMESTAMP,
    POS_FLAG,
    POS_MAGIC,
    POS_PHYSICALOFFSET,
    POS_QUEUEID,
    POS_QUEUEOFFSET,
    POS_SYSFLAG,
    POS_TOTALSIZE,
    REASONS,
    RECORD_BAD_CRC,
    RECORD_BAD_LENGTH,
    RECORD_BAD_MAGIC,
    RECORD_BLANK,
    RECORD_END,
    RECORD_SHORT,
    body_crc,
    calc_msg_length,
    check_record_at,
    decode_record,
    encode_record,
    record_length,
    scan,
    tags_code,
)
from pystore.format._hosts import normalize_host
from pystore.format._jstring import java_string_hash
from pystore.format._props import properties_to_string, string_to_properties
from pystore.status import AppendMessageStatus, PutMessageStatus

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def i32(buf, pos):
    return struct.unpack_from(">i", buf, pos)[0]


def i64(buf, pos):
    return struct.unpack_from(">q", buf, pos)[0]


def ref_encode_message(m: Message, props: bytes, queue_offset=0, phy_offset=0, store_ts=0,
                       store_host=("127.0.0.1", 10911), topic=None):
    """The reference record of a Message, with the properties string the test expects."""
    return ref.encode(m.topic if topic is None else topic, m.body, props, m.queue_id, m.flag, queue_offset,
                      phy_offset, m.sys_flag, m.born_timestamp, m.born_host, store_ts, store_host,
                      m.reconsume_times, m.prepared_transaction_offset)


# ------------------------------------------------------------------------------------------------
# Constants
# ------------------------------------------------------------------------------------------------


def test_magic_codes_and_constants():
    assert MAGIC_CODE_V1 == -626843481 == struct.unpack(">i", bytes.fromhex("daa320a7"))[0]
    assert MAGIC_CODE_V2 == -626843477 == struct.unpack(">i", bytes.fromhex("daa320ab"))[0]
    assert BLANK_CODE == -875286124 == struct.unpack(">i", bytes.fromhex("cbd43194"))[0]
    assert MIN_BLANK == 8


def test_field_positions_of_format_md():
    assert (POS_TOTALSIZE, POS_MAGIC, POS_BODYCRC, POS_QUEUEID, POS_FLAG, POS_QUEUEOFFSET,
            POS_PHYSICALOFFSET, POS_SYSFLAG, POS_BORNTIMESTAMP, POS_BORNHOST) == (
        0, 4, 8, 12, 16, 20, 28, 36, 40, 48)


def test_check_codes_are_distinct_and_explained():
    codes = [RECORD_BLANK, RECORD_END, RECORD_SHORT, RECORD_BAD_MAGIC, RECORD_BAD_LENGTH, RECORD_BAD_CRC]
    assert len(set(codes)) == len(codes)
    assert all(c <= 0 for c in codes)
    assert set(REASONS) == set(codes)


# ------------------------------------------------------------------------------------------------
# Byte vectors
# ------------------------------------------------------------------------------------------------

# docs/format.md §1.2 "Worked hexdump", transcribed line by line (the quoted parts are ASCII).
WORKED_HEXDUMP = (
    bytes.fromhex("0000009b daa320a7 248c774f 00000000")
    + bytes.fromhex("00000000 00000000 00000000 00000000")
    + bytes.fromhex("00000000 00000000 0000018b cfe56800")
    + bytes.fromhex("7f000001 0000c350 0000018b cfe56864")
    + bytes.fromhex("c0a80001 00002a9f 00000000 00000000")
    + bytes.fromhex("00000000 00000010")
    + b"Hello RocketMQ 0"
    + bytes.fromhex("09")
    + b"TopicTest"
    + bytes.fromhex("0027")
    + b"a\x011\x02KEYS\x01key0\x02UNIQ_KEY\x01UNIQ0\x02TAGS\x01TagA\x02"
)


def worked_message():
    return Message("TopicTest", b"Hello RocketMQ 0",
                   properties={"a": "1", "KEYS": "key0", "UNIQ_KEY": "UNIQ0", "TAGS": "TagA"},
                   born_timestamp=0x18BCFE56800, born_host=("127.0.0.1", 50000))


def test_worked_hexdump_of_format_md():
    assert len(WORKED_HEXDUMP) == 155
    rec = encode_record(worked_message(), store_timestamp=0x18BCFE56864, store_host=("192.168.0.1", 10911))
    assert rec == WORKED_HEXDUMP
    props = b"a\x011\x02KEYS\x01key0\x02UNIQ_KEY\x01UNIQ0\x02TAGS\x01TagA\x02"
    assert ref.encode("TopicTest", b"Hello RocketMQ 0", props, 0, 0, 0, 0, 0, 0x18BCFE56800,
                      ("127.0.0.1", 50000), 0x18BCFE56864, ("192.168.0.1", 10911), 0, 0) == WORKED_HEXDUMP
    # fields at the module's positions
    assert i32(rec, POS_TOTALSIZE) == 155
    assert i32(rec, POS_MAGIC) == MAGIC_CODE_V1
    assert i32(rec, POS_BODYCRC) == 0x248C774F == zlib.crc32(b"Hello RocketMQ 0") & 0x7FFFFFFF
    assert i32(rec, POS_QUEUEID) == 0
    assert i32(rec, POS_FLAG) == 0
    assert i64(rec, POS_QUEUEOFFSET) == 0
    assert i64(rec, POS_PHYSICALOFFSET) == 0
    assert i32(rec, POS_SYSFLAG) == 0
    assert i64(rec, POS_BORNTIMESTAMP) == 0x18BCFE56800
    assert rec[POS_BORNHOST:POS_BORNHOST + 8] == bytes([127, 0, 0, 1]) + struct.pack(">i", 50000)
    assert i64(rec, 56) == 0x18BCFE56864
    assert check_record_at(rec) == 155
    e = decode_record(rec)
    assert e.msg_id == "C0A8000100002A9F0000000000000000"
    assert (e.topic, e.body, e.tags, e.keys, e.uniq_key) == (
        "TopicTest", b"Hello RocketMQ 0", "TagA", ["key0"], "UNIQ0")
    assert e.born_host == ("127.0.0.1", 50000) and e.store_host == ("192.168.0.1", 10911)


# Hand-computed vectors: field by field, for the variants of docs/format.md §1.2 / §1.3.
# Common message: topic "TopicTest", body b"Hi", tags "TagA", queue 1, flag 2, queue offset 4,
# commit-log offset 0x1234, born 0x0102030405060708, store 0x1122334455667788, reconsume 3, prepared-tx 0x10.
CRC_HI = "4d170e0e"  # crc32(b"Hi") & 0x7FFFFFFF
TOPIC = "09" + b"TopicTest".hex()
PROPS = "000a" + b"TAGS\x01TagA\x02".hex()
BORN4 = "0a000001" "00000050"  # 10.0.0.1:80
BORN6 = "00000000000000000000000000000001" "00001f90"  # [::1]:8080
STORE4 = "0a000002" "00002a9f"  # 10.0.0.2:10911
STORE6 = "20010db8000000000000000000000002" "00002a9f"  # [2001:db8::2]:10911
HEAD = "00000001" "00000002" "0000000000000004" "0000000000001234"  # QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET
BORN_TS = "0102030405060708"
STORE_TS = "1122334455667788"
TAIL = "00000003" "0000000000000010"  # RECONSUMETIMES PREPAREDTXOFFSET
BODY_HI = "00000002" "4869"

VECTORS = {
    # name: (born host, store host, topic, body, hex)
    "v1-ipv4": (("10.0.0.1", 80), ("10.0.0.2", 10911), "TopicTest", b"Hi",
                "00000070" "daa320a7" + CRC_HI + HEAD + "00000000" + BORN_TS + BORN4 + STORE_TS + STORE4
                + TAIL + BODY_HI + TOPIC + PROPS),
    "born-ipv6": (("::1", 8080), ("10.0.0.2", 10911), "TopicTest", b"Hi",
                  "0000007c" "daa320a7" + CRC_HI + HEAD + "00000010" + BORN_TS + BORN6 + STORE_TS + STORE4
                  + TAIL + BODY_HI + TOPIC + PROPS),
    "store-ipv6": (("10.0.0.1", 80), ("2001:db8::2", 10911), "TopicTest", b"Hi",
                   "0000007c" "daa320a7" + CRC_HI + HEAD + "00000020" + BORN_TS + BORN4 + STORE_TS + STORE6
                   + TAIL + BODY_HI + TOPIC + PROPS),
    "both-ipv6": (("::1", 8080), ("2001:db8::2", 10911), "TopicTest", b"Hi",
                  "00000088" "daa320a7" + CRC_HI + HEAD + "00000030" + BORN_TS + BORN6 + STORE_TS + STORE6
                  + TAIL + BODY_HI + TOPIC + PROPS),
    "empty-body": (("10.0.0.1", 80), ("10.0.0.2", 10911), "TopicTest", b"",
                   "0000006e" "daa320a7" "00000000" + HEAD + "00000000" + BORN_TS + BORN4 + STORE_TS + STORE4
                   + TAIL + "00000000" + TOPIC + PROPS),
    # 128-character topic: V2 magic, 2-byte topic length; 92 + 2 + 128 + 10 = 232 bytes
    "v2-long-topic": (("10.0.0.1", 80), ("10.0.0.2", 10911), "%RETRY%" + "G" * 121, b"Hi",
                      "000000e8" "daa320ab" + CRC_HI + HEAD + "00000000" + BORN_TS + BORN4 + STORE_TS + STORE4
                      + TAIL + BODY_HI + "0080" + b"%RETRY%".hex() + "47" * 121 + PROPS),
}


def vector_message(born, topic, body):
    return Message(topic, body, tags="TagA", queue_id=1, flag=2, born_timestamp=0x0102030405060708,
                   born_host=born, reconsume_times=3, prepared_transaction_offset=0x10)


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_hand_computed_vectors(name):
    born, store, topic, body, hexstr = VECTORS[name]
    expected = bytes.fromhex(hexstr)
    m = vector_message(born, topic, body)
    rec = encode_record(m, queue_offset=4, commit_log_offset=0x1234, store_timestamp=0x1122334455667788,
                        store_host=store)
    assert rec == expected
    assert ref.encode(topic, body, b"TAGS\x01TagA\x02", 1, 2, 4, 0x1234, 0, 0x0102030405060708, born,
                      0x1122334455667788, store, 3, 0x10) == expected
    assert len(rec) == record_length(m, store) == i32(rec, POS_TOTALSIZE)
    born6, store6 = ":" in born[0], ":" in store[0]
    v2 = len(topic) > 127
    # fixed fields at the module's positions
    assert i32(rec, POS_MAGIC) == (MAGIC_CODE_V2 if v2 else MAGIC_CODE_V1)
    assert i32(rec, POS_BODYCRC) == (zlib.crc32(body) & 0x7FFFFFFF)
    assert i32(rec, POS_QUEUEID) == 1
    assert i32(rec, POS_FLAG) == 2
    assert i64(rec, POS_QUEUEOFFSET) == 4
    assert i64(rec, POS_PHYSICALOFFSET) == 0x1234
    assert i32(rec, POS_SYSFLAG) == (0x10 if born6 else 0) | (0x20 if store6 else 0)
    assert i64(rec, POS_BORNTIMESTAMP) == 0x0102030405060708
    # the moving fields: STORETIMESTAMP at 56 (68 with an IPv6 born host), and so on
    store_ts_pos = POS_BORNHOST + (20 if born6 else 8)
    assert i64(rec, store_ts_pos) == 0x1122334455667788
    reconsume_pos = store_ts_pos + 8 + (20 if store6 else 8)
    assert i32(rec, reconsume_pos) == 3
    assert i64(rec, reconsume_pos + 4) == 0x10
    assert i32(rec, reconsume_pos + 12) == len(body)
    e = decode_record(rec)
    assert e.born_host == normalize_host(born) and e.store_host == normalize_host(store)
    assert e.topic == topic and e.body == body and e.tags == "TagA"
    assert e.version == (2 if v2 else 1)
    assert len(e.msg_id) == (56 if store6 else 32)
    assert e.msg_id == ref.msg_id(store, 0x1234)


def test_topic_length_127_is_v1_and_128_is_v2():
    for n, magic, topic_len_field in ((127, MAGIC_CODE_V1, b"\x7f"), (128, MAGIC_CODE_V2, b"\x00\x80")):
        m = Message("T" * n, b"", born_timestamp=0)
        rec = encode_record(m)
        assert i32(rec, POS_MAGIC) == magic
        assert rec[88:88 + len(topic_len_field)] == topic_len_field
        assert decode_record(rec).topic == "T" * n


def test_255_byte_topic_roundtrips_as_v2():
    m = Message("t" * 255, b"b", born_timestamp=0)
    rec = encode_record(m)
    assert rec[89:91] == b"\x00\xff"
    assert decode_record(rec).topic == "t" * 255
    assert rec == ref.encode("t" * 255, b"b", b"", 0, 0, 0, 0, 0, 0, ("127.0.0.1", 0), 0,
                             ("127.0.0.1", 10911), 0, 0)


REPUT_BODY = b"Once, there was a chance for me!"


def test_reput_message_service_test_case_158_bytes():
    # T/ReputMessageServiceTest: 10 messages = 1580 bytes: 91 + 32 + 6 + 29 each
    assert len(REPUT_BODY) == 32
    props = {"KEYS": "1700000000000", "TAGS": "TAG1"}
    recs = []
    for i in range(10):
        m = Message("FooBar", REPUT_BODY, properties=props, born_timestamp=1700000000000 + i)
        recs.append(encode_record(m, queue_offset=i, commit_log_offset=158 * i,
                                  store_timestamp=1700000000100 + i))
    assert all(len(r) == 158 for r in recs)
    first = recs[0]
    expected = (
        bytes.fromhex("0000009e daa320a7 09021560 00000000 00000000")  # size, magic, crc, queue 0, flag 0
        + bytes.fromhex("0000000000000000 0000000000000000 00000000")  # queue off., commit-log off., sysflag
        + struct.pack(">q", 1700000000000) + bytes.fromhex("7f000001 00000000")  # born 127.0.0.1:0
        + struct.pack(">q", 1700000000100) + bytes.fromhex("7f000001 00002a9f")  # store 127.0.0.1:10911
        + bytes.fromhex("00000000 0000000000000000")  # reconsume, prepared tx
        + bytes.fromhex("00000020") + REPUT_BODY + b"\x06FooBar"
        + bytes.fromhex("001d") + b"KEYS\x011700000000000\x02TAGS\x01TAG1\x02"
    )
    assert first == expected
    blob = b"".join(recs)
    assert len(blob) == 1580
    assert scan(blob + bytes(100)) == (1580, RECORD_END, 10, 1700000000109)
    assert [decode_record(blob, 158 * i).queue_offset for i in range(10)] == list(range(10))


# ------------------------------------------------------------------------------------------------
# Lengths
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("sys_flag", [0, 0x10, 0x20, 0x30, 0x1 | 0x2 | 0xC, 0x7CF, 0x7FF])
@pytest.mark.parametrize("body_len,topic_len,props_len",
                         [(0, 0, 0), (1, 1, 1), (4096, 255, 32767), (7, 128, 0)])
def test_calc_msg_length_formula(version, sys_flag, body_len, topic_len, props_len):
    expected = ref.cal_msg_length(version, sys_flag, body_len, topic_len, props_len)
    assert calc_msg_length(version, sys_flag, body_len, topic_len, props_len) == expected
    base = 91 + (1 if version == 2 else 0) + (12 if sys_flag & 0x10 else 0) + (12 if sys_flag & 0x20 else 0)
    assert expected == base + body_len + topic_len + props_len


def test_calc_msg_length_fixed_overheads():
    assert calc_msg_length(1, 0, 0, 0, 0) == 91
    assert calc_msg_length(2, 0, 0, 0, 0) == 92
    assert calc_msg_length(1, 0x10, 0, 0, 0) == 103
    assert calc_msg_length(1, 0x20, 0, 0, 0) == 103
    assert calc_msg_length(2, 0x30, 0, 0, 0) == 116
    assert calc_msg_length(1, 0, 32, 6, 29) == 158


@pytest.mark.parametrize("born", [("127.0.0.1", 1), ("::1", 1)])
@pytest.mark.parametrize("store", [("127.0.0.1", 10911), ("fe80::1", 10911)])
@pytest.mark.parametrize("topic", ["T", "T" * 127, "T" * 128, "T" * 255])
@pytest.mark.parametrize("body", [b"", b"body" * 100])
def test_record_length_matches_encoding(born, store, topic, body):
    m = Message(topic, body, tags="t", keys=["k1", "k2"], properties={"é": "ü😀"}, born_host=born)
    rec = encode_record(m, store_host=store)
    props_len = len("TAGS\x01t\x02KEYS\x01k1 k2\x02é\x01ü😀\x02".encode())
    version = 2 if len(topic) > 127 else 1
    sys_flag = (0x10 if ":" in born[0] else 0) | (0x20 if ":" in store[0] else 0)
    assert len(rec) == record_length(m, store) == calc_msg_length(version, sys_flag, len(body), len(topic),
                                                                   props_len)
    assert len(rec) == ref.cal_msg_length(version, sys_flag, len(body), len(topic), props_len)


def test_record_length_default_store_host_is_ipv4():
    m = Message("T", b"xyz", born_timestamp=0)
    assert record_length(m) == 91 + 3 + 1 == len(encode_record(m))
    assert record_length(m, ("::1", 1)) == 91 + 12 + 3 + 1


# ------------------------------------------------------------------------------------------------
# The compiled codec == the Python reference (hypothesis)
# ------------------------------------------------------------------------------------------------

TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789%|_-"
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                    max_size=40)
key_text = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)), min_size=1,
                   max_size=20)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
ports = st.integers(0, 65535)
hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), ports),
    st.tuples(st.ip_addresses(v=6).map(str), ports),
)


SPECIAL_KEYS = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT"])


@st.composite
def message_args(draw):
    return dict(
        topic=draw(st.text(TOPIC_CHARS, min_size=1, max_size=255)),
        body=draw(st.binary(max_size=4096)),
        tags=draw(st.none() | prop_text),
        keys=draw(st.none() | st.lists(key_text, min_size=1, max_size=4)),
        properties=draw(st.dictionaries(SPECIAL_KEYS | prop_text, prop_text, max_size=6)),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        flag=draw(int32s),
        delay_time_level=draw(st.integers(0, 18)),
        wait_store_msg_ok=draw(st.booleans()),
        born_timestamp=draw(int64s),
        born_host=draw(hosts),
        sys_flag=draw(st.integers(0, 2**31 - 1)) & ~0x30,
        reconsume_times=draw(int32s),
        prepared_transaction_offset=draw(int64s),
    )


def expected_properties(a):
    """docs/api.md "Settled details": TAGS, KEYS, DELAY, WAIT=false, then the own properties in insertion order;
    a key given both ways keeps the argument's value, once."""
    out = {}
    if a["tags"] is not None:
        out["TAGS"] = a["tags"]
    if a["keys"] is not None:
        out["KEYS"] = a["keys"] if isinstance(a["keys"], str) else " ".join(a["keys"])
    if a["delay_time_level"] > 0:
        out["DELAY"] = str(a["delay_time_level"])
    if not a["wait_store_msg_ok"]:
        out["WAIT"] = "false"
    for k, v in a["properties"].items():
        out.setdefault(k, v)
    return out


CASE_ASTRAL = dict(topic="T" * 128, body=b"\x00", tags="😀é", keys=["ключ", "🂡"], properties={"x": "𝄞"},
                   queue_id=7, flag=-1, delay_time_level=3, wait_store_msg_ok=False, born_timestamp=-1,
                   born_host=("::ffff:1.2.3.4", 65535), sys_flag=0x7FFFFFFF & ~0x30, reconsume_times=-(2**31),
                   prepared_transaction_offset=2**63 - 1)
CASE_TAGS_BOTH_WAYS = dict(topic="%RETRY%g", body=b"", tags="a", keys=None,
                           properties={"TAGS": "b", "WAIT": "x"}, queue_id=0, flag=0, delay_time_level=0,
                           wait_store_msg_ok=True, born_timestamp=0, born_host=("0.0.0.0", 0), sys_flag=0,
                           reconsume_times=0, prepared_transaction_offset=0)


@FAST
@given(a=message_args(), queue_offset=int64s, phy_offset=int64s, store_ts=int64s, store_host=hosts)
@example(a=CASE_ASTRAL, queue_offset=-1, phy_offset=2**63 - 1, store_ts=0, store_host=("::", 0))
@example(a=CASE_TAGS_BOTH_WAYS, queue_offset=0, phy_offset=0, store_ts=0,
         store_host=("255.255.255.255", 65535))
def test_encode_record_equals_reference(a, queue_offset, phy_offset, store_ts, store_host):
    m = Message(**a)
    props = expected_properties(a)
    props_b = ref.properties_string(props)
    rec = encode_record(m, queue_offset=queue_offset, commit_log_offset=phy_offset, store_timestamp=store_ts,
                        store_host=store_host)
    expected = ref.encode(a["topic"], a["body"], props_b, a["queue_id"], a["flag"], queue_offset, phy_offset,
                          a["sys_flag"], a["born_timestamp"], a["born_host"], store_ts, store_host,
                          a["reconsume_times"], a["prepared_transaction_offset"])
    assert rec == expected
    assert len(rec) == record_length(m, store_host)
    assert check_record_at(rec) == len(rec)

    # decode_record gives every field back
    r = ref.decode(rec)
    e = decode_record(rec)
    assert e.raw == rec
    assert e.store_size == len(rec)
    assert e.magic_code == (MAGIC_CODE_V2 if len(a["topic"]) > 127 else MAGIC_CODE_V1)
    assert e.version == r["version"]
    assert e.topic == a["topic"]
    assert e.body == a["body"]
    assert e.properties == props
    assert list(e.properties) == list(props)
    assert e.tags == props.get("TAGS")
    assert e.keys == ([k for k in props["KEYS"].split(" ") if k] if "KEYS" in props else [])
    if a["keys"] is not None:
        assert e.keys == a["keys"]
    assert e.uniq_key == props.get("UNIQ_KEY")
    assert e.flag == a["flag"] and e.queue_id == a["queue_id"]
    assert e.queue_offset == queue_offset and e.commit_log_offset == phy_offset
    assert e.born_timestamp == a["born_timestamp"] and e.store_timestamp == store_ts
    assert e.reconsume_times == a["reconsume_times"]
    assert e.prepared_transaction_offset == a["prepared_transaction_offset"]
    born6 = ipaddress.ip_address(a["born_host"][0]).version == 6
    store6 = ipaddress.ip_address(store_host[0]).version == 6
    assert e.sys_flag & 0x10 == (0x10 if born6 else 0)
    assert e.sys_flag & 0x20 == (0x20 if store6 else 0)
    assert e.sys_flag & ~0x30 == a["sys_flag"] & ~0x30
    assert e.transaction_type == a["sys_flag"] & 0xC
    assert e.born_host == (ipaddress.ip_address(a["born_host"][0]).compressed, a["born_host"][1])
    assert e.store_host == (ipaddress.ip_address(store_host[0]).compressed, store_host[1])
    assert e.msg_id == ref.msg_id(store_host, phy_offset) == r["msg_id"]
    assert e.msg_id == e.msg_id.upper() and len(e.msg_id) == (56 if store6 else 32)
    assert e.body_crc == zlib.crc32(a["body"]) & 0x7FFFFFFF == body_crc(a["body"]) == r["body_crc"]
    assert e.tags_code == tags_code(rec) == m.tags_code == r["tags_code"]
    assert e.delay_time_level == m.delay_time_level
    assert e.wait_store_msg_ok == m.wait_store_msg_ok
    # and back: a Message from the record encodes to the same bytes
    assert encode_record(e.to_message(), queue_offset=queue_offset, commit_log_offset=phy_offset,
                         store_timestamp=store_ts, store_host=store_host) == rec


@FAST
@given(topic=st.text(TOPIC_CHARS, min_size=1, max_size=255), body=st.binary(max_size=600),
       props=st.dictionaries(prop_text, prop_text, max_size=5), born=hosts, store=hosts)
def test_decode_record_matches_reference_decode(topic, body, props, born, store):
    rec = ref.encode(topic, body, ref.properties_string(props), 5, 6, 7, 8, 0x3, 9, born, 10, store, 11, 12)
    r = ref.decode(rec)
    e = decode_record(rec)
    assert (e.topic, e.body, e.properties, e.born_host, e.store_host, e.sys_flag, e.msg_id, e.body_crc) == (
        r["topic"], r["body"], r["properties"], r["born_host"], r["store_host"], r["sys_flag"], r["msg_id"],
        r["body_crc"])
    assert (e.queue_id, e.flag, e.queue_offset, e.commit_log_offset, e.born_timestamp, e.store_timestamp,
            e.reconsume_times, e.prepared_transaction_offset) == (5, 6, 7, 8, 9, 10, 11, 12)


# ------------------------------------------------------------------------------------------------
# Java String.hashCode and tags codes
# ------------------------------------------------------------------------------------------------


@FAST
@given(tags=st.none() | prop_text, other=st.dictionaries(prop_text, prop_text, max_size=3))
def test_tags_code_of_record_equals_message(tags, other):
    m = Message("T", b"b", tags=tags, properties=other)
    rec = encode_record(m)
    expected = java_string_hash(m.tags) if m.tags else 0
    assert tags_code(rec) == m.tags_code == expected
    assert decode_record(rec).tags_code == expected


@FAST
@given(raw=st.binary(min_size=1, max_size=40).filter(lambda b: b"\x01" not in b and b"\x02" not in b))
@example(raw=b"\xff\xfeA")
@example(raw=b"\xed\xa0\x80x")  # an encoded surrogate: invalid, three replacements
@example(raw=b"\xf0\x9f\x98")  # a truncated 4-byte sequence: one replacement
@example(raw=b"\xe2\x82")
def test_tags_code_of_invalid_utf8_hashes_the_replaced_string(raw):
    rec = raw_record(b"T", b"TAGS\x01" + raw + b"\x02")
    text = raw.decode("utf-8", "replace")
    assert tags_code(rec) == ref.java_hash(text) == decode_record(rec).tags_code
    assert decode_record(rec).tags == text


def test_tags_code_without_tags_or_with_empty_tags_is_zero():
    rec = raw_record(b"T", b"TAGS\x01\x02KEYS\x01k\x02")
    assert tags_code(rec) == 0
    assert tags_code(encode_record(Message("T", b""))) == 0


def test_tags_code_last_duplicate_wins():
    rec = raw_record(b"T", b"TAGS\x01a\x02TAGS\x01b\x02")
    assert tags_code(rec) == java_string_hash("b") == decode_record(rec).tags_code


def test_tags_code_and_the_properties_dict_split_alike():
    """``tags_code`` (``find_property``) and ``string_to_properties`` run the one splitter (``next_prop``):
    for properties strings built at random from the pieces that matter (names that are prefixes or extensions
    of TAGS, separators in a row, empty names and values, repeated names, strings shorter and longer than the
    eight bytes it reads at a time) they find the same TAGS."""
    import random

    rnd = random.Random(23)
    names = [b"TAGS", b"TAG", b"TAGSX", b"XTAGS", b"", b"a", b"KEYS"]
    values = [b"", b"a", b"b c", b"\x01x", b"\xc3\xa9", b"t1234567890"]
    seen = 0
    for _ in range(3000):
        props = rnd.choice([b"\x02", b"\x02\x02"]).join(
            rnd.choice(names) + (b"\x01" if rnd.random() < 0.9 else b"") + rnd.choice(values)
            for _ in range(rnd.randint(1, 4)))
        props += rnd.choice([b"", b"\x02"])
        tags = string_to_properties(props.decode("utf-8")).get("TAGS")
        seen += tags is not None
        assert tags_code(raw_record(b"T", props)) == (java_string_hash(tags) if tags else 0), props
    assert seen > 500


def test_tags_code_of_a_bad_record_raises_value_error():
    with pytest.raises(ValueError):
        tags_code(bytes(200))


# ------------------------------------------------------------------------------------------------
# check_record_at
# ------------------------------------------------------------------------------------------------


def sample_record(i=0, body=b"payload", topic="TopicTest", born=("10.0.0.1", 1), store=("10.0.0.2", 2), **kw):
    m = Message(topic, body, tags="t%d" % i, keys="k%d" % i, born_timestamp=1000 + i, born_host=born, **kw)
    return encode_record(m, queue_offset=i, commit_log_offset=0, store_timestamp=2000 + i, store_host=store)


def test_check_good_record_returns_its_size():
    rec = sample_record()
    assert check_record_at(rec) == len(rec)
    assert check_record_at(rec, verify_crc=False) == len(rec)
    assert check_record_at(b"xx" + rec + b"\x00" * 10, 2) == len(rec)
    assert check_record_at(bytearray(rec)) == len(rec)
    assert check_record_at(memoryview(rec)) == len(rec)


def test_check_zeros_is_end():
    assert check_record_at(bytes(4096)) == RECORD_END
    assert check_record_at(bytes(4096), 100) == RECORD_END
    rec = sample_record()
    assert check_record_at(rec, len(rec)) == RECORD_END
    assert check_record_at(b"") == RECORD_END


def test_check_offset_outside_buffer_raises_index_error():
    rec = sample_record()
    with pytest.raises(IndexError):
        check_record_at(rec, -1)
    with pytest.raises(IndexError):
        check_record_at(rec, len(rec) + 1)


def test_check_blank():
    blank = ref.encode_blank(4096)
    assert check_record_at(blank + bytes(4088)) == RECORD_BLANK
    # the blank header alone is enough; what follows it is never parsed
    assert check_record_at(blank) == RECORD_BLANK
    assert check_record_at(blank + b"\xff" * 100) == RECORD_BLANK
    assert check_record_at(ref.encode_blank(8)) == RECORD_BLANK


def test_check_bad_magic():
    rec = bytearray(sample_record())
    rec[4:8] = b"\xde\xad\xbe\xef"
    assert check_record_at(rec) == RECORD_BAD_MAGIC
    rec[4:8] = bytes(4)
    assert check_record_at(rec) == RECORD_BAD_MAGIC
    assert check_record_at(b"\x00\x00\x00\x10" + b"garbage!" * 4) == RECORD_BAD_MAGIC


def test_check_truncated_record_is_short():
    rec = sample_record()
    for n in range(8, len(rec)):
        assert check_record_at(rec[:n]) == RECORD_SHORT, n
    # with fewer than 8 bytes there is no header to look at: the end of written data (documented)
    for n in range(1, 8):
        assert check_record_at(rec[:n]) == RECORD_END, n


def test_check_totalsize_too_small_or_negative_is_bad_length():
    rec = bytearray(sample_record())
    for total in (1, 90, -1, -(2**31)):
        struct.pack_into(">i", rec, 0, total)
        assert check_record_at(rec) == RECORD_BAD_LENGTH, total


def body_len_pos(rec):
    return ref.decode(rec)["body_len_pos"]


def corruptions(rec):
    """(description, corrupted bytes) for every length field of ``rec``."""
    d = ref.decode(rec)
    out = []
    for delta in (1, -1, 1000, 2**31 - 1, -(2**31), -5):
        b = bytearray(rec)
        struct.pack_into(">i", b, d["body_len_pos"], len(d["body"]) + delta if abs(delta) < 2**30 else delta)
        out.append(("body length %+d" % delta, bytes(b)))
    tl_pos = d["topic_len_pos"]
    if d["version"] == 1:
        for v in (len(d["topic_raw"]) + 1, len(d["topic_raw"]) - 1, 0x7F, 0x80, 0xFF):
            b = bytearray(rec)
            b[tl_pos] = v & 0xFF
            out.append(("topic length byte %#x" % v, bytes(b)))
    else:
        for v in (len(d["topic_raw"]) + 1, len(d["topic_raw"]) - 1, -1, 0x7FFF):
            b = bytearray(rec)
            struct.pack_into(">h", b, tl_pos, v)
            out.append(("topic length short %d" % v, bytes(b)))
    for v in (len(d["properties_raw"]) + 1, len(d["properties_raw"]) - 1, -1, 0x7FFF, 0):
        b = bytearray(rec)
        struct.pack_into(">h", b, d["props_len_pos"], v)
        out.append(("properties length %d" % v, bytes(b)))
    # TOTALSIZE one byte larger than the fields (with a byte to spare in the buffer) and one smaller
    b = bytearray(rec) + b"\x00"
    struct.pack_into(">i", b, 0, len(rec) + 1)
    out.append(("total size +1", bytes(b)))
    b = bytearray(rec)
    struct.pack_into(">i", b, 0, len(rec) - 1)
    out.append(("total size -1", bytes(b)))
    return out


LENGTH_SAMPLES = {
    "v1": sample_record(),
    "v2": sample_record(topic="L" * 200),
    "v6-hosts": sample_record(born=("::1", 1), store=("2001:db8::5", 6)),
    "empty-body": sample_record(body=b""),
}


@pytest.mark.parametrize("name", sorted(LENGTH_SAMPLES))
def test_check_corrupt_lengths_are_bad_length(name):
    rec = LENGTH_SAMPLES[name]
    for what, bad in corruptions(rec):
        r = check_record_at(bad)
        assert r == RECORD_BAD_LENGTH, (what, r)
        assert check_record_at(bad, verify_crc=False) == RECORD_BAD_LENGTH, what
        with pytest.raises(StoreCorruptedError):
            decode_record(bad)
        end, reason, count, _ = scan(bad + bytes(16))
        assert (end, reason, count) == (0, RECORD_BAD_LENGTH, 0), what


def test_check_bad_crc_and_verify_crc_false():
    rec = bytearray(sample_record(body=b"some body bytes"))
    pos = body_len_pos(rec) + 4
    rec[pos + 3] ^= 0x01
    assert check_record_at(rec) == RECORD_BAD_CRC
    assert check_record_at(rec, verify_crc=True) == RECORD_BAD_CRC
    assert check_record_at(rec, verify_crc=False) == len(rec)
    # decode_record does not verify by default, and does when asked
    assert decode_record(rec).body[3] == ord("e") ^ 1
    with pytest.raises(StoreCorruptedError):
        decode_record(rec, verify_crc=True)
    # a wrong stored CRC is the same mismatch
    rec2 = bytearray(sample_record(body=b"x"))
    struct.pack_into(">i", rec2, POS_BODYCRC, (zlib.crc32(b"x") & 0x7FFFFFFF) ^ 4)
    assert check_record_at(rec2) == RECORD_BAD_CRC
    assert check_record_at(rec2, verify_crc=False) == len(rec2)


def test_check_crc_of_empty_body_is_not_read():
    # docs/format.md §1.2 / §7.1: only a body with bodyLen > 0 is read (and checked)
    rec = bytearray(sample_record(body=b""))
    assert i32(rec, POS_BODYCRC) == 0
    struct.pack_into(">i", rec, POS_BODYCRC, 12345)
    assert check_record_at(rec) == len(rec)


# Out-of-bounds reads: a buffer that ends (or starts) at an inaccessible page, in a child process.
GUARD = textwrap.dedent(r"""
    import ctypes, mmap, struct, sys
    sys.path.insert(0, %r)
    import reference_codec as ref
    from pystore import Message
    from pystore.format._codec import check_record_at, decode_record, encode_record, scan, tags_code
    from pystore.errors import StoreCorruptedError
    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _keep = []

    def guarded(data, at_end=True):
        "``data`` in a page between two PROT_NONE pages, flush against the one after (or before) it."
        mm = mmap.mmap(-1, 3 * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        assert libc.mprotect(base, PAGE, 0) == 0 and libc.mprotect(base + 2 * PAGE, PAGE, 0) == 0
        off = PAGE - len(data) if at_end else 0
        mv = memoryview(mm)[PAGE + off:PAGE + off + len(data)]
        mv[:] = data
        _keep.append((mm, mv))
        return mv
""") % os.path.dirname(os.path.abspath(__file__))


def run_guarded(body: str):
    code = GUARD + textwrap.dedent(body) + "\nprint('OK')\n"
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [root, env.get("PYTHONPATH", "")] if p)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), (p.returncode, p.stdout, p.stderr)
    return p.stdout


def test_corrupt_lengths_never_read_past_the_buffer():
    run_guarded("""
        def recs():
            for born, store, topic, body in [(("10.0.0.1", 1), ("10.0.0.2", 2), "T" * 10, b"body"),
                                             (("::1", 1), ("::2", 2), "T" * 200, b"")]:
                m = Message(topic, body, tags="tg", born_host=born)
                yield encode_record(m, store_host=store)

        for rec in recs():
            d = ref.decode(rec)
            cases = []
            for v in (len(d["body"]) + 1, 2**31 - 1, len(rec)):
                b = bytearray(rec); struct.pack_into(">i", b, d["body_len_pos"], v); cases.append(b)
            b = bytearray(rec)
            if d["version"] == 1:
                b[d["topic_len_pos"]] = 0xFF
            else:
                struct.pack_into(">h", b, d["topic_len_pos"], 0x7FFF)
            cases.append(b)
            for v in (0x7FFF, len(d["properties_raw"]) + 1):
                b = bytearray(rec); struct.pack_into(">h", b, d["props_len_pos"], v); cases.append(b)
            for n in range(8, len(rec)):
                cases.append(bytearray(rec[:n]))
            for c in cases:
                mv = guarded(bytes(c))
                assert check_record_at(mv) < 0
                assert scan(mv)[2] == 0
                try:
                    decode_record(mv)
                except StoreCorruptedError:
                    pass
                else:
                    raise AssertionError("decoded a corrupt record")
            # a good record flush against the end of the buffer is read, and only it
            mv = guarded(rec)
            assert check_record_at(mv) == len(rec) and decode_record(mv).topic == d["topic"]
            assert tags_code(mv) == tags_code(rec)
    """)


# ------------------------------------------------------------------------------------------------
# scan
# ------------------------------------------------------------------------------------------------


def records(n, **kw):
    return [sample_record(i, **kw) for i in range(n)]


def test_scan_stops_at_zeros():
    rs = records(5)
    blob = b"".join(rs)
    assert scan(blob + bytes(500)) == (len(blob), RECORD_END, 5, 2004)
    assert scan(blob) == (len(blob), RECORD_END, 5, 2004)


def test_scan_stops_at_blank():
    rs = records(3)
    blob = b"".join(rs)
    assert scan(blob + ref.encode_blank(200) + b"\xff" * 192) == (len(blob), RECORD_BLANK, 3, 2002)


def test_scan_stops_at_garbage():
    rs = records(4)
    blob = b"".join(rs)
    garbage = b"\x00\x00\x01\x00garbage-garbage" + bytes(300)
    assert scan(blob + garbage) == (len(blob), RECORD_BAD_MAGIC, 4, 2003)


def test_scan_stops_at_torn_record():
    rs = records(4)
    blob = b"".join(rs)
    for cut in (9, 50, len(rs[3]) - 1):
        assert scan(blob[:len(blob) - len(rs[3]) + cut]) == (len(blob) - len(rs[3]), RECORD_SHORT, 3, 2002)


def test_scan_bad_crc_in_the_middle():
    rs = records(5)
    bad = bytearray(rs[2])
    bad[body_len_pos(bad) + 4] ^= 0x40
    blob = rs[0] + rs[1] + bytes(bad) + rs[3] + rs[4]
    assert scan(blob) == (len(rs[0]) + len(rs[1]), RECORD_BAD_CRC, 2, 2001)
    assert scan(blob, verify_crc=False) == (len(blob), RECORD_END, 5, 2004)


def test_scan_start_and_end():
    rs = records(4)
    blob = b"".join(rs) + bytes(64)
    n0 = len(rs[0])
    assert scan(blob, start=n0) == (len(blob) - 64, RECORD_END, 3, 2003)
    # ``end`` is where the readable data stops: a record crossing it is torn
    assert scan(blob, end=n0 + len(rs[1]) + 10) == (n0 + len(rs[1]), RECORD_SHORT, 2, 2001)
    assert scan(blob, end=n0) == (n0, RECORD_END, 1, 2000)
    assert scan(blob, start=len(blob)) == (len(blob), RECORD_END, 0, -1)
    assert scan(b"") == (0, RECORD_END, 0, -1)
    with pytest.raises(IndexError):
        scan(blob, start=-1)
    with pytest.raises(IndexError):
        scan(blob, start=len(blob) + 1)


def test_scan_mixed_variants():
    rs = [sample_record(0), sample_record(1, topic="X" * 180), sample_record(2, born=("::1", 3)),
          sample_record(3, store=("fe80::7", 4), body=b""),
          sample_record(4, born=("::2", 3), store=("::3", 4))]
    blob = b"".join(rs)
    assert scan(blob + ref.encode_blank(8)) == (len(blob), RECORD_BLANK, 5, 2004)
    pos = 0
    for i, r in enumerate(rs):
        assert decode_record(blob, pos).queue_offset == i
        pos += check_record_at(blob, pos)
    assert pos == len(blob)


# ------------------------------------------------------------------------------------------------
# Garbage never crashes
# ------------------------------------------------------------------------------------------------


def assert_decode_or_corrupted(buf, offset, base=0):
    try:
        e = decode_record(buf, offset, source="/x/00000000000000000000", base_offset=base)
    except StoreCorruptedError as exc:
        assert exc.path == "/x/00000000000000000000"
        assert exc.offset == base + offset
        assert "/x/00000000000000000000" in str(exc) and str(base + offset) in str(exc)
        return None
    # whatever decoded is readable
    (e.topic, e.body, e.properties, e.born_host, e.store_host, e.msg_id, e.keys, e.tags_code)
    assert e.store_size == check_record_at(buf, offset, verify_crc=False) > 0
    return e


@FAST
@given(data=st.binary(max_size=400), offset=st.integers(0, 400), base=st.integers(0, 2**40))
def test_random_bytes_never_crash(data, offset, base):
    offset = min(offset, len(data))
    r = check_record_at(data, offset)
    assert r <= len(data) - offset
    end, reason, count, _ = scan(data, offset)
    assert offset <= end <= len(data)
    assert reason <= 0 and count >= 0
    if offset < len(data):
        assert_decode_or_corrupted(data, offset, base)


@st.composite
def mutated_record(draw):
    rec = bytearray(draw(st.sampled_from(list(LENGTH_SAMPLES.values()))))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(rec) - 1))
        rec[pos] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(rec)))
    return bytes(rec[:cut]) + draw(st.binary(max_size=20))


@FAST
@given(data=mutated_record())
def test_mutated_records_never_crash(data):
    r = check_record_at(data, verify_crc=False)
    assert r <= len(data)
    end, reason, count, _ = scan(data, verify_crc=False)
    assert (end, count) == ((r, 1) if r > 0 else (0, 0))
    if data:
        e = assert_decode_or_corrupted(data, 0)
        assert (e is None) == (r <= 0)


def test_decode_record_error_names_source_and_absolute_offset():
    rec = sample_record()
    with pytest.raises(StoreCorruptedError) as ei:
        decode_record(bytes(64) + rec, 10, source="/store/commitlog/00000000001073741824",
                      base_offset=1073741824)
    assert ei.value.path == "/store/commitlog/00000000001073741824"
    assert ei.value.offset == 1073741834
    with pytest.raises(StoreCorruptedError) as ei:
        decode_record(rec, len(rec))
    assert ei.value.offset == len(rec)
    e = decode_record(bytes(64) + rec, 64)
    assert e.raw == rec


# ------------------------------------------------------------------------------------------------
# Strings: invalid UTF-8 and the properties string
# ------------------------------------------------------------------------------------------------


def raw_record(topic_b: bytes, props_b: bytes):
    return ref.encode(topic_b, b"", props_b, 0, 0, 0, 0, 0, 0, ("1.1.1.1", 1), 0, ("1.1.1.1", 2), 0, 0,
                      version=1)


def test_invalid_utf8_topic_is_replaced():
    rec = raw_record(b"To\xffpic\xc3", b"")
    e = decode_record(rec)
    assert e.topic == "To\ufffdpic\ufffd"
    assert e.to_message().topic == "To\ufffdpic\ufffd"


def test_invalid_utf8_properties_are_replaced():
    rec = raw_record(b"T", b"a\x01\xc3\x02b\x01ok\x02TAGS\x01t\xe2\x82\x02KEYS\x01k\xff1 k2\x02")
    e = decode_record(rec)
    assert e.properties == {"a": "\ufffd", "b": "ok", "TAGS": "t\ufffd", "KEYS": "k\ufffd1 k2"}
    assert e.tags == "t\ufffd"
    assert e.keys == ["k\ufffd1", "k2"]
    assert e.tags_code == java_string_hash("t\ufffd") == tags_code(rec)


@FAST
@given(st.binary(max_size=120))
def test_any_properties_bytes_decode_without_raising(raw):
    rec = raw_record(b"T", raw)
    e = decode_record(rec)
    assert e.properties == ref.parse_properties(raw.decode("utf-8", "replace"))


@pytest.mark.parametrize("s,expected", [
    ("", {}),
    ("a\x011\x02", {"a": "1"}),
    ("a\x011", {"a": "1"}),  # no trailing separator
    ("a\x01\x02", {}),  # empty value: dropped
    ("\x01v\x02", {}),  # empty name: dropped
    ("abc\x02", {}),  # no name/value separator
    ("\x02\x02a\x01b\x02\x02", {"a": "b"}),  # empty items
    ("a\x01b\x01c\x02", {"a": "b\x01c"}),  # the value may contain 0x01
    ("a\x011\x02a\x012\x02", {"a": "2"}),  # the last duplicate wins
    ("x\x01y\x02ab\x02c\x01d\x02", {"x": "y", "c": "d"}),
    ("KEYS\x01\x02TAGS\x01T\x02", {"TAGS": "T"}),
])
def test_string_to_properties_follows_rocketmq_5(s, expected):
    assert string_to_properties(s) == expected == ref.parse_properties(s)
    # and the record decoder applies the same rules
    assert decode_record(raw_record(b"T", s.encode())).properties == expected


@FAST
@given(st.text(st.sampled_from("ab\x01\x02é😀"), max_size=30))
def test_string_to_properties_equals_reference(s):
    assert string_to_properties(s) == ref.parse_properties(s)


def test_properties_to_string_keeps_order():
    assert properties_to_string({}) == ""
    assert properties_to_string({"b": "2", "a": "1"}) == "b\x012\x02a\x011\x02"
    props = {"z": "😀", "KEYS": "k1 k2", "é": "ü"}
    assert properties_to_string(props).encode() == ref.properties_string(props)
    assert string_to_properties(properties_to_string(props)) == props


# ------------------------------------------------------------------------------------------------
# Hosts and msg ids
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store,offset,expected", [
    (("192.168.0.1", 10911), 0, "C0A8000100002A9F0000000000000000"),
    (("10.0.0.1", 1), 0x0102030405060708, "0A000001000000010102030405060708"),
    (("::1", 10911), 155, "00000000000000000000000000000001" "00002A9F" "000000000000009B"),
])
def test_msg_id(store, offset, expected):
    m = Message("T", b"x", born_timestamp=0)
    e = decode_record(encode_record(m, commit_log_offset=offset, store_host=store))
    assert e.msg_id == expected == ref.msg_id(store, offset)
    assert len(e.msg_id) == (56 if ":" in store[0] else 32)


# ------------------------------------------------------------------------------------------------
# body_crc
# ------------------------------------------------------------------------------------------------


@FAST
@given(st.binary(max_size=2048))
def test_body_crc_is_masked_zlib_crc32(data):
    assert body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF == ref.body_crc(data)
    assert body_crc(bytearray(data)) == body_crc(memoryview(data)) == body_crc(data)


@pytest.mark.parametrize("path", ["vpclmulqdq", "pclmulqdq", "zlib"])
def test_body_crc_every_length_and_alignment_is_zlibs(path):
    # every path of the CRC this CPU runs, each forced in turn: zlib alone (< 64 bytes), 128-bit folds (from
    # 64 bytes), 256-bit folds (from 128 bytes), one round or many, with 0-15 bytes left for zlib, at several
    # alignments of the start
    import random

    from pystore.format._codec import _force_crc_implementation, crc_implementation, fast_body_crc

    before = _force_crc_implementation(path)
    try:
        if crc_implementation() != path:
            pytest.skip("this CPU or build has no %s path" % path)
        rng = random.Random(6)
        data = rng.randbytes(4096 + 64)
        lengths = list(range(0, 1100)) + [2047, 2048, 2049, 4095, 4096]
        for n in lengths:
            for skip in (0, 1, 3, 8, 15, 32):
                view = memoryview(data)[skip:skip + n]
                want = zlib.crc32(view) & 0x7FFFFFFF
                assert body_crc(view) == fast_body_crc(view) == want, (path, n, skip)
    finally:
        _force_crc_implementation(before)
    assert crc_implementation() == before


def test_crc_implementation_follows_the_cpu():
    from pystore.format._codec import crc_implementation, crc_implementations_built

    impl = crc_implementation()
    built = crc_implementations_built()
    assert impl in built and built[0] == "zlib"
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        flags = None
    if flags is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("no x86 /proc/cpuinfo flags to compare with")
    if "vpclmulqdq" in flags and "avx2" in flags and "vpclmulqdq" in built:
        assert impl == "vpclmulqdq"
    elif "pclmulqdq" in flags and "sse4_1" in flags and "pclmulqdq" in built:
        assert impl == "pclmulqdq"
    else:
        assert impl == "zlib"


def test_body_crc_of_empty_is_zero_and_non_negative():
    assert body_crc(b"") == 0
    # crc32(b"a") = 0xE8B7BE43, masked to 31 bits
    assert body_crc(b"a") == 0x68B7BE43


# ------------------------------------------------------------------------------------------------
# Put results (the parts that need no store)
# ------------------------------------------------------------------------------------------------


def test_put_message_result_without_append():
    r = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert not r.is_ok()
    assert r.append_message_result is None
    assert r.wrote_offset == -1 and r.next_offset == -1


def test_put_message_result_with_append():
    a = AppendMessageResult(AppendMessageStatus.PUT_OK, wrote_offset=1000, wrote_bytes=155, msg_id="ID",
                            store_timestamp=5, logics_offset=3, msg_num=1)
    r = PutMessageResult(PutMessageStatus.PUT_OK, a)
    assert r.is_ok() and a.is_ok()
    assert r.append_message_result is a
    assert (a.wrote_offset, a.wrote_bytes, a.msg_id, a.store_timestamp, a.logics_offset, a.msg_num) == (
        1000, 155, "ID", 5, 3, 1)
    # a flush timeout after a successful append is still "ok" (RocketMQ semantics)
    t = r.with_status(PutMessageStatus.FLUSH_DISK_TIMEOUT)
    assert t.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and t.is_ok()
    assert t.append_message_result is a
    failed = PutMessageResult(PutMessageStatus.UNKNOWN_ERROR,
                              AppendMessageResult(AppendMessageStatus.UNKNOWN_ERROR))
    assert not failed.is_ok()
    with pytest.raises(TypeError):
        PutMessageResult(PutMessageStatus.PUT_OK, "not a result")
    with pytest.raises(ValueError):
        PutMessageResult(999)
