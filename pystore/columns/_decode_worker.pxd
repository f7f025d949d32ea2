# cython: language_level=3
"""Interface of ``pystore.columns._decode_worker``: the decode worker's hand-off protocol as ``_arrow.BatchBuilder`` drives
it, once a window of deferred records (``dw_acquire`` the worker, ``dw_post`` a job, ``dw_wait`` for it,
``dw_release`` it); all without the GIL."""

ctypedef void (*dw_job)(void *) noexcept nogil


# the worker is on (``decode_worker``): windows may be handed to it
cdef bint dw_on() noexcept nogil
# the worker for this caller (started on first use); False when another has it, none can start, or the owners are
# decoding in their own threads for a while (the back-off)
cdef bint dw_acquire() noexcept nogil
# the owner is done with the worker (after ``dw_wait``): the back-off hears whether the worker was preempted
cdef void dw_release() noexcept nogil
# hand ``fn(arg)`` to the acquired worker
cdef void dw_post(dw_job fn, void *arg) noexcept nogil
# until the job posted last is done (its writes then seen by this thread); one not yet started is run here
cdef void dw_wait() noexcept nogil
