"""Regression tests for bugs once found in pystore's codec and message code (all fixed).

Each test states the input, what docs/format.md / docs/api.md lead one to expect, and the line suspected."""

from __future__ import annotations

import pytest
import reference_codec as ref
from test_codec import run_guarded

from pystore import Message
from pystore.format._codec import check_record_at, decode_record, encode_record
from pystore.format._jstring import java_string_hash


def test_bug1_check_record_reads_fixed_fields_past_the_buffer_for_ipv6_flags():
    """A record header claiming TOTALSIZE 91 (the IPv4 minimum) with SYSFLAG 0x30 (both hosts IPv6), flush
    against the end of the readable memory. The fixed part of such a record is 115 bytes, so it is
    RECORD_BAD_LENGTH; check_record reads STORETIMESTAMP/STOREHOST/RECONSUMETIMES/PREPAREDTXOFFSET up to byte
    108 before comparing anything with TOTALSIZE -> reads 17 bytes past the buffer (SIGSEGV here).
    Suspect: _codec.pyx check_record, ``if total < _MIN_RECORD`` only checks 91; the fixed length for the
    sys flag (84 + 12 per IPv6 host + 4) must be checked against ``total`` before the reads."""
    run_guarded("""
        rec = bytearray(ref.encode("T", b"", b"", 0, 0, 0, 0, 0, 0, ("1.2.3.4", 1), 0, ("1.2.3.4", 2),
                                   0, 0)[:91])
        struct.pack_into(">i", rec, 0, 91)
        struct.pack_into(">i", rec, 36, 0x30)
        mv = guarded(bytes(rec))
        assert check_record_at(mv) == -4   # RECORD_BAD_LENGTH
    """)


def test_bug2_tags_code_negative_offset_reads_before_the_buffer():
    """``tags_code(data, offset)`` does not validate ``offset`` (check_record_at raises IndexError for it).
    With offset -16 it reads from 16 bytes before the buffer (SIGSEGV with a guard page there).
    Suspect: _codec.pyx ``def tags_code``: ``&b[offset]`` under boundscheck=False/wraparound=False."""
    run_guarded("""
        rec = ref.encode("T", b"x", b"TAGS\\x01a\\x02", 0, 0, 0, 0, 0, 0, ("1.2.3.4", 1), 0,
                         ("1.2.3.4", 2), 0, 0)
        mv = guarded(rec, at_end=False)
        try:
            tags_code(mv, -16)
        except IndexError:
            pass
        else:
            raise AssertionError("no IndexError")
    """)


@pytest.mark.parametrize("bad_port", [True, 1.0])
def test_bug3_host_cache_accepts_a_non_int_port_after_a_hit(bad_port):
    """``("10.9.8.7", True)`` raises TypeError on a fresh address, but after ``("10.9.8.7", 1)`` was used once
    it is accepted (True == 1 and 1.0 == 1 hash and compare equal to the cached tuple).
    Suspect: _hosts.pyx ``encode_host``: ``_host_cache.get(host)`` runs before the type checks of
    ``_encode_host_slow``."""
    Message("T", b"", born_host=("10.9.8.7", 1))
    with pytest.raises(TypeError):
        Message("T", b"", born_host=("10.9.8.7", bad_port))


def test_bug4_java_string_hash_of_a_lone_surrogate():
    """Java hashes every UTF-16 code unit, a lone surrogate included: "\\ud800".hashCode() == 0xD800 == 55296.
    java_string_hash returns 63 (the hash of "?"), because it hashes ``s.encode("utf-8", "replace")``.
    Suspect: _jstring.pyx ``java_hash_str``. (Stored records cannot hold a lone surrogate, so tags codes of
    records are not affected; only the public function's claim "Java's String.hashCode of s".)"""
    assert java_string_hash("\ud800") == 0xD800
    assert java_string_hash("a\udc00") == 97 * 31 + 0xDC00


def test_bug5_delay_property_with_a_big_number_breaks_the_message():
    """``Message("T", b"", properties={"DELAY": "99999999999"})`` raises OverflowError; a message the store
    must judge should be constructible (and once put_property set such a value every later setter raises).
    Suspect: _message.pyx ``_refresh``: ``self._delay_level = int(d)`` into an int32_t catches only
    ValueError."""
    m = Message("T", b"", properties={"DELAY": "99999999999"})
    assert m.get_property("DELAY") == "99999999999"
    m2 = Message("T", b"")
    try:
        m2.put_property("DELAY", "99999999999")
    except OverflowError:
        pass
    m2.tags = "x"  # raises OverflowError today: the message is stuck
    assert m2.tags == "x"


@pytest.mark.parametrize("name,value", [("a", None), (None, "v")])
def test_bug6_put_property_with_none_corrupts_the_message(name, value):
    """``put_property("a", None)`` (Cython ``str`` arguments accept None) stores None in the properties, then
    ``_refresh`` raises TypeError half-way: ``m.properties`` shows ``{'x': '1', 'a': None}`` while
    ``encode_record`` still writes the old properties, and later setters keep failing.
    Expected: TypeError before anything changes. Suspect: _message.pyx ``def put_property(self, str name,
    str value)`` (needs ``not None``, or the _check_prop check)."""
    m = Message("T", b"", properties={"x": "1"})
    before = encode_record(m)
    with pytest.raises(TypeError):
        m.put_property(name, value)
    assert m.properties == {"x": "1"}
    m.tags = "t"
    assert encode_record(m) != before


def test_bug7_v2_switch_counts_code_points_not_java_chars():
    """docs/format.md §1.3: V2 iff ``topic.length() > 127`` in Java chars (UTF-16 units). A topic of 64 U+1F600
    is 128 Java chars (V2) and 256 UTF-8 bytes; pystore counts 64 code points, writes V1 and its 1-byte topic
    length wraps to 0, so the record it encodes does not decode. (Such a topic is refused by the put checks,
    so only encode_record/record_length are affected.) Suspect: _message.pyx ``_refresh``:
    ``self._version = 2 if len(self._topic) > MAX_V1_TOPIC_CHARS else 1``; and _codec.pyx encode_message
    ``q[0] = <unsigned char>topic_len`` truncates silently."""
    topic = "\U0001F600" * 64
    rec = encode_record(Message(topic, b"x", born_timestamp=0))
    assert rec == ref.encode(topic, b"x", b"", 0, 0, 0, 0, 0, 0, ("127.0.0.1", 0), 0, ("127.0.0.1", 10911),
                             0, 0)
    assert check_record_at(rec) == len(rec)
    assert decode_record(rec).topic == topic


def test_stored_delay_level_beyond_int_reads_as_the_message_reads_it():
    """A DELAY property above 2^31-1 is clamped the same way by Message and by the decoded MessageExt
    (found by hypothesis: 2200000000 decoded unclamped); a negative one reads as no delay."""
    from pystore import Message
    from pystore.format._codec import decode_record, encode_record

    for text, level in (("2200000000", 0x7FFFFFFF), ("-3", 0), ("7", 7)):
        m = Message("T", b"", properties={"DELAY": text})
        assert m.delay_time_level == level
        assert decode_record(encode_record(m)).delay_time_level == level
