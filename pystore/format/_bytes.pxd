# cython: language_level=3
"""Big-endian loads and stores on raw pointers (cf. py-pgproto's hton.pxd).

Every integer in every RocketMQ file is big-endian (docs/format.md §0). These helpers are header-only and
inlined; they never fail and never touch Python objects. ``store_i32_release`` publishes a record's
TOTALSIZE after its other bytes, so a reader in another thread or process that sees a non-zero size
also sees the record it announces (``load_i32_acquire`` is its partner).
"""

from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t

cdef extern from "Python.h":
    # a bytes object's data and size through a borrowed pointer: no reference counting (a typed attribute
    # passed as ``object`` costs an incref and a decref per use on the per-message paths)
    char *bytes_data "PyBytes_AS_STRING"(PyObject *b) noexcept nogil
    Py_ssize_t bytes_size "PyBytes_GET_SIZE"(PyObject *b) noexcept nogil

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #  define PS_BE16(x) (x)
    #  define PS_BE32(x) (x)
    #  define PS_BE64(x) (x)
    #else
    #  define PS_BE16(x) __builtin_bswap16(x)
    #  define PS_BE32(x) __builtin_bswap32(x)
    #  define PS_BE64(x) __builtin_bswap64(x)
    #endif
    static inline void ps_put_i16(unsigned char *p, int16_t v) { uint16_t x = PS_BE16((uint16_t)v); memcpy(p, &x, 2); }
    static inline void ps_put_i32(unsigned char *p, int32_t v) { uint32_t x = PS_BE32((uint32_t)v); memcpy(p, &x, 4); }
    static inline void ps_put_i64(unsigned char *p, int64_t v) { uint64_t x = PS_BE64((uint64_t)v); memcpy(p, &x, 8); }
    static inline int16_t ps_get_i16(const unsigned char *p) { uint16_t x; memcpy(&x, p, 2); return (int16_t)PS_BE16(x); }
    static inline int32_t ps_get_i32(const unsigned char *p) { uint32_t x; memcpy(&x, p, 4); return (int32_t)PS_BE32(x); }
    static inline int64_t ps_get_i64(const unsigned char *p) { uint64_t x; memcpy(&x, p, 8); return (int64_t)PS_BE64(x); }
    /* The record's first word is written last and read first (a 4-byte aligned-or-not atomic is fine on
       x86-64 and arm64 for naturally aligned words; records are not always aligned, so we pair the plain
       store with a release fence and the plain load with an acquire fence). */
    static inline void ps_store_i32_release(unsigned char *p, int32_t v) {
        __atomic_thread_fence(__ATOMIC_RELEASE); ps_put_i32(p, v);
    }
    static inline int32_t ps_load_i32_acquire(const unsigned char *p) {
        int32_t v = ps_get_i32(p); __atomic_thread_fence(__ATOMIC_ACQUIRE); return v;
    }
    """
    void put_i16 "ps_put_i16"(unsigned char *p, int16_t v) noexcept nogil
    void put_i32 "ps_put_i32"(unsigned char *p, int32_t v) noexcept nogil
    void put_i64 "ps_put_i64"(unsigned char *p, int64_t v) noexcept nogil
    int16_t get_i16 "ps_get_i16"(const unsigned char *p) noexcept nogil
    int32_t get_i32 "ps_get_i32"(const unsigned char *p) noexcept nogil
    int64_t get_i64 "ps_get_i64"(const unsigned char *p) noexcept nogil
    void store_i32_release "ps_store_i32_release"(unsigned char *p, int32_t v) noexcept nogil
    int32_t load_i32_acquire "ps_load_i32_acquire"(const unsigned char *p) noexcept nogil


cdef extern from *:
    """
    /* Native-endian fields shared by threads of this process outside the GIL (positions, cursors, flags). */
    static inline int64_t ps_load_i64_acquire(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void ps_store_i64_release(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline int ps_cas_i64(int64_t *p, int64_t expected, int64_t desired) {
        return __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    /* *p = max(*p, v); returns the value now there */
    static inline int64_t ps_advance_i64(int64_t *p, int64_t v) {
        int64_t cur = __atomic_load_n(p, __ATOMIC_ACQUIRE);
        while (v > cur) {
            if (__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return v;
        }
        return cur;
    }
    """
    int64_t load_i64_acquire "ps_load_i64_acquire"(const int64_t *p) noexcept nogil
    void store_i64_release "ps_store_i64_release"(int64_t *p, int64_t v) noexcept nogil
    bint cas_i64 "ps_cas_i64"(int64_t *p, int64_t expected, int64_t desired) noexcept nogil
    int64_t advance_i64 "ps_advance_i64"(int64_t *p, int64_t v) noexcept nogil


cdef extern from "cpu_follow.h":
    ctypedef struct ps_cpu_follow:
        int where
    int pinned_cpu "ps_pinned_cpu"() noexcept nogil
    void cpu_follow_init "ps_cpu_follow_init"(ps_cpu_follow *f) noexcept nogil
    void follow_cpu "ps_follow_cpu"(int cpu, ps_cpu_follow *f) noexcept nogil

# The body CRC of puts and of recovery's checks: zlib's CRC-32 computed with carry-less multiplication
# (PCLMULQDQ) where the CPU has it: ~8 GB/s on 128-byte bodies where zlib's table-driven crc32 gives ~0.7 GB/s,
# which capped the recovery scan near 1 GB/s and cost a put of a new 128 B message ~180 ns. The same value as
# zlib's for every length (tests/test_codec.py compares them); other CPUs and compilers use zlib.
cdef extern from "crc32.h":
    uint32_t ps_fast_crc32(const unsigned char *p, size_t n) noexcept nogil
    int crc_level "ps_crc_level"() noexcept nogil
    int crc_built "ps_crc_built"() noexcept nogil
    int crc_force "ps_crc_force"(int level) noexcept nogil


cdef inline int32_t body_crc32(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """RocketMQ's body CRC: CRC-32/IEEE (zlib's polynomial) masked to 31 bits (docs/format.md §1.5)."""
    return <int32_t>(ps_fast_crc32(p, <size_t>n) & 0x7FFFFFFF)


cdef extern from *:
    """
    #include <time.h>
    static inline int64_t ps_now_ms(void) {
        struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    static inline int64_t ps_mono_ns(void) {
        struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    /* The kernel's tick-resolution monotonic clock: a few ns to read where CLOCK_MONOTONIC costs ~30 ns on a
       VM, precise enough for millisecond latency buckets (RocketMQ measures put latency in ms). */
    static inline int64_t ps_mono_coarse_ns(void) {
    #ifdef CLOCK_MONOTONIC_COARSE
        struct timespec ts; clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    #else
        return ps_mono_ns();
    #endif
    }
    """
    int64_t now_ms "ps_now_ms"() noexcept nogil
    int64_t mono_ns "ps_mono_ns"() noexcept nogil
    int64_t mono_coarse_ns "ps_mono_coarse_ns"() noexcept nogil


cdef inline int fmt_int(char *out, int64_t v) noexcept nogil:
    """Decimal text of ``v``; returns its length."""
    cdef char tmp[24]
    cdef int n = 0, o = 0
    cdef uint64_t u
    if v < 0:
        out[0] = b'-'
        o = 1
        u = <uint64_t>(-(v + 1)) + 1
    else:
        u = <uint64_t>v
    while True:
        tmp[n] = <char>(48 + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    while n > 0:
        n -= 1
        out[o] = tmp[n]
        o += 1
    return o
