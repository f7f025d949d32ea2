/* The cross-process wake-up word of pystore's `wakeup` file (docs/format.md §15).
 *
 * One 64-bit state word, shared through a MAP_SHARED mapping of the file by the writer and by the read-only
 * stores of other processes:
 *
 *   bits  0-31  seq       the futex word: the writer adds 1 when it wakes the waiters
 *   bits 32-62  waiters   registered waiters (a waiter adds 1 before it looks at the queue a last time)
 *   bit  63     sleeping  a registered waiter sleeps in the kernel (or is about to)
 *
 * Writer, after the units of a put are written: a full fence, then one load; only when `waiters` is not 0
 * does it swap the word to (seq + 1, no waiters) and, when `sleeping` was set, FUTEX_WAKE everyone. The fence
 * pairs with the waiter's atomic add: either the writer sees the registration, or the waiter's last look at
 * the queue sees the unit (Dekker's pattern; without the fence the writer's load may pass its own unit stores).
 * A writer that registered for membarrier(2)'s global expedited barrier (`ps_writer_light`) sets bit 0 of the
 * flags word before the state word and skips its fence: each waiter then issues that barrier after its add,
 * which runs a full fence on the writer's CPU wherever the writer is (the fence moves to the side that is about
 * to sleep anyway).
 *
 * Waiter: register (returns seq), look at the queue, wait (spin on seq, then set `sleeping` and FUTEX_WAIT
 * while seq is unchanged), unregister. The writer's swap unregisters every waiter at once, so a waiter whose
 * seq moved has nothing to take back; one whose seq did not move takes back its own count (the swap and the
 * take-back are both compare-and-swaps on the whole word: they cannot both count the same registration).
 * A waiter killed while registered leaves a count behind: the writer's next wake-up clears it.
 */
#ifndef PYSTORE_NOTIFY_H
#define PYSTORE_NOTIFY_H

#include <stdint.h>
#include <limits.h>
#include <errno.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#define PS_NOTIFY_FUTEX 1
#else
#define PS_NOTIFY_FUTEX 0
#endif

#define PS_WAITER_ONE ((uint64_t)1 << 32)
/* the flags word's bit: waiters issue the global expedited membarrier after registering */
#define PS_FLAG_WAITER_BARRIER 1u
#define PS_SLEEPING ((uint64_t)1 << 63)
#define PS_WAITERS(w) (((w) >> 32) & 0x7fffffffu)

/* the futex word: the low half of the state word in memory order */
static inline uint32_t *ps_seq_addr(uint64_t *word)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (uint32_t *)word;
#else
    return (uint32_t *)word + 1;
#endif
}

static inline uint32_t ps_seq(uint64_t *word)
{
    return __atomic_load_n(ps_seq_addr(word), __ATOMIC_ACQUIRE);
}

static inline void ps_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int ps_notify_slow(uint64_t *word, uint64_t w)
{
    uint64_t n;
    do {
        if (PS_WAITERS(w) == 0)
            return 0;
        n = (uint64_t)(uint32_t)(w + 1);
    } while (!__atomic_compare_exchange_n(word, &w, n, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
#if PS_NOTIFY_FUTEX
    if (w & PS_SLEEPING)
        syscall(SYS_futex, ps_seq_addr(word), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
#endif
    return 1;
}

/* Take back a registration made at `seen` unless the writer's wake-up took every registration since. */
static inline void ps_unregister(uint64_t *word, uint32_t seen)
{
    uint64_t w = __atomic_load_n(word, __ATOMIC_RELAXED), n;
    do {
        if ((uint32_t)w != seen || PS_WAITERS(w) == 0)
            return;
        n = w - PS_WAITER_ONE;
        if (PS_WAITERS(n) == 0)
            n &= ~PS_SLEEPING;
    } while (!__atomic_compare_exchange_n(word, &w, n, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
}

/* The writer's hook: 1 when waiters were woken. `light`: the waiters fence for it (ps_writer_light). */
static inline int ps_notify(uint64_t *word, int light)
{
    uint64_t w;
    if (light)
        __asm__ __volatile__("" ::: "memory");
    else
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    w = __atomic_load_n(word, __ATOMIC_RELAXED);
    if (__builtin_expect(PS_WAITERS(w) == 0, 1))
        return 0;
    return ps_notify_slow(word, w);
}

/* A writer: register this process for the waiters' barrier and say so in `flags`; 1 when the writer may then
 * notify without its fence. */
static inline int ps_writer_light(uint32_t *flags)
{
#if PS_NOTIFY_FUTEX && defined(SYS_membarrier)
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0) {
        __atomic_fetch_or(flags, PS_FLAG_WAITER_BARRIER, __ATOMIC_SEQ_CST);
        return 1;
    }
#endif
    __atomic_fetch_and(flags, ~PS_FLAG_WAITER_BARRIER, __ATOMIC_SEQ_CST);
    return 0;
}

/* Register a waiter: the seq to wait on (0..2**32-1), or -1 when the writer needs the waiters' barrier and it
 * failed here (the registration is taken back: the caller polls instead). */
static inline int64_t ps_register(uint64_t *word, uint32_t *flags)
{
    uint32_t seen = (uint32_t)__atomic_fetch_add(word, PS_WAITER_ONE, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(flags, __ATOMIC_SEQ_CST) & PS_FLAG_WAITER_BARRIER) {
#if PS_NOTIFY_FUTEX && defined(SYS_membarrier)
        if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0)
            return seen;
#endif
        ps_unregister(word, seen);
        return -1;
    }
    return seen;
}

static inline int64_t ps_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A spinning waiter's watch on the very place the writer publishes to: spin up to `spin_ns` while the 4
 * bytes at `p` (4-byte aligned: the size field of the next consume-queue unit, zero until the writer stores
 * it last) are zero. 1 when they changed, 0 when the time ran out. It needs no registration, so the writer
 * pays nothing for it: no swap of the state word, no barrier sent to its CPU. */
static inline int ps_spin_nonzero(const unsigned char *p, int64_t spin_ns)
{
    int64_t start = ps_now_ns();
    unsigned i;
    for (;;) {
        for (i = 0; i < 64; i++) {
            if (__atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE) != 0)
                return 1;
            ps_cpu_relax();
        }
        if (ps_now_ns() - start >= spin_ns)
            return 0;
    }
}

/* Wait while seq is `seen`: spin up to `spin_ns`, then sleep up to the rest of `timeout_ns`.
 * 1: seq moved; 0: timeout; -1: a signal interrupted the sleep (the caller runs its handlers and waits on);
 * -2: no futex on this platform (the caller polls). */
static inline int ps_wait(uint64_t *word, uint32_t seen, int64_t spin_ns, int64_t timeout_ns)
{
#if PS_NOTIFY_FUTEX
    int64_t start = ps_now_ns(), now = start, left;
    uint64_t w;
    struct timespec ts;
    long r;
    unsigned i;
    if (spin_ns > timeout_ns)
        spin_ns = timeout_ns;
    while (now - start < spin_ns) {
        for (i = 0; i < 64; i++) {
            if (ps_seq(word) != seen)
                return 1;
            ps_cpu_relax();
        }
        now = ps_now_ns();
    }
    w = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (!(w & PS_SLEEPING)) {
        if ((uint32_t)w != seen)
            return 1;
        if (__atomic_compare_exchange_n(word, &w, w | PS_SLEEPING, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            break;
    }
    left = timeout_ns - (ps_now_ns() - start);
    if (left <= 0)
        return ps_seq(word) != seen;
    ts.tv_sec = (time_t)(left / 1000000000);
    ts.tv_nsec = (long)(left % 1000000000);
    r = syscall(SYS_futex, ps_seq_addr(word), FUTEX_WAIT, seen, &ts, NULL, 0);
    if (ps_seq(word) != seen)
        return 1;
    if (r == -1 && errno == EINTR)
        return -1;
    return 0;
#else
    (void)word; (void)seen; (void)spin_ns; (void)timeout_ns;
    return -2;
#endif
}

#endif
