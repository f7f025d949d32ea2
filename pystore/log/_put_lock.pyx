# cython: language_level=3
"""The put lock: RocketMQ's PutMessageSpinLock (the default: an atomic flag, for a lock held for the length of
one append) or PutMessageReentrantLock (a recursive mutex; ``use_reentrant_lock_when_put_message``). ``lock``
and ``unlock`` are inline in ``_put_lock.pxd``; this module makes and frees the lock and gives Python the same
operations (``acquire``/``release``, ``with``).

Thread-safety: any thread may take it; the spin lock is not reentrant.
"""

cimport cython


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutexattr_t:
        pass
    int pthread_mutexattr_init(pthread_mutexattr_t *)
    int pthread_mutexattr_settype(pthread_mutexattr_t *, int)
    int pthread_mutex_init(pthread_mutex_t *, const pthread_mutexattr_t *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int PTHREAD_MUTEX_RECURSIVE


@cython.final
cdef class PutMessageLock:
    """RocketMQ's PutMessageSpinLock (default) or PutMessageReentrantLock."""

    def __cinit__(self, bint reentrant=False):
        cdef pthread_mutexattr_t attr
        self.reentrant = reentrant
        pthread_mutexattr_init(&attr)
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE)
        pthread_mutex_init(&self.mu, &attr)

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mu)

    def acquire(self):
        self.lock()

    def release(self):
        self.unlock()

    def __enter__(self):
        self.lock()
        return self

    def __exit__(self, *exc):
        self.unlock()
