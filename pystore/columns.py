"""The column API (docs/api.md, "Columns"): many messages in one call, as arrays.

* ``put_columns`` stores columns (bodies, keys, tags, properties) so that the bytes on disk are exactly those
  of the same messages put by hand, one by one or as ``MessageBatch``es: bodies that share everything else by
  one compiled call (``_bulk_put``), others as ``Message``s through the store's own put path; the result
  gathers the stored messages' offsets and times into numpy arrays.
* ``get_columns`` is ``get_message`` with its in-memory transfer caps lifted, its messages as one Arrow
  record batch with the export's columns (``pystore.export.record_batch``).
* ``queue_units`` is a zero-copy numpy view of a consume-queue file's 20-byte units.

numpy and pyarrow are the ``columns`` extra (``pip install pystore-mq[columns]``): this module imports without
them and a call that needs one raises ``ImportError`` naming the extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pystore._bulk_put import put_bodies, put_bytes
from pystore._codec import record_length
from pystore._message import Message
from pystore._message_batch import MessageBatch
from pystore._read import ReadLimits
from pystore._results import PutMessageResult
from pystore._units import UNIT_SIZE
from pystore.status import GetMessageStatus, PutMessageStatus

if TYPE_CHECKING:
    import numpy as np

    from pystore.message import MessageFilter, TagFilter
    from pystore.reads import StoreReads
    from pystore.store import MessageStore

__all__ = ["UNIT_DTYPE", "PutColumnsResult", "get_columns", "put_columns", "queue_units"]

MISSING = "the column API needs numpy and pyarrow: install pystore-mq[columns] (%s)"

#: One consume-queue unit as stored (docs/format.md): big-endian commit-log offset, size, tags code.
UNIT_DTYPE = [("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")]

#: A commit-log file keeps this much room after its last record for the END_OF_FILE blank (RocketMQ's
#: END_FILE_MIN_BLANK_LENGTH): a batch larger than the file less this is refused by the put path.
_END_BLANK = 8


def _np() -> Any:
    try:
        import numpy
    except ImportError as e:
        raise ImportError(MISSING % e) from e
    return numpy


def _pa() -> Any:
    try:
        import pyarrow
    except ImportError as e:
        raise ImportError(MISSING % e) from e
    return pyarrow


class PutColumnsResult:
    """What ``put_columns`` stored: ``status`` (the first refusal; else the first failed wait of a stored
    message, such as FLUSH_DISK_TIMEOUT; else PUT_OK), ``count`` messages stored, and for each of them (numpy
    int64 arrays, in input order) its queue offset, commit-log offset and store time."""

    __slots__ = ("status", "count", "queue_offsets", "commit_log_offsets", "store_timestamps")

    def __init__(self, status: PutMessageStatus, queue_offsets: np.ndarray, commit_log_offsets: np.ndarray,
                 store_timestamps: np.ndarray) -> None:
        self.status = status
        self.count = len(queue_offsets)
        self.queue_offsets = queue_offsets
        self.commit_log_offsets = commit_log_offsets
        self.store_timestamps = store_timestamps

    def __repr__(self) -> str:
        return "PutColumnsResult(%s, count=%d)" % (self.status.name, self.count)


# -- put_columns ------------------------------------------------------------------------------------------


def _packed(bodies: Any) -> tuple[Any, Any]:
    """The bodies as ``(values, offsets)``: a uint8 array and n + 1 rising int64 offsets into it, with the
    caller's buffers shared where they are arrays (a pyarrow array, a numpy pair) and a sequence of bytes-like
    objects as ``(tuple of them, None)`` (``bytes`` are read where they are; others are ``_joined``). Raises what
    the put path's validation raises (types, nulls, offsets)."""
    np = _np()
    if isinstance(bodies, tuple) and len(bodies) == 2 and all(hasattr(b, "dtype") for b in bodies):
        return _checked(*bodies)
    if type(bodies).__module__.startswith("pyarrow"):
        pa = _pa()
        if isinstance(bodies, pa.ChunkedArray):
            bodies = bodies.combine_chunks()
        if not (pa.types.is_binary(bodies.type) or pa.types.is_large_binary(bodies.type)):
            raise TypeError("bodies must be a pyarrow binary or large_binary array, got %s" % bodies.type)
        if bodies.null_count:
            raise ValueError("bodies must not hold nulls (%d found)" % bodies.null_count)
        _, offsets_buf, values_buf = bodies.buffers()
        otype = np.int32 if pa.types.is_binary(bodies.type) else np.int64
        offsets = np.frombuffer(offsets_buf, dtype=otype)[bodies.offset:bodies.offset + len(bodies) + 1]
        values = np.frombuffer(values_buf, dtype=np.uint8) if values_buf is not None else np.empty(0, np.uint8)
        return _checked(values, offsets)
    if isinstance(bodies, (str, bytes, bytearray, memoryview)):
        raise TypeError("bodies must be a sequence of bodies, not one %s" % type(bodies).__name__)
    return tuple(bodies), None


def _joined(items: tuple[Any, ...]) -> tuple[Any, Any] | None:
    """Bytes-like bodies (not all ``bytes``) joined once into ``(values, offsets)``; None when they cannot be."""
    np = _np()
    try:
        joined = b"".join(items)
    except TypeError:
        return None
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] != len(joined):
        return None     # an item whose len() counts other units than bytes
    return np.frombuffer(joined, dtype=np.uint8), offsets


def _checked(values: Any, offsets: Any) -> tuple[Any, Any]:
    np = _np()
    values, offsets = np.asarray(values), np.asarray(offsets)
    if values.dtype != np.uint8 or values.ndim != 1:
        raise TypeError("bodies' values must be a 1-d uint8 array, got %s" % values.dtype)
    if offsets.dtype not in (np.int32, np.int64) or offsets.ndim != 1 or len(offsets) < 1:
        raise TypeError("bodies' offsets must be a 1-d int32 or int64 array of length n+1")
    if np.any(offsets[1:] < offsets[:-1]) or offsets[0] < 0 or offsets[-1] > len(values):
        raise ValueError("bodies' offsets must rise and stay within the values (%d bytes)" % len(values))
    return np.ascontiguousarray(values), np.ascontiguousarray(offsets, dtype=np.int64)


def _bodies(packed: tuple[Any, Any]) -> Sequence[Any]:
    """The bodies as a sequence of bytes-like objects (slices of the packed buffer, not copies)."""
    if packed[1] is None:
        return list(packed[0])
    view = memoryview(packed[0])
    bounds = packed[1].tolist()
    return [view[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]


def _column(name: str, col: Any, n: int) -> list[Any]:
    """A keys/tags/properties column as a list of n entries (None: n Nones)."""
    if col is None:
        return [None] * n
    if isinstance(col, str):
        raise TypeError("%s must be a sequence of one entry per message, not a str" % name)
    values = col.to_pylist() if hasattr(col, "to_pylist") else list(col)
    if len(values) != n:
        raise ValueError("%s holds %d entries for %d bodies" % (name, len(values), n))
    return values


def _all_null(name: str, col: Any, n: int) -> bool:
    """Whether a keys/tags column is absent or only nulls, told without a Python object per entry (an Arrow
    array's null count); a column that cannot be told so is not (it goes through ``Message``)."""
    if col is None:
        return True
    if isinstance(col, str):
        raise TypeError("%s must be a sequence of one entry per message, not a str" % name)
    if hasattr(col, "null_count") and hasattr(col, "__len__"):
        if len(col) != n:
            raise ValueError("%s holds %d entries for %d bodies" % (name, len(col), n))
        return bool(col.null_count == n)
    return False


def _properties(properties: Any, n: int) -> list[Any]:
    """One dict (shared by every message), or one mapping, list of pairs (a pyarrow map) or None per message."""
    if isinstance(properties, Mapping):
        return [properties] * n
    return [p if p is None or isinstance(p, Mapping) else dict(p) for p in _column("properties", properties, n)]


def _messages(topic: str, bs: Sequence[Any], queue_id: int, keys: Any, tags: Any, properties: Any,
              born: int) -> list[Message]:
    n = len(bs)
    ks, ts, ps = _column("keys", keys, n), _column("tags", tags, n), _properties(properties, n)
    return [Message(topic, bs[i], ts[i], ks[i], 0, ps[i], queue_id, born_timestamp=born) for i in range(n)]


def _chunks(store: MessageStore, msgs: list[Message]) -> list[list[Message]]:
    """The batches ``batch=True`` stores: consecutive messages whose records add up to at most the max
    message size (RocketMQ's cap on a batch) and fit a commit-log file; a message that cannot go in a batch
    (a body over the max size) goes alone, so that its refusal stops the put exactly there. (The compiled
    path, ``_bulk_put``, cuts the same batches.)"""
    cfg = store.config
    cap = min(cfg.max_message_size, cfg.mapped_file_size_commit_log - _END_BLANK)
    out: list[list[Message]] = []
    cur: list[Message] = []
    total = 0
    for m in msgs:
        size = record_length(m, cfg.store_host)
        if cur and (total + size > cap or len(m.body) > cfg.max_message_size):
            out.append(cur)
            cur, total = [], 0
        cur.append(m)
        total += size
        if len(m.body) > cfg.max_message_size:
            out.append(cur)
            cur, total = [], 0
    if cur:
        out.append(cur)
    return out


def put_columns(store: MessageStore, topic: str, bodies: Any, queue_id: int = 0, keys: Any = None,
                tags: Any = None, properties: Any = None, batch: bool = False) -> PutColumnsResult:
    """``MessageStore.put_columns`` (docs/api.md): the messages put one by one (``batch=False``) or as batches
    (``_chunks``), stopping at the first refusal.

    Messages that share everything but their bodies (no keys or tags column, or only nulls in it; properties
    one mapping or None; no delay level) are stored by one compiled call (``_bulk_put.put_bodies``) straight
    from the caller's buffers or bytes, with no Python object per message. Others are made into ``Message``s and go
    through ``put_message``/``put_messages``; both ways store the same bytes."""
    np = _np()
    packed = _packed(bodies)
    n = len(packed[0]) if packed[1] is None else len(packed[1]) - 1
    # one born time for the call, from the store's clock (a test's fake one included)
    born = store.clock()
    cl = store._commitlog
    if (cl is not None and (properties is None or isinstance(properties, Mapping))
            and _all_null("keys", keys, n) and _all_null("tags", tags, n)):
        tmpl = Message(topic, b"", None, None, 0, properties, queue_id, born_timestamp=born)
        if tmpl.delay_time_level == 0:
            out = np.empty((3, n), dtype=np.int64)
            r = None
            if packed[1] is None:
                try:
                    # checks every item's type before it stores anything
                    r = put_bytes(cl, tmpl, packed[0], batch, born, out[0], out[1], out[2])
                except TypeError:
                    packed = _joined(packed[0]) or packed
            if r is None and packed[1] is not None:
                r = put_bodies(cl, tmpl, packed[0], packed[1], batch, born, out[0], out[1], out[2])
            if r is not None:
                status, count, waited = r
                if status is PutMessageStatus.PUT_OK:
                    status = waited
                return PutColumnsResult(status, out[0, :count], out[1, :count], out[2, :count])
    bs = _bodies(packed)
    return _put_messages(store, _messages(topic, bs, queue_id, keys, tags, properties, born), batch)


def _put_messages(store: MessageStore, msgs: list[Message], batch: bool) -> PutColumnsResult:
    """``put_columns`` through ``Message``s."""
    np = _np()
    qoffs: list[int] = []
    phys: list[int] = []
    times: list[int] = []
    status = PutMessageStatus.PUT_OK
    # a stored message whose wait failed (FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE ...) is no refusal: the put
    # goes on, and the result says so unless a refusal comes later
    waited = [PutMessageStatus.PUT_OK]

    def stored(r: PutMessageResult, group: list[Message]) -> bool:
        a = r.append_message_result
        if not r.is_ok() or a is None:
            return False
        if r.status is not PutMessageStatus.PUT_OK and waited[0] is PutMessageStatus.PUT_OK:
            waited[0] = r.status
        phy = a.wrote_offset
        for i, m in enumerate(group):
            qoffs.append(a.logics_offset + i)
            phys.append(phy)
            times.append(a.store_timestamp)
            phy += record_length(m, store.config.store_host) if len(group) > 1 else 0
        return True

    if batch:
        for group in _chunks(store, msgs):
            r = store.put_messages(MessageBatch(group))
            if stored(r, group):
                continue
            # a refused batch stored nothing: its messages alone find the one refused, the ones before it stay
            if len(group) > 1:
                for m in group:
                    r = store.put_messages(MessageBatch([m]))
                    if not stored(r, [m]):
                        break
            if not r.is_ok():
                status = r.status
                break
    else:
        for m in msgs:
            r = store.put_message(m)
            if not stored(r, [m]):
                status = r.status
                break
    if status is PutMessageStatus.PUT_OK:
        status = waited[0]
    return PutColumnsResult(status, np.array(qoffs, dtype=np.int64), np.array(phys, dtype=np.int64),
                            np.array(times, dtype=np.int64))


# -- get_columns ------------------------------------------------------------------------------------------


def lifted(limits: ReadLimits) -> ReadLimits:
    """``limits`` without the in-memory transfer caps (``max_transfer_*_on_message_in_memory``)."""
    return ReadLimits(2**62, 2**31 - 1, limits.bytes_in_disk, limits.count_in_disk, limits.memory_window,
                      limits.check_crc)


def get_columns(reads: StoreReads, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 1024,
                message_filter: MessageFilter | TagFilter | str | None = None,
                timeout_ms: int = 0) -> tuple[GetMessageStatus, int, Any]:
    """``MessageStore.get_columns`` (docs/api.md)."""
    from pystore.export import record_batch  # pyarrow only when asked for

    _pa()
    r = reads.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms, lifted)
    return r.status, r.next_begin_offset, record_batch(r.messages)


# -- queue_units ------------------------------------------------------------------------------------------


def queue_units(reads: StoreReads, topic: str, queue_id: int, start: int = 0, count: int | None = None) -> Any:
    """``MessageStore.queue_units`` (docs/api.md): a read-only numpy view of the units from ``start`` to ``count``
    or the end of the file holding ``start``. The array's base holds the file (a ``SelectMappedBufferResult``)
    and pins its mapping, so it stays readable after the store cleaned the file or closed."""
    np = _np()
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError("start must be an int >= 0, got %r" % (start,))
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError("count must be None or an int >= 0, got %r" % (count,))
    empty = np.empty(0, dtype=UNIT_DTYPE)
    cq = reads.queue(topic, queue_id, start)
    if cq is None or count == 0:
        return empty
    low, high = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
    if start < low:
        raise ValueError("queue offset %d of %s/%d is below its min offset %d" % (start, topic, queue_id, low))
    found = cq.get_index_buffer(start) if start < high else None
    if found is None:
        return empty
    mf, pos, end = found
    n = min((end - pos) // UNIT_SIZE, high - start, count if count is not None else high)
    view = mf.select_mapped_buffer(pos, n * UNIT_SIZE) if n > 0 else None
    if view is None:
        return empty
    return np.frombuffer(view, dtype=UNIT_DTYPE, count=n)
