# cython: language_level=3
"""The cross-process wake-up word (``WakeWord``): the state word of pystore's ``wakeup`` file, mapped by a writer
and by the read-only stores of other processes (``pystore.read.arrival`` opens the file; docs/format.md §15
draws it). The C is in ``_notify.h``: the writer's hook (``ps_notify``, called by ``_dispatch`` after the
units of a put are written), and the waiter's register (with membarrier's global barrier when the writer asks for
it) / wait (spin, then futex) / unregister."""

cimport cython
from libc.stdint cimport int64_t, uint32_t, uint64_t, uintptr_t


@cython.final
cdef class WakeWord:
    """The state word at ``offset`` of ``buf`` (a writable buffer, e.g. an ``mmap`` of the wake file, kept
    referenced as long as this object lives), with the flags word in the 4 bytes before it; ``offset`` must
    leave the state word 8-byte aligned."""

    def __cinit__(self, object buf, Py_ssize_t offset):
        cdef unsigned char[::1] view = buf
        if offset < 4 or offset + 8 > view.shape[0]:
            raise ValueError("the state word at %d does not fit a buffer of %d bytes" % (offset, view.shape[0]))
        if (<uintptr_t>&view[offset]) % 8:
            raise ValueError("the state word at %d is not 8-byte aligned" % offset)
        self._buf = buf
        self._view = view
        self.word = <uint64_t *>&view[offset]
        self.flag_word = <uint32_t *>&view[offset - 4]
        self.light = False

    @property
    def seq(self) -> int:
        """The futex word: how many times a writer woke its waiters (modulo 2**32)."""
        return ps_seq(self.word)

    @property
    def waiters(self) -> int:
        """Registered waiters (a waiter killed while registered counts until the writer's next wake-up)."""
        return (self.word[0] >> 32) & 0x7fffffff

    @property
    def sleeping(self) -> bool:
        """Whether a registered waiter sleeps in the kernel (the writer's wake-up makes the futex call)."""
        return (self.word[0] >> 63) != 0

    @property
    def flags(self) -> int:
        """The flags word (bit 0: the writer skips its fence, waiters issue membarrier's global barrier)."""
        return self.flag_word[0]

    def claim_writer(self) -> bool:
        """A writer's start: notify without a fence when this process can be sent membarrier's global
        expedited barrier (the flags word then tells the waiters to issue it); whether it can (``light``)."""
        self.light = ps_writer_light(self.flag_word) != 0
        return self.light

    def register(self) -> int:
        """Count a waiter in; the seq to pass to ``wait`` and ``unregister``, or -1 when the writer needs a
        barrier this process cannot issue (nothing is registered then: poll). Look at the queue after this."""
        return ps_register(self.word, self.flag_word)

    def unregister(self, unsigned int seen) -> None:
        """Take back the registration made at ``seen`` (nothing when a wake-up already took it)."""
        ps_unregister(self.word, seen)

    def wait(self, unsigned int seen, double spin_us, double timeout_ms) -> int:
        """Wait, without the GIL, while the seq is ``seen``: spin up to ``spin_us``, then sleep up to the rest of
        ``timeout_ms``. 1: woken; 0: timed out; -1: a signal came (run its handler, then wait on); -2: this
        platform has no futex (poll instead)."""
        cdef int64_t spin_ns = <int64_t>(spin_us * 1000.0) if spin_us > 0 else 0
        cdef int64_t timeout_ns = <int64_t>(timeout_ms * 1000000.0) if timeout_ms > 0 else 0
        cdef int r
        with nogil:
            r = ps_wait(self.word, seen, spin_ns, timeout_ns)
        return r

    def notify(self) -> bool:
        """The writer's hook (``_dispatch`` calls its C directly): wake the registered waiters, if any."""
        return ps_notify(self.word, self.light) != 0


#: whether waits sleep on a futex here (else ``WakeWord.wait`` returns -2 and waiters poll)
HAVE_FUTEX = bool(PS_NOTIFY_FUTEX)
