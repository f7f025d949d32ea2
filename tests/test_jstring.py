"""Java's ``String.hashCode`` of a ``str`` (``pystore.format._jstring.java_string_hash``; docs/format.md §2.2, §14):
over UTF-16 code units, so a character beyond the BMP counts as its two surrogates and a lone surrogate as
itself; compared with references written out in Python. The same hash straight from stored UTF-8 bytes (the
tags code of a record) is tested with the codec in test_codec.py."""

from __future__ import annotations

import pytest
import reference_codec as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pystore.format._jstring import java_string_hash

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def utf16_hash(s: str) -> int:
    """``h = 31*h + c`` over UTF-16 code units, signed 32-bit (written out again here on purpose)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i:i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize("s,expected", [
    ("", 0),
    ("hello", 99162322),
    ("TagA", 2598919),  # ((84*31 + 97)*31 + 103)*31 + 65
    ("polygenelubricants", -(2**31)),  # the well-known Integer.MIN_VALUE hashCode
    ("é", 0xE9),
    ("日本", 0x65E5 * 31 + 0x672C),
    ("😀", 0xD83D * 31 + 0xDE00),  # U+1F600 is a surrogate pair in Java
])
def test_java_string_hash_known_values(s, expected):
    assert java_string_hash(s) == expected == utf16_hash(s) == ref.java_hash(s)


def test_java_string_hash_of_astral_string_counts_two_code_units():
    s = "a𝄞b"  # U+1D11E = D834 DD1E
    assert java_string_hash(s) == ((97 * 31 + 0xD834) * 31 + 0xDD1E) * 31 + 98


def test_java_string_hash_rejects_non_str():
    with pytest.raises(TypeError):
        java_string_hash(b"abc")
    with pytest.raises(TypeError):
        java_string_hash(None)


@FAST
@given(st.text(max_size=200))
def test_java_string_hash_equals_reference(s):
    assert java_string_hash(s) == ref.java_hash(s) == utf16_hash(s)


@FAST
@given(st.lists(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=100).map("".join))
def test_java_string_hash_of_any_text_with_lone_surrogates_equals_reference(s):
    """Lone surrogates (which no UTF-8 encodes) count as the one code unit they are, as in Java."""
    assert java_string_hash(s) == ref.java_hash(s)


@pytest.mark.parametrize("s", ["\ud800", "a\udfffb", "\udc00\ud800", "\ud834\udd1e"])
def test_java_string_hash_of_surrogates(s):
    h = 0
    for c in s:
        h = (31 * h + ord(c)) % 2**32
    assert java_string_hash(s) == (h - 2**32 if h >= 2**31 else h)


def test_a_pair_of_surrogates_hashes_like_the_character_they_make():
    assert java_string_hash("\ud834\udd1e") == java_string_hash("𝄞")


def test_the_hash_wraps_as_a_signed_32_bit_int():
    s = "z" * 50
    h = 0
    for c in s:
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    assert java_string_hash(s) == (h - 2**32 if h >= 2**31 else h)
    assert -(2**31) <= java_string_hash(s) < 2**31
