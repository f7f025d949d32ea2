# cython: language_level=3
"""The properties string (docs/format.md §1.7). Its one splitter, ``next_prop``, is inline: the Arrow decoder
(``_textfmt.parse_props``) runs it on every record without the GIL, and ``props_from_utf8`` builds from it the
dict that ``MessageExt.properties`` and ``string_to_properties`` return."""
from libc.stdint cimport int32_t


cdef inline bint next_prop(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at,
                           Py_ssize_t *item) noexcept nogil:
    """The next item of the properties string ``p[:n]``, from ``at[0]`` on, that RocketMQ's decoder
    (``MessageDecoder.string2messageProperties``) keeps: a non-empty name before the item's first \\x01 and a
    non-empty value after it. Sets ``item`` to (name_pos, name_len, value_pos, value_len) and moves ``at[0]``
    past the item; False when no item is left. A name may repeat: RocketMQ puts every item into a HashMap, so
    its last value wins, and each caller merges repeats that way."""
    cdef Py_ssize_t start = at[0], end, sep
    while start < n:
        end = start
        while end < n and p[end] != 2:
            end += 1
        sep = start
        while sep < end and p[sep] != 1:
            sep += 1
        if sep > start and sep < end - 1:
            item[0] = start
            item[1] = sep - start
            item[2] = sep + 1
            item[3] = end - sep - 1
            at[0] = end + 1
            return True
        start = end + 1
    at[0] = start
    return False


cpdef str properties_to_string(dict props)
cpdef dict string_to_properties(str s)
cdef dict props_from_utf8(const unsigned char *p, Py_ssize_t n, const char *errors)
cdef int check_text(str s, str what, object name) except -1
cdef int check_prop(object k, object v) except -1
cdef int32_t delay_level_of(object d)
