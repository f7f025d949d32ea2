# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Commit-log records straight into Arrow columns (the Spark data source's decoder, docs/api.md "Spark").

A :class:`BatchBuilder` decodes whole records (fed by ``_arrow_source``'s readers of a commit-log file range or
a consume queue's units, or by ``get_message``'s scan as a ``RecordSink``) in one C pass straight into the
column buffers of a ``pyarrow.RecordBatch`` (those of its schema's columns, any of ``COLUMNS`` in any order:
a column not asked for costs nothing): validity where needed, int32 offsets and data for strings and
binaries, list/map offsets, fixed-width values.
The buffers come from Arrow's memory pool (``pyarrow.allocate_buffer``: freed batches' memory is reused
rather than faulted in afresh): the per-row ones (fixed-width values, row offsets, validity) share one
allocation sized for the batch's rows; the variable-length ones grow by doubling and start at the size the
last batch reached. At the end of a batch they go to Arrow without a copy through its C data interface
(one ``RecordBatch._import_from_c`` of ``ArrowArray`` structs pointing into them, ``_arrow_export.pxd``;
releasing the batch drops the buffers).

No Python object is made per row. Strings are UTF-8 with invalid sequences replaced by U+FFFD (maximal
subparts, as Java and Python do), so Arrow always gets valid UTF-8. The properties map follows RocketMQ
5.x's decoder (an item needs a name and a value; the last duplicate wins); ``keys`` is the ``KEYS``
property split on spaces (empty tokens dropped); ``tags`` is null without a ``TAGS`` property. Hosts are
``address:port`` (IPv6 ``[address]:port``, compressed like ``ipaddress``); ``msg_id`` is the offset
message id (docs/format.md §1.8); timestamps are microseconds since the epoch, UTC.

The sources (a file range, a consume queue) are ``_arrow_source``; the driver's planning helpers (where to
split a file, a queue's bounds) are ``_arrow_plan``; the text formatting of fields (UTF-8 repair, hosts,
numbers, properties items) is ``_textfmt.pxd``; the offset message id is written here from a table of hex
digit pairs (docs/format.md §1.8). The builder's fields and the per-record tests its sources call inline are
declared in ``_arrow.pxd``.
"""

cimport cython
from cpython.ref cimport Py_INCREF, PyObject
from libc.stdint cimport INT64_MAX, INT64_MIN, int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy, memset

from pystore._arrow_export cimport ArrowArray, Exporting, PS_ARRAYS, _array, ps_batch, ps_release_batch
from pystore._bytes cimport body_crc32
from pystore._codec cimport REC_BAD_CRC
from pystore._record cimport RecordView
from pystore._sink cimport Pending, complete_plain, same_bytes
from pystore._props cimport find_byte
from pystore._textfmt cimport MAX_ITEMS, fmt_host, ms_to_us, parse_props, utf8_fix

import logging

import pyarrow as pa

from pystore._codec import REASONS
from pystore.errors import StoreCorruptedError

log = logging.getLogger(__name__)

#: Column order of the data source (docs/api.md "Spark").
COLUMNS = ("topic", "queue_id", "queue_offset", "commit_log_offset", "store_size", "body", "tags", "keys",
           "properties", "flag", "sys_flag", "born_timestamp", "store_timestamp", "born_host", "store_host",
           "reconsume_times", "prepared_transaction_offset", "body_crc", "msg_id")


# two upper-case hex digits of each byte value: a message id is written two digits at a time
cdef unsigned char HEX_PAIRS[512]


cdef void _fill_hex_pairs():
    cdef const char *digits = b"0123456789ABCDEF"
    cdef int i
    for i in range(256):
        HEX_PAIRS[2 * i] = digits[i >> 4]
        HEX_PAIRS[2 * i + 1] = digits[i & 0xF]


_fill_hex_pairs()


cdef inline void hex_bytes(unsigned char *out, const unsigned char *p, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        memcpy(out + 2 * i, &HEX_PAIRS[2 * p[i]], 2)


cdef inline void hex_i64(unsigned char *out, int64_t x) noexcept nogil:
    """The 16 hex digits of ``x`` as its big-endian bytes (an offset message id's tail)."""
    cdef uint64_t u = <uint64_t>x
    cdef int i
    for i in range(7, -1, -1):
        memcpy(out + 2 * i, &HEX_PAIRS[2 * (u & 0xFF)], 2)
        u >>= 8


# the property names ``TAGS`` and ``KEYS`` as the 4-byte words they are in a properties string
cdef uint32_t TAGS_WORD, KEYS_WORD
memcpy(&TAGS_WORD, <const char *>b"TAGS", 4)
memcpy(&KEYS_WORD, <const char *>b"KEYS", 4)

# the last schema a BatchBuilder was made with, checked: its columns (C_*, in its order) and whether its
# timestamps are milliseconds
cdef object _last_schema = None
cdef tuple _last_ids = ()
cdef bint _last_ts_ms = False

# the kind of Arrow type each column takes (Spark's and the export's schemas differ in the timestamps' unit)
_KINDS = ("string", "int32", "int64", "int64", "int32", "binary", "string", "list<string>", "map<string,string>",
          "int32", "int32", "timestamp", "timestamp", "string", "string", "int32", "int64", "int32", "string")


def _kind_ok(str kind, t):
    types = pa.types
    if kind == "string":
        return types.is_string(t)
    if kind == "int32":
        return types.is_int32(t)
    if kind == "int64":
        return types.is_int64(t)
    if kind == "binary":
        return types.is_binary(t)
    if kind == "list<string>":
        return types.is_list(t) and types.is_string(t.value_type)
    if kind == "map<string,string>":
        return types.is_map(t) and types.is_string(t.key_type) and types.is_string(t.item_type)
    return types.is_timestamp(t) and t.unit in ("ms", "us")


def _schema_columns(schema):
    """The columns of ``schema`` (C_* numbers, in its order) and whether its timestamps are milliseconds;
    ValueError unless its fields are distinct columns of ``COLUMNS`` with their types."""
    names = list(schema.names)
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise ValueError("the Arrow schema has columns that are not among %s: %s" % (COLUMNS, unknown))
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError("the Arrow schema has these columns more than once: %s" % twice)
    ids = tuple(COLUMNS.index(n) for n in names)
    units = set()
    for k, c in enumerate(ids):
        t = schema.field(k).type
        if not _kind_ok(_KINDS[c], t):
            raise ValueError("the Arrow schema's column %r is %s, not a %s" % (COLUMNS[c], t, _KINDS[c]))
        if _KINDS[c] == "timestamp":
            units.add(t.unit)
    if len(units) > 1:
        raise ValueError("the Arrow schema's timestamps must share one unit, not %s" % sorted(units))
    return ids, units == {"ms"}


# each column's own buffers, by column number: its values (or offsets) and its data (-1: none); the tags, keys
# and properties also write the buffers of their one shared parse (``_buffers_of``)
cdef int _COL_FIRST[N_COLS]
cdef int _COL_SECOND[N_COLS]
_COL_FIRST[:] = [B_TOPIC_O, B_QID, B_QOFF, B_CLO, B_SIZE, B_BODY_O, B_TAGS_O, B_KEYS_LO, B_MAP_O, B_FLAG, B_SYS,
                 B_BORN, B_STORE, B_BH_O, B_SH_O, B_RC, B_PREP, B_CRC, B_ID_O]
_COL_SECOND[:] = [B_TOPIC, -1, -1, -1, -1, B_BODY, B_TAGS, -1, -1, -1, -1, -1, -1, B_BH, B_SH, -1, -1, -1, B_ID]


cdef uint64_t _buffers_of(uint32_t cols) noexcept:
    """The buffers columns ``cols`` (bits ``1 << C_*``) write. The tags, keys and properties come from one parse
    of the properties: any of them writes the buffers of all three."""
    cdef uint64_t on = 0
    cdef int c
    for c in range(N_COLS):
        if cols & (1u << c):
            on |= <uint64_t>1 << _COL_FIRST[c]
            if _COL_SECOND[c] >= 0:
                on |= <uint64_t>1 << _COL_SECOND[c]
    if cols & PROPS_COLS:
        for c in (B_TAGS_V, B_TAGS_O, B_TAGS, B_KEYS_LO, B_KEYS_O, B_KEYS, B_MAP_O, B_PK_O, B_PK, B_PV_O, B_PV):
            on |= <uint64_t>1 << c
    return on

# zeros: what a buffer not yet needed points at (an empty list's or map's one offset, an empty data buffer)
cdef int64_t ZEROS[8]
memset(ZEROS, 0, sizeof(ZEROS))


cdef inline int64_t _row_bytes(int i, int64_t r) noexcept nogil:
    """The bytes buffer ``i`` takes for ``r`` rows when it is one of the per-row buffers (fixed-width values,
    row offsets, the tags' validity), which share one allocation; 0 for the others."""
    if i == B_QID or i == B_SIZE or i == B_FLAG or i == B_SYS or i == B_RC or i == B_CRC:
        return 4 * r
    if i == B_QOFF or i == B_CLO or i == B_BORN or i == B_STORE or i == B_PREP:
        return 8 * r
    if (i == B_TOPIC_O or i == B_BODY_O or i == B_TAGS_O or i == B_KEYS_LO or i == B_MAP_O or i == B_BH_O
            or i == B_SH_O or i == B_ID_O):
        return 4 * (r + 1)
    if i == B_TAGS_V:
        return (r + 7) // 8
    return 0


# ----------------------------------------------------------------------------------------------------
# The decode worker: one C thread per process that decodes windows of deferred records while the scan that
# feeds them goes on (``BatchBuilder.commit``). Lent to one builder at a time (``ps_dw_acquire``): another
# finds it taken and decodes in its own thread. It never touches Python objects; after a fork the child
# starts its own when it needs one.
# ----------------------------------------------------------------------------------------------------

cdef extern from *:
    """
    #include <pthread.h>
    #include <fcntl.h>
    #include <stdio.h>
    #include <unistd.h>
    typedef void (*ps_dw_fn)(void *);
    static pthread_mutex_t ps_dw_mu = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t ps_dw_cv = PTHREAD_COND_INITIALIZER;
    static ps_dw_fn ps_dw_job_fn;
    static void *ps_dw_job_arg;
    static int ps_dw_posted, ps_dw_done = 1, ps_dw_owned, ps_dw_started, ps_dw_atfork_set, ps_dw_failed;
    /* on by default: a job the worker has not started when the scan wants it done is taken back and run in
       the scan's thread (ps_dw_wait), and after a job the worker was preempted in (the other core busy) the
       owner decodes its next windows itself (ps_dw_skip, doubling while it happens again); decode_worker(False)
       turns it off */
    static int ps_dw_off = 0;
    /* the worker waited for a CPU (on a run queue) more than a quarter of the time it ran over its last
       PS_DW_SAMPLE jobs: the other core is not free (set by the worker before it says done; read by the owner
       after) */
    static int ps_dw_preempted;
    /* the worker took a schedstat sample after the last job (set and read as ps_dw_preempted is): only those
       jobs count as clean, not windows taken back or jobs between samples */
    static int ps_dw_sampled;
    /* the worker's own schedstat, open while it runs (closed in a forked child, which starts its own) */
    static int ps_dw_fd = -1;
    /* windows the owners decode in their own thread before the worker is tried again, and that number the
       next time the worker is found preempted (0: never found so since the last clean job) */
    static int ps_dw_skip, ps_dw_backoff, ps_dw_clean;
    static long long ps_dw_preemptions;
    #define PS_DW_SAMPLE 4
    #define PS_DW_FIRST_SKIP 8
    #define PS_DW_MAX_SKIP 1024
    /* clean samples in a row (PS_DW_SAMPLE jobs each) after which the back-off starts again from
       PS_DW_FIRST_SKIP */
    #define PS_DW_CLEAN 64

    /* how long each side spins before it sleeps: a window's hand-off is a few microseconds apart */
    #define PS_DW_SPIN 2000

    /* this thread's time on a CPU and waiting on a run queue so far (ns), from the kernel's schedstat: 0 when
       it cannot be read (the worker then never backs off) */
    static int ps_dw_sched(int fd, long long *run, long long *wait) {
        char buf[96];
        ssize_t n;
        if (fd < 0 || (n = pread(fd, buf, sizeof buf - 1, 0)) <= 0)
            return 0;
        buf[n] = 0;
        return sscanf(buf, "%lld %lld", run, wait) == 2;
    }

    static void *ps_dw_main(void *arg) {
        long long jobs = 0, run = 0, wait = 0, last_run = 0, last_wait = 0;
        (void)arg;
        ps_dw_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        ps_dw_sched(ps_dw_fd, &last_run, &last_wait);
        for (;;) {
            int i;
            ps_dw_fn fn;
            void *a;
            for (i = 0; i < PS_DW_SPIN && !__atomic_load_n(&ps_dw_posted, __ATOMIC_ACQUIRE); i++)
                __builtin_ia32_pause();
            pthread_mutex_lock(&ps_dw_mu);
            while (!ps_dw_posted)
                pthread_cond_wait(&ps_dw_cv, &ps_dw_mu);
            fn = ps_dw_job_fn;
            a = ps_dw_job_arg;
            __atomic_store_n(&ps_dw_posted, 0, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&ps_dw_mu);
            fn(a);
            if (++jobs % PS_DW_SAMPLE == 0 && ps_dw_sched(ps_dw_fd, &run, &wait)) {
                ps_dw_preempted = 4 * (wait - last_wait) > run - last_run;
                ps_dw_sampled = 1;
                last_run = run;
                last_wait = wait;
            }
            pthread_mutex_lock(&ps_dw_mu);
            __atomic_store_n(&ps_dw_done, 1, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&ps_dw_cv);
            pthread_mutex_unlock(&ps_dw_mu);
        }
        return NULL;
    }

    static void ps_dw_atfork_child(void) {
        pthread_mutex_init(&ps_dw_mu, NULL);
        pthread_cond_init(&ps_dw_cv, NULL);
        ps_dw_posted = 0;
        ps_dw_done = 1;
        ps_dw_owned = 0;
        ps_dw_preempted = ps_dw_sampled = ps_dw_skip = ps_dw_backoff = ps_dw_clean = 0;
        if (ps_dw_fd >= 0) {        /* the parent's worker's: this child's worker opens its own */
            close(ps_dw_fd);
            ps_dw_fd = -1;
        }
        ps_dw_started = 0;
    }

    /* The worker for this caller (started on first use): 1, or 0 when another has it, none can start, or the
       owners are decoding in their own threads for a while (ps_dw_skip). */
    static int ps_dw_acquire(void) {
        int expect = 0;
        if (ps_dw_failed || ps_dw_off || !__atomic_compare_exchange_n(&ps_dw_owned, &expect, 1, 0, __ATOMIC_ACQUIRE,
                                                         __ATOMIC_RELAXED))
            return 0;
        if (ps_dw_skip > 0) {
            ps_dw_skip--;
            __atomic_store_n(&ps_dw_owned, 0, __ATOMIC_RELEASE);
            return 0;
        }
        if (!ps_dw_started) {
            pthread_t t;
            pthread_attr_t at;
            if (!ps_dw_atfork_set) { pthread_atfork(NULL, NULL, ps_dw_atfork_child); ps_dw_atfork_set = 1; }
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, ps_dw_main, NULL) != 0) {
                ps_dw_failed = 1;
                __atomic_store_n(&ps_dw_owned, 0, __ATOMIC_RELEASE);
                pthread_attr_destroy(&at);
                return 0;
            }
            pthread_attr_destroy(&at);
            ps_dw_started = 1;
        }
        return 1;
    }

    /* The owner is done with the worker (its job done): after a job the worker was preempted in, the next
       windows are decoded in their owners' threads. */
    static void ps_dw_release(void) {
        if (ps_dw_sampled) {
            ps_dw_sampled = 0;
            if (ps_dw_preempted) {
                ps_dw_preempted = 0;
                ps_dw_preemptions++;
                ps_dw_backoff = ps_dw_backoff == 0 ? PS_DW_FIRST_SKIP
                    : (ps_dw_backoff >= PS_DW_MAX_SKIP ? PS_DW_MAX_SKIP : 2 * ps_dw_backoff);
                ps_dw_skip = ps_dw_backoff;
                ps_dw_clean = 0;
            } else if (ps_dw_clean < PS_DW_CLEAN && ++ps_dw_clean == PS_DW_CLEAN) {
                ps_dw_backoff = 0;      /* the other core has been free for a while */
            }
        }
        __atomic_store_n(&ps_dw_owned, 0, __ATOMIC_RELEASE);
    }

    static void ps_dw_post(ps_dw_fn fn, void *arg) {
        pthread_mutex_lock(&ps_dw_mu);
        ps_dw_job_fn = fn;
        ps_dw_job_arg = arg;
        __atomic_store_n(&ps_dw_done, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&ps_dw_posted, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&ps_dw_cv);
        pthread_mutex_unlock(&ps_dw_mu);
    }

    /* until the job posted last is done (its writes then seen by this thread). A job the worker has not
       taken yet is taken back and run here: waiting for a worker that is not running would cost the caller
       the scheduler's delay, not the job's time. */
    static void ps_dw_wait(void) {
        int i;
        ps_dw_fn fn = NULL;
        void *a = NULL;
        if (__atomic_load_n(&ps_dw_posted, __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(&ps_dw_mu);
            if (ps_dw_posted) {
                fn = ps_dw_job_fn;
                a = ps_dw_job_arg;
                __atomic_store_n(&ps_dw_posted, 0, __ATOMIC_RELAXED);
            }
            pthread_mutex_unlock(&ps_dw_mu);
            if (fn != NULL) {
                fn(a);
                __atomic_store_n(&ps_dw_done, 1, __ATOMIC_RELEASE);
                return;
            }
        }
        for (i = 0; i < PS_DW_SPIN && !__atomic_load_n(&ps_dw_done, __ATOMIC_ACQUIRE); i++)
            __builtin_ia32_pause();
        if (__atomic_load_n(&ps_dw_done, __ATOMIC_ACQUIRE))
            return;
        pthread_mutex_lock(&ps_dw_mu);
        while (!__atomic_load_n(&ps_dw_done, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&ps_dw_cv, &ps_dw_mu);
        pthread_mutex_unlock(&ps_dw_mu);
    }
    """
    int ps_dw_off
    int ps_dw_skip, ps_dw_backoff
    long long ps_dw_preemptions
    int ps_dw_acquire() noexcept nogil
    void ps_dw_release() noexcept nogil
    void ps_dw_post(void (*fn)(void *) noexcept nogil, void *arg) noexcept nogil
    void ps_dw_wait() noexcept nogil

cdef extern from "crc32.h":
    uint32_t ps_copy_crc32(unsigned char *dst, const unsigned char *src, size_t n) noexcept nogil


def decode_worker_state():
    """The decode worker's back-off, for tests and benchmarks: the jobs it was found preempted in so far, the
    windows owners will still decode in their own threads, and the back-off's current length."""
    return {"preemptions": ps_dw_preemptions, "skip": ps_dw_skip, "backoff": ps_dw_backoff}


def decode_worker(enabled=None):
    """Whether ``BatchBuilder`` hands windows of deferred records to the decode worker (on by default);
    ``enabled`` True or False sets it. Returns the setting before."""
    before = not ps_dw_off
    if enabled is not None:
        global ps_dw_off
        ps_dw_off = 0 if enabled else 1
    return before


# the windows of the last builder freed, for the next one to take (with the GIL): a builder per page, and
# windows of this size malloc'd and freed each time cost more than a small page's decoding (the heap's top
# grown and trimmed, its pages faulted in afresh)
cdef Pending *_spare_wins[2]
_spare_wins[0] = _spare_wins[1] = NULL

# records in a window of deferred ones: the worker takes a window once the scan has filled it, so a page of
# fewer records than a window holds is decoded in the scan's thread alone
cdef enum:
    WINDOW = 2048
    # the bodies a window's decoding copies (and takes the CRC of) at a time
    CRC_GROUP = 4
    # how _decode finds the body: to copy, or copied already
    BODY_COPY = 0
    BODY_PLACED = 1


# ----------------------------------------------------------------------------------------------------
# The batch builder
# ----------------------------------------------------------------------------------------------------

@cython.final
cdef class BatchBuilder(RecordSink):
    """Decodes accepted records (pointers into mapped files the caller keeps open) into column buffers
    and hands them to Arrow as RecordBatches. As a ``RecordSink`` it takes the records ``get_message``'s
    scan serves (``get_columns``): the same decoder for Spark and the column API. It takes them deferred:
    the scan checks their structure, the builder their body CRC as it copies each body, a window at a time
    (unless ``decode_worker(False)``, on the decode worker while the scan fills the next window).

    ``BatchBuilder(schema, verify_crc=True, topics=None, queue_id=-1, start_ms=None, end_ms=None,
    max_rows=32768, max_bytes=64 MiB)``: ``schema`` is the exact ``pyarrow.Schema`` to produce: the data
    source's (``COLUMNS``, with Spark's field types) or any of its columns in any order (a projection: the work
    of the others is skipped, no properties parse without tags, keys or properties, no host text without a
    host column, ...; a record's structure and, with ``verify_crc`` or a deferring scan's check, its body CRC
    are checked all the same); the filters keep records of one of ``topics`` (a list of
    str), of ``queue_id`` (>= 0), stored in ``[start_ms, end_ms)``. A batch is full at ``max_rows`` rows
    or ``max_bytes`` bytes of variable-length data (what ``scan_file`` and ``QueueReader.scan`` stop at; a
    sink fed past ``max_rows`` grows). Timestamps are microseconds, or milliseconds when the schema's
    timestamp type is (the export's schema).
    """

    def __cinit__(self):
        self.topic_ptr = NULL
        self.topic_len = NULL
        memset(&self.d, 0, sizeof(Dec))
        memset(self.last_n, 0, sizeof(self.last_n))
        self.d.born_cache.id_high = self.d.store_cache.id_high = -1
        self.d.topic_cache.raw_len = -1
        self.wins[0] = self.wins[1] = NULL

    def __init__(self, schema, bint verify_crc=True, topics=None, int queue_id=-1, start_ms=None, end_ms=None,
                 long long max_rows=32768, long long max_bytes=64 << 20):
        cdef int i
        cdef uint32_t cols = 0
        global _last_schema, _last_ids, _last_ts_ms
        if schema is not _last_schema:
            # looked at once per schema object: pyarrow makes a Python object per field asked for
            _last_ids, _last_ts_ms = _schema_columns(schema)
            _last_schema = schema
        self.schema = schema
        self.d.ts_ms = _last_ts_ms
        self.n_cols = len(_last_ids)
        for i in range(self.n_cols):
            self.col_ids[i] = _last_ids[i]
            cols |= 1u << self.col_ids[i]
        self.d.cols = cols
        self.d.every = cols == ALL_COLS
        self.d.on = _buffers_of(cols)
        self.verify_crc = verify_crc
        self.queue_id = queue_id
        self.start_ms = INT64_MIN if start_ms is None else start_ms
        self.end_ms = INT64_MAX if end_ms is None else end_ms
        self.topics = [t.encode("utf-8") for t in topics] if topics else []
        self.n_topics = len(self.topics)
        if self.n_topics:
            self.topic_ptr = <const unsigned char **>malloc(self.n_topics * sizeof(void *))
            self.topic_len = <int32_t *>malloc(self.n_topics * sizeof(int32_t))
            if self.topic_ptr == NULL or self.topic_len == NULL:
                raise MemoryError()
            for i in range(self.n_topics):
                self.topic_ptr[i] = <const unsigned char *><bytes>self.topics[i]
                self.topic_len[i] = len(<bytes>self.topics[i])
        self.max_rows = max(1, min(max_rows, 1 << 24))
        self.max_bytes = max(1, min(max_bytes, 1 << 30))
        self.d.items = <int32_t *>malloc(4 * MAX_ITEMS * sizeof(int32_t))
        if self.d.items == NULL:
            raise MemoryError()
        self.pybufs = [None] * N_BUFS
        self._start()

    @property
    def rows(self):
        """The rows added since the last build."""
        return self.d.rows

    cdef int _grow(self, int i, int64_t need) except -1:
        """Room for ``need`` bytes in buffer ``i`` (doubling; a pool allocation, so freed batches' memory
        is reused instead of faulting fresh pages in)."""
        cdef Buf *b = &self.d.bufs[i]
        cdef int64_t cap = b.cap * 2 if b.cap else 4096
        while cap < need:
            cap *= 2
        # a fresh buffer with what the old one held copied over: a resize would copy its whole capacity
        buf = pa.allocate_buffer(cap, resizable=True)
        if b.n > 0:
            memcpy(<void *><uintptr_t>buf.address, b.p, b.n)
        self.pybufs[i] = buf
        b.p = <unsigned char *><uintptr_t>buf.address
        b.cap = cap
        return 0

    cdef int _rows_block(self, int64_t r, bint keep) except -1:
        """The per-row buffers (``_row_bytes``) for ``r`` rows, in one allocation; with ``keep`` their contents
        so far are copied over (more rows for the batch under way), the tags' validity zeroed past them."""
        cdef int64_t total = 0, off = 0, size
        cdef int i
        cdef Buf *b
        cdef unsigned char *base
        for i in range(N_BUFS):
            if on(&self.d, i):
                total += (_row_bytes(i, r) + 63) & ~63
        block = pa.allocate_buffer(total)
        base = <unsigned char *><uintptr_t>block.address
        for i in range(N_BUFS):
            size = _row_bytes(i, r)
            if size == 0 or not on(&self.d, i):
                continue
            b = &self.d.bufs[i]
            if keep and b.cap > 0:
                memcpy(base + off, b.p, b.cap)
            if i == B_TAGS_V:
                memset(base + off + (b.cap if keep else 0), 0, size - (b.cap if keep else 0))
            b.p = base + off
            b.cap = size
            off += (size + 63) & ~63
        self.rows_block = block
        return 0

    cdef int _spend(self) except -1:
        """No buffers: the last batch owns them; an ``add`` now raises (through ``_more_rows``)."""
        cdef int i
        self.d.rows = 0
        self.d.cap_rows = -1
        self.d.spare = self.d.pspare = 0
        self.rows_block = None
        for i in range(N_BUFS):
            self.pybufs[i] = None
            self.d.bufs[i].p = NULL
            self.d.bufs[i].n = 0
            self.d.bufs[i].cap = 0
        return 0

    cdef int _more_rows(self) except -1:
        """Room for twice the rows in the per-row buffers (a sink fed past ``max_rows``)."""
        if self.d.cap_rows < 0:
            raise ValueError("this BatchBuilder built its last batch (build(again=False))")
        self._rows_block(2 * self.d.cap_rows, True)
        self.d.bufs[B_TAGS_V].n = self.d.bufs[B_TAGS_V].cap
        self.d.cap_rows *= 2
        return 0

    cdef int _room(self, int64_t n, int64_t body, int64_t topic, int64_t props) except -1:
        """Room for ``n`` more records of ``body`` body, ``topic`` topic and ``props`` properties bytes in all,
        whatever their text becomes (``_decode`` then writes without a test): invalid UTF-8 grows at most 3x, a
        host's text and a message id take at most 48 bytes, a properties string of ``k`` bytes holds at most
        ``k`` items or keys; copies of a cached text may write up to 64 bytes past their end."""
        # records decoded by windows do not keep ``spare``: the next ``add`` finds it anew
        self.d.spare = self.d.pspare = 0
        if _fits(&self.d, n, body, topic, props):
            return 0
        while self.d.rows + n > self.d.cap_rows:
            self._more_rows()
        res(self, B_BODY, body)
        return self._room_rest(n, topic, props)

    cdef int _room_one(self, int64_t m, int64_t pm) except -1:
        """Room for one more row and ``m`` free bytes in every main buffer, ``pm`` in every properties' one
        (with room for some rows more, up to 64 KiB: ``add`` then rarely comes here), then ``spare`` and
        ``pspare`` anew: the least any of them has free."""
        cdef Buf *b = self.d.bufs
        cdef int64_t spare = INT64_MAX, pspare = INT64_MAX
        cdef int i
        if self.d.rows >= self.d.cap_rows:
            self._more_rows()
        m += min(63 * m, 65536)
        pm += min(63 * pm, 65536)
        for i in (B_BODY, B_TOPIC, B_BH, B_SH, B_ID):
            if on(&self.d, i):
                res(self, i, m)
                spare = min(spare, b[i].cap - b[i].n)
        for i in (B_TAGS, B_KEYS, B_PK, B_PV, B_KEYS_O, B_PK_O, B_PV_O):
            if on(&self.d, i):
                if pm > 0:
                    res(self, i, pm)
                pspare = min(pspare, b[i].cap - b[i].n)
        self.d.spare = spare
        self.d.pspare = pspare
        return 0

    def reserve(self, long long rows, long long body_bytes, long long topic_bytes=0):
        """Room for ``rows`` more rows with ``body_bytes`` of bodies and ``topic_bytes`` of topics (a page
        whose size is known up front grows no buffer, so nothing is copied on the way)."""
        self._room(max(rows, 0), max(body_bytes, 0), max(topic_bytes, 0), 0)

    def __dealloc__(self):
        self.settle()
        free(self.d.items)
        free(self.topic_ptr)
        free(self.topic_len)
        if _spare_wins[0] == NULL:
            # kept for the next builder (the settled windows are no longer read)
            _spare_wins[0], _spare_wins[1] = self.wins[0], self.wins[1]
        else:
            free(self.wins[0])
            free(self.wins[1])

    cdef int _start(self) except -1:
        """Fresh buffers for the next batch: the per-row ones sized for ``max_rows`` at once, the others at the
        size the last batch reached (batches alike grow none); those the last batch left empty (tags, keys,
        properties) point at zeros until a row needs them."""
        cdef int64_t r = self.max_rows
        cdef int i
        cdef Buf *b = self.d.bufs
        self.d.rows = 0
        self.d.cap_rows = r
        self.d.spare = self.d.pspare = 0
        self.d.tags_nulls = self.d.n_keys = self.d.n_items = 0
        for i in range(N_BUFS):
            self.pybufs[i] = None
            b[i].p = <unsigned char *>ZEROS
            b[i].n = 0
            b[i].cap = 0
        for i in (B_TOPIC, B_BODY, B_BH, B_SH, B_ID):
            if on(&self.d, i):
                self._grow(i, max(64, self.last_n[i] + self.last_n[i] // 8))
        for i in (B_TAGS, B_KEYS, B_PK, B_PV):
            if self.last_n[i] > 0 and on(&self.d, i):
                self._grow(i, self.last_n[i] + self.last_n[i] // 8)
        # the offsets of the keys' and properties' items: their first, 0, stands in ZEROS until then
        for i in (B_KEYS_O, B_PK_O, B_PV_O):
            b[i].n = 4
            if self.last_n[i] > 4 and on(&self.d, i):
                self._grow(i, self.last_n[i] + self.last_n[i] // 8)
        self._rows_block(r, False)
        for i in (B_TOPIC_O, B_BODY_O, B_TAGS_O, B_KEYS_LO, B_MAP_O, B_BH_O, B_SH_O, B_ID_O):
            if on(&self.d, i):
                (<int32_t *>b[i].p)[0] = 0
            b[i].n = 4
        b[B_TAGS_V].n = b[B_TAGS_V].cap
        return 0

    cdef int check_crc(self, const unsigned char *p, RecordView *v, str path, int64_t offset) except -1:
        if self.verify_crc and v.body_len > 0 and body_crc32(p + v.body_pos, v.body_len) != v.body_crc:
            raise StoreCorruptedError(path, offset, REASONS.get(REC_BAD_CRC))
        return 0

    cdef int add(self, const unsigned char *p, RecordView *v) except -1:
        """Append one accepted record to every column."""
        # the most any one buffer takes for this record (see _room), of the main and of the properties' buffers
        cdef int64_t m = max(<int64_t>v.body_len, 3 * <int64_t>v.topic_len + 32, 112)
        cdef int64_t pm = 4 * <int64_t>v.props_len + 4 if v.props_len > 0 else 0
        if self.d.rows >= self.d.cap_rows or m > self.d.spare or pm > self.d.pspare:
            self._room_one(m, pm)
        self.d.spare -= m
        self.d.pspare -= pm
        if self.d.every:
            _decode(&self.d, p, v, BODY_COPY, True)
        else:
            _decode(&self.d, p, v, BODY_COPY, False)
        return 0

    # -- deferred records (RecordSink) ---------------------------------------------------------------

    cdef bint begin(self, bint check_crc) except -1:
        if self.d.cap_rows < 0:
            raise ValueError("this BatchBuilder built its last batch (build(again=False))")
        if self.wins[0] == NULL:
            if _spare_wins[0] != NULL:
                self.wins[0], self.wins[1] = _spare_wins[0], _spare_wins[1]
                _spare_wins[0] = _spare_wins[1] = NULL
            else:
                self.wins[0] = <Pending *>malloc(WINDOW * sizeof(Pending))
                self.wins[1] = <Pending *>malloc(WINDOW * sizeof(Pending))
            if self.wins[0] == NULL or self.wins[1] == NULL:
                raise MemoryError()
        self.settle()
        self.defer_crc = check_crc
        self.cut_found = False
        self.good = self.good_bytes = 0
        self.good_phy = -1
        self.split = self.d.every or (self.d.cols & TEXT_COLS) != 0
        return True

    cdef int hand_off(self) except -1:
        return self._decode_fill(True)

    cdef int finish(self) except -1:
        if self._wait() or self.cut_found:
            return 1
        return self._decode_fill(False)

    cdef int settle(self) noexcept:
        if self.busy:
            with nogil:
                ps_dw_wait()
                ps_dw_release()
            self.busy = False
        self._empty()
        return 0

    cdef void _empty(self) noexcept:
        """No record in the window being filled."""
        self.next = self.wins[self.fill]
        self.window_end = self.next + WINDOW if self.next != NULL else NULL

    cdef int _wait(self) except -1:
        """The window with the worker decoded (1 when it ended at a wrong CRC: ``cut``)."""
        if not self.busy:
            return 0
        with nogil:
            ps_dw_wait()
            ps_dw_release()
        self.busy = False
        return self._done(&self.job)

    cdef int _done(self, Job *j) except -1:
        """Account for a decoded window (1 when it ended at a wrong CRC: ``cut`` says where); nothing for the rest
        of a split window (``_fill_split`` accounted for it when it placed the bodies)."""
        if j.part == PART_REST:
            return 0
        self.good += j.done
        self.good_bytes += j.done_bytes
        if j.done > 0:
            self.good_phy = j.recs[j.done - 1].v.phy_offset
        if j.done < j.n:
            self.cut_found = True
            self.cut.good = self.good
            self.cut.good_bytes = self.good_bytes
            self.cut.last_phy = self.good_phy
            self.cut.bad = j.recs[j.done]
            self._empty()
            return 1
        return 0

    cdef int _decode_fill(self, bint worker) except -1:
        """Decode the window being filled: by the worker (``worker``, when it is free and the last window it
        had was decoded whole) while the scan fills the other window, else here. A page with text columns
        splits the window between the threads instead (``_fill_split``) while the worker is on."""
        cdef Job *j = &self.job
        cdef Pending *q = self.wins[self.fill]
        cdef int64_t i, n, body = 0, topic = 0, props = 0
        if self.cut_found:
            return 1
        n = self.next - q
        if worker and self.split and n > 0 and not ps_dw_off:
            return self._fill_split(q, n)
        if self._wait() or self.cut_found:
            return 1
        if n == 0:
            return 0
        for i in range(n):
            body += q[i].v.body_len
            topic += q[i].v.topic_len
            props += q[i].v.props_len
        self._room(n, body, topic, props)
        j.d = &self.d
        j.recs = q
        j.n = n
        j.crc = self.defer_crc
        j.part = PART_ALL
        if worker and ps_dw_acquire():
            self.busy = True
            self.fill ^= 1
            self._empty()
            ps_dw_post(_decode_job, j)
            return 0
        self._empty()
        _decode_job(j)
        return self._done(j)

    cdef int _fill_split(self, Pending *q, int64_t n) except -1:
        """``_decode_fill`` for a page with text columns: copy the window's bodies with their CRCs here (up to
        the first wrong one: the ``cut``), while the worker may still be building the last window's other
        columns, then hand this window's other columns to the worker (or build them here when it is not free)
        and fill the other window. Only the scan's thread touches the body buffer meanwhile; the per-row
        buffers, which the worker writes too, grow only once it is done."""
        cdef Job *j = &self.job
        cdef Job sb
        cdef int64_t i, k, body = 0, topic = 0, props = 0, body_n
        cdef bint every = self.d.every, cut_before
        if self.busy and j.part != PART_REST:
            # a whole window posted while this page's windows were not split (``decode_worker`` turned on
            # meanwhile, by another thread): it writes the body buffer and the rows too, so it must be done first
            if self._wait():
                return 1
        if self.d.rows + n > self.d.cap_rows:
            if self._wait():
                return 1
            while self.d.rows + n > self.d.cap_rows:
                self._more_rows()
        for i in range(n):
            body += q[i].v.body_len
        self.d.spare = self.d.pspare = 0
        res(self, B_BODY, body)
        sb.d = &self.d
        sb.recs = q
        sb.n = n
        sb.crc = self.defer_crc
        sb.part = PART_ALL
        sb.row0 = self.d.rows
        body_n = self.d.bufs[B_BODY].n
        with nogil:
            if every:
                _place_bodies(&sb, True)
            else:
                _place_bodies(&sb, False)
        k = sb.done
        # the bodies placed are not rows until the rest is handed on: on any way out before that, the builder
        # stays as it was before this window
        try:
            cut_before = self._wait()
            if not cut_before and k > 0:
                for i in range(k):
                    topic += q[i].v.topic_len
                    props += q[i].v.props_len
                self._room_rest(k, topic, props)
        except BaseException:
            self.d.bufs[B_BODY].n = body_n
            raise
        if cut_before:
            self.d.bufs[B_BODY].n = body_n
            return 1
        if k > 0:
            j.d = &self.d
            j.recs = q
            j.n = k
            j.crc = False
            j.part = PART_REST
            j.row0 = self.d.rows
            self.d.rows += k
            self.good += k
            self.good_bytes += sb.done_bytes
            self.good_phy = q[k - 1].v.phy_offset
        if k < n:
            self.cut_found = True
            self.cut.good = self.good
            self.cut.good_bytes = self.good_bytes
            self.cut.last_phy = self.good_phy
            self.cut.bad = q[k]
        if k > 0 and ps_dw_acquire():
            self.busy = True
            self.fill ^= 1
            self._empty()
            ps_dw_post(_rest_job, j)
        else:
            self._empty()
            if k > 0:
                _rest_job(j)
        return 1 if k < n else 0

    cdef int _room_rest(self, int64_t n, int64_t topic, int64_t props) except -1:
        """``_room`` for the columns but the body of ``n`` rows the per-row buffers already have room for."""
        cdef int i
        res(self, B_TOPIC, 3 * topic + 32)
        res(self, B_BH, 48 * n + 64)
        res(self, B_SH, 48 * n + 64)
        res(self, B_ID, 48 * n + 64)
        if props > 0 and self.d.cols & PROPS_COLS:
            for i in (B_TAGS, B_KEYS, B_PK, B_PV):
                res(self, i, 3 * props)
            for i in (B_KEYS_O, B_PK_O, B_PV_O):
                res(self, i, 4 * (props + n))
        return 0

    def build(self, bint again=True):
        """The RecordBatch of the records added since the last build; None when there are none. With
        ``again=False`` no buffers are made for a next batch: the builder is spent (a caller's last batch)."""
        cdef int64_t n = self.d.rows
        cdef int i
        cdef Buf *b = self.d.bufs
        cdef ps_batch *e
        self.settle()
        if n == 0:
            return None
        for i in (B_QID, B_SIZE, B_FLAG, B_SYS, B_RC, B_CRC):
            b[i].n = 4 * n
        for i in (B_QOFF, B_CLO, B_BORN, B_STORE, B_PREP):
            b[i].n = 8 * n
        for i in (B_TOPIC_O, B_BODY_O, B_TAGS_O, B_KEYS_LO, B_MAP_O, B_BH_O, B_SH_O, B_ID_O):
            b[i].n = 4 * (n + 1)
        b[B_TAGS_V].n = (n + 7) // 8
        for i in range(N_BUFS):
            self.last_n[i] = b[i].n
        self.rows_total += n
        e = <ps_batch *>calloc(1, sizeof(ps_batch))
        if e == NULL:
            raise MemoryError()
        # the columns point into these buffers: the batch holds them until Arrow releases it
        keep = list(self.pybufs)
        keep.append(self.rows_block)
        Py_INCREF(keep)
        e.keep = <PyObject *>keep
        try:
            try:
                _describe(self, e, n)
            finally:
                # the batch's own release (``_describe`` gave every array the children's)
                e.a[0].release = ps_release_batch
                e.a[0].private_data = e
            if again:
                self._start()
            else:
                self._spend()
            return pa.RecordBatch._import_from_c(<uintptr_t>&e.a[0], self.schema)
        finally:
            if e.a[0].release != NULL:     # not taken (an error): released here
                e.a[0].release(&e.a[0])


# ----------------------------------------------------------------------------------------------------
# Decoding: C on ``Dec`` without the GIL (the decode worker runs it), into buffers ``_room`` made room in
# ----------------------------------------------------------------------------------------------------

cdef inline bint _fits(Dec *d, int64_t n, int64_t body, int64_t topic, int64_t props) noexcept nogil:
    """``BatchBuilder._room`` has nothing to do (its bounds, tested inline)."""
    cdef Buf *b = d.bufs
    cdef int64_t host = 48 * n + 64
    if not d.every:
        return _fits_some(d, n, body, topic, props)
    if (d.rows + n > d.cap_rows or b[B_BODY].n + body > b[B_BODY].cap
            or b[B_TOPIC].n + 3 * topic + 32 > b[B_TOPIC].cap or b[B_BH].n + host > b[B_BH].cap
            or b[B_SH].n + host > b[B_SH].cap or b[B_ID].n + host > b[B_ID].cap):
        return False
    return props <= 0 or _props_fit(b, n, props)


cdef bint _fits_some(Dec *d, int64_t n, int64_t body, int64_t topic, int64_t props) noexcept nogil:
    """``_fits`` for a builder of some columns: only the buffers they write are tested."""
    cdef Buf *b = d.bufs
    cdef int64_t host = 48 * n + 64
    if d.rows + n > d.cap_rows:
        return False
    if on(d, B_BODY) and b[B_BODY].n + body > b[B_BODY].cap:
        return False
    if on(d, B_TOPIC) and b[B_TOPIC].n + 3 * topic + 32 > b[B_TOPIC].cap:
        return False
    if ((on(d, B_BH) and b[B_BH].n + host > b[B_BH].cap) or (on(d, B_SH) and b[B_SH].n + host > b[B_SH].cap)
            or (on(d, B_ID) and b[B_ID].n + host > b[B_ID].cap)):
        return False
    return props <= 0 or not on(d, B_PK) or _props_fit(b, n, props)


cdef inline bint _props_fit(Buf *b, int64_t n, int64_t props) noexcept nogil:
    """Room for ``n`` rows' ``props`` bytes of properties in the property, tags and keys buffers."""
    return not (b[B_TAGS].n + 3 * props > b[B_TAGS].cap or b[B_KEYS].n + 3 * props > b[B_KEYS].cap
                or b[B_PK].n + 3 * props > b[B_PK].cap or b[B_PV].n + 3 * props > b[B_PV].cap
                or b[B_KEYS_O].n + 4 * (props + n) > b[B_KEYS_O].cap
                or b[B_PK_O].n + 4 * (props + n) > b[B_PK_O].cap
                or b[B_PV_O].n + 4 * (props + n) > b[B_PV_O].cap)


cdef inline int res(BatchBuilder self, int i, int64_t extra) except -1:
    if on(&self.d, i) and self.d.bufs[i].n + extra > self.d.bufs[i].cap:
        self._grow(i, self.d.bufs[i].n + extra)
    return 0


cdef void _decode_job(void *arg) noexcept nogil:
    """Decode a window of deferred records in order, up to the first whose body CRC is wrong (with ``crc``).

    With ``crc``, the bodies of ``CRC_GROUP`` records are copied into place and their CRCs taken one after the
    other before the group is decoded: a short body's CRC is a chain of dependent carry-less multiplications,
    and independent chains back to back run side by side in the CPU."""
    cdef Job *j = <Job *>arg
    # one copy of the loop for all the columns, one for some (``every`` a constant in each)
    if j.d.every:
        _decode_window(j, True, False)
    else:
        _decode_window(j, False, False)


cdef inline void _decode_window(Job *j, bint every, bint bodies) noexcept nogil:
    """``_decode_job``'s loop (``bodies`` False: whole rows from ``d.rows``), and ``_place_bodies``' (``bodies``:
    only the bodies, rows from ``j.row0``); both flags are constants where it is inlined."""
    cdef Dec *d = j.d
    cdef Buf *body = &d.bufs[B_BODY]
    cdef int64_t i = 0, k, g, off, nbytes = 0
    cdef Pending *q = j.recs
    cdef RecordView *v
    cdef uint32_t crcs[CRC_GROUP]
    cdef bint copy = every or on(d, B_BODY)
    cdef int how = BODY_PLACED if j.crc else BODY_COPY
    while i < j.n:
        g = min(<int64_t>CRC_GROUP, j.n - i)
        for k in range(g):
            complete_plain(q[i + k].rec, &q[i + k].v)
        if j.crc:
            off = body.n
            for k in range(g):
                v = &q[i + k].v
                if copy:
                    crcs[k] = ps_copy_crc32(body.p + off, q[i + k].rec + v.body_pos, v.body_len) & 0x7FFFFFFF
                else:
                    # no body column: the CRC is still checked, on the record itself
                    crcs[k] = <uint32_t>body_crc32(q[i + k].rec + v.body_pos, v.body_len)
                off += v.body_len
        for k in range(g):
            v = &q[i + k].v
            if j.crc and v.body_len > 0 and <int32_t>crcs[k] != v.body_crc:
                j.done = i + k
                j.done_bytes = nbytes
                return
            if bodies:
                _decode_body(d, q[i + k].rec, v, j.row0 + i + k, how, every)
            else:
                _decode(d, q[i + k].rec, v, how, every)
            nbytes += v.total_size
        i += g
    j.done = j.n
    j.done_bytes = nbytes


cdef inline void _decode(Dec *d, const unsigned char *p, RecordView *v, int body, bint every) noexcept nogil:
    """Append one accepted record to the columns asked for (``every``: all of them, the tests folded away by the
    compiler), its body copied (``BODY_COPY``) or there already (``BODY_PLACED``: ``_decode_job`` copied it
    with its CRC)."""
    cdef int64_t r = d.rows
    _decode_body(d, p, v, r, body, every)
    _decode_rest(d, p, v, r, every)
    d.rows = r + 1


cdef inline void _decode_body(Dec *d, const unsigned char *p, RecordView *v, int64_t r, int body,
                              bint every) noexcept nogil:
    """Row ``r``'s body (``_decode``'s first part)."""
    cdef Buf *b = d.bufs
    if every or d.cols & (1 << C_BODY):
        if body == BODY_COPY:
            memcpy(b[B_BODY].p + b[B_BODY].n, p + v.body_pos, v.body_len)
        b[B_BODY].n += v.body_len
        (<int32_t *>b[B_BODY_O].p)[r + 1] = <int32_t>b[B_BODY].n


cdef inline void _decode_rest(Dec *d, const unsigned char *p, RecordView *v, int64_t r, bint every) noexcept nogil:
    """Row ``r``'s columns but the body (``_decode``'s second part; the worker's share of a split window)."""
    cdef Buf *b = d.bufs
    cdef int64_t phy = v.phy_offset
    cdef int32_t hl2
    cdef uint32_t cols = d.cols
    cdef HostCache *sc = &d.store_cache
    cdef unsigned char *dst
    # fixed-width columns (the others tested as a group first: a projection names few)
    if every or cols & (1 << C_QOFF):
        (<int64_t *>b[B_QOFF].p)[r] = v.queue_offset
    if every or cols & FIXED_COLS:
        if every or cols & (1 << C_QID):
            (<int32_t *>b[B_QID].p)[r] = v.queue_id
        if every or cols & (1 << C_CLO):
            (<int64_t *>b[B_CLO].p)[r] = phy
        if every or cols & (1 << C_SIZE):
            (<int32_t *>b[B_SIZE].p)[r] = v.total_size
        if every or cols & (1 << C_FLAG):
            (<int32_t *>b[B_FLAG].p)[r] = v.flag
        if every or cols & (1 << C_SYS):
            (<int32_t *>b[B_SYS].p)[r] = v.sys_flag
        if every or cols & (1 << C_BORN):
            (<int64_t *>b[B_BORN].p)[r] = v.born_ts if d.ts_ms else ms_to_us(v.born_ts)
        if every or cols & (1 << C_STORE):
            (<int64_t *>b[B_STORE].p)[r] = v.store_ts if d.ts_ms else ms_to_us(v.store_ts)
        if every or cols & (1 << C_RC):
            (<int32_t *>b[B_RC].p)[r] = v.reconsume_times
        if every or cols & (1 << C_PREP):
            (<int64_t *>b[B_PREP].p)[r] = v.prepared_tx_offset
        if every or cols & (1 << C_CRC):
            (<int32_t *>b[B_CRC].p)[r] = v.body_crc
    if every or cols & TEXT_COLS:
        if every or cols & (1 << C_TOPIC):
            put_topic(d, p + v.topic_pos, v.topic_len)
            (<int32_t *>b[B_TOPIC_O].p)[r + 1] = <int32_t>b[B_TOPIC].n
        # properties map, then TAGS and KEYS from it (a record without properties has none of them)
        if every or cols & PROPS_COLS:
            if v.props_len > 0:
                add_props(d, r, p + v.props_pos, v.props_len)
            else:
                d.tags_nulls += 1
                (<int32_t *>b[B_MAP_O].p)[r + 1] = <int32_t>d.n_items
                (<int32_t *>b[B_TAGS_O].p)[r + 1] = <int32_t>b[B_TAGS].n
                (<int32_t *>b[B_KEYS_LO].p)[r + 1] = <int32_t>d.n_keys
        # hosts and the offset message id
        if every or cols & (1 << C_BH):
            put_host(d, &d.born_cache, B_BH, p + v.born_host_pos, v.born_host_len)
            (<int32_t *>b[B_BH_O].p)[r + 1] = <int32_t>b[B_BH].n
        if every or cols & STORE_HOST_COLS:
            host_cached(sc, p + v.store_host_pos, v.store_host_len)
        if every or cols & (1 << C_SH):
            put_host_text(&b[B_SH], sc)
            (<int32_t *>b[B_SH_O].p)[r + 1] = <int32_t>b[B_SH].n
        if every or cols & (1 << C_ID):
            # the offset message id (docs/format.md §1.8): the store host's hex, kept with its text, then the
            # offset's, of which only the last four digits change between rows whose offsets differ in the low 16
            # bits only
            hl2 = 2 * sc.raw_len
            if (phy >> 16) != sc.id_high:
                hex_i64(sc.id + hl2, phy)
                sc.id_high = phy >> 16
            dst = b[B_ID].p + b[B_ID].n
            if hl2 == 16:
                memcpy(dst, sc.id, 32)
            else:
                memcpy(dst, sc.id, 64)
            memcpy(dst + hl2 + 12, &HEX_PAIRS[2 * ((phy >> 8) & 0xFF)], 2)
            memcpy(dst + hl2 + 14, &HEX_PAIRS[2 * (phy & 0xFF)], 2)
            b[B_ID].n += hl2 + 16
            (<int32_t *>b[B_ID_O].p)[r + 1] = <int32_t>b[B_ID].n


cdef void _place_bodies(Job *j, bint every) noexcept nogil:
    """The first part of a split window (``BatchBuilder._fill_split``), in the scan's thread: each record's view
    completed, its body copied into place with its CRC taken (or the CRC alone without a body column), up to
    the first whose CRC is wrong (``j.done``), rows from ``j.row0``."""
    if every:
        _decode_window(j, True, True)
    else:
        _decode_window(j, False, True)


cdef void _rest_job(void *arg) noexcept nogil:
    """The second part of a split window: every column but the body, rows ``row0`` on (the decode worker runs
    it, or the scan's thread when the worker is not free)."""
    cdef Job *j = <Job *>arg
    cdef int64_t i
    if j.d.every:
        for i in range(j.n):
            _decode_rest(j.d, j.recs[i].rec, &j.recs[i].v, j.row0 + i, True)
    else:
        for i in range(j.n):
            _decode_rest(j.d, j.recs[i].rec, &j.recs[i].v, j.row0 + i, False)


cdef void _add_props(Dec *d, int64_t r, const unsigned char *props, int32_t props_len) noexcept nogil:
    """Row ``r``'s properties map, tags and keys, from its properties string."""
    cdef Buf *b = d.bufs
    cdef int32_t *items = d.items
    cdef int32_t cnt, i, t, s, e, tags_at, keys_at
    cdef uint32_t word
    cnt = parse_props(props, props_len, items)
    for i in range(cnt):
        put_utf8(&b[B_PK], props + items[4 * i], items[4 * i + 1])
        put_utf8(&b[B_PV], props + items[4 * i + 2], items[4 * i + 3])
        d.n_items += 1
        (<int32_t *>b[B_PK_O].p)[d.n_items] = <int32_t>b[B_PK].n
        (<int32_t *>b[B_PV_O].p)[d.n_items] = <int32_t>b[B_PV].n
    b[B_PK_O].n += 4 * cnt
    b[B_PV_O].n += 4 * cnt
    (<int32_t *>b[B_MAP_O].p)[r + 1] = <int32_t>d.n_items
    # TAGS and KEYS in one pass over the items, names compared as one 4-byte word
    tags_at = keys_at = -1
    for i in range(cnt):
        if items[4 * i + 1] == 4:
            memcpy(&word, props + items[4 * i], 4)
            if word == TAGS_WORD:
                tags_at = i
            elif word == KEYS_WORD:
                keys_at = i
    if tags_at >= 0:
        put_utf8(&b[B_TAGS], props + items[4 * tags_at + 2], items[4 * tags_at + 3])
        b[B_TAGS_V].p[r >> 3] |= <unsigned char>(1 << (r & 7))
    else:
        d.tags_nulls += 1
    (<int32_t *>b[B_TAGS_O].p)[r + 1] = <int32_t>b[B_TAGS].n
    if keys_at >= 0:
        # the value split on spaces, empty tokens dropped
        s = items[4 * keys_at + 2]
        e = s + items[4 * keys_at + 3]
        while s < e:
            t = <int32_t>find_byte(props, s, e, 32)
            if t > s:
                put_utf8(&b[B_KEYS], props + s, t - s)
                d.n_keys += 1
                (<int32_t *>b[B_KEYS_O].p)[d.n_keys] = <int32_t>b[B_KEYS].n
                b[B_KEYS_O].n += 4
            s = t + 1
    (<int32_t *>b[B_KEYS_LO].p)[r + 1] = <int32_t>d.n_keys


# ``_add_props`` called through a pointer: the compiler then keeps it out of ``_decode``, whose rows without
# properties run faster without it inline
cdef void (*add_props)(Dec *, int64_t, const unsigned char *, int32_t) noexcept nogil
add_props = _add_props


cdef inline void put_utf8(Buf *b, const unsigned char *p, int32_t n) noexcept nogil:
    """Append ``p[:n]`` to ``b`` as valid UTF-8 (valid text is copied as is). A short ASCII text (the usual
    property) is tested and copied as two overlapping words; the room ``_room`` made (3 bytes a byte) holds
    them."""
    cdef uint64_t x, y
    cdef uint32_t a, c
    cdef unsigned char *d = b.p + b.n
    if 8 <= n <= 16:
        memcpy(&x, p, 8)
        memcpy(&y, p + n - 8, 8)
        if ((x | y) & <uint64_t>0x8080808080808080) == 0:
            memcpy(d, &x, 8)
            memcpy(d + n - 8, &y, 8)
            b.n += n
            return
    elif 4 <= n < 8:
        memcpy(&a, p, 4)
        memcpy(&c, p + n - 4, 4)
        if ((a | c) & <uint32_t>0x80808080) == 0:
            memcpy(d, &a, 4)
            memcpy(d + n - 4, &c, 4)
            b.n += n
            return
    b.n += utf8_fix(p, n, d)


cdef void _new_host(HostCache *c, const unsigned char *h, int32_t hlen) noexcept nogil:
    c.text_len = fmt_host(h, hlen, c.text)
    hex_bytes(c.id, h, hlen)
    c.id_high = -1
    memcpy(c.raw, h, hlen)
    c.raw_len = hlen


cdef inline void host_cached(HostCache *c, const unsigned char *h, int32_t hlen) noexcept nogil:
    """``c`` holds host ``h`` (rows mostly repeat a host: the last one formatted is kept)."""
    cdef uint64_t x, y
    if hlen == 8 and c.raw_len == 8:
        memcpy(&x, h, 8)
        memcpy(&y, c.raw, 8)
        if x != y:
            _new_host(c, h, hlen)
    elif hlen != c.raw_len or memcmp(c.raw, h, hlen) != 0:
        _new_host(c, h, hlen)


cdef inline void put_host(Dec *d, HostCache *c, int i, const unsigned char *h, int32_t hlen) noexcept nogil:
    """Append the text of host ``h``."""
    host_cached(c, h, hlen)
    put_host_text(&d.bufs[i], c)


cdef inline void put_host_text(Buf *b, HostCache *c) noexcept nogil:
    """Append the text of the host ``c`` holds."""
    # a fixed-size copy (vector moves, no call) of the text and what follows it in the cache
    if c.text_len <= 32:
        memcpy(b.p + b.n, c.text, 32)
    else:
        memcpy(b.p + b.n, c.text, 64)
    b.n += c.text_len


cdef inline void put_topic(Dec *d, const unsigned char *t, int32_t n) noexcept nogil:
    """Append topic ``t[:n]`` as valid UTF-8: a repeat of the last topic is copied from the cache."""
    cdef TextCache *c = &d.topic_cache
    cdef Buf *b = &d.bufs[B_TOPIC]
    if n > <int32_t>sizeof(c.raw):
        # longer than the cache holds (a V2 record's topic may be): written as it comes
        b.n += utf8_fix(t, n, b.p + b.n)
        c.raw_len = -1
        return
    if n != c.raw_len or not same_bytes(c.raw, t, n):
        memcpy(c.raw, t, n)
        c.raw_len = n
        c.text_len = <int32_t>utf8_fix(t, n, c.text)
    if c.text_len <= 32:
        memcpy(b.p + b.n, c.text, 32)
    else:
        memcpy(b.p + b.n, c.text, c.text_len)
    b.n += c.text_len

# ----------------------------------------------------------------------------------------------------
# The built batch to Arrow, through its C data interface
# ----------------------------------------------------------------------------------------------------

cdef ArrowArray *_col(Buf *bufs, Exporting *x, int64_t length, int64_t nulls, int first, int second,
                      int n_children=0) noexcept:
    """An array of buffers ``first`` (values, or offsets) and ``second`` (-1: none; else the data of those
    offsets), without a validity bitmap (set by the caller where there are nulls)."""
    cdef ArrowArray *a = _array(x, length, nulls, 3 if second >= 0 else 2, n_children)
    a.buffers[0] = NULL
    a.buffers[1] = bufs[first].p
    if second >= 0:
        a.buffers[2] = bufs[second].p
    return a


cdef int _describe(BatchBuilder bb, ps_batch *e, int64_t n) except -1:
    """Fill ``e`` with the ArrowArrays of the ``n`` rows in ``bb``'s buffers: its schema's columns, in its order
    (docs/api.md), then the children of the keys and properties among them."""
    cdef Exporting x
    cdef Buf *b = bb.d.bufs
    cdef ArrowArray *top
    cdef ArrowArray *a
    cdef ArrowArray *c
    cdef ArrowArray *keys = NULL
    cdef ArrowArray *props = NULL
    cdef int k, col
    x.e = e
    x.arrays = x.kids = x.bufs = 0
    top = _array(&x, n, 0, 1, bb.n_cols)
    top.buffers[0] = NULL
    for k in range(bb.n_cols):
        col = bb.col_ids[k]
        if col == C_TAGS:
            a = _col(b, &x, n, bb.d.tags_nulls, B_TAGS_O, B_TAGS)
            if bb.d.tags_nulls:
                a.buffers[0] = b[B_TAGS_V].p
        elif col == C_KEYS:
            a = keys = _col(b, &x, n, 0, B_KEYS_LO, -1, 1)
        elif col == C_PROPS:
            a = props = _col(b, &x, n, 0, B_MAP_O, -1, 1)
        else:
            a = _col(b, &x, n, 0, _COL_FIRST[col], _COL_SECOND[col])
        top.children[k] = a
    # the keys' strings, the properties' entries (a struct of key and value strings)
    if keys != NULL:
        keys.children[0] = _col(b, &x, bb.d.n_keys, 0, B_KEYS_O, B_KEYS)
    if props != NULL:
        c = _array(&x, bb.d.n_items, 0, 1, 2)
        c.buffers[0] = NULL
        props.children[0] = c
        c.children[0] = _col(b, &x, bb.d.n_items, 0, B_PK_O, B_PK)
        c.children[1] = _col(b, &x, bb.d.n_items, 0, B_PV_O, B_PV)
    assert x.arrays <= PS_ARRAYS
    return 0
