# cython: language_level=3
from libc.stdint cimport int64_t, uint32_t, uint64_t

from pystore.message._message cimport Message

cdef extern from *:
    """
    typedef __int128 ps_i128;
    /* ``v``'s decimal text into ``out`` (at least 41 bytes); its length */
    static inline int ps_fmt_i128(char *out, __int128 v) {
        char tmp[48]; int n = 0, o = 0;
        unsigned __int128 u;
        if (v < 0) { out[o++] = '-'; u = (unsigned __int128)(-(v + 1)) + 1; } else u = (unsigned __int128)v;
        do { tmp[n++] = (char)('0' + (int)(u % 10)); u /= 10; } while (u);
        while (n) out[o++] = tmp[--n];
        return o;
    }
    /* Python's floor division and modulo (the divisor positive) */
    static inline __int128 ps_floordiv_i128(__int128 a, __int128 b) {
        __int128 q = a / b; if ((a % b) != 0 && a < 0) q -= 1; return q;
    }
    static inline __int128 ps_mod_i128(__int128 a, __int128 b) {
        __int128 r = a % b; if (r < 0) r += b; return r;
    }
    """
    ctypedef long long i128 "ps_i128"
    int fmt_i128 "ps_fmt_i128"(char *out, i128 v) noexcept nogil
    i128 floordiv_i128 "ps_floordiv_i128"(i128 a, i128 b) noexcept nogil
    i128 mod_i128 "ps_mod_i128"(i128 a, i128 b) noexcept nogil


cdef class TimerPutLink:
    # the wheel's in-memory slots (TimerWheel.raw) while open, else None; 2 * slots_total; the wheel's precision
    cdef bytearray wheel
    cdef int64_t slots2
    cdef int64_t wheel_precision
    # the enqueue's wake word (_notify's state word and its flags word, in this process's memory)
    cdef uint64_t word
    cdef uint32_t flags
    cdef int64_t pending              # a note or wake since the last wait returned
    cdef public bint expecting        # a put was rewritten for the timer topic (the enqueue polls at its rate)

    cdef int64_t num_at(self, i128 deliver_ms) except? -1
    cdef void note_put(self) noexcept
    cdef bint _poll(self, int64_t t)


cdef class TimerPut:
    cdef readonly bint enabled
    cdef readonly int64_t precision_ms
    cdef readonly int64_t max_delay_sec
    cdef readonly int64_t congest_num
    cdef public object clock          # the store's injected clock, or None: the C clock
    cdef readonly TimerPutLink link   # the timer store's, or None: no flow control, no wake-up

    cdef int64_t _now(self) except? -1
    cdef object rewrite(self, Message msg)
    cdef tuple _too_far(self, object kind, int64_t value, object delay)
