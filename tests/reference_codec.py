"""The tests' independent reference for the commit-log record (docs/format.md §1, §1.8, §2.2, §14).

Written from docs/format.md alone, with ``struct`` and nothing from pystore, so that the compiled codec in
``pystore.format._codec`` / ``pystore.message._message`` can be checked against it byte for byte (the C path must equal
               this Python reference, as yarl's and msgpack's test suites check their C speed-ups). It is slow on
purpose: clarity over speed.

Record layout (big-endian; every integer signed)::

    TOTALSIZE i32 | MAGICCODE i32 | BODYCRC i32 | QUEUEID i32 | FLAG i32 | QUEUEOFFSET i64 |
    PHYSICALOFFSET i64 | SYSFLAG i32 | BORNTIMESTAMP i64 | BORNHOST 4+4 or 16+4 |
    STORETIMESTAMP i64 | STOREHOST 4+4 or 16+4 | RECONSUMETIMES i32 | PREPAREDTXOFFSET i64 |
    BODYLEN i32 + body | TOPICLEN i8 (V1) or i16 (V2) + topic | PROPLEN i16 + properties
"""

from __future__ import annotations

import ipaddress
import struct
import zlib

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194

BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

# docs/format.md §1.1 position constants
POS = {
    "TOTALSIZE": 0,
    "MAGIC": 4,
    "BODYCRC": 8,
    "QUEUEID": 12,
    "FLAG": 16,
    "QUEUEOFFSET": 20,
    "PHYSICALOFFSET": 28,
    "SYSFLAG": 36,
    "BORNTIMESTAMP": 40,
    "BORNHOST": 48,
}


def _s32(v: int) -> int:
    """The signed 32-bit value of ``v`` (wraparound), as Java's ``int``."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def java_hash(s: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, signed 32-bit."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return _s32(h)


def java_length(s: str) -> int:
    """Java ``String.length()``: the number of UTF-16 code units."""
    return len(s.encode("utf-16-be", "surrogatepass")) // 2


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def host_bytes(host) -> bytes:
    """``(address, port)`` → 4 or 16 address bytes + big-endian int port."""
    addr, port = host
    ip = ipaddress.ip_address(addr)
    return ip.packed + struct.pack(">i", port)


def host_is_v6(host) -> bool:
    return ipaddress.ip_address(host[0]).version == 6


def host_text(raw: bytes) -> tuple:
    """4+4 or 16+4 bytes → ``(compressed address text, port)``."""
    addr = ipaddress.ip_address(raw[:-4]).compressed
    return (addr, struct.unpack(">i", raw[-4:])[0])


def cal_msg_length(version: int, sys_flag: int, body_len: int, topic_len: int, props_len: int) -> int:
    """docs/format.md §1.2 ``calMsgLength``."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOST_V6_FLAG else 8
    return (
        4  # TOTALSIZE
        + 4  # MAGICCODE
        + 4  # BODYCRC
        + 4  # QUEUEID
        + 4  # FLAG
        + 8  # QUEUEOFFSET
        + 8  # PHYSICALOFFSET
        + 4  # SYSFLAG
        + 8  # BORNTIMESTAMP
        + born
        + 8  # STORETIMESTAMP
        + store
        + 4  # RECONSUMETIMES
        + 8  # PREPAREDTXOFFSET
        + 4 + body_len
        + (2 if version == 2 else 1) + topic_len
        + 2 + props_len
    )


def choose_version(topic: str) -> int:
    """docs/format.md §1.3: V2 iff the topic has more than 127 Java chars."""
    return 2 if java_length(topic) > 127 else 1


def encode(topic, body: bytes, properties_string: bytes, queue_id: int, flag: int, queue_offset: int,
           phy_offset: int, sys_flag: int, born_ts: int, born_host, store_ts: int, store_host,
           reconsume_times: int, prepared_tx_offset: int, version: int | None = None) -> bytes:
    """One record's bytes. ``topic`` is a ``str`` (or raw ``bytes``, used as stored). The host v6 bits of
    ``sys_flag`` are set (or cleared) from the hosts; ``version=None`` picks V1 unless the topic is longer
    than 127 characters."""
    if isinstance(topic, str):
        topic_b = topic.encode("utf-8")
        if version is None:
            version = choose_version(topic)
    else:
        topic_b = bytes(topic)
        if version is None:
            version = 2 if len(topic_b) > 127 else 1
    body = bytes(body)
    props = bytes(properties_string)
    bh = host_bytes(born_host)
    sh = host_bytes(store_host)
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    if len(bh) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(sh) == 20:
        sys_flag |= STOREHOST_V6_FLAG
    total = cal_msg_length(version, sys_flag, len(body), len(topic_b), len(props))
    magic = MAGIC_V2 if version == 2 else MAGIC_V1
    out = bytearray()
    out += struct.pack(">iIiii", total, magic, body_crc(body), _s32(queue_id), _s32(flag))
    out += struct.pack(">qqi", queue_offset, phy_offset, _s32(sys_flag))
    out += struct.pack(">q", born_ts) + bh
    out += struct.pack(">q", store_ts) + sh
    out += struct.pack(">iq", _s32(reconsume_times), prepared_tx_offset)
    out += struct.pack(">i", len(body)) + body
    if version == 2:
        out += struct.pack(">h", len(topic_b)) + topic_b
    else:
        out += struct.pack(">b", len(topic_b)) + topic_b
    out += struct.pack(">h", len(props)) + props
    assert len(out) == total
    return bytes(out)


def encode_blank(size: int) -> bytes:
    """The 8-byte end-of-file blank header announcing ``size`` bytes (docs/format.md §1.4)."""
    return struct.pack(">iI", size, BLANK_MAGIC)


def parse_properties(s: str) -> dict:
    """RocketMQ 5.x ``string2messageProperties`` (docs/format.md §1.7): split on 0x02, keep an item iff it has
    a non-empty name before its first 0x01 and a non-empty value after it; the last duplicate wins."""
    out: dict = {}
    for item in s.split("\x02"):
        sep = item.find("\x01")
        if sep >= 1 and sep < len(item) - 1:
            out[item[:sep]] = item[sep + 1:]
    return out


def properties_string(props) -> bytes:
    """``name 0x01 value 0x02`` per entry, in the mapping's order, UTF-8."""
    return "".join("%s\x01%s\x02" % (k, v) for k, v in props.items()).encode("utf-8")


def msg_id(store_host, offset: int) -> str:
    """docs/format.md §1.8: upper-case hex of store address + port (int) + offset (long)."""
    return (host_bytes(store_host) + struct.pack(">q", offset)).hex().upper()


def decode(buf, offset: int = 0) -> dict:
    """Every field of the record at ``offset`` (raises ``ValueError`` if it is not a whole V1/V2 record)."""
    mv = bytes(memoryview(buf)[offset:])
    if len(mv) < 8:
        raise ValueError("no record header")
    total, magic = struct.unpack_from(">iI", mv, 0)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise ValueError("bad magic %#x" % magic)
    if total > len(mv):
        raise ValueError("short record")
    rec = mv[:total]
    d: dict = {"total_size": total, "magic": magic, "version": 2 if magic == MAGIC_V2 else 1}
    (d["body_crc"], d["queue_id"], d["flag"], d["queue_offset"], d["phy_offset"], d["sys_flag"],
     d["born_timestamp"]) = struct.unpack_from(">iiiqqiq", rec, 8)
    pos = 48
    bl = 20 if d["sys_flag"] & BORNHOST_V6_FLAG else 8
    d["born_host_raw"] = rec[pos:pos + bl]
    d["born_host"] = host_text(d["born_host_raw"])
    pos += bl
    (d["store_timestamp"],) = struct.unpack_from(">q", rec, pos)
    d["store_timestamp_pos"] = pos
    pos += 8
    sl = 20 if d["sys_flag"] & STOREHOST_V6_FLAG else 8
    d["store_host_raw"] = rec[pos:pos + sl]
    d["store_host"] = host_text(d["store_host_raw"])
    d["store_host_pos"] = pos
    pos += sl
    d["reconsume_times"], d["prepared_tx_offset"] = struct.unpack_from(">iq", rec, pos)
    pos += 12
    d["body_len_pos"] = pos
    (body_len,) = struct.unpack_from(">i", rec, pos)
    pos += 4
    if body_len < 0 or pos + body_len > total:
        raise ValueError("bad body length")
    d["body"] = rec[pos:pos + body_len]
    pos += body_len
    d["topic_len_pos"] = pos
    if d["version"] == 2:
        (tl,) = struct.unpack_from(">h", rec, pos)
        pos += 2
    else:
        (tl,) = struct.unpack_from(">b", rec, pos)
        pos += 1
    if tl < 0 or pos + tl > total:
        raise ValueError("bad topic length")
    d["topic_raw"] = rec[pos:pos + tl]
    d["topic"] = d["topic_raw"].decode("utf-8", "replace")
    pos += tl
    d["props_len_pos"] = pos
    (pl,) = struct.unpack_from(">h", rec, pos)
    pos += 2
    if pl < 0 or pos + pl != total:
        raise ValueError("bad properties length")
    d["properties_raw"] = rec[pos:pos + pl]
    d["properties"] = parse_properties(d["properties_raw"].decode("utf-8", "replace"))
    d["tags"] = d["properties"].get("TAGS")
    d["tags_code"] = java_hash(d["tags"]) if d["tags"] else 0
    k = d["properties"].get("KEYS")
    d["keys"] = [x for x in k.split(" ") if x] if k else []
    d["msg_id"] = (d["store_host_raw"] + struct.pack(">q", d["phy_offset"])).hex().upper()
    if cal_msg_length(d["version"], d["sys_flag"], body_len, tl, pl) != total:
        raise ValueError("lengths disagree with TOTALSIZE")
    return d
