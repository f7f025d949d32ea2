# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One index file: hash slots and linked entries (docs/format.md §3.1, §3.2, §3.4; RocketMQ ``IndexFile``).

::

    0                40                     40 + slots*4                      40 + slots*4 + num*20
    | header         | slot table           | entries (entry 0 is never used)  |
    | 40 bytes       | int32 per slot:      | 20 bytes each:                   |
    |                | newest entry number  | keyHash int32 | phyOffset int64  |
    |                | in the chain, 0=none | timeDiff int32 (s) | prev int32  |

    header: beginTimestamp int64, endTimestamp int64, beginPhyOffset int64, endPhyOffset int64,
            hashSlotCount int32, indexCount int32 (starts at 1: the next free entry number)

The key is ``topic + "#" + key``; its hash is ``abs(String.hashCode)`` (``Integer.MIN_VALUE`` → 0), its slot
``hash % slots``. Lookups compare only the 32-bit hash, as RocketMQ does, so a collision returns an extra
offset (callers re-check the decoded message). Not checksummed: recovery rebuilds entries after the
checkpoint's index time. One writer; readers see whole entries (an entry is linked into its slot after it
is written).

Nothing read from the file is trusted to end a walk: entries are appended and each links to an older one, so
a chain's ``prev`` numbers strictly decrease, and a chain that does not (a loop, a link forward or past the
written entries) is cut where it breaks. The index is a lossy accelerator: a lookup stops at the break (one
warning a file) rather than fail, and ``check_chains`` lists every break for ``pystore verify``.

The walk (``_walk``) is resumable, for an archived file fetched by ranges (``pystore.archive.archive``): given
a byte map of the ranges readable, it stops before the first byte outside them (the key's slot, or the next
entry) and says which bytes it needs and where to resume; the local lookup runs the same walk with every byte
readable (``walk`` from Python, ``_select`` from C).

Also here: ``index_message``, the writer of a message's entries, which dispatch (inline and reput) calls once
per message with the stored topic and properties bytes; it hashes each key on the bytes (``java_hash_utf8``
going on over topic, ``#`` and key, each decoded on its own as the stored UTF-8 is, which ``key_hash`` of the
decoded string equals). When a file fills it takes the one made ahead (``take_spare``), and calls Python
only to make a file when there is none. It is two steps, which the inline dispatch calls apart: ``key_scan``
(the hashes, no offset needed; it starts fetching their slots) before the record is written,
``index_scanned`` (the entries) after.

And ``index_log``, the index builder's walk of the commit log: it scans records and writes their entries in
batches with the GIL released (``_put_entry``), taking the GIL back only to switch files or to ask the
prefault worker for more pages (``_room``).
"""

import logging

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from libc.stdint cimport INT32_MIN, INT64_MAX, int32_t, int64_t, uint32_t
from libc.stdio cimport rename
from libc.string cimport memchr

from pystore.format._bytes cimport get_i32, get_i64, load_i32_acquire, put_i32, put_i64, store_i32_release
from pystore.format._codec cimport TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from pystore.log._mapped_file cimport MappedFile
from pystore.format._jstring cimport java_hash_str, java_hash_utf8_from

HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
cdef enum:
    _ENTRY = 20                 # an index entry: key hash i32, phy offset i64, time diff i32, previous i32
INDEX_SIZE = _ENTRY
cdef int64_t _HEADER = 40
cdef int64_t _PAGE = 4096
# how far ahead of the writer the prefault worker is asked to have the entries' pages (13,107 entries)
cdef int64_t _PREFAULT_LEAD = 256 * 1024
#: disk allocated and pre-faulted ahead of an index file's entries (``MappedFile(window=)``): the rest of the
#: file stays a hole until written
PREFAULT_WINDOW = 2 * _PREFAULT_LEAD

log = logging.getLogger("pystore.index.service")


cpdef int32_t key_hash(str key) except? -1:
    """RocketMQ ``indexKeyHashMethod``: abs(String.hashCode), with Integer.MIN_VALUE → 0."""
    return _abs_hash(<uint32_t>java_hash_str(key))


def index_file_size(long long slots, long long num):
    return _HEADER + slots * 4 + num * _ENTRY


cdef inline bint _readable(const unsigned char *ready, Py_ssize_t n_ready, int64_t range_size, int64_t pos,
                           int64_t n) noexcept nogil:
    """Whether bytes ``[pos, pos + n)`` lie in ranges the byte map ``ready`` marks readable (NULL: every byte is)."""
    cdef int64_t i
    if ready == NULL:
        return True
    for i in range(pos // range_size, (pos + n - 1) // range_size + 1):
        if i >= n_ready or not ready[i]:
            return False
    return True


@cython.final
cdef class IndexFileCore:
    """One index file over its mapping (the attributes are declared in ``_index.pxd``)."""

    def __init__(self, MappedFile mf not None, long long hash_slot_num, long long index_num):
        if mf.file_size != _HEADER + hash_slot_num * 4 + index_num * _ENTRY:
            raise ValueError("%s is %d bytes, not an index of %d slots and %d entries" % (
                mf.file_name, mf.file_size, hash_slot_num, index_num))
        self.mapped_file = mf
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        # Keys land all over the slot table, and each page of it faults on the put path the first time one
        # does (a few microseconds, several puts' worth). Once the file holds as many entries as the table
        # has pages, random keys (a UNIQ_KEY a message) have touched most of it (1 - 1/e), so from there the
        # prefault worker takes the rest at once, off the put path: the disk it allocates is about what the
        # keys would take anyway, and a file of few keys keeps a sparse table
        self.slots_prefault_at = (hash_slot_num * 4 + _PAGE - 1) // _PAGE
        self.load_header()

    def load_header(self):
        cdef unsigned char *b = self.mapped_file.base
        self.mapped_file.check_mapped()
        self.begin_timestamp = get_i64(b)
        self.end_timestamp = get_i64(b + 8)
        self.begin_phy_offset = get_i64(b + 16)
        self.end_phy_offset = get_i64(b + 24)
        self.hash_slot_count = get_i32(b + 32)
        self.index_count = get_i32(b + 36)
        if self.index_count <= 0:
            self.index_count = 1
        elif self.index_count > self.index_num:
            # a damaged header: entries past the file's end do not exist; a writer sees the file full
            log.warning("%s: header indexCount %d exceeds the file's %d entries; using %d",
                        self.mapped_file.file_name, self.index_count, self.index_num, self.index_num)
            self.index_count = <int32_t>self.index_num

    def init_header(self, long long begin_ts, long long end_ts, long long begin_phy, long long end_phy):
        """A new file starts from the previous file's end values (0 for the first)."""
        self._start(begin_ts, end_ts, begin_phy, end_phy)

    cdef void _start(self, int64_t begin_ts, int64_t end_ts, int64_t begin_phy, int64_t end_phy) noexcept:
        self.begin_timestamp = begin_ts
        self.end_timestamp = end_ts
        self.begin_phy_offset = begin_phy
        self.end_phy_offset = end_phy
        self.hash_slot_count = 0
        self.index_count = 1
        self._store_header()

    cdef void _store_header(self) noexcept:
        cdef unsigned char *b = self.mapped_file.base
        if b == NULL or self.mapped_file.read_only:
            return
        put_i64(b, self.begin_timestamp)
        put_i64(b + 8, self.end_timestamp)
        put_i64(b + 16, self.begin_phy_offset)
        put_i64(b + 24, self.end_phy_offset)
        put_i32(b + 32, self.hash_slot_count)
        put_i32(b + 36, self.index_count)

    cdef void _prefault_slots(self) noexcept nogil:
        """Have the prefault worker take the whole hash slot table, or try again 1024 entries later when it
        could not be asked."""
        if self.mapped_file.prefault_range(0, _HEADER + self.hash_slot_num * 4):
            self.slots_prefault_at = INT64_MAX
        else:
            self.slots_prefault_at = self.index_count + 1024

    def is_write_full(self):
        return self.index_count >= self.index_num

    def put_key(self, str key, long long phy_offset, long long store_timestamp):
        """Add one entry; False when the file is full."""
        return self._put_hash(key_hash(key), phy_offset, store_timestamp) == 1

    cdef int _put_hash(self, int32_t h, int64_t phy_offset, int64_t store_timestamp) except -1:
        """Add the entry of a key whose ``key_hash`` is ``h``: 1, or 0 when the file is full."""
        self.mapped_file.check_mapped()
        if self._room() == 0:
            return 0
        self._put_entry(self.mapped_file.base, self.mapped_file.read_only, h, phy_offset, store_timestamp)
        return 1

    cdef int64_t _room(self) noexcept nogil:
        """How many entries ``_put_entry`` may write from here without the GIL (0: the file is full): what the
        prefault worker is asked first, where the entries' pages or the slot table need it, bounds it."""
        cdef int64_t entries = _HEADER + self.hash_slot_num * 4, entry_pos, room
        if self.index_count >= self.index_num:
            return 0
        entry_pos = entries + <int64_t>self.index_count * _ENTRY
        if entry_pos + _PREFAULT_LEAD > self.mapped_file.warmed:
            # a sparse file written through its mapping: without the prefault worker, the writer takes two
            # page faults on each new page
            self.mapped_file._prefault(entry_pos, _PREFAULT_LEAD)
        if self.index_count >= self.slots_prefault_at:
            self._prefault_slots()
        room = self.index_num - self.index_count
        if self.slots_prefault_at - self.index_count < room:
            room = self.slots_prefault_at - self.index_count
        if (self.mapped_file.warmed - _PREFAULT_LEAD - entries) // _ENTRY + 1 - self.index_count < room:
            room = (self.mapped_file.warmed - _PREFAULT_LEAD - entries) // _ENTRY + 1 - self.index_count
        # the worker could not be asked: write on, the next entry asks again
        return room if room > 0 else 1

    cdef void _put_entry(self, unsigned char *b, bint read_only, int32_t h, int64_t phy_offset,
                         int64_t store_timestamp) noexcept nogil:
        """Write one entry into the mapping at ``b`` (the file has room: ``_room``). The entry first, then the
        slot that links it (RocketMQ's order, with a release fence): a reader that finds the slot finds the
        entry whole."""
        cdef int64_t slot = _slot_of(h, self.hash_slot_num)
        cdef int64_t slot_pos = _HEADER + slot * 4
        cdef int32_t slot_value = get_i32(b + slot_pos)
        cdef int64_t diff
        cdef int64_t entry_pos = _HEADER + self.hash_slot_num * 4 + <int64_t>self.index_count * _ENTRY
        if slot_value <= 0 or slot_value >= self.index_count:
            # links must point back to an older entry, or lookups could loop
            slot_value = 0
        if self.begin_timestamp <= 0:
            diff = 0
        else:
            diff = (store_timestamp - self.begin_timestamp) // 1000
            if diff < 0:
                diff = 0
            elif diff > 2147483647:
                diff = 2147483647
        put_i32(b + entry_pos, h)
        put_i64(b + entry_pos + 4, phy_offset)
        put_i32(b + entry_pos + 12, <int32_t>diff)
        put_i32(b + entry_pos + 16, slot_value)
        store_i32_release(b + slot_pos, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
            if not read_only:
                put_i64(b, store_timestamp)
                put_i64(b + 16, phy_offset)
        if slot_value == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        # the header fields an entry changes (the begin values above with the first entry), without
        # rewriting the rest
        if not read_only:
            put_i64(b + 8, store_timestamp)
            put_i64(b + 24, phy_offset)
            put_i32(b + 32, self.hash_slot_count)
            put_i32(b + 36, self.index_count)

    cdef bint _time_matched(self, int64_t begin, int64_t end) noexcept:
        return ((begin < self.begin_timestamp and end > self.end_timestamp)
                or (self.begin_timestamp <= begin <= self.end_timestamp)
                or (self.begin_timestamp <= end <= self.end_timestamp))

    cdef void _broken(self, int64_t pos, str what):
        if self.broken is None:
            self.broken = (pos, what)
        if not self.warned:
            self.warned = True
            log.warning("%s: broken index chain at offset %d (%s); lookups stop there, messages behind "
                        "it are not found by key", self.mapped_file.file_name, pos, what)

    def select_phy_offset(self, list out not None, str key not None, int max_num, long long begin, long long end):
        """Append to ``out`` the offsets of entries with ``key``'s hash stored in [begin, end] (newest first)."""
        self._select(out, key_hash(key), max_num, begin, end)

    def walk(self, list out not None, int32_t h, Py_ssize_t max_num, long long begin, long long end,
             long long cur, const unsigned char[::1] ready, long long range_size):
        """One leg of the chain walk of a key whose ``key_hash`` is ``h`` over a file of which only some ranges
        are readable (an archived copy fetched by ranges): ``ready[i]`` non-zero when bytes
        ``[i * range_size, (i + 1) * range_size)`` are (``ready`` None: every byte is). Appends to ``out``, as
        ``select_phy_offset`` does, until ``len(out)`` reaches ``max_num`` or it needs bytes not readable.
        Start with ``cur`` = -1 (the key's slot first). Returns ``(resume, lo, hi)``: ``resume`` 0 when the
        walk is over, else the ``cur`` to call again with once bytes ``[lo, hi)`` (the slot, or an entry, which
        may straddle two ranges) are readable. A broken chain ends the walk as in a local file (``broken``)."""
        cdef int64_t need[2]
        cdef int64_t resume
        cdef unsigned char nothing = 0     # an empty map: nothing readable (NULL would say everything)
        if ready is not None and range_size <= 0:
            raise ValueError("a ready map needs a range size")
        if h < 0 or cur < -1 or cur >= self.index_num:
            raise ValueError("no entry %d in a file of %d (key hash %d)" % (cur, self.index_num, h))
        self.mapped_file.check_mapped()
        need[0] = need[1] = 0
        if self.index_count <= 1 or cur == 0:
            return 0, 0, 0
        if ready is None:
            resume = self._walk(out, h, max_num, begin, end, cur, NULL, 0, 0, need)
        else:
            resume = self._walk(out, h, max_num, begin, end, cur, &ready[0] if ready.shape[0] else &nothing,
                                ready.shape[0], range_size, need)
        return resume, need[0], need[1]

    cdef int _select(self, list out, int32_t h, Py_ssize_t max_num, int64_t begin, int64_t end) except -1:
        cdef int64_t need[2]
        self.mapped_file.check_mapped()
        if self.index_count <= 1:
            return 0
        # every byte readable: the walk goes to its end in one call
        self._walk(out, h, max_num, begin, end, -1, NULL, 0, 0, need)
        return 0

    cdef int64_t _walk(self, list out, int32_t h, Py_ssize_t max_num, int64_t begin, int64_t end, int64_t cur,
                       const unsigned char *ready, Py_ssize_t n_ready, int64_t range_size,
                       int64_t *need) except -2:
        """The chain walk of ``_select``, resumable: from the key's slot (``cur`` -1) or from entry ``cur``, over
        a file whose readable bytes are the ranges of ``range_size`` bytes that the byte map ``ready`` (``n_ready``
        of them) marks; NULL: all (a local file, a whole copy), and the walk runs to its end. Returns 0 when
        the walk is over (at its chain's end, at ``max_num``, at a break), else where to resume (-1: the slot,
        else an entry number) once ``need[0]`` to ``need[1]`` are readable."""
        cdef const unsigned char *b = self.mapped_file.base
        cdef int64_t slot_pos = _HEADER + _slot_of(h, self.hash_slot_num) * 4
        cdef int64_t entries = _HEADER + self.hash_slot_num * 4
        cdef int64_t entry_pos, phy, time_read
        cdef int32_t prev, entry_hash, diff
        if cur < 0:
            if not _readable(ready, n_ready, range_size, slot_pos, 4):
                need[0] = slot_pos
                need[1] = slot_pos + 4
                return -1
            # the acquire pairs with the writer's release of the slot: the entry it names is whole, even one
            # the writer (the index builder, GIL released) links while this runs, past the count read before
            cur = load_i32_acquire(b + slot_pos)
            if cur <= 0:
                return 0
            if cur >= self.index_num:
                self._broken(slot_pos, "slot points at entry %d of %d" % (cur, self.index_num))
                return 0
        while PyList_GET_SIZE(out) < max_num:
            entry_pos = entries + cur * _ENTRY
            if not _readable(ready, n_ready, range_size, entry_pos, _ENTRY):
                need[0] = entry_pos
                need[1] = entry_pos + _ENTRY
                return cur
            entry_hash = get_i32(b + entry_pos)
            phy = get_i64(b + entry_pos + 4)
            diff = get_i32(b + entry_pos + 12)
            prev = get_i32(b + entry_pos + 16)
            if diff < 0:
                break
            time_read = self.begin_timestamp + <int64_t>diff * 1000
            if entry_hash == h and begin <= time_read <= end:
                out.append(phy)
            if prev <= 0 or time_read < begin:
                break
            if prev >= cur:
                # strictly decreasing links bound the walk by the entry count
                self._broken(entry_pos + 16, "entry %d links to entry %d" % (cur, prev))
                break
            cur = prev
        return 0

    def check_chains(self, long long max_problems=100):
        """Every break in the file's structure: a list of ``(position, what)``, at most ``max_problems``.

        Checks the header's entry count, that every slot's chain links strictly back through written
        entries of that slot's hashes, that no entry is on two chains, and that every written entry is on
        one. Reads each slot and entry once (a bitmap of visited entries), so damage cannot make it slow."""
        cdef const unsigned char *b = self.mapped_file.base
        cdef int64_t entries = _HEADER + self.hash_slot_num * 4
        cdef int64_t slot, pos, reached = 0
        cdef int32_t cur, prev, h, raw_count
        cdef bytearray seen
        cdef unsigned char *sp
        cdef list problems = []
        self.mapped_file.check_mapped()
        raw_count = get_i32(b + 36)
        if raw_count < 0 or raw_count > self.index_num:
            problems.append((36, "header indexCount %d is outside 0..%d" % (raw_count, self.index_num)))
        count = self.index_count
        seen = bytearray(count)
        sp = seen
        for slot in range(self.hash_slot_num):
            if len(problems) >= max_problems:
                return problems
            pos = _HEADER + slot * 4
            cur = get_i32(b + pos)
            if cur == 0:
                continue
            if cur == count and count < self.index_num:
                # the entry a live writer is publishing (its header count is written last)
                cur = get_i32(b + entries + <int64_t>cur * _ENTRY + 16)
                if cur == 0:
                    continue
            if cur < 0 or cur >= count:
                problems.append((pos, "hash slot %d points at entry %d, outside the %d written entries"
                                 % (slot, cur, count - 1)))
                continue
            while True:
                pos = entries + <int64_t>cur * _ENTRY
                if sp[cur]:
                    problems.append((pos, "entry %d is on two chains (reached again from slot %d)"
                                     % (cur, slot)))
                    break
                sp[cur] = 1
                reached += 1
                h = get_i32(b + pos)
                if h < 0 or h % self.hash_slot_num != slot:
                    problems.append((pos, "entry %d (key hash %d) is on the chain of slot %d"
                                     % (cur, h, slot)))
                    break
                prev = get_i32(b + pos + 16)
                if prev == 0:
                    break
                if prev < 0 or prev >= cur:
                    problems.append((pos + 16, "entry %d links to entry %d: links must go back to an "
                                     "older entry" % (cur, prev)))
                    break
                cur = prev
        if reached < count - 1 and not problems:
            lost = count - 1 - reached
            for cur in range(1, count):
                if not sp[cur]:
                    pos = entries + <int64_t>cur * _ENTRY
                    problems.append((pos, "%d written entr%s on no chain, the first %d"
                                     % (lost, "y is" if lost == 1 else "ies are", cur)))
                    break
        return problems[:max_problems]


# ----------------------------------------------------------------------------------------------------------
# the index entries of one message, from its stored bytes (dispatch, inline and reput)
# ----------------------------------------------------------------------------------------------------------

cdef extern from *:
    void __builtin_prefetch(const void *addr, int rw, int locality) nogil


cdef inline int32_t _abs_hash(uint32_t h) noexcept nogil:
    """``key_hash`` of a string whose ``String.hashCode`` is ``h``."""
    cdef int32_t s = <int32_t>h
    if s == INT32_MIN:
        return 0
    return -s if s < 0 else s


cdef class IndexFilesBase:
    """The compiled core an ``IndexService`` holds (``IndexService.core``, what dispatch, ``index_keys`` and
    ``index_log`` take): its list of files as a C field, which ``index_message`` reads on every message (an
    attribute of a Python object would be a dictionary lookup), the spare made ahead, the ``new_file`` hook,
    and the hash of the last topic indexed (messages of one topic come in runs: its ``topic#`` part is hashed
    once a run)."""

    def __cinit__(self, *args, **kwargs):
        self._topic_len = -1

    def __init__(self):
        self._files = []
        self._full = []

    def take_spare(self):
        """The writer's switch to the file made ahead (``_spare``) once the newest is full: renamed into the
        folder, started from the full file's end values, appended to the files, the full one queued for its
        flush (``_full``). The new newest file, or None (no spare, the newest not full, the rename failed)."""
        return _take_spare(self)

    def drop_files(self, list gone not None):
        """Remove the files of ``gone`` (the same objects) from ``_files``: the cleaner's change to the list.

        One step under the GIL, as the writer's ``_take_spare`` is: the writer appends the spare in C without
        any lock of Python's, so a list rebuilt in Python code (which may hand the GIL over between reading
        ``_files`` and storing the new list) would store a list without the file the writer took meanwhile:
        the file it then writes would no longer be flushed or searched, and a checkpoint past its entries
        would lose its keys after a crash. Nothing between reading ``_files`` and storing the new list runs
        Python code: items are compared by identity, no object is made there (the collector, which may run
        finalizers, is only started by making one), and the old list's items stay alive (``gone`` holds
        them)."""
        cdef list kept = []             # made first: making an object may run the collector, and so Python code
        cdef list files = self._files
        cdef Py_ssize_t i, j, n = PyList_GET_SIZE(gone)
        cdef object f
        cdef bint drop
        for i in range(PyList_GET_SIZE(files)):     # appends only grow ``kept``'s item array: no object is made
            f = <object>PyList_GET_ITEM(files, i)
            drop = False
            for j in range(n):
                if <object>PyList_GET_ITEM(gone, j) is f:
                    drop = True
                    break
            if not drop:
                kept.append(f)
        self._files = kept
        return PyList_GET_SIZE(files) - PyList_GET_SIZE(kept)


cdef int _append_file(IndexFilesBase service, IndexFileCore f) except -1:
    """``service._files = service._files + [f]`` in one step under the GIL (see ``drop_files``, the cleaner's
    side): the new list is made before the list it copies is read for the last time, since making an object
    may start the collector, whose finalizers are Python code that may hand the GIL to the cleaner."""
    cdef list files, new
    cdef Py_ssize_t i, n
    cdef object item
    while True:
        files = service._files
        n = PyList_GET_SIZE(files)
        new = PyList_New(n + 1)
        if service._files is files and PyList_GET_SIZE(files) == n:
            break
    for i in range(n):
        item = <object>PyList_GET_ITEM(files, i)
        Py_INCREF(item)
        PyList_SET_ITEM(new, i, item)
    Py_INCREF(f)
    PyList_SET_ITEM(new, n, f)
    service._files = new
    return 0


cdef IndexFileCore _take_spare(IndexFilesBase service):
    """``take_spare``: in C, so that the put path makes no Python call when a file fills (the spare's owner
    made it in good time, off the put path)."""
    cdef IndexFileCore f = service._spare, prev
    cdef list files = service._files
    cdef bytes src, dst
    if f is None or PyList_GET_SIZE(files) == 0 or f.mapped_file.base == NULL:
        return None
    prev = <IndexFileCore>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
    if prev.index_count < prev.index_num:
        return None
    # the header first: a reader that lists the folder right after the rename must not find a file whose
    # begin time (0) ends its newest-first walk before the older files
    f._start(prev.end_timestamp, prev.end_timestamp, prev.end_phy_offset, prev.end_phy_offset)
    src = service._spare_path.encode("utf-8", "surrogateescape")
    dst = service._spare_name.encode("utf-8", "surrogateescape")
    if rename(src, dst) != 0:
        # left to the new_file hook (IndexService._new_file), which makes a file of its own and deletes this one
        return None
    service._spare = None
    f.mapped_file.file_name = service._spare_name
    _append_file(service, f)
    service._full.append(prev)
    return f


cdef IndexFileCore _next_file(IndexFilesBase service):
    """A new newest file once the newest is full: the spare, else one made by Python (the ``new_file`` hook,
    ``IndexService._new_file``: the first file, or no spare in time; None if there is no hook or no file can
    be made)."""
    cdef IndexFileCore f = _take_spare(service)
    if f is not None:
        return f
    if service.new_file is None:
        return None
    made = service.new_file()
    # a checked cast refuses None: a file that cannot be made (no space) is no file, not a TypeError
    return None if made is None else <IndexFileCore?>made


cdef IndexFileCore writable_file(IndexFilesBase service):
    """The newest file if it has room, else a new one (``_next_file``; None if none)."""
    cdef list files = service._files
    cdef IndexFileCore f
    if PyList_GET_SIZE(files) > 0:
        f = <IndexFileCore>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
        if f.index_count < f.index_num:
            return f
    return _next_file(service)


cdef IndexFileCore _put(IndexFilesBase service, IndexFileCore f, int32_t h, int64_t phy, int64_t ts):
    """Put one entry, into a new file when ``f`` is full; the file it went into, or None (no file)."""
    cdef int _attempt
    for _attempt in range(3):
        if f._put_hash(h, phy, ts):
            return f
        f = _next_file(service)
        if f is None:
            return None
    return f


cdef void next_hashes(const unsigned char *props, KeyScan *ks) noexcept nogil:
    """Fill ``ks.h`` with the next keys' hashes (up to ``KEY_SCAN_HASHES``): the UNIQ_KEY first, then each key of
    KEYS (split on single spaces, empty keys skipped); ``ks.n`` is how many, 0 when none are left."""
    cdef const unsigned char *e
    cdef int32_t j
    ks.n = 0
    if ks.uniq_pos >= 0:
        ks.h[0] = _abs_hash(java_hash_utf8_from(ks.prefix, props + ks.uniq_pos, ks.uniq_len))
        ks.n = 1
        ks.uniq_pos = -1
    while ks.keys_pos < ks.keys_end and ks.n < KEY_SCAN_HASHES:
        e = <const unsigned char *>memchr(props + ks.keys_pos, 32, ks.keys_end - ks.keys_pos)
        j = ks.keys_end if e == NULL else <int32_t>(e - props)
        if j > ks.keys_pos:
            ks.h[ks.n] = _abs_hash(java_hash_utf8_from(ks.prefix, props + ks.keys_pos, j - ks.keys_pos))
            ks.n += 1
        ks.keys_pos = j + 1


cdef bint key_scan(IndexFilesBase service, const unsigned char *topic, Py_ssize_t topic_len,
                   const unsigned char *props, Py_ssize_t props_len, int32_t sys_flag, KeyScan *ks) noexcept:
    """The first part of ``index_message``, which needs no commit-log offset: does the message get entries (has
    keys, not rolled back)? If so ``ks`` holds the first keys' hashes, and their hash slots in the newest file
    are being fetched into the cache (a write to a random slot of a 20 MB table would otherwise wait for
    memory; the inline dispatch calls this before writing the message's consume-queue unit, so the two
    overlap)."""
    cdef list files
    cdef IndexFileCore f
    cdef const unsigned char *b
    cdef int32_t i
    if (sys_flag & TRANSACTION_TYPE_MASK) == TRANSACTION_ROLLBACK_TYPE or props_len <= 0 or props_len > 0x7FFFFFFF:
        return False
    ks.uniq_pos = -1
    ks.keys_pos = ks.keys_end = 0
    if find_keys(props, <int32_t>props_len, ks) == 0:
        return False
    ks.prefix = topic_prefix(service._topic, &service._topic_len, &service._prefix, topic, topic_len)
    next_hashes(props, ks)
    files = service._files
    if PyList_GET_SIZE(files) > 0:
        f = <IndexFileCore>PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1)
        b = f.mapped_file.base
        if b != NULL:
            for i in range(ks.n):
                __builtin_prefetch(b + _HEADER + _slot_of(ks.h[i], f.hash_slot_num) * 4, 1, 3)
    return True


cdef int index_scanned(IndexFilesBase service, const unsigned char *props, const KeyScan *scan,
                       int64_t phy_offset, int64_t store_ts) except -1:
    """The rest of ``index_message``: the entries of the message at ``phy_offset`` whose ``key_scan`` is
    ``scan`` (its ``props`` the same bytes), not one when the newest file ends above that offset (indexed
    before: a re-dispatch). ``scan`` is not changed (a batch of one properties string reuses it)."""
    cdef KeyScan ks = scan[0]
    cdef IndexFileCore f = writable_file(service)
    cdef int32_t i
    if f is None:
        service.dropped += ks.n
        return 0
    if phy_offset < f.end_phy_offset:
        return 0
    while ks.n > 0:
        for i in range(ks.n):
            f = _put(service, f, ks.h[i], phy_offset, store_ts)
            if f is None:
                service.dropped += ks.n - i
                return 0
        next_hashes(props, &ks)
    return 0


cdef int index_message(IndexFilesBase service, const unsigned char *topic, Py_ssize_t topic_len,
                       const unsigned char *props, Py_ssize_t props_len, int64_t phy_offset, int64_t store_ts,
                       int32_t sys_flag) except -1:
    """Index the message stored at ``phy_offset`` with these topic and properties bytes (as stored: UTF-8, the
    properties string of docs/format.md §1.3) into ``service`` (an ``IndexService``): an entry for its
    ``UNIQ_KEY``, then one per key of ``KEYS`` (split on single spaces, empty keys skipped), each under the
    hash of ``topic + "#" + key`` computed on the bytes. Rolled-back transaction messages are not indexed,
    nor a message below the newest file's end offset (indexed before: a re-dispatch). A full file is
    followed by the spare made ahead (``take_spare``); Python runs only to make a file when there is none
    (none yet, or no spare in time: ``IndexService._new_file``). ``key_scan`` then ``index_scanned``, which the inline
    dispatch calls apart."""
    cdef KeyScan ks
    if key_scan(service, topic, topic_len, props, props_len, sys_flag, &ks):
        index_scanned(service, props, &ks, phy_offset, store_ts)
    return 0


def index_keys(IndexFilesBase service not None, bytes topic not None, bytes props not None, long long phy_offset,
               long long store_ts, int sys_flag):
    """``index_message`` from Python: ``topic`` and ``props`` as a record stores them (UTF-8)."""
    index_message(service, <const unsigned char *>PyBytes_AS_STRING(topic), PyBytes_GET_SIZE(topic),
                  <const unsigned char *>PyBytes_AS_STRING(props), PyBytes_GET_SIZE(props), phy_offset, store_ts,
                  sys_flag)


def select_in_files(list files not None, str full_key not None, Py_ssize_t max_num, long long begin,
                    long long end, list out not None):
    """``IndexService.query_offset``'s walk: append to ``out`` the offsets of ``full_key``'s entries
    (``topic#key``) stored in [begin, end], newest file first, at most ``max_num``; returns the newest file's
    (end time, end commit-log offset), RocketMQ's ``indexLastUpdateTimestamp`` / ``...Phyoffset``."""
    cdef int32_t h = key_hash(full_key)
    cdef Py_ssize_t i, n = PyList_GET_SIZE(files)
    cdef IndexFileCore f
    cdef int64_t last_ts = 0, last_phy = 0
    if n:
        f = <IndexFileCore>PyList_GET_ITEM(files, n - 1)
        last_ts = f.end_timestamp
        last_phy = f.end_phy_offset
    for i in range(n - 1, -1, -1):
        f = <IndexFileCore>PyList_GET_ITEM(files, i)
        if f._time_matched(begin, end):
            f._select(out, h, max_num, begin, end)
        if f.begin_timestamp < begin or PyList_GET_SIZE(out) >= max_num:
            break
    return last_ts, last_phy
