# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The async flush service's wait, without the GIL (``pystore.log.flush.FlushRealTimeService``, ASYNC_FLUSH without a
transient pool).

RocketMQ's flush thread is woken by the puts (``flushCommitLogService.wakeup()``) and flushes once at least
``flush_commit_log_least_pages`` pages are dirty. pystore's puts wake it once that many bytes are dirty
(``CommitLogCore._after_append``). Woken through a Python ``Event``, the service takes the GIL twice a flush (to
wake, and after the msync that ran without it), and a put thread that keeps the GIL busy hands it over each
time only after CPython's switch interval: a flush every few milliseconds becomes a GIL hand-over every few
milliseconds, and the woken thread takes a core from whatever runs beside.

``follow_flush`` keeps the whole loop in C: it waits on the commit log's in-process wake word
(``CommitLogCore.flush_word``, the state word of ``_notify``: the put path's ``ps_notify`` finds the
registered waiter and wakes it with ``FUTEX_WAKE``), flushes the newest file (``MappedFile.sync_nogil``) each
time enough is dirty (but not twice within the store's ``flush_commit_log_min_gap``), and hands back to Python
when the service's own schedule needs it: the time of its next thorough flush (everything dirty, and the
checkpoint's time after it), a file flushed to its end (the log goes on in the next file), a failed sync, or
``stop``.

Lost wake-ups: the wait clears ``flush_notified`` and registers on the word before it looks at the dirty
bytes, and the put path sets ``flush_notified`` and looks for waiters (after a full fence) only after it
appended: either the put sees the registration and wakes the wait, or the wait's look sees the put's bytes.
"""

from libc.stdint cimport int64_t

from pystore.format._bytes cimport (cpu_follow_init, follow_cpu, load_i64_acquire, mono_ns, ps_cpu_follow,
                                    store_i64_release)
from pystore.log._commitlog cimport CommitLogCore
from pystore.log._mapped_file cimport MappedFile
from pystore.system._notify cimport ps_notify, ps_register, ps_unregister, ps_wait

cdef enum:
    _FLUSH_STOPPED = 0      # ``FlushStop.stop`` was called
    _FLUSH_TIMEOUT = 1      # the time given is up, or ``FlushStop.poke`` asked for a pass of the service now
    _FLUSH_FILE_DONE = 2    # the file is full and flushed to its end
    _FLUSH_ERROR = 3        # a sync failed (``FlushStop.errno`` says why)

FLUSH_STOPPED = _FLUSH_STOPPED
FLUSH_TIMEOUT = _FLUSH_TIMEOUT
FLUSH_FILE_DONE = _FLUSH_FILE_DONE
FLUSH_ERROR = _FLUSH_ERROR


cdef class FlushStop:
    """The flags that end a ``follow_flush`` running in another thread (``stop``; ``poke``: return now, once),
    and the errno of the sync that made the last one return ``FLUSH_ERROR``."""

    cdef int64_t _stop
    cdef int64_t _poke
    cdef int sync_errno
    cdef ps_cpu_follow cpu      # where the waiting thread was moved (``CommitLogCore.follow_put_cpu``)

    def __cinit__(self):
        cpu_follow_init(&self.cpu)

    @property
    def errno(self):
        return self.sync_errno

    def poke(self, CommitLogCore core not None):
        """Make the ``follow_flush`` waiting on ``core``'s word return ``FLUSH_TIMEOUT`` now (or the next one
        at once): the service's ``wakeup``, which asks for a pass."""
        store_i64_release(&self._poke, 1)
        ps_notify(&core.flush_word, 0)

    def stop(self, CommitLogCore core not None):
        """End the ``follow_flush`` waiting on ``core``'s word, and any started later."""
        store_i64_release(&self._stop, 1)
        # a wait registered before the flag was set is woken; one that registers after it sees the flag
        ps_notify(&core.flush_word, 0)

    def resume(self):
        store_i64_release(&self._stop, 0)


def follow_flush(CommitLogCore core not None, MappedFile mf not None, FlushStop stop not None, int least_pages,
                 long long interval_ns, long long max_ns, long long min_gap_ns=0):
    """Without the GIL, for at most about ``max_ns``: flush ``mf`` (the commit log's newest file) whenever at
    least ``least_pages`` pages of it are dirty, sleeping on ``core``'s wake word in between, at most
    ``interval_ns`` at a time (the service's timed pass: a log that grows without puts, a slave's, wakes
    nobody). Two flushes are at least ``min_gap_ns`` apart: what the puts dirty meanwhile waits for the next
    one (each flush wakes this thread, which takes a core from whatever runs beside). Returns
    ``FLUSH_TIMEOUT``, ``FLUSH_FILE_DONE``, ``FLUSH_STOPPED`` or ``FLUSH_ERROR`` (see the module's text)."""
    cdef int result, err = 0
    if not mf.pin():
        return _FLUSH_FILE_DONE
    try:
        with nogil:
            result = _follow(core, mf, stop, least_pages, interval_ns, max_ns, min_gap_ns, &err)
    finally:
        mf.unpin()
    stop.sync_errno = err
    return result


cdef int _follow(CommitLogCore core, MappedFile mf, FlushStop stop, int least_pages, int64_t interval_ns,
                 int64_t max_ns, int64_t min_gap_ns, int *err) noexcept nogil:
    cdef int64_t deadline = mono_ns() + max_ns, left, seen, now, last_flush = 0, wait
    while True:
        if core.follow_put_cpu:
            follow_cpu(core.put_cpu, &stop.cpu)
        store_i64_release(&core.flush_notified, 0)
        seen = ps_register(&core.flush_word, &core.flush_flags)
        if load_i64_acquire(&stop._stop):
            ps_unregister(&core.flush_word, <unsigned int>seen)
            return _FLUSH_STOPPED
        if load_i64_acquire(&stop._poke):
            store_i64_release(&stop._poke, 0)
            ps_unregister(&core.flush_word, <unsigned int>seen)
            return _FLUSH_TIMEOUT
        if not mf.available:
            # shut down: a file that cannot be held keeps its flushed position (``MappedFile.flush``)
            ps_unregister(&core.flush_word, <unsigned int>seen)
            return _FLUSH_FILE_DONE
        if mf._able_to_flush(least_pages):
            now = mono_ns()
            if last_flush == 0 or now - last_flush >= min_gap_ns or mf.wrote == mf.file_size:
                ps_unregister(&core.flush_word, <unsigned int>seen)
                err[0] = mf.sync_nogil(least_pages)
                if err[0] != 0:
                    return _FLUSH_ERROR
                last_flush = mono_ns()
                if min_gap_ns > 0 and last_flush < deadline:
                    # sleep the gap out at once, the puts waking nobody meanwhile: one wake-up a gap, not one
                    # when the puts dirty the least pages again and another when the gap ends
                    store_i64_release(&core.flush_notified, 1)
                    seen = ps_register(&core.flush_word, &core.flush_flags)
                    if not load_i64_acquire(&stop._stop) and not load_i64_acquire(&stop._poke):
                        ps_wait(&core.flush_word, <unsigned int>seen, 0,
                                min_gap_ns if min_gap_ns < deadline - last_flush else deadline - last_flush)
                    ps_unregister(&core.flush_word, <unsigned int>seen)
                continue
            # too soon after the last flush: sleep out the gap. The puts meanwhile see ``flush_notified`` set and
            # wake nobody; a stop or a poke still ends the sleep (they notify whatever is set)
            if now >= deadline:
                ps_unregister(&core.flush_word, <unsigned int>seen)
                return _FLUSH_TIMEOUT
            store_i64_release(&core.flush_notified, 1)
            wait = last_flush + min_gap_ns - now
            ps_wait(&core.flush_word, <unsigned int>seen, 0, wait if wait < deadline - now else deadline - now)
            ps_unregister(&core.flush_word, <unsigned int>seen)
            continue
        if mf.flushed >= mf.file_size:
            ps_unregister(&core.flush_word, <unsigned int>seen)
            return _FLUSH_FILE_DONE
        left = deadline - mono_ns()
        if left <= 0:
            ps_unregister(&core.flush_word, <unsigned int>seen)
            return _FLUSH_TIMEOUT
        ps_wait(&core.flush_word, <unsigned int>seen, 0, left if left < interval_ns else interval_ns)
        ps_unregister(&core.flush_word, <unsigned int>seen)
