# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The index builder's walk of the commit log (``pystore.index.builder.IndexBuildService``): the records the put path
appended are scanned for keys, and their entries written into the index files (``_index``), with the GIL
released.

* ``index_log`` walks a range of the log: it scans records and writes their entries in batches without the
  GIL (``IndexFileCore._put_entry``), taking it back only to switch files. The builder runs it under its
  lock; so does a lookup that finds the builder behind.
* ``follow_log`` is the builder's wait between those walks: in one call without the GIL it sleeps, looks
  at the newest commit-log file and indexes what it gained (the cursor moved over records without keys, the
  entries of records with keys written into the newest index file while that has room), as long as there is
  nothing else to do. It returns when the log moved to another file, the index file is near full (a walk
  switches files, which may call Python), its time is up or the builder is stopping. A store's index builder
  thus needs no Python, and no GIL, while puts go on: a thread that wakes every millisecond and waits for the
  GIL would otherwise make a busy put thread hand it over (CPython's switch interval), and when it is
  descheduled holding the GIL (every core busy), the put thread waits out the scheduler's time slice.
* ``IndexCursor`` is where the walk is, shared by the two, and their lock: a mutex waited for without the
  GIL, held by a walk (``index_log``'s caller, which then moves the cursor with ``advance``), by a lookup
  that catches the builder up, and by each look of the follow. One writer of the index at a time; nothing
  indexed twice or skipped.
* ``log_end``: where the log's written data ends.

Memory order: the put path publishes a record by storing the file's ``wrote`` after the record's bytes;
the follow loads it with acquire semantics.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.stdlib cimport free, malloc

from pystore.format._bytes cimport (advance_i64, cpu_follow_init, follow_cpu, load_i64_acquire, mono_ns,
                                    ps_cpu_follow)
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
    #include <linux/futex.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    /* Sleep ns, or less once *stop is no longer 0: a futex wait on the stop word, which stop() sets and wakes
       (a builder polling rarely would otherwise hold a shutdown for its whole pause). A signal or a spurious
       wake ends the wait early: the caller looks again, which costs one look. */
    static inline void ps_sleep_unless(int32_t *stop, int64_t ns) {
        struct timespec ts;
        if (ns <= 0 || __atomic_load_n(stop, __ATOMIC_ACQUIRE))
            return;
        ts.tv_sec = ns / 1000000000LL;
        ts.tv_nsec = ns % 1000000000LL;
        syscall(SYS_futex, stop, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    }
    static inline int ps_stopped(int32_t *stop) {
        return __atomic_load_n(stop, __ATOMIC_ACQUIRE) != 0;
    }
    static inline void ps_stop_wake(int32_t *stop, int32_t value) {
        __atomic_store_n(stop, value, __ATOMIC_RELEASE);
        if (value)
            syscall(SYS_futex, stop, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
    }
    """
    void sleep_unless "ps_sleep_unless"(int32_t *stop, int64_t ns) noexcept nogil
    void stop_wake "ps_stop_wake"(int32_t *stop, int32_t value) noexcept nogil
    bint stopped "ps_stopped"(int32_t *stop) noexcept nogil


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
            service.dropped += n - i
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
    are scanned and the entries written: the index builder's walk (``pystore.index.builder.IndexBuildService``), which
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

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, const void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_trylock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)


cdef enum:
    _FOLLOW_STOPPED = 0     # the builder is stopping
    _FOLLOW_TIMEOUT = 1     # its time is up, nothing to hand over
    _FOLLOW_WORK = 2        # the walk is outside the newest file, or the index needs a file: ``index_log``'s turn

FOLLOW_STOPPED = _FOLLOW_STOPPED
FOLLOW_TIMEOUT = _FOLLOW_TIMEOUT
FOLLOW_WORK = _FOLLOW_WORK

cdef enum:
    _STEP_IDLE = 0          # nothing written (no new records, or none with keys)
    _STEP_WROTE = 1         # entries written: more keyed records are likely soon
    _STEP_HAND_OVER = 2     # ``index_log``'s turn (returned as ``FOLLOW_WORK``)
    _STEP_NEED_FILE = 3     # the newest index file is full: the caller switches files (with the GIL) and resumes
    _STEP_NO_FILE = 4       # no index file could be had: the collected entries are dropped (as ``index_log`` does)


cdef struct Step:
    # one look of the follow, which may stop for an index file and resume: where the look started, the end
    # of what the put path published, the entries the last scan collected (buf[:n]) and how many are written
    int64_t start
    int64_t end
    int n
    int done
    bint scanned
    bint wrote
    # the follow's pacing (what ``_follow`` keeps between the calls that an index file's switch splits)
    int64_t deadline
    int64_t pause
    int64_t next_pause
    bint in_step            # a look is under way: the cursor's lock is held


cdef class IndexCursor:
    """Where the index builder's walk is: every record below ``reached`` is indexed (or has no keys). The lock
    that makes one writer of the index at a time (the builder's walks, the lookups that catch it up, the
    follow's steps): a mutex waited for without the GIL, so the follow takes it in C. And the flag that ends a
    running ``follow_log`` (``stop``). ``reached`` is loaded and stored atomically; it moves only under
    the lock."""

    cdef int64_t _reached
    cdef int32_t _stop          # a futex word: the follow's sleep ends when ``stop`` sets it
    cdef ps_cpu_follow cpu      # where the following thread was moved (``CommitLogCore.follow_put_cpu``)
    cdef pthread_mutex_t mu

    def __cinit__(self, long long start):
        pthread_mutex_init(&self.mu, NULL)

    def __init__(self, long long start):
        self._reached = start
        self._stop = 0
        cpu_follow_init(&self.cpu)

    def __dealloc__(self):
        pthread_mutex_destroy(&self.mu)

    @property
    def reached(self):
        return load_i64_acquire(&self._reached)

    def advance(self, long long to):
        """Move ``reached`` to ``to`` if that is further on (a walk's end); returns where it is now."""
        return advance_i64(&self._reached, to)

    def stop(self):
        """End a ``follow_log`` running in another thread (its sleep cut short) and any started later."""
        stop_wake(&self._stop, 1)

    def resume(self):
        stop_wake(&self._stop, 0)

    def acquire(self):
        """Take the lock (waiting without the GIL: the follow may hold it and want nothing from Python)."""
        if pthread_mutex_trylock(&self.mu) != 0:
            with nogil:
                pthread_mutex_lock(&self.mu)
        return True

    def release(self):
        pthread_mutex_unlock(&self.mu)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        pthread_mutex_unlock(&self.mu)


def follow_log(IndexCursor cursor not None, list cl_files not None, long long busy_ns, long long idle_ns,
               long long max_ns, CommitLogCore core=None, long long idle_max_ns=0,
               IndexFilesBase service=None):
    """Without the GIL: sleep ``busy_ns`` (right after a walk, more keyed records are likely), then index what
    the newest of ``cl_files`` gained since ``cursor``, again after ``idle_ns``, each further pause twice the
    last up to ``idle_max_ns`` (when larger) while nothing had keys, ``busy_ns`` again after records that had,
    for at most about ``max_ns``. Each look runs under the cursor's lock: records without keys only move the
    cursor; with ``service`` (the index), the entries of records with keys are written into its newest file,
    so a busy keyed writer needs no Python and no GIL from the builder either. When that file fills, the
    look takes the GIL once to switch to the next (``writable_file``: the spare made ahead, else Python makes
    one) and goes on where it was. Without ``service``, or without an index file yet, it hands over to
    ``index_log`` at the first record with keys (``FOLLOW_WORK``, the cursor on that record); so it does
    when the walk is outside the newest commit-log file.

    Records without keys give the builder nothing to write, so it looks at them seldom: each look is a
    thread waking, which takes a core from whatever runs beside, and a lookup catches the cursor up itself.
    With ``core`` (the log's writer) set to ``follow_put_cpu``, the thread moves to the CPU the last put
    thread is pinned to before each look (back where it was when that thread is not pinned), so that its
    work lands beside the put thread. Returns ``FOLLOW_WORK`` (above; also for a blank that ends the file or a
    full file), ``FOLLOW_TIMEOUT`` when the time is up, ``FOLLOW_STOPPED`` once ``cursor.stop()`` was
    called. A record not whole yet, or unreadable, is looked at again after the next sleep, as
    ``index_log``'s next walk would."""
    cdef MappedFile f
    cdef IndexFileCore idx = None, nxt
    cdef Pending *buf
    cdef LogScan s
    cdef Step st
    cdef int result
    if PyList_GET_SIZE(cl_files) == 0:
        return _FOLLOW_WORK
    f = <MappedFile>PyList_GET_ITEM(cl_files, PyList_GET_SIZE(cl_files) - 1)
    if service is not None and PyList_GET_SIZE(service._files) > 0:
        idx = _pinned(<IndexFileCore>PyList_GET_ITEM(service._files, PyList_GET_SIZE(service._files) - 1))
    if not f.pin():
        _unpin(idx)
        return _FOLLOW_WORK
    buf = <Pending *>malloc(_PENDING * sizeof(Pending))
    if buf == NULL:
        f.unpin()
        _unpin(idx)
        raise MemoryError()
    s.topic_len = -1
    st.deadline = mono_ns() + max_ns
    st.pause = busy_ns
    st.next_pause = idle_ns
    st.in_step = False
    try:
        while True:
            with nogil:
                result = _follow(cursor, f, idx, &s, buf, &st, busy_ns, idle_ns, max(idle_ns, idle_max_ns), core)
            if result != _STEP_NEED_FILE:
                return result
            # the look stopped at a full index file, the cursor's lock held: the next file, with the GIL
            nxt = writable_file(service)
            _unpin(idx)
            idx = None if nxt is None else _pinned(nxt)
    finally:
        if st.in_step:
            pthread_mutex_unlock(&cursor.mu)
        free(buf)
        f.unpin()
        _unpin(idx)


cdef IndexFileCore _pinned(IndexFileCore idx):
    """``idx`` with its mapping pinned for the follow's writes without the GIL; None when it cannot be written."""
    if idx.mapped_file.read_only or not idx.mapped_file.pin():
        return None
    return idx


cdef void _unpin(IndexFileCore idx):
    if idx is not None:
        idx.mapped_file.unpin()


cdef int _follow(IndexCursor cursor, MappedFile f, IndexFileCore idx, LogScan *s, Pending *buf, Step *st,
                 int64_t busy_ns, int64_t idle_ns, int64_t idle_max_ns, CommitLogCore core) noexcept nogil:
    """``follow_log``'s loop: sleep, look (``_step_begin``, ``_step_run`` under the cursor's lock), pace.
    Returns a ``FOLLOW_*`` result, or ``_STEP_NEED_FILE`` with the lock held and ``st.in_step`` set: called
    again with the next index file, it resumes the look."""
    cdef int step
    while True:
        if not st.in_step:
            if core is not None and core.follow_put_cpu:
                follow_cpu(core.put_cpu, &cursor.cpu)
            sleep_unless(&cursor._stop, st.pause)
            if stopped(&cursor._stop):
                return _FOLLOW_STOPPED
            if not f.available:
                return _FOLLOW_WORK
            pthread_mutex_lock(&cursor.mu)
            st.in_step = True
            step = _step_begin(cursor, f, s, st)
            if step < 0:
                step = _step_run(cursor, f, idx, s, buf, st)
        else:
            step = _step_run(cursor, f, idx, s, buf, st)
        if step == _STEP_NEED_FILE:
            return step
        st.in_step = False
        pthread_mutex_unlock(&cursor.mu)
        if step == _STEP_HAND_OVER or step == _STEP_NO_FILE:
            return _FOLLOW_WORK
        if step == _STEP_WROTE:
            st.pause = busy_ns
            st.next_pause = idle_ns
        else:
            st.pause = st.next_pause
            st.next_pause = min(st.next_pause * 2, idle_max_ns)
        if mono_ns() >= st.deadline:
            return _FOLLOW_TIMEOUT


cdef int _step_begin(IndexCursor cursor, MappedFile f, LogScan *s, Step *st) noexcept nogil:
    """Start a look at the newest commit-log file ``f`` from the cursor (under the cursor's lock: nobody else
    writes the index meanwhile): -1 when there are records to scan, else the look's result."""
    cdef int64_t file_from = f.file_from_offset, size = f.file_size, readable
    st.start = load_i64_acquire(&cursor._reached)
    if st.start < file_from or st.start >= file_from + size:
        return _STEP_HAND_OVER
    readable = f.read_position_acquire()        # what the put path published, read once
    st.end = file_from + readable
    if st.start >= st.end:
        return _STEP_HAND_OVER if readable == size else _STEP_IDLE
    s.off = st.start
    s.mid = False
    st.n = st.done = 0
    st.scanned = st.wrote = False
    return -1


cdef int _step_run(IndexCursor cursor, MappedFile f, IndexFileCore idx, LogScan *s, Pending *buf,
                   Step *st) noexcept nogil:
    """Scan on from ``s.off`` to ``st.end`` and write the entries found into ``idx``, the newest index file;
    then move the cursor past what was indexed. ``_STEP_NEED_FILE`` when ``idx`` is full (or None) with
    entries left to write: called again with the next file, it goes on where it stopped (a record's entries
    may span two files, as in RocketMQ); called with None (no file could be had), it drops what it collected
    and ends the look past it, as ``index_log`` does."""
    cdef int64_t file_from = f.file_from_offset
    cdef int j, k
    cdef unsigned char *b
    cdef bint ro, keyless = idx is None and not st.scanned
    while True:
        while st.done < st.n:
            if idx is None or idx.mapped_file.base == NULL or not idx.mapped_file.available:
                if st.wrote or not keyless:
                    # asked again without a file: drop the rest of these entries (and of their record)
                    while s.mid:
                        next_hashes(s.props, &s.ks)
                        s.mid = s.ks.n > 0
                    advance_i64(&cursor._reached, s.off)
                    return _STEP_NO_FILE
                # no file to write into yet: the walk starts at the first record with entries, and makes one
                advance_i64(&cursor._reached, buf[0].phy)
                return _STEP_HAND_OVER
            if idx.index_count >= idx.index_num:
                return _STEP_NEED_FILE
            idx._room()                         # asks the prefault worker ahead of the entries
            k = <int>min(<int64_t>(st.n - st.done), idx.index_num - idx.index_count)
            b = idx.mapped_file.base
            ro = idx.mapped_file.read_only
            for j in range(st.done, st.done + k):
                idx._put_entry(b, ro, buf[j].h, buf[j].phy, buf[j].ts)
            st.done += k
            st.wrote = True
        if st.scanned and s.status != _SCAN_MORE:
            break
        st.n = _scan_records(s, f.base, file_from, st.end, st.end, buf)
        st.done = 0
        st.scanned = True
    advance_i64(&cursor._reached, s.off)
    if s.status == _SCAN_NEXT_FILE:
        return _STEP_HAND_OVER
    return _STEP_WROTE if st.wrote else _STEP_IDLE
