# cython: language_level=3
"""The put lock (RocketMQ's PutMessageLock): what ``_commitlog`` holds while it appends. ``lock`` and
``unlock`` are inline: every put takes and releases the lock once."""


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_trylock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from *:
    """
    static inline int ps_spin_try(int *f) {
        int expected = 0;
        return __atomic_compare_exchange_n(f, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
    }
    static inline void ps_spin_unlock(int *f) { __atomic_store_n(f, 0, __ATOMIC_RELEASE); }
    """
    bint spin_try "ps_spin_try"(int *f) noexcept nogil
    void spin_unlock "ps_spin_unlock"(int *f) noexcept nogil


cdef class PutMessageLock:
    cdef int flag                       # the spin lock's word: 1 while held
    cdef readonly bint reentrant
    cdef pthread_mutex_t mu             # the reentrant lock (recursive mutex)

    cdef inline void lock(self) noexcept:
        """Called with the GIL held. The spin lock's waiter yields the GIL every few spins, so a holder that
        released it (to copy a big body) can take it back and finish; the mutex is waited for without it."""
        cdef int spins = 0
        if self.reentrant:
            if pthread_mutex_trylock(&self.mu) != 0:
                with nogil:
                    pthread_mutex_lock(&self.mu)
            return
        while not spin_try(&self.flag):
            spins += 1
            if spins >= 64:
                spins = 0
                with nogil:
                    sched_yield()

    cdef inline bint try_lock(self) noexcept:
        """``lock`` if it is free now, without waiting: True when taken."""
        if self.reentrant:
            return pthread_mutex_trylock(&self.mu) == 0
        return spin_try(&self.flag)

    cdef inline void unlock(self) noexcept:
        if self.reentrant:
            pthread_mutex_unlock(&self.mu)
        else:
            spin_unlock(&self.flag)
