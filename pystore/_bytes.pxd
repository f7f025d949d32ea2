# cython: language_level=3
"""Big-endian loads and stores on raw pointers (cf. py-pgproto's hton.pxd).

Every integer in every RocketMQ file is big-endian (FORMAT.md §0). These helpers are header-only and
inlined; they never fail and never touch Python objects. ``store_i32_release`` publishes a record's
TOTALSIZE after its other bytes, so a reader in another thread or process that sees a non-zero size
also sees the record it announces (``load_i32_acquire`` is its partner).
"""

from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t

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


# The body CRC of puts and of recovery's checks: zlib's CRC-32 computed with carry-less multiplication
# (PCLMULQDQ) where the CPU has it: ~8 GB/s on 128-byte bodies where zlib's table-driven crc32 gives ~0.7 GB/s,
# which capped the recovery scan near 1 GB/s and cost a put of a new 128 B message ~180 ns. The same value as
# zlib's for every length (tests/test_codec.py compares them); other CPUs and compilers use zlib.
cdef extern from *:
    """
    #include <stdint.h>
    #include <stddef.h>
    #include <zlib.h>
    #if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    #include <immintrin.h>
    #define PS_CRC_CLMUL 1
    /* CRC-32/IEEE (reflected, zlib's) of len bytes, len >= 64 and a multiple of 16, by carry-less
       multiplication: four 128-bit lanes fold 64 bytes a round, then fold to one lane, then to 64 bits, then a
       Barrett reduction (Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ",
       Intel 2009; constants are x^k mod P for the bit-reflected polynomial 0x1DB710641). `crc` is the running
       CRC before its final inversion. */
    /* The end of both folding paths: one 128-bit lane `x1` holds the CRC state of everything before `p`; fold
       in the `len` bytes left (a multiple of 16), 16 at a time, then reduce 128 -> 64 bits, then to 32 bits
       by a Barrett reduction. */
    __attribute__((target("pclmul,sse4.1")))
    static inline uint32_t ps_crc32_clmul_finish(__m128i x1, const unsigned char *p, size_t len) {
        const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
        const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);
        const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
        const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
        __m128i a;
        while (len >= 16) {
            a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
            x1 = _mm_xor_si128(_mm_xor_si128(x1, a), _mm_loadu_si128((const __m128i *)p));
            p += 16; len -= 16;
        }
        /* 128 -> 64 bits */
        a = _mm_clmulepi64_si128(x1, k3k4, 0x10);
        x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), a);
        a = _mm_srli_si128(x1, 4);
        x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), a);
        /* Barrett reduction to 32 bits */
        a = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
        a = _mm_clmulepi64_si128(_mm_and_si128(a, mask32), poly, 0x00);
        return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, a), 1);
    }
    __attribute__((target("pclmul,sse4.1")))
    static uint32_t ps_crc32_clmul(uint32_t crc, const unsigned char *p, size_t len) {
        const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
        const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
        __m128i x1, x2, x3, x4, a, b, c, d;
        x1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)crc));
        x2 = _mm_loadu_si128((const __m128i *)(p + 16));
        x3 = _mm_loadu_si128((const __m128i *)(p + 32));
        x4 = _mm_loadu_si128((const __m128i *)(p + 48));
        p += 64; len -= 64;
        while (len >= 64) {
            a = _mm_clmulepi64_si128(x1, k1k2, 0x00); x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
            b = _mm_clmulepi64_si128(x2, k1k2, 0x00); x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
            c = _mm_clmulepi64_si128(x3, k1k2, 0x00); x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
            d = _mm_clmulepi64_si128(x4, k1k2, 0x00); x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
            x1 = _mm_xor_si128(_mm_xor_si128(x1, a), _mm_loadu_si128((const __m128i *)p));
            x2 = _mm_xor_si128(_mm_xor_si128(x2, b), _mm_loadu_si128((const __m128i *)(p + 16)));
            x3 = _mm_xor_si128(_mm_xor_si128(x3, c), _mm_loadu_si128((const __m128i *)(p + 32)));
            x4 = _mm_xor_si128(_mm_xor_si128(x4, d), _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64; len -= 64;
        }
        /* four lanes into one */
        a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, a), x2);
        a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, a), x3);
        a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, a), x4);
        return ps_crc32_clmul_finish(x1, p, len);
    }
    #if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)
    #define PS_CRC_VCLMUL 1
    /* The same CRC, len >= 128 and a multiple of 16, with 256-bit carry-less multiplications (VPCLMULQDQ,
       AVX2): four registers of two lanes fold 128 bytes a round, then fold into one register (by 64, then 32
       bytes) and its two lanes into one (by 16), then finish as the 128-bit path does. 12 multiplications
       for a 128-byte body instead of 19: the multiplier's throughput bounds a short body's CRC, so that is
       25-33 % less time (measured in C on the EPYC CI machine). The fold constants are x^(d+32) and
       x^(d-32) mod P, bit-reflected, for a fold over d bits (d = 1024, 512, 256, 128). */
    __attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
    static uint32_t ps_crc32_vclmul(uint32_t crc, const unsigned char *p, size_t len) {
        const __m256i k1024 = _mm256_set_epi64x(0x014a7fe880LL, 0x01e88ef372LL, 0x014a7fe880LL, 0x01e88ef372LL);
        const __m256i k512 = _mm256_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL, 0x01c6e41596LL, 0x0154442bd4LL);
        const __m256i k256 = _mm256_set_epi64x(0x015a546366LL, 0x00f1da05aaLL, 0x015a546366LL, 0x00f1da05aaLL);
        const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
        __m256i y0, y1, y2, y3;
        __m128i lo;
    #define PS_FOLD256(y, k, d) _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(y, k, 0x00), \
                                                                  _mm256_clmulepi64_epi128(y, k, 0x11)), d)
        y0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_setr_epi32((int)crc, 0, 0, 0, 0, 0, 0, 0));
        y1 = _mm256_loadu_si256((const __m256i *)(p + 32));
        y2 = _mm256_loadu_si256((const __m256i *)(p + 64));
        y3 = _mm256_loadu_si256((const __m256i *)(p + 96));
        p += 128; len -= 128;
        while (len >= 128) {
            y0 = PS_FOLD256(y0, k1024, _mm256_loadu_si256((const __m256i *)p));
            y1 = PS_FOLD256(y1, k1024, _mm256_loadu_si256((const __m256i *)(p + 32)));
            y2 = PS_FOLD256(y2, k1024, _mm256_loadu_si256((const __m256i *)(p + 64)));
            y3 = PS_FOLD256(y3, k1024, _mm256_loadu_si256((const __m256i *)(p + 96)));
            p += 128; len -= 128;
        }
        y2 = PS_FOLD256(y0, k512, y2);
        y3 = PS_FOLD256(y1, k512, y3);
        y3 = PS_FOLD256(y2, k256, y3);
    #undef PS_FOLD256
        lo = _mm256_castsi256_si128(y3);
        return ps_crc32_clmul_finish(
            _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lo, k3k4, 0x00), _mm_clmulepi64_si128(lo, k3k4, 0x11)),
                          _mm256_extracti128_si256(y3, 1)), p, len);
    }
    #endif
    #endif

    /* The CRC paths: 2 VPCLMULQDQ (bulk of 128 bytes and more), 1 PCLMULQDQ (64 and more), 0 zlib only.
       ps_crc_built: the best this build has; ps_crc_cpu: the best this CPU runs (decided once: the CPU does
       not change under a process); ps_crc_level: the one in use, the CPU's unless a test lowered it. Each
       extension module has its own copy of these statics. */
    static int ps_crc_level_set = -1;
    static inline int ps_crc_built(void) {
    #if defined(PS_CRC_VCLMUL)
        return 2;
    #elif defined(PS_CRC_CLMUL)
        return 1;
    #else
        return 0;
    #endif
    }
    static inline int ps_crc_cpu(void) {
        int level = 0;
    #ifdef PS_CRC_CLMUL
        if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
            level = 1;
    #ifdef PS_CRC_VCLMUL
            if (__builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx2"))
                level = 2;
    #endif
        }
    #endif
        return level;
    }
    static inline int ps_crc_level(void) {
        /* threads may race on the first call: each computes the same value and publishes it whole */
        int level = __atomic_load_n(&ps_crc_level_set, __ATOMIC_RELAXED);
        if (level < 0) {
            level = ps_crc_cpu();
            __atomic_store_n(&ps_crc_level_set, level, __ATOMIC_RELAXED);
        }
        return level;
    }
    /* Tests: use at most `level` (never more than the CPU runs); returns the level in use before. */
    static inline int ps_crc_force(int level) {
        int before = ps_crc_level(), cpu = ps_crc_cpu();
        __atomic_store_n(&ps_crc_level_set, level < cpu ? level : cpu, __ATOMIC_RELAXED);
        return before;
    }

    /* zlib's crc32 (same value), with the carry-less multiplication paths for the bulk of buffers of 64 bytes
       and more when the CPU has them. */
    static inline uint32_t ps_fast_crc32(const unsigned char *p, size_t n) {
        uint32_t c = 0;
    #ifdef PS_CRC_CLMUL
        int level = ps_crc_level();
        if (level && n >= 64) {
            size_t bulk = n & ~(size_t)15;
    #ifdef PS_CRC_VCLMUL
            if (level == 2 && bulk >= 128)
                c = ~ps_crc32_vclmul(~c, p, bulk);
            else
    #endif
                c = ~ps_crc32_clmul(~c, p, bulk);
            p += bulk;
            n -= bulk;
        }
    #endif
        while (n > 0) {
            unsigned int step = n < 0x40000000 ? (unsigned int)n : 0x40000000u;
            c = (uint32_t)crc32(c, p, step);
            p += step;
            n -= step;
        }
        return c;
    }
    """
    uint32_t ps_fast_crc32(const unsigned char *p, size_t n) noexcept nogil
    int crc_level "ps_crc_level"() noexcept nogil
    int crc_built "ps_crc_built"() noexcept nogil
    int crc_force "ps_crc_force"(int level) noexcept nogil


cdef inline int32_t body_crc32(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """RocketMQ's body CRC: CRC-32/IEEE (zlib's polynomial) masked to 31 bits (FORMAT.md §1.5)."""
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
