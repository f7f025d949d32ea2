/* pystore: the body CRC (zlib's CRC-32, by carry-less multiplication where the CPU has it); declared in _bytes.pxd
   (ps_copy_crc32, the column put's copy of a body with its CRC, in _bulk_put.pyx) */
#ifndef PYSTORE_CRC32_H
#define PYSTORE_CRC32_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
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
/* The folding loops take `copy` and `dst`: with `copy` (a constant 1), each block loaded is also stored at
   `dst` (the fused copy, ps_copy_crc32). Inlined into one function that passes 0 and one that passes 1, so
   the test is decided at compile time: the plain CRC has no store in its loop, the copy no test. */
#define PS_CRC_BODY static inline __attribute__((always_inline))
__attribute__((target("pclmul,sse4.1")))
PS_CRC_BODY uint32_t ps_crc32_clmul_body(uint32_t crc, unsigned char *dst, const unsigned char *p, size_t len,
                                             const int copy) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    __m128i x1, x2, x3, x4, a, b, c, d;
    __m128i v1, v2, v3, v4;
#define PS_LOAD128(v, off) do { v = _mm_loadu_si128((const __m128i *)(p + (off))); \
                                if (copy) _mm_storeu_si128((__m128i *)(dst + (off)), v); } while (0)
    PS_LOAD128(v1, 0); PS_LOAD128(x2, 16); PS_LOAD128(x3, 32); PS_LOAD128(x4, 48);
    x1 = _mm_xor_si128(v1, _mm_cvtsi32_si128((int)crc));
    p += 64; len -= 64;
    if (copy) dst += 64;
    while (len >= 64) {
        PS_LOAD128(v1, 0); PS_LOAD128(v2, 16); PS_LOAD128(v3, 32); PS_LOAD128(v4, 48);
        a = _mm_clmulepi64_si128(x1, k1k2, 0x00); x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        b = _mm_clmulepi64_si128(x2, k1k2, 0x00); x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        c = _mm_clmulepi64_si128(x3, k1k2, 0x00); x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        d = _mm_clmulepi64_si128(x4, k1k2, 0x00); x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, a), v1);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, b), v2);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, c), v3);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, d), v4);
        p += 64; len -= 64;
        if (copy) dst += 64;
    }
#undef PS_LOAD128
    /* four lanes into one */
    a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, a), x2);
    a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, a), x3);
    a = _mm_clmulepi64_si128(x1, k3k4, 0x00); x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, a), x4);
    if (copy) {
        /* the rest (under 64 bytes, whole blocks of 16) is folded from where it was stored: the CRC is of the
           bytes stored */
        for (size_t i = 0; i < len; i += 16)
            _mm_storeu_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(p + i)));
        p = dst;
    }
    return ps_crc32_clmul_finish(x1, p, len);
}
__attribute__((target("pclmul,sse4.1")))
static uint32_t ps_crc32_clmul(uint32_t crc, const unsigned char *p, size_t len) {
    return ps_crc32_clmul_body(crc, NULL, p, len, 0);
}
__attribute__((target("pclmul,sse4.1")))
static uint32_t ps_crc32_clmul_copy(uint32_t crc, unsigned char *dst, const unsigned char *p, size_t len) {
    return ps_crc32_clmul_body(crc, dst, p, len, 1);
}
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)
#define PS_CRC_VCLMUL 1
/* The same CRC, len >= 128 and a multiple of 16, with 256-bit carry-less multiplications (VPCLMULQDQ,
   AVX2): four registers of two lanes fold 128 bytes a round, then fold into one register (by 64, then 32
   bytes) and its two lanes into one (by 16), then finish as the 128-bit path does. 12 multiplications
   for a 128-byte body instead of 19: the multiplier's throughput bounds a short body's CRC, so fewer
   multiplications are directly less time. The fold constants are x^(d+32) and
   x^(d-32) mod P, bit-reflected, for a fold over d bits (d = 1024, 512, 256, 128). */
__attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
PS_CRC_BODY uint32_t ps_crc32_vclmul_body(uint32_t crc, unsigned char *dst, const unsigned char *p, size_t len,
                                              const int copy) {
    const __m256i k1024 = _mm256_set_epi64x(0x014a7fe880LL, 0x01e88ef372LL, 0x014a7fe880LL, 0x01e88ef372LL);
    const __m256i k512 = _mm256_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL, 0x01c6e41596LL, 0x0154442bd4LL);
    const __m256i k256 = _mm256_set_epi64x(0x015a546366LL, 0x00f1da05aaLL, 0x015a546366LL, 0x00f1da05aaLL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    __m256i y0, y1, y2, y3, v0, v1, v2, v3;
    __m128i lo;
#define PS_FOLD256(y, k, d) _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(y, k, 0x00), \
                                                              _mm256_clmulepi64_epi128(y, k, 0x11)), d)
#define PS_LOAD256(v, off) do { v = _mm256_loadu_si256((const __m256i *)(p + (off))); \
                                if (copy) _mm256_storeu_si256((__m256i *)(dst + (off)), v); } while (0)
    PS_LOAD256(v0, 0); PS_LOAD256(y1, 32); PS_LOAD256(y2, 64); PS_LOAD256(y3, 96);
    y0 = _mm256_xor_si256(v0, _mm256_setr_epi32((int)crc, 0, 0, 0, 0, 0, 0, 0));
    p += 128; len -= 128;
    if (copy) dst += 128;
    while (len >= 128) {
        PS_LOAD256(v0, 0); PS_LOAD256(v1, 32); PS_LOAD256(v2, 64); PS_LOAD256(v3, 96);
        y0 = PS_FOLD256(y0, k1024, v0);
        y1 = PS_FOLD256(y1, k1024, v1);
        y2 = PS_FOLD256(y2, k1024, v2);
        y3 = PS_FOLD256(y3, k1024, v3);
        p += 128; len -= 128;
        if (copy) dst += 128;
    }
    y2 = PS_FOLD256(y0, k512, y2);
    y3 = PS_FOLD256(y1, k512, y3);
    y3 = PS_FOLD256(y2, k256, y3);
#undef PS_LOAD256
#undef PS_FOLD256
    if (copy) {
        for (size_t i = 0; i < len; i += 16)
            _mm_storeu_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(p + i)));
        p = dst;
    }
    lo = _mm256_castsi256_si128(y3);
    return ps_crc32_clmul_finish(
        _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lo, k3k4, 0x00), _mm_clmulepi64_si128(lo, k3k4, 0x11)),
                      _mm256_extracti128_si256(y3, 1)), p, len);
}
__attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
static uint32_t ps_crc32_vclmul(uint32_t crc, const unsigned char *p, size_t len) {
    return ps_crc32_vclmul_body(crc, NULL, p, len, 0);
}
__attribute__((target("vpclmulqdq,avx2,pclmul,sse4.1")))
static uint32_t ps_crc32_vclmul_copy(uint32_t crc, unsigned char *dst, const unsigned char *p, size_t len) {
    return ps_crc32_vclmul_body(crc, dst, p, len, 1);
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

/* Copy n bytes from src to dst (not overlapping) and return zlib's crc32 of them, in one pass: each block
   loaded is stored and folded from the same register, so the CRC is that of the bytes stored (a source
   another thread changes meanwhile changes only what is stored, never makes the CRC disagree with it).
   The body of a record is read once instead of twice (copy, then CRC of the copy); short bodies and the
   last 0-15 bytes are copied, then taken by zlib from dst. */
static inline uint32_t ps_copy_crc32(unsigned char *dst, const unsigned char *src, size_t n) {
#ifdef PS_CRC_CLMUL
    int level = ps_crc_level();
    if (level && n >= 64) {
        size_t bulk = n & ~(size_t)15;
        uint32_t c;
#ifdef PS_CRC_VCLMUL
        if (level == 2 && bulk >= 128)
            c = ~ps_crc32_vclmul_copy(~0u, dst, src, bulk);
        else
#endif
            c = ~ps_crc32_clmul_copy(~0u, dst, src, bulk);
        if (n > bulk) {
            memcpy(dst + bulk, src + bulk, n - bulk);
            c = (uint32_t)crc32(c, dst + bulk, (unsigned int)(n - bulk));
        }
        return c;
    }
#endif
    memcpy(dst, src, n);
    return ps_fast_crc32(dst, n);
}

#endif /* PYSTORE_CRC32_H */
