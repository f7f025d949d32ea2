# cython: language_level=3
"""The properties string of a record (docs/format.md §1.7): ``name \\x01 value \\x02`` per item, written as
RocketMQ's ``messageProperties2String`` writes it and read as 5.x's decoder reads it; the checks that make a
property read back as given; the ``DELAY`` property as a level.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsEncodedString, PyUnicode_DecodeUTF8

cdef extern from *:
    int PyUnicode_IS_ASCII(object o)


cpdef str properties_to_string(dict props):
    """``name \\x01 value \\x02`` for each entry, as RocketMQ's ``messageProperties2String``."""
    if not props:
        return ""
    parts = []
    for k, v in props.items():
        parts.append(k)
        parts.append("\x01")
        parts.append(v)
        parts.append("\x02")
    return "".join(parts)


cpdef dict string_to_properties(str s):
    """RocketMQ's decoder (``MessageDecoder.string2messageProperties``): an item is kept iff it has a
    non-empty name and a non-empty value; a name that repeats keeps its first place in the dict and takes its
    last value (the HashMap RocketMQ decodes into keeps the last). Split by ``next_prop``, as stored records
    are."""
    cdef bytes b
    if not s:
        return {}
    # surrogatepass both ways: any str round-trips, and the separators (ASCII) never fall inside a character
    b = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass")
    return props_from_utf8(<const unsigned char *>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), "surrogatepass")


cdef dict props_from_utf8(const unsigned char *p, Py_ssize_t n, const char *errors):
    """The properties of the UTF-8 properties string ``p[:n]`` as a dict (see ``string_to_properties``), each
    name and value decoded with ``errors`` (``replace`` for stored bytes: Java's replacing decoder)."""
    cdef dict out = {}
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t item[4]
    while next_prop(p, n, &at, item):
        name = PyUnicode_DecodeUTF8(<const char *>p + item[0], item[1], errors)
        out[name] = PyUnicode_DecodeUTF8(<const char *>p + item[2], item[3], errors)
    return out


cdef int check_text(str s, str what, object name) except -1:
    # the decoder (RocketMQ's string2messageProperties) drops an empty name or value and splits on the
    # separators, and UTF-8 has no encoding for a lone surrogate: such a property would not read back as given
    if not s:
        raise ValueError("%s of property %r is empty" % (what, name))
    if "\x01" in s or "\x02" in s:
        raise ValueError("%s of property %r contains a separator (\\x01 or \\x02): %r" % (what, name, s))
    if not PyUnicode_IS_ASCII(s):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("%s of property %r cannot be stored in UTF-8 (%s): %r"
                             % (what, name, e.reason, s)) from None
    return 0


cdef int check_prop(object k, object v) except -1:
    if not isinstance(k, str) or not isinstance(v, str):
        raise TypeError("message properties are str -> str, got %r: %r" % (k, v))
    check_text(<str>k, "the name", k)
    check_text(<str>v, "the value", k)
    return 0


cdef int32_t delay_level_of(object d):
    """The DELAY property as a level: missing, unparsable or negative is none (0), beyond an int the largest
    level (Message and MessageExt read it alike)."""
    cdef object lvl
    if d is None:
        return 0
    try:
        lvl = int(d)
    except ValueError:
        return 0
    return 0 if lvl < 0 else (lvl if lvl < 0x7FFFFFFF else 0x7FFFFFFF)
