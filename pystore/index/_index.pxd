# cython: language_level=3
from libc.stdint cimport UINT32_MAX, int32_t, int64_t, uint32_t
from libc.string cimport memchr, memcmp, memcpy

from pystore.format._jstring cimport java_hash_utf8_from
from pystore.log._mapped_file cimport MappedFile
from pystore.format._props cimport next_prop

cdef enum:
    TOPIC_CACHE = 256           # a stored topic's length is one byte


cdef class IndexFileCore:
    cdef readonly MappedFile mapped_file
    cdef readonly int64_t hash_slot_num
    cdef readonly int64_t index_num
    cdef readonly int64_t begin_timestamp
    cdef readonly int64_t end_timestamp
    cdef readonly int64_t begin_phy_offset
    cdef readonly int64_t end_phy_offset
    cdef readonly int32_t hash_slot_count
    cdef readonly int32_t index_count
    # a broken chain was logged (once a file: a lookup may hit it every time); public: the archive's reader, which
    # makes a core per lookup, sets it and logs breaks itself, once per archived object
    cdef public bint warned
    cdef readonly object broken  # the first break a walk met: (position, what), or None
    cdef int64_t slots_prefault_at  # the entry count at which the prefault worker is asked for the slot table

    cdef void _store_header(self) noexcept
    cdef void _start(self, int64_t begin_ts, int64_t end_ts, int64_t begin_phy, int64_t end_phy) noexcept
    cdef void _prefault_slots(self) noexcept nogil
    cdef int _put_hash(self, int32_t h, int64_t phy_offset, int64_t store_timestamp) except -1
    cdef int64_t _room(self) noexcept nogil
    cdef void _put_entry(self, unsigned char *b, bint read_only, int32_t h, int64_t phy_offset,
                         int64_t store_timestamp) noexcept nogil
    cdef void _broken(self, int64_t pos, str what)
    cdef bint _time_matched(self, int64_t begin, int64_t end) noexcept
    cdef int _select(self, list out, int32_t h, Py_ssize_t max_num, int64_t begin, int64_t end) except -1
    cdef int64_t _walk(self, list out, int32_t h, Py_ssize_t max_num, int64_t begin, int64_t end, int64_t cur,
                       const unsigned char *ready, Py_ssize_t n_ready, int64_t range_size,
                       int64_t *need) except -2


cdef inline int64_t _slot_of(int32_t h, int64_t slots) noexcept nogil:
    """The hash slot of a key whose (non-negative) ``key_hash`` is ``h``: ``h % slots``, as a 32-bit division
    when the table allows (a 64-bit one takes several times longer)."""
    if slots <= <int64_t>UINT32_MAX:
        return <uint32_t>h % <uint32_t>slots
    return h % slots


cdef class IndexFilesBase:
    cdef public list _files     # the index files, oldest first (a new list on every change)
    cdef public list _full      # files the writer left full, oldest first, until their flush (IndexService)
    # a file made ahead of need (mapped at _spare_path, which the writer renames to _spare_name when it takes
    # it, so the folder holds only files in use), or None
    cdef public IndexFileCore _spare
    cdef public str _spare_path
    cdef public str _spare_name
    # makes a file when there is no spare (the first file, or files filling faster than spares are made): the
    # owning IndexService's ``_new_file``; None: no file (the one call from C into Python left on this path)
    cdef public object new_file
    # entries dropped because no file could be made (a full disk): at least that many keys are not found
    cdef public long long dropped
    # the last topic indexed and the Java hash of topic + "#" (_prefix); length -1: none yet
    cdef unsigned char _topic[TOPIC_CACHE]
    cdef Py_ssize_t _topic_len
    cdef uint32_t _prefix


cdef enum:
    KEY_SCAN_HASHES = 16        # key hashes a KeyScan holds at a time (a message with more takes several turns)


cdef struct KeyScan:
    # what index_scanned needs of a message's properties: the hashes of its next keys (h[:n]) and where
    # the keys still to hash are (UNIQ_KEY at uniq_pos, or -1; KEYS from keys_pos to keys_end)
    uint32_t prefix
    int32_t uniq_pos
    int32_t uniq_len
    int32_t keys_pos
    int32_t keys_end
    int32_t n
    int32_t h[KEY_SCAN_HASHES]


cdef bint key_scan(IndexFilesBase service, const unsigned char *topic, Py_ssize_t topic_len,
                   const unsigned char *props, Py_ssize_t props_len, int32_t sys_flag, KeyScan *ks) noexcept
cdef int index_scanned(IndexFilesBase service, const unsigned char *props, const KeyScan *scan,
                       int64_t phy_offset, int64_t store_ts) except -1


cdef int index_message(IndexFilesBase service, const unsigned char *topic, Py_ssize_t topic_len,
                       const unsigned char *props, Py_ssize_t props_len, int64_t phy_offset, int64_t store_ts,
                       int32_t sys_flag) except -1


cdef IndexFileCore writable_file(IndexFilesBase service)
cdef void next_hashes(const unsigned char *props, KeyScan *ks) noexcept nogil


cdef inline int find_keys(const unsigned char *props, int32_t n, KeyScan *ks) noexcept nogil:
    """``find_properties(props, n, "KEYS", 4, ..., "UNIQ_KEY", 8, ...)`` filling ``ks``'s positions: the items
    of the one splitter (``_props.next_prop``; the last of a name wins), the name told by its length and one
    compare. Bit 0 set when KEYS was found, bit 1 when UNIQ_KEY."""
    cdef Py_ssize_t at = 0
    cdef Py_ssize_t item[4]
    cdef int found = 0
    while next_prop(props, n, &at, item):
        if item[1] == 4 and memcmp(props + item[0], b"KEYS", 4) == 0:
            ks.keys_pos = <int32_t>item[2]
            ks.keys_end = <int32_t>(item[2] + item[3])
            found |= 1
        elif item[1] == 8 and memcmp(props + item[0], b"UNIQ_KEY", 8) == 0:
            ks.uniq_pos = <int32_t>item[2]
            ks.uniq_len = <int32_t>item[3]
            found |= 2
    return found


cdef inline uint32_t topic_prefix(unsigned char *cached, Py_ssize_t *cached_len, uint32_t *cached_hash,
                                  const unsigned char *topic, Py_ssize_t topic_len) noexcept nogil:
    """The Java hash of ``topic + "#"`` (the topic decoded on its own, as "#" and each key are: hashing on
    from it gives the whole key's), kept in the given cache (the service's for the put path, a log scan's for
    the builder) for the next message of the same topic."""
    cdef uint32_t h
    if topic_len == cached_len[0] and memcmp(topic, cached, topic_len) == 0:
        return cached_hash[0]
    h = 31 * java_hash_utf8_from(0, topic, topic_len) + 35
    if topic_len <= TOPIC_CACHE:
        memcpy(cached, topic, topic_len)
        cached_len[0] = topic_len
        cached_hash[0] = h
    return h
