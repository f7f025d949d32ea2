# cython: language_level=3
"""What ``_enqueue`` shares: the sizes and bits of the timer files (docs/format.md §10.1), its stop reasons, and
``TimerEnqueue``, the compiled ``doEnqueue`` of one timer store over a run of its queue's units."""
from libc.stdint cimport int32_t, int64_t

from pystore.format._codec cimport RecordView
from pystore.log._mapped_file cimport MappedFile


cdef enum:
    TL_UNIT_SIZE = 52            # a timer-log unit (TimerLog.UNIT_SIZE)
    TL_MIN_BLANK_LEN = 16        # the blank that ends a timer-log file (TimerLog.MIN_BLANK_LEN)
    WHEEL_SLOT_SIZE = 32         # a wheel slot (Slot.SIZE)
    DIRTY_PAGE_SHIFT = 12        # the wheel's dirty map: one byte per 4 KiB of slots
    T_MAGIC_DEFAULT = 1
    T_MAGIC_ROLL = 2
    T_MAGIC_DELETE = 4

# why a run stopped (``TimerEnqueue.run``'s second result)
cdef enum:
    STOP_END = 0                 # every unit of the run was enqueued
    STOP_ROLL = 1                # the next unit needs the next timer-log file (none yet, or the last is full)
    STOP_PYTHON = 2              # the next unit goes through Python (due, damaged, or anything unusual)
    _NEXT_FILE = 3               # (internal) the next record lies in another commit-log file


# The timer properties of one record, read without a Python object.
cdef struct TimerProps:
    int64_t out_ms               # TIMER_OUT_MS
    int32_t topic_pos            # REAL_TOPIC's value within the properties, -1 without one
    int32_t topic_len
    bint delete                  # TIMER_DEL_UNIQKEY is set


cdef bint timer_props(const unsigned char *p, Py_ssize_t n, TimerProps *t) noexcept nogil


cdef class TimerEnqueue:
    cdef unsigned char[::1] wheel          # TimerWheel's slots (its in-memory copy, flushed by the wheel)
    cdef unsigned char[::1] dirty          # TimerWheel's dirty map (a byte per 4 KiB of slots)
    cdef readonly int64_t slots_total
    cdef readonly int64_t precision_ms
    cdef readonly int64_t roll_window_slots
    # one run's state (set by ``run``, read by ``_run`` without the GIL)
    cdef bint check_crc                    # check each record's body CRC (check_crc_on_read)
    cdef MappedFile tl                     # the timer log's last file (None: there is none yet)
    cdef bint tl_writable                  # mapped for writing (else Python's append says why not)
    cdef int64_t write_ms
    cdef int64_t read_ms                   # the first slot the dequeue has not begun (a unit due before it: Python)
    cdef int64_t hi                        # the latest slot time written (-1: none)

    cdef int _run(self, const unsigned char *cq, int64_t *pos, int64_t end, int64_t *done,
                  const unsigned char *cl_base, int64_t cl_from, int64_t cl_file_size,
                  int64_t cl_read) noexcept nogil
    cdef int _unit(self, const unsigned char *rec, RecordView *v, int64_t phy, int32_t size) noexcept nogil
