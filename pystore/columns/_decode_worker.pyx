# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The decode worker: one C thread per process that decodes windows of deferred records while the scan that feeds
them goes on (``_arrow.BatchBuilder``'s ``hand_off``), and its hand-off and back-off protocol.

Lent to one owner at a time (``dw_acquire``): another finds it taken and decodes in its own thread. A job the
worker has not started when its owner wants it done is taken back and run in the owner's thread (``dw_wait``);
after a job the worker was found waiting for a CPU in (the other core busy, read from the kernel's schedstat)
the owners decode their next windows themselves for a while, the while doubling each time it happens again.
It never touches Python objects; after a fork the child starts its own when it needs one.

The builder calls the protocol through ``_decode_worker.pxd`` once a window, never a record; the jobs it posts
are ``_arrow_decode``'s. ``decode_worker`` turns the worker off or on, ``decode_worker_state`` shows the
back-off (both re-exported by ``pystore.columns._arrow``, where docs/api.md names them).
"""

cdef extern from *:
    """
    #include <pthread.h>
    #include <fcntl.h>
    #include <stdio.h>
    #include <unistd.h>
    typedef void (*ps_dw_fn)(void *);
    static pthread_mutex_t ps_dw_mu = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t ps_dw_cv = PTHREAD_COND_INITIALIZER;
    static ps_dw_fn ps_dw_job_fn;
    static void *ps_dw_job_arg;
    static int ps_dw_posted, ps_dw_done = 1, ps_dw_owned, ps_dw_started, ps_dw_atfork_set, ps_dw_failed;
    /* on by default: a job the worker has not started when the scan wants it done is taken back and run in
       the scan's thread (ps_dw_wait), and after a job the worker was preempted in (the other core busy) the
       owner decodes its next windows itself (ps_dw_skip, doubling while it happens again); decode_worker(False)
       turns it off */
    static int ps_dw_off = 0;
    /* the worker waited for a CPU (on a run queue) more than a quarter of the time it ran over its last
       PS_DW_SAMPLE jobs: the other core is not free (set by the worker before it says done; read by the owner
       after) */
    static int ps_dw_preempted;
    /* the worker took a schedstat sample after the last job (set and read as ps_dw_preempted is): only those
       jobs count as clean, not windows taken back or jobs between samples */
    static int ps_dw_sampled;
    /* the worker's own schedstat, open while it runs (closed in a forked child, which starts its own) */
    static int ps_dw_fd = -1;
    /* windows the owners decode in their own thread before the worker is tried again, and that number the
       next time the worker is found preempted (0: never found so since the last clean job) */
    static int ps_dw_skip, ps_dw_backoff, ps_dw_clean;
    static long long ps_dw_preemptions;
    #define PS_DW_SAMPLE 4
    #define PS_DW_FIRST_SKIP 8
    #define PS_DW_MAX_SKIP 1024
    /* clean samples in a row (PS_DW_SAMPLE jobs each) after which the back-off starts again from
       PS_DW_FIRST_SKIP */
    #define PS_DW_CLEAN 64

    /* how long each side spins before it sleeps: a window's hand-off is a few microseconds apart */
    #define PS_DW_SPIN 2000

    /* this thread's time on a CPU and waiting on a run queue so far (ns), from the kernel's schedstat: 0 when
       it cannot be read (the worker then never backs off) */
    static int ps_dw_sched(int fd, long long *run, long long *wait) {
        char buf[96];
        ssize_t n;
        if (fd < 0 || (n = pread(fd, buf, sizeof buf - 1, 0)) <= 0)
            return 0;
        buf[n] = 0;
        return sscanf(buf, "%lld %lld", run, wait) == 2;
    }

    static void *ps_dw_main(void *arg) {
        long long jobs = 0, run = 0, wait = 0, last_run = 0, last_wait = 0;
        (void)arg;
        ps_dw_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        ps_dw_sched(ps_dw_fd, &last_run, &last_wait);
        for (;;) {
            int i;
            ps_dw_fn fn;
            void *a;
            for (i = 0; i < PS_DW_SPIN && !__atomic_load_n(&ps_dw_posted, __ATOMIC_ACQUIRE); i++)
                __builtin_ia32_pause();
            pthread_mutex_lock(&ps_dw_mu);
            while (!ps_dw_posted)
                pthread_cond_wait(&ps_dw_cv, &ps_dw_mu);
            fn = ps_dw_job_fn;
            a = ps_dw_job_arg;
            __atomic_store_n(&ps_dw_posted, 0, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&ps_dw_mu);
            fn(a);
            if (++jobs % PS_DW_SAMPLE == 0 && ps_dw_sched(ps_dw_fd, &run, &wait)) {
                ps_dw_preempted = 4 * (wait - last_wait) > run - last_run;
                ps_dw_sampled = 1;
                last_run = run;
                last_wait = wait;
            }
            pthread_mutex_lock(&ps_dw_mu);
            __atomic_store_n(&ps_dw_done, 1, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&ps_dw_cv);
            pthread_mutex_unlock(&ps_dw_mu);
        }
        return NULL;
    }

    static void ps_dw_atfork_child(void) {
        pthread_mutex_init(&ps_dw_mu, NULL);
        pthread_cond_init(&ps_dw_cv, NULL);
        ps_dw_posted = 0;
        ps_dw_done = 1;
        ps_dw_owned = 0;
        ps_dw_preempted = ps_dw_sampled = ps_dw_skip = ps_dw_backoff = ps_dw_clean = 0;
        if (ps_dw_fd >= 0) {        /* the parent's worker's: this child's worker opens its own */
            close(ps_dw_fd);
            ps_dw_fd = -1;
        }
        ps_dw_started = 0;
    }

    /* The worker for this caller (started on first use): 1, or 0 when another has it, none can start, or the
       owners are decoding in their own threads for a while (ps_dw_skip). */
    static int ps_dw_acquire(void) {
        int expect = 0;
        if (ps_dw_failed || ps_dw_off || !__atomic_compare_exchange_n(&ps_dw_owned, &expect, 1, 0, __ATOMIC_ACQUIRE,
                                                         __ATOMIC_RELAXED))
            return 0;
        if (ps_dw_skip > 0) {
            ps_dw_skip--;
            __atomic_store_n(&ps_dw_owned, 0, __ATOMIC_RELEASE);
            return 0;
        }
        if (!ps_dw_started) {
            pthread_t t;
            pthread_attr_t at;
            if (!ps_dw_atfork_set) { pthread_atfork(NULL, NULL, ps_dw_atfork_child); ps_dw_atfork_set = 1; }
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, ps_dw_main, NULL) != 0) {
                ps_dw_failed = 1;
                __atomic_store_n(&ps_dw_owned, 0, __ATOMIC_RELEASE);
                pthread_attr_destroy(&at);
                return 0;
            }
            pthread_attr_destroy(&at);
            ps_dw_started = 1;
        }
        return 1;
    }

    /* The owner is done with the worker (its job done): after a job the worker was preempted in, the next
       windows are decoded in their owners' threads. */
    static void ps_dw_release(void) {
        if (ps_dw_sampled) {
            ps_dw_sampled = 0;
            if (ps_dw_preempted) {
                ps_dw_preempted = 0;
                ps_dw_preemptions++;
                ps_dw_backoff = ps_dw_backoff == 0 ? PS_DW_FIRST_SKIP
                    : (ps_dw_backoff >= PS_DW_MAX_SKIP ? PS_DW_MAX_SKIP : 2 * ps_dw_backoff);
                ps_dw_skip = ps_dw_backoff;
                ps_dw_clean = 0;
            } else if (ps_dw_clean < PS_DW_CLEAN && ++ps_dw_clean == PS_DW_CLEAN) {
                ps_dw_backoff = 0;      /* the other core has been free for a while */
            }
        }
        __atomic_store_n(&ps_dw_owned, 0, __ATOMIC_RELEASE);
    }

    static void ps_dw_post(ps_dw_fn fn, void *arg) {
        pthread_mutex_lock(&ps_dw_mu);
        ps_dw_job_fn = fn;
        ps_dw_job_arg = arg;
        __atomic_store_n(&ps_dw_done, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&ps_dw_posted, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&ps_dw_cv);
        pthread_mutex_unlock(&ps_dw_mu);
    }

    /* until the job posted last is done (its writes then seen by this thread). A job the worker has not
       taken yet is taken back and run here: waiting for a worker that is not running would cost the caller
       the scheduler's delay, not the job's time. */
    static void ps_dw_wait(void) {
        int i;
        ps_dw_fn fn = NULL;
        void *a = NULL;
        if (__atomic_load_n(&ps_dw_posted, __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(&ps_dw_mu);
            if (ps_dw_posted) {
                fn = ps_dw_job_fn;
                a = ps_dw_job_arg;
                __atomic_store_n(&ps_dw_posted, 0, __ATOMIC_RELAXED);
            }
            pthread_mutex_unlock(&ps_dw_mu);
            if (fn != NULL) {
                fn(a);
                __atomic_store_n(&ps_dw_done, 1, __ATOMIC_RELEASE);
                return;
            }
        }
        for (i = 0; i < PS_DW_SPIN && !__atomic_load_n(&ps_dw_done, __ATOMIC_ACQUIRE); i++)
            __builtin_ia32_pause();
        if (__atomic_load_n(&ps_dw_done, __ATOMIC_ACQUIRE))
            return;
        pthread_mutex_lock(&ps_dw_mu);
        while (!__atomic_load_n(&ps_dw_done, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&ps_dw_cv, &ps_dw_mu);
        pthread_mutex_unlock(&ps_dw_mu);
    }
    """
    int ps_dw_off
    int ps_dw_skip, ps_dw_backoff
    long long ps_dw_preemptions
    int ps_dw_acquire() noexcept nogil
    void ps_dw_release() noexcept nogil
    void ps_dw_post(void (*fn)(void *) noexcept nogil, void *arg) noexcept nogil
    void ps_dw_wait() noexcept nogil


cdef bint dw_on() noexcept nogil:
    return not ps_dw_off


cdef bint dw_acquire() noexcept nogil:
    return ps_dw_acquire()


cdef void dw_release() noexcept nogil:
    ps_dw_release()


cdef void dw_post(dw_job fn, void *arg) noexcept nogil:
    ps_dw_post(fn, arg)


cdef void dw_wait() noexcept nogil:
    ps_dw_wait()


def decode_worker_state():
    """The decode worker's back-off, for tests and benchmarks: the jobs it was found preempted in so far, the
    windows owners will still decode in their own threads, and the back-off's current length."""
    return {"preemptions": ps_dw_preemptions, "skip": ps_dw_skip, "backoff": ps_dw_backoff}


def decode_worker(enabled=None):
    """Whether ``BatchBuilder`` hands windows of deferred records to the decode worker (on by default);
    ``enabled`` True or False sets it. Returns the setting before."""
    before = not ps_dw_off
    if enabled is not None:
        global ps_dw_off
        ps_dw_off = 0 if enabled else 1
    return before
