# cython: language_level=3
from libc.stdint cimport int64_t, uint32_t, uint64_t

cdef extern from "_notify.h":
    int ps_notify(uint64_t *word, int light) noexcept nogil
    int ps_writer_light(uint32_t *flags) noexcept nogil
    int64_t ps_register(uint64_t *word, uint32_t *flags) noexcept nogil
    void ps_unregister(uint64_t *word, uint32_t seen) noexcept nogil
    int ps_wait(uint64_t *word, uint32_t seen, int64_t spin_ns, int64_t timeout_ns) noexcept nogil
    uint32_t ps_seq(uint64_t *word) noexcept nogil
    int64_t ps_now_ns() noexcept nogil
    int ps_spin_nonzero(const unsigned char *p, int64_t spin_ns) noexcept nogil
    int PS_NOTIFY_FUTEX

cimport cython


@cython.final
cdef class WakeWord:
    # the state word and the flags word, for the compiled waits of ``_read`` too
    cdef uint64_t *word
    cdef uint32_t *flag_word
    cdef readonly bint light
    cdef object _buf
    cdef object _view
