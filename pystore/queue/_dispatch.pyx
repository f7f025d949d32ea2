# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Dispatch: ``QueueDispatcher`` turns appended records into consume-queue units (and index entries), inline from
the put path (ASYNC_FLUSH: ``dispatch``/``dispatch_run`` under the put lock; index entries there only with
``inline_index``, else an index builder follows the log: ``_index.index_log``), or by walking the commit log
(``reput``: SYNC_FLUSH after each group commit, a store whose queues are missing; ``reput_checked``: recovery's
re-dispatch, which also returns the queues found lacking units before a record of theirs). Recovery's read-only
gap check (``queues_behind``) walks the log the same way (``_next_record``) and writes nothing.

``reput`` finds a record's topic-queue cell from the record's bytes in C (``_cell``: the last record's, else
the dispatcher's open-addressing table of the cells it met, keyed by topic bytes and queue id): no Python call
and no object per record. A queue new to the dispatcher crosses into Python once: its cell from the commit
log's table (``CommitLogCore.cell_of``: the topic's text and the cell's key made once) and, on its first
record, its consume queue (``create_queue``)."""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp

from pystore.format._codec cimport (CQ_STORE_UNIT_SIZE, REC_BLANK, RecordView, check_record, enters_queue, find_property,
                                    tags_code_of)
from pystore.format._bytes cimport bytes_data, bytes_size
from pystore.log._commitlog cimport CommitLogCore, Dispatcher, QueueCell
from pystore.log._files cimport files_of, find_file
from pystore.index._index cimport IndexFilesBase, KeyScan, index_message, index_scanned, key_scan
from pystore.log._mapped_file cimport MappedFile
from pystore.format._jstring cimport utf8_text
from pystore.message._message cimport Message
from pystore.system._notify cimport WakeWord, ps_notify
from pystore.queue._units cimport ConsumeQueueCore


cdef int64_t _parse_int(const unsigned char *p, int32_t n) noexcept:
    cdef int64_t v = 0
    cdef int32_t i
    if n <= 0 or n > 9:
        return -1
    for i in range(n):
        if p[i] < 48 or p[i] > 57:
            return -1
        v = v * 10 + (p[i] - 48)
    return v


cdef inline bint _behind(ConsumeQueueCore cq, int64_t queue_offset, int64_t record_end):
    """Does the queue lack the unit of the record of ``queue_offset`` (ending at commit-log ``record_end``)?
    Past its end: a record beyond the queue's last one whose unit would not land right after it (units
    missing before it); a queue without files counts so unless the record is its first message ever
    (offset 0). Before its first file: its first files are gone (callers walk only records still in the
    log, whose units a cleaner never deletes)."""
    cdef MappedFile mf = cq.last
    cdef list files
    if mf is None:
        return queue_offset > 0
    files = files_of(cq.queue)
    if PyList_GET_SIZE(files) > 0 and \
            queue_offset * CQ_STORE_UNIT_SIZE < (<MappedFile>PyList_GET_ITEM(files, 0)).file_from_offset:
        return True
    return record_end > cq.max_physic_offset and \
        queue_offset * CQ_STORE_UNIT_SIZE > mf.file_from_offset + mf.wrote


cdef int32_t _next_record(list cl_files, int64_t cl_file_size, int64_t *off, int64_t end_offset, RecordView *v,
                          const unsigned char **rec):
    """The walk of the commit log behind dispatch: from ``off[0]``, past file ends and blanks, to the next
    whole record that ends at or below ``end_offset`` (not wholly flushed yet otherwise). Its size, with
    ``rec`` and ``v`` filled and ``off[0]`` at it; or 0 when the walk stops there (the end, a file not mapped,
    or a record that cannot be read)."""
    cdef MappedFile f
    cdef int64_t pos, rp
    cdef int32_t r
    while off[0] < end_offset:
        f = find_file(cl_files, cl_file_size, off[0])
        if f is None or f.base == NULL:
            return 0
        pos = off[0] - f.file_from_offset
        rp = f.read_position()
        if pos >= rp:
            if rp == f.file_size:
                off[0] = f.file_from_offset + cl_file_size
                continue
            return 0
        rec[0] = f.base + pos
        r = check_record(rec[0], rp - pos, False, v)
        if r == REC_BLANK:
            off[0] = f.file_from_offset + cl_file_size
            continue
        if r <= 0 or off[0] + r > end_offset:
            return 0
        return r
    return 0


def queues_behind(list cl_files, long long cl_file_size, long long from_offset, long long end_offset,
                  dict queues, bint tails=True, long long stored_before=0, long long dispatched_end=0):
    """A reader's gap check (``recovery``), writing nothing: the ``(topic, queue id)``s of ``queues`` (a dict
    of ``ConsumeQueueCore`` by that key) with a record in ``[from_offset, end_offset)`` that lies past the
    queue's last unit (``_behind``). Returns ``(gaps, reached)``: the walk stops where a record cannot be
    read. A queue of a store shut down cleanly has a unit for each record of it; with ``tails`` False (a
    crashed writer's queues may lag its log at their end, never at their head) a record past a queue's end
    counts only when it was stored before ``stored_before`` (the checkpoint's time of the queues' flush) or
    ends at or below ``dispatched_end``: dispatch follows the log in order, so a crashed writer's queues lag
    it only as a common suffix, and a record before another queue's last unit had its unit built."""
    cdef int64_t off = from_offset
    cdef int32_t r
    cdef RecordView v
    cdef const unsigned char *rec = NULL
    cdef ConsumeQueueCore cq
    cdef set gaps = set()
    while True:
        r = _next_record(cl_files, cl_file_size, &off, end_offset, &v, &rec)
        if r <= 0:
            break
        if enters_queue(v.sys_flag):
            key = (utf8_text(rec + v.topic_pos, v.topic_len), v.queue_id)
            found = queues.get(key)
            if found is not None:
                cq = <ConsumeQueueCore?>found
                if cq.last is None or PyList_GET_SIZE(files_of(cq.queue)) == 0:
                    head = False
                    tail = True
                else:
                    head = v.queue_offset * CQ_STORE_UNIT_SIZE < \
                        (<MappedFile>PyList_GET_ITEM(files_of(cq.queue), 0)).file_from_offset
                    tail = off + r > cq.max_physic_offset and \
                        v.queue_offset * CQ_STORE_UNIT_SIZE >= cq.last.file_from_offset + cq.last.wrote
                if head or (tail and (tails or v.store_ts < stored_before or off + r <= dispatched_end)):
                    gaps.add(key)
        off += r
    return gaps, off


# reput's table of the cells it met (QueueDispatcher._cell): open addressing over (topic bytes, queue id), so that
# a record's cell is found from the bytes in the record, with no Python object made or called
cdef struct CellSlot:
    uint64_t hash                   # 0: an empty slot
    int32_t queue_id
    PyObject *topic                 # the topic's UTF-8 bytes; both held by QueueDispatcher._held
    PyObject *cell


cdef inline uint64_t _cell_hash(const unsigned char *p, Py_ssize_t n, int32_t queue_id) noexcept:
    # FNV-1a over the topic, then the queue id; never 0 (an empty slot)
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * 1099511628211ULL
    h = (h ^ <uint32_t>queue_id) * 1099511628211ULL
    return h | 1


@cython.final
cdef class QueueDispatcher(Dispatcher):
    """Builds consume-queue units (and index entries) from appended records."""
    cdef readonly CommitLogCore cells          # the topic-queue table (the commit log's): reput's cells
    cdef public object create_queue            # (topic, queue_id) -> ConsumeQueueCore (find_or_create_core)
    cdef public IndexFilesBase index           # IndexService.core, or None
    # whether the inline path (dispatch, dispatch_run) writes index entries; False while an index builder
    # (pystore.index.builder.IndexBuildService) follows the log off the put thread. reput always indexes
    cdef public bint inline_index
    cdef int64_t delay_ms[64]
    cdef int32_t max_level
    cdef public int64_t last_store_ts
    cdef public str schedule_topic
    # None, or arriving(topic, queue_id, queue_offset, tags_code, store_ts, properties bytes) after each unit
    # (pystore.read.arrival sets it only while a listener or a waiter exists: the put path pays one pointer test)
    cdef public object arriving
    # None, or schedule_wake() after a delayed message's unit enters the schedule topic's queue: the
    # delay service sleeps while its levels have nothing to deliver (pystore.engine.schedule)
    cdef public object schedule_wake
    # the wakeup file's word (pystore.read.arrival): after a put's units, one load unless another process waits
    cdef WakeWord _wake
    cdef uint64_t *_wake_word
    cdef bint _wake_light
    # the key_scan of the last keyed message's topic and properties bytes (immutable: the same objects, the
    # same scan), made by prepare before its record is written, and reused by its dispatch
    cdef KeyScan _ks
    cdef bint _ks_keyed
    cdef int32_t _ks_flag
    cdef object _ks_topic
    cdef object _ks_props
    cdef bytes _last_topic                     # the last record's topic and queue id, and their cell (reput)
    cdef int32_t _last_qid
    cdef QueueCell _last_cell
    cdef CellSlot *_slots                      # reput's cells by (topic, queue id): _cell
    cdef Py_ssize_t _mask                      # the table's size less one (a power of two less one)
    cdef Py_ssize_t _used
    cdef list _held                            # what the slots point at: (topic bytes, cell) pairs
    cdef int64_t _cells_removed                # the table's cells_removed when the slots were filled

    def __init__(self, CommitLogCore cells not None, create_queue, delay_levels=None, index=None,
                 str schedule_topic="SCHEDULE_TOPIC_XXXX"):
        self.cells = cells
        self.create_queue = create_queue
        self._held = []
        self._cells_removed = cells.cells_removed
        self.index = index
        self.inline_index = True
        self.arriving = None
        self.schedule_wake = None
        self.schedule_topic = schedule_topic
        self.max_level = 0
        if delay_levels:
            for lvl, ms in delay_levels.items():
                if 1 <= lvl < 64:
                    self.delay_ms[lvl] = ms
                    if lvl > self.max_level:
                        self.max_level = lvl

    def __dealloc__(self):
        free(self._slots)

    @property
    def wake(self):
        """The ``WakeWord`` bumped after each put's units (readers in other processes wait on it), or None."""
        return self._wake

    @wake.setter
    def wake(self, WakeWord w):
        self._wake = w
        self._wake_word = NULL if w is None else w.word
        self._wake_light = w is not None and w.light

    cdef int64_t _deliver_time(self, int64_t level, int64_t store_ts) noexcept:
        """docs/format.md §2.2: the schedule topic's tags code is the time the message is due."""
        if level > self.max_level:
            level = self.max_level
        if level <= 0:
            return store_ts + 1000
        return store_ts + self.delay_ms[level]

    cdef int dispatch(self, QueueCell cell, Message msg, int64_t phy_offset, int32_t size, int64_t store_ts,
                      int64_t queue_offset) except -1:
        cdef ConsumeQueueCore cq
        cdef int64_t tags = msg._tags_code
        cdef bint keyed = self.inline_index and self.index is not None and msg._has_keys and self._scan(msg)
        # every record reaches here (the index takes PREPARED ones too); only NOT/COMMIT enter a queue
        cdef bint delayed = False
        if enters_queue(msg._sys_flag):
            cq = self._queue_of(cell)
            if msg._delay_level > 0 and cell.topic == self.schedule_topic:
                tags = self._deliver_time(msg._delay_level, store_ts)
                delayed = True
            cq.put_unit(phy_offset, size, tags, queue_offset)
            cq.last_store_ts = store_ts
            if delayed and self.schedule_wake is not None:
                self.schedule_wake()
            if self.arriving is not None:
                self.arriving(cell.topic, cell.queue_id, queue_offset, tags, store_ts, msg._props_b)
            if self._wake_word != NULL:
                ps_notify(self._wake_word, self._wake_light)
        self.last_store_ts = store_ts
        if keyed:
            index_scanned(self.index, <const unsigned char *>PyBytes_AS_STRING(msg._props_b), &self._ks, phy_offset,
                          store_ts)
        return 0

    cdef ConsumeQueueCore _queue_of(self, QueueCell cell):
        """The cell's consume queue, created on its first record."""
        if cell.consume_queue is None:
            cell.consume_queue = self.create_queue(cell.topic, cell.queue_id)
        return <ConsumeQueueCore?>cell.consume_queue

    cdef void prepare(self, Message msg) noexcept:
        # a keyed message's keys are hashed before its record is written: key_scan starts the fetch of their
        # hash slots (a random place in a 20 MB table), which then overlaps the append
        if self.inline_index and self.index is not None and msg._has_keys:
            self._scan(msg)

    cdef bint _scan(self, Message msg) noexcept:
        """Does a record of ``msg`` get index entries (it has keys, KEYS or UNIQ_KEY, and is not rolled back)?
        Then ``_ks`` holds its keys' hashes for ``index_scanned``: from the topic and properties bytes the
        encoder writes into the record, as ``reput`` indexes a record. Scanned again only when those bytes
        objects or the flag differ from the last scan's."""
        if msg._props_b is not self._ks_props or msg._topic_b is not self._ks_topic or \
                msg._sys_flag != self._ks_flag:
            self._ks_keyed = key_scan(self.index, <const unsigned char *>PyBytes_AS_STRING(msg._topic_b),
                                      PyBytes_GET_SIZE(msg._topic_b),
                                      <const unsigned char *>PyBytes_AS_STRING(msg._props_b),
                                      PyBytes_GET_SIZE(msg._props_b), msg._sys_flag, &self._ks)
            self._ks_props = msg._props_b
            self._ks_topic = msg._topic_b
            self._ks_flag = msg._sys_flag
        return self._ks_keyed

    cdef int dispatch_run(self, QueueCell cell, Message msg, int64_t phy_offset, const int32_t *sizes, Py_ssize_t n,
                          int64_t store_ts, int64_t queue_offset) except -1:
        """A batch whose records share ``msg``'s topic, queue, tags code and type (built from bodies, or
        messages with one tags code and no keys; no delay and no transaction type: a batch refuses both): their
        units go in as one run. Index entries, when the batch has keys, are still one per record, as
        ``dispatch`` makes them."""
        cdef ConsumeQueueCore cq
        cdef Py_ssize_t i
        if not enters_queue(msg._sys_flag) or msg._delay_level > 0:
            return Dispatcher.dispatch_run(self, cell, msg, phy_offset, sizes, n, store_ts, queue_offset)
        cq = self._queue_of(cell)
        cq.put_units(phy_offset, sizes, n, msg._tags_code, queue_offset)
        cq.last_store_ts = store_ts
        self.last_store_ts = store_ts
        if self.arriving is not None:
            for i in range(n):
                self.arriving(cell.topic, cell.queue_id, queue_offset + i, msg._tags_code, store_ts, msg._props_b)
        if self._wake_word != NULL:
            ps_notify(self._wake_word, self._wake_light)
        if self.inline_index and self.index is not None and msg._has_keys and self._scan(msg):
            # one properties string: its keys are hashed once for all the records
            for i in range(n):
                index_scanned(self.index, <const unsigned char *>PyBytes_AS_STRING(msg._props_b), &self._ks,
                              phy_offset, store_ts)
                phy_offset += sizes[i]
        return 0

    cdef int dispatch_each(self, QueueCell cell, Message msg, const unsigned char *rec, int64_t phy_offset,
                           const int32_t *sizes, const int32_t *props_lens, const int64_t *tags_codes, Py_ssize_t n,
                           int64_t store_ts, int64_t queue_offset, bint keyed) except -1:
        """A run of records that differ in tags code and properties (the column put with a tags or keys column;
        no delay, no transaction type): a unit each, index entries from each record's properties as ``reput``
        makes them (``index_message``), one wake-up for the run."""
        cdef ConsumeQueueCore cq
        cdef const unsigned char *props
        cdef Py_ssize_t i
        if not enters_queue(msg._sys_flag) or msg._delay_level > 0:
            return Dispatcher.dispatch_each(self, cell, msg, rec, phy_offset, sizes, props_lens, tags_codes, n,
                                            store_ts, queue_offset, keyed)
        cq = self._queue_of(cell)
        for i in range(n):
            props = rec + sizes[i] - props_lens[i]
            cq.put_unit(phy_offset, sizes[i], tags_codes[i], queue_offset + i)
            if self.arriving is not None:
                self.arriving(cell.topic, cell.queue_id, queue_offset + i, tags_codes[i], store_ts,
                              props[:props_lens[i]])
            if keyed and self.inline_index and self.index is not None:
                index_message(self.index, <const unsigned char *>PyBytes_AS_STRING(msg._topic_b),
                              PyBytes_GET_SIZE(msg._topic_b), props, props_lens[i], phy_offset, store_ts,
                              msg._sys_flag)
            phy_offset += sizes[i]
            rec += sizes[i]
        cq.last_store_ts = store_ts
        self.last_store_ts = store_ts
        if self._wake_word != NULL:
            ps_notify(self._wake_word, self._wake_light)
        return 0

    cdef int dispatch_record(self, QueueCell cell, const unsigned char *rec, RecordView *v, int64_t phy_offset,
                             int64_t queue_offset) except -1:
        """``dispatch`` of a record written from bytes (the timer store's compiled delivery: it enters a queue and
        has no delay level): its tags code and index entries read from the record as ``reput`` reads them."""
        cdef ConsumeQueueCore cq = self._queue_of(cell)
        cdef int64_t tags = tags_code_of(rec, v)
        cq.put_unit(phy_offset, v.total_size, tags, queue_offset)
        cq.last_store_ts = v.store_ts
        if self.arriving is not None:
            self.arriving(cell.topic, cell.queue_id, queue_offset, tags, v.store_ts,
                          rec[v.props_pos:v.props_pos + v.props_len])
        if self._wake_word != NULL:
            ps_notify(self._wake_word, self._wake_light)
        self.last_store_ts = v.store_ts
        if self.inline_index and self.index is not None:
            index_message(self.index, rec + v.topic_pos, v.topic_len, rec + v.props_pos, v.props_len, phy_offset,
                          v.store_ts, v.sys_flag)
        return 0

    cdef QueueCell _cell(self, const unsigned char *rec, RecordView *v):
        """The cell of a record's topic and queue (reput), from the record's bytes: the last record's when they
        repeat, else from the dispatcher's table of cells met, else (a queue new to this dispatcher) from the
        commit log's topic-queue table, which makes the topic's text and the cell's key once. A cell removed
        from that table (its queue destroyed by cleaning) empties this one."""
        cdef const unsigned char *t = rec + v.topic_pos
        cdef Py_ssize_t n = v.topic_len, i
        cdef uint64_t h
        cdef CellSlot *slot
        if self.cells.cells_removed != self._cells_removed:
            self._forget_cells()
        if self._last_cell is not None and v.queue_id == self._last_qid and \
                bytes_size(<PyObject *>self._last_topic) == n and \
                memcmp(bytes_data(<PyObject *>self._last_topic), t, n) == 0:
            return self._last_cell
        h = _cell_hash(t, n, v.queue_id)
        if self._slots != NULL:
            i = <Py_ssize_t>(h & <uint64_t>self._mask)
            while self._slots[i].hash != 0:
                slot = &self._slots[i]
                if slot.hash == h and slot.queue_id == v.queue_id and bytes_size(slot.topic) == n and \
                        memcmp(bytes_data(slot.topic), t, n) == 0:
                    self._last_topic = <bytes>slot.topic
                    self._last_qid = v.queue_id
                    self._last_cell = <QueueCell>slot.cell
                    return self._last_cell
                i = (i + 1) & self._mask
        return self._add_cell(t, n, v.queue_id, h)

    cdef QueueCell _add_cell(self, const unsigned char *t, Py_ssize_t n, int32_t queue_id, uint64_t h):
        cdef bytes topic = PyBytes_FromStringAndSize(<const char *>t, n)
        cdef QueueCell cell = self.cells.cell_of(utf8_text(t, n), queue_id)
        cdef Py_ssize_t i
        if (self._used + 1) * 2 > self._mask + 1:
            self._grow()
        i = <Py_ssize_t>(h & <uint64_t>self._mask)
        while self._slots[i].hash != 0:
            i = (i + 1) & self._mask
        self._held.append((topic, cell))
        self._slots[i].hash = h
        self._slots[i].queue_id = queue_id
        self._slots[i].topic = <PyObject *>topic
        self._slots[i].cell = <PyObject *>cell
        self._used += 1
        self._last_topic = topic
        self._last_qid = queue_id
        self._last_cell = cell
        return cell

    cdef int _grow(self) except -1:
        cdef Py_ssize_t size = 16 if self._slots == NULL else 2 * (self._mask + 1), i, j
        cdef CellSlot *old = self._slots
        cdef CellSlot *slots = <CellSlot *>calloc(size, sizeof(CellSlot))
        if slots == NULL:
            raise MemoryError()
        if old != NULL:
            for i in range(self._mask + 1):
                if old[i].hash != 0:
                    j = <Py_ssize_t>(old[i].hash & <uint64_t>(size - 1))
                    while slots[j].hash != 0:
                        j = (j + 1) & (size - 1)
                    slots[j] = old[i]
            free(old)
        self._slots = slots
        self._mask = size - 1
        return 0

    cdef int _forget_cells(self) except -1:
        free(self._slots)
        self._slots = NULL
        self._mask = 0
        self._used = 0
        self._held = []
        self._last_cell = None
        self._last_topic = None
        self._cells_removed = self.cells.cells_removed
        return 0

    def reput(self, list cl_files, long long cl_file_size, long long from_offset, long long end_offset):
        """Dispatch every record in ``[from_offset, end_offset)`` (RocketMQ ``ReputMessageService.doReput``);
        returns the offset reached: ``end_offset``, or where an unreadable record stopped the walk."""
        return self._reput(cl_files, cl_file_size, from_offset, end_offset, None)

    def reput_checked(self, list cl_files, long long cl_file_size, long long from_offset, long long end_offset):
        """Recovery's re-dispatch of ``[from_offset, end_offset)``: as ``reput``, but a record whose queue lacks
        the units before it (``_behind``: the queue's tail was lost, a file of it deleted, or its folder is gone
        while its records are not at the log's head) gets no unit, and units below a queue's end that disagree
        with their record are rewritten (``repair_unit``). Returns ``(reached, gaps)``: ``gaps`` maps each
        such queue's ``(topic, queue id)`` to the offset of its first record found past its units (-1 when
        the queue had no units at all)."""
        cdef dict gaps = {}
        reached = self._reput(cl_files, cl_file_size, from_offset, end_offset, gaps)
        return reached, gaps

    cdef int64_t _reput(self, list cl_files, int64_t cl_file_size, int64_t from_offset, int64_t end_offset,
                        dict gaps) except -1:
        """The walk of ``reput`` (``gaps`` None) and ``reput_checked`` (``gaps`` a dict to fill)."""
        cdef int64_t off = from_offset, tags, level
        cdef int32_t r, vp = 0, vl = 0
        cdef bint gap, delayed = False
        cdef RecordView v
        cdef QueueCell cell
        cdef ConsumeQueueCore cq
        cdef const unsigned char *rec = NULL
        while True:
            r = _next_record(cl_files, cl_file_size, &off, end_offset, &v, &rec)
            if r <= 0:
                break
            if enters_queue(v.sys_flag):
                cell = self._cell(rec, &v)
                cq = self._queue_of(cell)
                tags = tags_code_of(rec, &v)
                if cell.topic == self.schedule_topic and v.props_len > 0 and \
                        find_property(rec + v.props_pos, v.props_len, "DELAY", 5, &vp, &vl):
                    level = _parse_int(rec + v.props_pos + vp, vl)
                    if level > 0:
                        tags = self._deliver_time(level, v.store_ts)
                        delayed = True
                gap = False
                if gaps is not None and _behind(cq, v.queue_offset, off + r):
                    # the queue lacks units before this record (files lost, or never written before a crash):
                    # recovery rebuilds it from the log's head; a unit here would sit at the wrong offset.
                    # Kept: where the first record past a queue with units was (-1: only an empty queue's)
                    gap = cq.last is not None
                    key = (cell.topic, cell.queue_id)
                    first = gaps.get(key, -1)
                    gaps[key] = first if first >= 0 else (off if gap else -1)
                if not gap:
                    if gaps is not None:
                        cq.repair_unit(off, r, tags, v.queue_offset, cl_files, cl_file_size)
                    cq.put_unit(off, r, tags, v.queue_offset)
                    if self.arriving is not None:
                        self.arriving(cell.topic, cell.queue_id, v.queue_offset, tags, v.store_ts,
                                      rec[v.props_pos:v.props_pos + v.props_len])
                if cell.next_offset <= v.queue_offset:
                    # a slave's queues grow by reput only (a master assigned these offsets at put time)
                    cell.next_offset = v.queue_offset + 1
                cq.last_store_ts = v.store_ts
                self.last_store_ts = v.store_ts
            if self.index is not None:
                index_message(self.index, rec + v.topic_pos, v.topic_len, rec + v.props_pos,
                              v.props_len, off, v.store_ts, v.sys_flag)
            off += r
        if self._wake_word != NULL:
            ps_notify(self._wake_word, self._wake_light)
        if delayed and self.schedule_wake is not None:
            self.schedule_wake()
        return off
