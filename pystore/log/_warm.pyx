# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A mapped file's pages made ready off the put path: what the allocate service and the store's start do to a
file before its writer reaches it, and the prefault worker seen from Python (docs/format.md §5.1).

* ``warm``: pre-fault a whole file for writing (``warm_mapped_file_enable``), its blocks allocated first;
* ``write_page_by_page``: no read-ahead for a file from a position on, until its writer is done with it;
* ``populate_past_writer``: the prefault worker's loop run in the calling thread (tests and diagnostics);
* ``prefault_stats``: what the worker did in this process.

Each takes the ``MappedFile`` as its first argument. What the put path calls (``prefault_ahead``, ``reserve``,
``settle``) stays inline in ``_mapped_file``, and so does the worker itself: ``prefault_worker.h`` keeps its
thread, ring and counters in static variables, so only ``_mapped_file.pyx`` includes it (a second includer
would start a second worker with its own counters), and this module reaches the worker through
``prefault_populate`` and ``prefault_counters`` (``_mapped_file.pxd``)."""

from libc.errno cimport errno
from libc.stdint cimport int64_t, uintptr_t
from posix.mman cimport MS_SYNC, madvise, msync

from pystore.log._mapped_file cimport (MADV_POPULATE_WRITE, PAGE, MappedFile, PrefaultCounters, prefault_counters,
                                       prefault_populate)

import os

from pystore.errors import StoreClosedError

cdef extern from *:
    # the writer's address in its cursor slot (a relaxed load: it is only a hint)
    uintptr_t __atomic_load_n(uintptr_t *p, int order) noexcept nogil
    int __ATOMIC_RELAXED


def prefault_stats():
    """What the prefault worker did in this process: ``{"bytes", "skipped", "dropped", "failed", "pending",
    "supported"}`` (``skipped``: bytes of requests left to a writer that had reached them first;
    ``pending``: requests queued or running now)."""
    cdef PrefaultCounters c
    with nogil:
        c = prefault_counters()
    return {"bytes": c.done_bytes, "skipped": c.skipped, "dropped": c.dropped,
            "failed": c.failed, "pending": c.pending, "supported": c.supported}


def warm(MappedFile mf not None, bint populate=True, long long sync_every=0):
    """Pre-fault the whole mapping of ``mf`` for writing (so the put path takes no page faults), without the GIL.
    Falls back to touching one byte a page on kernels without MADV_POPULATE_WRITE. The writer still asks
    the prefault worker for the pages ahead of it (see the end of this function).

    ``sync_every > 0`` (RocketMQ's warm with SYNC_FLUSH, ``flushLeastPagesWhenWarmMapedFile``): write the
    zeros to disk every that many bytes, so the file's blocks are allocated and written before any
    durable put, whose flushes then carry data only (no unwritten-extent conversion in the journal)."""
    cdef int rc = 0
    cdef int64_t i, pos = 0, step, end
    cdef int64_t first_touch = mf.wrote - mf.wrote % PAGE + PAGE   # fallback: past the written page
    mf.check_mapped()
    if mf.read_only or mf.base == NULL:
        return
    # warming touches every page: the whole file's blocks first, or a full disk would raise SIGBUS
    mf.ensure_reserved(0, mf.file_size)
    step = sync_every if sync_every > 0 else mf.file_size
    step = (step + PAGE - 1) // PAGE * PAGE
    with nogil:
        while pos < mf.file_size:
            end = pos + step if pos + step < mf.file_size else mf.file_size
            rc = madvise(mf.base + pos, end - pos, MADV_POPULATE_WRITE)
            if rc != 0:
                i = pos if pos > first_touch else first_touch
                while i < end:
                    (<volatile unsigned char *>mf.base)[i] = (<volatile unsigned char *>mf.base)[i]
                    i += PAGE
            if sync_every > 0:
                msync(mf.base + pos, end - pos, MS_SYNC)
            pos = end
    # ``warmed`` is left where it was: the kernel writes these zeros back once they have been dirty for
    # its expiry time (30 s by default) and write-protects them on the way, so a file warmed long before
    # its writer reaches it would fault on every page again. The writer keeps asking the prefault worker
    # for the pages just ahead of it (a page-table walk while they are still writable).


def write_page_by_page(MappedFile mf not None, long long pos=0):
    """Map ``[pos, file_size)`` of ``mf`` a page at a time from here on (``MADV_RANDOM``), until the writer is done
    with the file (``MappedFile.settle``: normal read-ahead again, for its readers).

    Why a commit log wants it: on kernels whose page cache holds a file in large folios (XFS since Linux
    5.18, ext4 since 6.16), a fault's read-ahead makes the folios of a file mapped in order grow with each
    window, up to 2 MiB with a large ``read_ahead_kb``, and the kernel keeps the dirty state of a folio
    whole. A flush of a few KiB then writes the folio around it, zeros ahead of the writer included: past
    the first tens of MiB of a file, SYNC_FLUSH puts slow down several times over, and ASYNC_FLUSH writes
    many times the bytes put (more than a disk may take). With this advice a flush writes what was
    written, and little more.

    The price: a page that is not in the page cache yet is faulted in alone, not in a large folio, which
    makes bursts of puts into a file that was not warmed slower (less so once the prefault worker runs
    past its writer; warmed files take their faults in the allocate service, off the put path). Pages
    already in the page cache keep their folios (the tail of a file read by recovery, up to one
    read-ahead window past its last record)."""
    mf.check_mapped()
    if mf.read_only or pos >= mf.file_size:
        return
    mf._page_by_page(0 if pos < 0 else pos)


def populate_past_writer(MappedFile mf not None, long long start, long long end, writer_at=None):
    """Run the prefault worker's loop over ``[start, end)`` of ``mf`` in this thread, without the GIL:
    ``(bytes populated, bytes left to the writer)``. The writer is where this file's writer last said
    it was (``writer_at=None``), at file offset ``writer_at``, or nowhere (-1). For tests and
    diagnostics; writers use the worker (``prefault_ahead``)."""
    cdef uintptr_t cursor = 0
    cdef long long at
    cdef unsigned long long done = 0, skipped = 0
    cdef int rc, err
    mf.check_mapped()
    if mf.read_only or mf.base == NULL:
        raise ValueError("%s is not mapped for writing" % mf.file_name)
    if not 0 <= start <= end <= mf.file_size or start % PAGE:
        raise ValueError("bad range [%d, %d) of a file of %d (start on a page)" % (start, end, mf.file_size))
    if writer_at is None:
        cursor = __atomic_load_n(mf.pf_cursor, __ATOMIC_RELAXED)
    else:
        at = writer_at
        if 0 <= at < mf.file_size:
            cursor = <uintptr_t>(mf.base + at)
    if not mf.c_hold():
        raise StoreClosedError("%s is closed" % mf.file_name)
    try:
        with nogil:
            rc = prefault_populate(mf.base + start, <size_t>(end - start), mf.base, mf.base + mf.file_size,
                                   &cursor, &done, &skipped)
            err = errno if rc != 0 else 0
    finally:
        mf.c_release()
    if rc != 0:
        raise OSError(err, "madvise(MADV_POPULATE_WRITE): " + os.strerror(err), mf.file_name)
    return done, skipped
