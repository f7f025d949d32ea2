# cython: language_level=3
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from pystore._mapped_file cimport MappedFile
from pystore._message cimport Message
from pystore._put_lock cimport PutMessageLock


cdef class QueueCell:
    """One (topic, queue id): the next queue offset to assign and, once dispatch exists, its consume queue."""
    cdef readonly str topic
    cdef readonly int32_t queue_id
    cdef public int64_t next_offset
    cdef public object consume_queue


cdef class Dispatcher:
    """Inline dispatch hook: called under the put lock for every appended record that enters a queue."""
    cdef void prepare(self, Message msg) noexcept
    cdef int dispatch(self, QueueCell cell, Message msg, int64_t phy_offset, int32_t size, int64_t store_ts,
                      int64_t queue_offset) except -1
    cdef int dispatch_run(self, QueueCell cell, Message msg, int64_t phy_offset, const int32_t *sizes, Py_ssize_t n,
                          int64_t store_ts, int64_t queue_offset) except -1
    cdef int dispatch_each(self, QueueCell cell, Message msg, const unsigned char *rec, int64_t phy_offset,
                           const int32_t *sizes, const int32_t *props_lens, const int64_t *tags_codes, Py_ssize_t n,
                           int64_t store_ts, int64_t queue_offset, bint keyed) except -1


cdef class CommitLogCore:
    cdef PutMessageLock put_lock
    cdef MappedFile last
    cdef readonly int64_t file_size
    cdef dict table
    cdef str last_key                 # the cell of the last put's topic-queue key, reused while the key repeats
    cdef QueueCell last_cell
    cdef bytes store_host_b
    cdef int32_t store_flag
    cdef public int64_t max_message_size
    cdef public bint writeable
    cdef int64_t begin_time_in_lock
    cdef public int64_t os_page_cache_busy_timeout
    cdef public object roll_file
    cdef public object after_put
    cdef public object delay_rewrite
    cdef public object flush_wakeup
    cdef int64_t flush_notified       # the flush service was woken since it last looked (cleared by it)
    # The flush service's wake-up when it waits in C (``_flush_wait``): _notify's state word, in this process's
    # memory, and its flags word (0: the put path fences before it looks for a waiter). flush_wake_c: puts
    # wake the service through it rather than by calling flush_wakeup.
    cdef uint64_t flush_word
    cdef uint32_t flush_flags
    cdef public bint flush_wake_c
    # the CPU the thread that last woke the flush service is pinned to (-1: none, or not pinned), where the
    # store's service threads that follow the puts go when ``follow_put_cpu`` is set
    cdef public int put_cpu
    cdef public bint follow_put_cpu
    cdef public long long wake_bytes
    cdef public Dispatcher dispatcher
    cdef public object clock
    cdef readonly int64_t put_times_total
    cdef readonly int64_t put_size_total
    cdef readonly int64_t put_failed_times
    cdef readonly int64_t put_max_ns
    cdef int64_t buckets[13]

    cdef QueueCell cell_for(self, Message m)
    cdef int64_t _now(self)
    cdef void _account(self, int64_t t0, int64_t size) noexcept
    cdef MappedFile _roll(self, int64_t next_offset)
    cdef MappedFile _file_with_room(self, int64_t total)
    cdef void _after_append(self, MappedFile mf) except *
    cdef object _put(self, Message msg, bint run_after)
    cdef object _put_batch(self, object batch, bint run_after)
