/* pystore: the prefault worker of _mapped_file.pyx (declared there; C, one thread per process) */
#ifndef PYSTORE_PREFAULT_WORKER_H
#define PYSTORE_PREFAULT_WORKER_H

/* The prefault worker: one detached C thread per process that runs MADV_POPULATE_WRITE over ranges a
   writer is about to reach, so the writer's thread takes no page faults there. It never takes the GIL
   and never touches a Python object, so it cannot be held up by, or hold up, the interpreter.

   A request is only an address range. Populating never changes what a page holds, so a range whose
   file was unmapped meanwhile is harmless: the call fails (unmapped, or not writable) or faults in
   pages of whatever is mapped there now. Requests that do not fit in the ring, or that find the worker
   taking one, are dropped (the writer then
   faults lazily, as without the worker).

   A writer that outruns the worker (a file that was not warmed, written page by page: each new page
   costs the worker ~5 us on this VM, and the writer ~7 us when it faults one itself) must not meet
   it on the same pages: the writer would sleep on the page locks the worker holds, and the worker,
   at idle priority, may be preempted holding them, and the writer ends up slower than with no worker
   at all (docs/performance.md has the runs). So each file publishes its writer's address in a cursor slot
   (``ps_pf_publish``, a store per put), and the worker populates a request 32 KiB at a time, moving
   each piece to 64 KiB past the writer once the writer has come that close: the writer then rarely
   sleeps, and the two share the pages (the worker takes most, the writer faults the rest). A cursor is only compared, never dereferenced, and only when it lies in the request's own
   mapping: a stale or shared slot costs a skipped or a redundant piece, never a wrong byte. */
#include <pthread.h>
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <stdint.h>
#include "cpu_follow.h"
#define PS_PF_RING 256
#define PS_PF_SLOTS 64
#define PS_PF_PIECE (32 * 1024)
#define PS_PF_GAP (64 * 1024)
typedef struct { char *addr; size_t len; char *lo; char *hi; uintptr_t *cursor; } ps_pf_req;
static uintptr_t ps_pf_cursors[PS_PF_SLOTS];
static unsigned ps_pf_next_slot;
static pthread_mutex_t ps_pf_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ps_pf_cv = PTHREAD_COND_INITIALIZER;
static ps_pf_req ps_pf_ring[PS_PF_RING];
static unsigned long ps_pf_head, ps_pf_tail;
static int ps_pf_started, ps_pf_atfork_set;
static volatile int ps_pf_unsupported;
static int ps_pf_active;        /* the worker is running a request it popped */
/* the CPU the worker moves to before a request: a put thread's pinned CPU (CommitLogCore.follow_put_cpu
   publishes it), or -1 (the worker's own CPU set). At idle priority it still takes 4 ms slices of a busy
   CPU now and then: beside a pinned writer, not on the core a pinned consumer spins on. With several
   stores in a process, the last one to publish decides. */
static int ps_pf_cpu = -1;
static void ps_pf_follow(int cpu) { __atomic_store_n(&ps_pf_cpu, cpu, __ATOMIC_RELAXED); }

/* requests queued or running (for tests that must not meet a request left by an earlier file) */
static unsigned long ps_pf_pending(void) {
    unsigned long n;
    pthread_mutex_lock(&ps_pf_mu);
    n = (ps_pf_tail - ps_pf_head) + (unsigned long)__atomic_load_n(&ps_pf_active, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&ps_pf_mu);
    return n;
}
static unsigned long long ps_pf_done_bytes, ps_pf_dropped, ps_pf_failed, ps_pf_skipped;

/* a cursor slot for a new file (shared round-robin: see above why sharing is harmless) */
static uintptr_t *ps_pf_slot(void) {
    return &ps_pf_cursors[__atomic_fetch_add(&ps_pf_next_slot, 1, __ATOMIC_RELAXED) % PS_PF_SLOTS];
}

/* populate [r.addr, r.addr + r.len) a piece at a time, each piece past the writer; the bytes go to
   *done and *skipped; -1 with errno set when madvise fails */
static int ps_pf_populate(const ps_pf_req *r, unsigned long long *done, unsigned long long *skipped,
                          ps_cpu_follow *follow) {
    char *p = r->addr, *end = r->addr + r->len, *e, *c, *q;
    while (p < end) {
        if (follow != NULL)     /* a request may span a whole file: the move is checked a piece at a time */
            ps_follow_cpu(__atomic_load_n(&ps_pf_cpu, __ATOMIC_RELAXED), follow);
        c = (char *)__atomic_load_n(r->cursor, __ATOMIC_RELAXED);
        if (c >= r->lo && c < r->hi && c + PS_PF_GAP > p) {
            q = (char *)(((uintptr_t)c + PS_PF_GAP + 4095) & ~(uintptr_t)4095);
            __atomic_add_fetch(skipped, (unsigned long long)((q < end ? q : end) - p), __ATOMIC_RELAXED);
            p = q;
            if (p >= end) break;
        }
        e = end - p > PS_PF_PIECE ? p + PS_PF_PIECE : end;
        if (madvise(p, (size_t)(e - p), MADV_POPULATE_WRITE) != 0)
            return -1;
        __atomic_add_fetch(done, (unsigned long long)(e - p), __ATOMIC_RELAXED);
        p = e;
    }
    return 0;
}

static void *ps_pf_main(void *arg) {
    (void)arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "pystore-pfault");   /* as ps, top and perf show it (15 chars at most) */
#endif
#ifdef SCHED_IDLE
    /* Lowest class: it runs on a core nobody else wants and never preempts a writer (woken on the
       writer's core, a normal thread would take it over for the length of its faults, which a
       2-core machine feels). Starved, it only leaves the writer to fault as it would without it. */
    {
        struct sched_param sp;
        memset(&sp, 0, sizeof sp);
        sched_setscheduler(0, SCHED_IDLE, &sp);
    }
#endif
    /* Does this kernel know MADV_POPULATE_WRITE (5.14+)? Asked once, of a page of our own: a request
       fails with EINVAL too when its file was unmapped and the range reused by a read-only mapping,
       which must not turn pre-faulting off for the whole process. */
    {
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page != MAP_FAILED) {
            if (madvise(page, 4096, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
                ps_pf_unsupported = 1;
            munmap(page, 4096);
        }
    }
    ps_cpu_follow follow;
    ps_cpu_follow_init(&follow);
    for (;;) {
        ps_pf_req r;
        pthread_mutex_lock(&ps_pf_mu);
        while (ps_pf_head == ps_pf_tail)
            pthread_cond_wait(&ps_pf_cv, &ps_pf_mu);
        r = ps_pf_ring[ps_pf_head % PS_PF_RING];
        ps_pf_head++;
        ps_pf_active = 1;
        pthread_mutex_unlock(&ps_pf_mu);
        if (ps_pf_populate(&r, &ps_pf_done_bytes, &ps_pf_skipped, &follow) != 0)
            __atomic_add_fetch(&ps_pf_failed, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&ps_pf_active, 0, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* a forked child has no worker thread: start afresh there */
static void ps_pf_atfork_child(void) {
    pthread_mutex_init(&ps_pf_mu, NULL);
    pthread_cond_init(&ps_pf_cv, NULL);
    ps_pf_started = 0;
    ps_pf_head = ps_pf_tail = 0;
}

static int ps_pf_request(void *addr, size_t len, void *lo, void *hi, uintptr_t *cursor) {
    int queued = 0;
    if (ps_pf_unsupported || len == 0) return 0;
    /* never wait for the worker: at idle priority it may be parked holding the lock (for the moment
       it takes to pop a request); the request is dropped and the writer faults lazily instead */
    if (pthread_mutex_trylock(&ps_pf_mu) != 0) {
        __atomic_add_fetch(&ps_pf_dropped, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (!ps_pf_started) {
        pthread_t t;
        pthread_attr_t a;
        if (!ps_pf_atfork_set) { pthread_atfork(NULL, NULL, ps_pf_atfork_child); ps_pf_atfork_set = 1; }
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 65536);
        if (pthread_create(&t, &a, ps_pf_main, NULL) != 0) ps_pf_unsupported = 1;
        else ps_pf_started = 1;
        pthread_attr_destroy(&a);
    }
    if (ps_pf_started) {
        if (ps_pf_tail - ps_pf_head < PS_PF_RING) {
            ps_pf_req *r = &ps_pf_ring[ps_pf_tail % PS_PF_RING];
            r->addr = (char *)addr;
            r->len = len;
            r->lo = (char *)lo;
            r->hi = (char *)hi;
            r->cursor = cursor;
            ps_pf_tail++;
            pthread_cond_signal(&ps_pf_cv);
            queued = 1;
        } else {
            __atomic_add_fetch(&ps_pf_dropped, 1, __ATOMIC_RELAXED);
        }
    }
    pthread_mutex_unlock(&ps_pf_mu);
    return queued;
}

#endif /* PYSTORE_PREFAULT_WORKER_H */
