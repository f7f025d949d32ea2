# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The index builder's walk of the commit log (``pystore.index.service.IndexBuildService``): the records the put path
appended are scanned for keys, and their entries written into the index files (``_index``), with the GIL
released.

* ``index_log`` walks a range of the log: it scans records and writes their entries in batches without the
  GIL (``IndexFileCore._put_entry``), taking it back only to switch files or to ask the prefault worker for
  more pages (``IndexFileCore._room``). The builder runs it under its lock; so does a lookup that finds the
  builder behind.
* ``follow_keyless`` is the builder's wait between those walks: in one call without the GIL it sleeps,
  looks at the newest commit-log file and moves the builder's cursor over records without keys, as long as
  there is nothing else to do. It returns when there are entries to write, the log moved to another file,
  its time is up or the builder is stopping. A store whose messages have no keys thus needs no Python, and
  no GIL, from its index builder while puts go on: a thread that wakes every millisecond and waits for the
  GIL would otherwise make a busy put thread hand it over (CPython's switch interval) and take a core from
  whatever runs beside.
* ``IndexCursor`` is where the walk is, shared by the two: ``index_log``'s caller moves it forward with
  ``advance`` (under the builder's lock), ``follow_keyless`` with a compare-and-swap from the position it
  scanned from, so that a walk under the lock that moved it meanwhile wins. The follow moves it only over
  records that have no entries, so whichever moved it, nothing is indexed twice or skipped.
* ``log_end``: where the log's written data ends.

Memory order: the put path publishes a record by storing the file's ``wrote`` after the record's bytes;
the follow loads it with acquire semantics.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc

from pystore.format._bytes cimport (advance_i64, cas_i64, cpu_follow_init, follow_cpu, load_i64_acquire, mono_ns,
                                    ps_cpu_follow, store_i64_release)
from pystore.log._commitlog cimport CommitLogCore
from pystore.format._codec cimport REC_BLANK, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK, check_record
from pystore.log._files cimport find_file
from pystore.index._index cimport (
          TOPIC_CACHE,
          IndexFileCore,
          IndexFilesBase,
          KeyScan,
          find_keys,
          next_hashes,
          topic_prefix,
          writable_file,
      )
from pystore.log._mapped_file cimport MappedFile
from pystore.format._record cimport RecordView


cdef extern from *:
    """
    #include <time.h>
    static inline void ps_sleep_ns(int64_t ns) {
        struct timespec ts;
        ts.tv_sec = ns / 1000000000LL;
        ts.tv_nsec = ns % 1000000000LL;
        nanosleep(&ts, NULL);
    }
    """
    void sleep_ns "ps_sleep_ns"(int64_t ns) noexcept nogil


cdef enum:
    _PENDING = 4096             # entries a scan collects before they are written (more than KEY_SCAN_HASHES)
    _SCAN_MORE = 0              # the buffer is full: scan on from where it stopped
    _SCAN_SEGMENT = 1           # reached the segment's end
    _SCAN_NEXT_FILE = 2         # a blank: the rest of the file is unused
    _SCAN_STOP = 3              # a record not whole below the end (being written), or unreadable


cdef struct Pending:
    int32_t h
    int64_t phy
    int64_t ts


cdef struct LogScan:
    # where the walk is (the next record's commit-log offset), and why the last scan returned
    int64_t off
    int status
    # a record whose keys are not all collected yet (mid): its properties, offset and store time
    bint mid
    KeyScan ks
    const unsigned char *props
    int64_t phy
    int64_t ts
    # the last topic's bytes and the Java hash of topic + "#" (as IndexFilesBase keeps them for dispatch)
    unsigned char topic[TOPIC_CACHE]
    Py_ssize_t topic_len
    uint32_t prefix


cdef int _scan_records(LogScan *s, const unsigned char *base, int64_t file_from, int64_t readable_end,
                       int64_t end, Pending *out) noexcept nogil:
    """Collect into ``out`` the entries of the records from ``s.off`` on, in one commit-log file mapped at
    ``base`` (starting at ``file_from``, readable below ``readable_end``), up to ``end``: the keys as
    ``index_message`` takes them. Returns how many (``s.status`` says why it stopped); a record's keys may
    span two calls (``s.mid``)."""
    cdef int n = 0, i
    cdef int32_t r
    cdef RecordView v
    cdef const unsigned char *rec
    while True:
        while s.mid:
            if n + s.ks.n > _PENDING:
                s.status = _SCAN_MORE
                return n
            for i in range(s.ks.n):
                out[n].h = s.ks.h[i]
                out[n].phy = s.phy
                out[n].ts = s.ts
                n += 1
            next_hashes(s.props, &s.ks)
            s.mid = s.ks.n > 0
        if s.off >= end or s.off >= readable_end:
            s.status = _SCAN_SEGMENT
            return n
        rec = base + (s.off - file_from)
        r = check_record(rec, readable_end - s.off, False, &v)
        if r == REC_BLANK:
            s.status = _SCAN_NEXT_FILE
            return n
        if r <= 0 or s.off + r > end:
            s.status = _SCAN_STOP
            return n
        if (v.sys_flag & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK_TYPE and 0 < v.props_len:
            s.ks.uniq_pos = -1
            s.ks.keys_pos = s.ks.keys_end = 0
            if find_keys(rec + v.props_pos, v.props_len, &s.ks) != 0:
                s.ks.prefix = topic_prefix(s.topic, &s.topic_len, &s.prefix, rec + v.topic_pos, v.topic_len)
                next_hashes(rec + v.props_pos, &s.ks)
                s.props = rec + v.props_pos
                s.phy = s.off
                s.ts = v.store_ts
                s.mid = s.ks.n > 0
        s.off += r


cdef bint _write_pending(IndexFilesBase service, const Pending *p, int n):
    """Write ``n`` collected entries, in order, into the newest file and the ones after it as each fills (the
    switch, rare, with the GIL; the entries without). False when no file could be made (the rest are
    dropped, as ``index_message`` drops them)."""
    cdef IndexFileCore f
    cdef int i = 0, j, k
    cdef unsigned char *b
    cdef bint ro
    while i < n:
        f = writable_file(service)
        if f is None:
            return False
        f.mapped_file.check_mapped()
        k = <int>min(<int64_t>(n - i), f._room())
        b = f.mapped_file.base
        ro = f.mapped_file.read_only
        with nogil:
            for j in range(i, i + k):
                f._put_entry(b, ro, p[j].h, p[j].phy, p[j].ts)
        i += k
    return True


def index_log(IndexFilesBase service not None, list cl_files not None, long long cl_file_size,
              long long from_offset, long long end_offset):
    """Index the records of the commit log (``cl_files``, ``cl_file_size`` bytes each) in ``[from_offset,
    end_offset)``, as dispatch's reput does with ``index_message`` but with the GIL released while the records
    are scanned and the entries written: the index builder's walk (``pystore.index.service.IndexBuildService``), which
    a put thread keeps running beside. Every record is indexed (the caller starts past what is indexed).
    Returns the offset reached: ``end_offset``, or the record where the walk stopped (not whole yet, or
    unreadable; a later call retries it)."""
    cdef LogScan s
    cdef Pending *buf
    cdef MappedFile f
    cdef int64_t pos, rp, file_from, end = end_offset
    cdef const unsigned char *base
    cdef int n
    s.off = from_offset
    s.mid = False
    s.topic_len = -1
    buf = <Pending *>malloc(_PENDING * sizeof(Pending))
    if buf == NULL:
        raise MemoryError()
    try:
        while s.off < end:
            f = find_file(cl_files, cl_file_size, s.off)
            if f is None or f.base == NULL:
                break
            file_from = f.file_from_offset
            pos = s.off - file_from
            rp = f.read_position()
            if pos >= rp:
                if rp == f.file_size:
                    s.off = file_from + cl_file_size
                    continue
                break
            if not f.c_hold():
                break
            base = f.base
            try:
                while True:
                    with nogil:
                        n = _scan_records(&s, base, file_from, file_from + rp, end, buf)
                    if n > 0 and not _write_pending(service, buf, n):
                        s.status = _SCAN_STOP
                    if s.status != _SCAN_MORE:
                        break
            finally:
                f.c_release()
            if s.status == _SCAN_NEXT_FILE:
                s.off = file_from + cl_file_size
            elif s.status == _SCAN_STOP:
                break
    finally:
        free(buf)
    return s.off


def log_end(list cl_files not None):
    """Where a log's written data ends (its last file's offset plus read position; 0 without files): what
    ``index_log`` may reach, in one call (a lookup asks before each query whether the builder is behind)."""
    cdef MappedFile f
    if PyList_GET_SIZE(cl_files) == 0:
        return 0
    f = <MappedFile>PyList_GET_ITEM(cl_files, PyList_GET_SIZE(cl_files) - 1)
    return f.file_from_offset + f.read_position()


# ----------------------------------------------------------------------------------------------------------
# the builder's cursor and its follow of the newest file between walks
# ----------------------------------------------------------------------------------------------------------

cdef enum:
    _FOLLOW_STOPPED = 0     # the builder is stopping
    _FOLLOW_TIMEOUT = 1     # its time is up, nothing to hand over
    _FOLLOW_WORK = 2        # entries to write, or the walk is outside the newest file: ``index_log``'s turn

FOLLOW_STOPPED = _FOLLOW_STOPPED
FOLLOW_TIMEOUT = _FOLLOW_TIMEOUT
FOLLOW_WORK = _FOLLOW_WORK


cdef class IndexCursor:
    """Where the index builder's walk is: every record below ``reached`` is indexed (or has no keys). And the
    flag that ends a running ``follow_keyless`` (``stop``). Thread-safe: loads and stores are atomic."""

    cdef int64_t _reached
    cdef int64_t _stop
    cdef ps_cpu_follow cpu      # where the following thread was moved (``CommitLogCore.follow_put_cpu``)

    def __init__(self, long long start):
        self._reached = start
        self._stop = 0
        cpu_follow_init(&self.cpu)

    @property
    def reached(self):
        return load_i64_acquire(&self._reached)

    def advance(self, long long to):
        """Move ``reached`` to ``to`` if that is further on (a walk's end); returns where it is now."""
        return advance_i64(&self._reached, to)

    def stop(self):
        """End a ``follow_keyless`` running in another thread (within its sleep) and any started later."""
        store_i64_release(&self._stop, 1)

    def resume(self):
        store_i64_release(&self._stop, 0)


def follow_keyless(IndexCursor cursor not None, list cl_files not None, long long busy_ns, long long idle_ns,
                   long long max_ns, CommitLogCore core=None, long long idle_max_ns=0):
    """Without the GIL: sleep ``busy_ns`` (right after a walk, more keyed records are likely), then move
    ``cursor`` over the records without keys that the newest of ``cl_files`` gained, again after ``idle_ns``,
    each further pause twice the last up to ``idle_max_ns`` (when larger), for at most about ``max_ns``.
    Records without keys give the builder nothing to write, so it looks at them seldom: each look is a
    thread waking, which takes a core from whatever runs beside, and a lookup catches the cursor up itself.
    With ``core`` (the log's writer) set to ``follow_put_cpu``, the thread moves to the CPU the last put
    thread is pinned to before each look (back where it was when that thread is not pinned), so that its
    work lands beside the put thread. Returns ``FOLLOW_WORK`` as soon as a record with entries
    (``index_log`` writes them), a blank that ends the file, a full file or a cursor outside the newest file
    needs the walk; ``FOLLOW_TIMEOUT`` when the time is up; ``FOLLOW_STOPPED`` once ``cursor.stop()`` was
    called. A record not whole yet, or unreadable, is looked at again after the next sleep, as
    ``index_log``'s next walk would."""
    cdef MappedFile f
    cdef Pending *buf
    cdef LogScan s
    cdef int result
    if PyList_GET_SIZE(cl_files) == 0:
        return _FOLLOW_WORK
    f = <MappedFile>PyList_GET_ITEM(cl_files, PyList_GET_SIZE(cl_files) - 1)
    if not f.pin():
        return _FOLLOW_WORK
    buf = <Pending *>malloc(_PENDING * sizeof(Pending))
    if buf == NULL:
        f.unpin()
        raise MemoryError()
    s.topic_len = -1
    try:
        with nogil:
            result = _follow(cursor, f, &s, buf, busy_ns, idle_ns, max(idle_ns, idle_max_ns), max_ns, core)
    finally:
        free(buf)
        f.unpin()
    return result


cdef int _follow(IndexCursor cursor, MappedFile f, LogScan *s, Pending *buf, int64_t busy_ns, int64_t idle_ns,
                 int64_t idle_max_ns, int64_t max_ns, CommitLogCore core) noexcept nogil:
    cdef int64_t deadline = mono_ns() + max_ns, start, readable
    cdef int64_t file_from = f.file_from_offset, size = f.file_size
    cdef int64_t pause = busy_ns, next_pause = idle_ns
    while True:
        if core is not None and core.follow_put_cpu:
            follow_cpu(core.put_cpu, &cursor.cpu)
        sleep_ns(pause)
        if load_i64_acquire(&cursor._stop):
            return _FOLLOW_STOPPED
        if not f.available:
            return _FOLLOW_WORK
        start = load_i64_acquire(&cursor._reached)
        if start < file_from or start >= file_from + size:
            return _FOLLOW_WORK
        readable = f.read_position_acquire()        # what the put path published, read once
        pause = next_pause
        next_pause = min(next_pause * 2, idle_max_ns)
        if start < file_from + readable:
            s.off = start
            s.mid = False
            if _scan_records(s, f.base, file_from, file_from + readable, file_from + readable, buf) > 0:
                # up to the first record with entries: the walk starts there
                cas_i64(&cursor._reached, start, buf[0].phy)
                return _FOLLOW_WORK
            if s.status == _SCAN_NEXT_FILE:
                cas_i64(&cursor._reached, start, s.off)
                return _FOLLOW_WORK
            if s.off > start:
                # a walk under the builder's lock may have moved the cursor meanwhile: then it stands
                cas_i64(&cursor._reached, start, s.off)
        elif readable == size:
            return _FOLLOW_WORK
        if mono_ns() >= deadline:
            return _FOLLOW_TIMEOUT
