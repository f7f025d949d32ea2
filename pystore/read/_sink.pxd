# cython: language_level=3
"""Interface of ``pystore.read._sink``: where a reader's scan hands the records it accepts instead of making a
``MessageExt`` of each (the Arrow decoder's ``BatchBuilder`` is one), and ``same_bytes``, the short-string test
both sides run on every record (a record's topic against the queue's, against the last one decoded).

A sink may take records *deferred* (``begin`` says whether it does): the scan then checks each record's
structure straight into the sink's next ``slot`` and ``commit``s it, and the sink decodes them later (perhaps in
another thread, while the scan goes on), checking their body CRC as it copies the bodies. A record whose CRC is
wrong ends the page there, as when the scan finds it: ``commit``/``finish`` return 1 and ``cut`` says where."""
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcmp, memcpy

from pystore.format._bytes cimport get_i32, get_i64
from pystore.format._codec cimport MESSAGE_MAGIC_CODE, read_other_fixed
from pystore.format._record cimport (AT_BORNHOST, IPV4_HOST_SIZE, PLAIN_AT_PREPAREDTXOFFSET, PLAIN_AT_RECONSUMETIMES,
                                     PLAIN_AT_STOREHOST, PLAIN_AT_STORETIMESTAMP, RecordView)


# one record the scan accepted and deferred: its checked view, where it lies, its unit's place in the queue file.
# The scan's tight loop leaves the fields no test needs unread (``v.magic`` 0): the sink completes the view
# (``complete_plain``) before it uses them, in the thread that decodes
cdef struct Pending:
    RecordView v
    const unsigned char *rec
    int64_t pos


# where a deferred page ends early: ``good`` records decoded (``good_bytes`` of records, the last at commit-log
# offset ``last_phy``, -1 for none), then ``bad``, the first record whose body CRC is wrong
cdef struct Cut:
    int64_t good
    int64_t good_bytes
    int64_t last_phy
    Pending bad


cdef class RecordSink:
    cdef Cut cut
    # deferring: the slot the scan checks its next record into, and the end of the window it lies in
    cdef Pending *next
    cdef Pending *window_end
    cdef int add(self, const unsigned char *p, RecordView *v) except -1
    cdef bint begin(self, bint check_crc) except -1
    cdef int hand_off(self) except -1
    cdef int finish(self) except -1
    cdef int settle(self) noexcept

    cdef inline int commit(self) except -1:
        """The record in ``next`` is accepted: 0, or 1 when a record committed before it turned out damaged
        (``cut``: the page ends at ``cut.bad``)."""
        self.next += 1
        if self.next == self.window_end:
            return self.hand_off()
        return 0


cdef inline void complete_plain(const unsigned char *p, RecordView *v) noexcept nogil:
    """The rest of the view of a checked plain record (magic V1, IPv4 hosts: every field before the body at a
    fixed place) whose view the scan left partial (``v.magic`` 0); nothing for a view already whole."""
    if v.magic != 0:
        return
    v.magic = MESSAGE_MAGIC_CODE
    read_other_fixed(p, v)
    v.born_host_pos = AT_BORNHOST
    v.born_host_len = IPV4_HOST_SIZE
    v.store_ts = get_i64(p + PLAIN_AT_STORETIMESTAMP)
    v.store_host_pos = PLAIN_AT_STOREHOST
    v.store_host_len = IPV4_HOST_SIZE
    v.reconsume_times = get_i32(p + PLAIN_AT_RECONSUMETIMES)
    v.prepared_tx_offset = get_i64(p + PLAIN_AT_PREPAREDTXOFFSET)


cdef inline bint same_bytes(const unsigned char *a, const unsigned char *b, Py_ssize_t n) noexcept nogil:
    """``a[:n] == b[:n]``, inline: topics are short, and a call to ``memcmp`` costs more than comparing them."""
    cdef uint64_t x, y
    cdef Py_ssize_t i = 0
    if n > 32:
        return memcmp(a, b, n) == 0
    while i + 8 <= n:
        memcpy(&x, a + i, 8)
        memcpy(&y, b + i, 8)
        if x != y:
            return False
        i += 8
    while i < n:
        if a[i] != b[i]:
            return False
        i += 1
    return True
