"""The column API (docs/api.md, "Columns"): many messages in one call, as arrays.

* ``put_columns`` stores columns (bodies, keys, tags, properties) so that the bytes on disk are exactly those
  of the same messages put by hand, one by one or as ``MessageBatch``es: bodies that share everything else by
  one compiled call (``_bulk_put``), others as ``Message``s through the store's own put path; the result
  gathers the stored messages' offsets and times into numpy arrays.
* ``get_columns`` is ``get_message`` with its in-memory transfer caps lifted, its messages decoded straight
  from the mapped records into one Arrow record batch with the export's columns (``get_message``'s scan hands
  each record to the Spark source's decoder, ``_arrow.BatchBuilder``: no ``MessageExt`` per message), of all
  the export's columns or those asked for (``columns``: the others cost nothing).
* ``queue_units`` is a zero-copy numpy view of a consume-queue file's 20-byte units.

numpy and pyarrow are the ``columns`` extra (``pip install pystore-mq[columns]``): this module imports without
them and a call that needs one raises ``ImportError`` naming the extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from pystore.errors import StoreError
from pystore.format._codec import record_length
from pystore.log._bulk_put import batch_ends, put_bodies, put_bytes
from pystore.log._results import PutMessageResult
from pystore.message._message import Message
from pystore.message._message_batch import MessageBatch
from pystore.queue._units import UNIT_SIZE, record_bytes
from pystore.read._read import ReadLimits
from pystore.read.results import PutColumnsResult
from pystore.read.store_reads import offset_arg
from pystore.status import GetMessageStatus, PutMessageStatus

if TYPE_CHECKING:
    import numpy
    import numpy.typing as npt
    import pyarrow
    from typing_extensions import Buffer

    from pystore.engine.store import MessageStore
    from pystore.log._commitlog import CommitLogCore
    from pystore.message.constants import MessageFilter, TagFilter
    from pystore.read.store_reads import StoreReads

    #: ``put_columns``' bodies (docs/api.md): a pyarrow binary array, a (uint8 values, int32/int64 offsets) pair of
    #: numpy arrays, or bytes-like objects
    BodiesColumn: TypeAlias = (pyarrow.Array | pyarrow.ChunkedArray
                               | tuple[npt.NDArray[numpy.uint8], npt.NDArray[numpy.int32] | npt.NDArray[numpy.int64]]
                               | Iterable[Buffer])
    #: its ``keys`` (an entry may be a list of keys) and ``tags``: one entry per body, a list, numpy or pyarrow array
    KeysColumn: TypeAlias = Iterable[str | Sequence[str] | None] | pyarrow.Array | pyarrow.ChunkedArray
    TagsColumn: TypeAlias = Iterable[str | None] | pyarrow.Array | pyarrow.ChunkedArray
    #: its ``properties``: one mapping for every message, or one mapping, list of pairs or None per message
    PropertiesColumn: TypeAlias = (Mapping[str, str] | Iterable[Mapping[str, str] | Iterable[tuple[str, str]] | None]
                                   | pyarrow.Array | pyarrow.ChunkedArray)

__all__ = ["UNIT_DTYPE", "PutColumnsResult", "get_columns", "put_columns", "queue_units"]

MISSING = "the column API needs numpy and pyarrow: install pystore-mq[columns] (%s)"

#: One consume-queue unit as stored (docs/format.md): big-endian commit-log offset, size, tags code.
UNIT_DTYPE = [("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")]

#: The largest record size ``batch_ends`` takes (sizes are int32, as in a record's TOTALSIZE).
_INT32_MAX = 2**31 - 1


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


#: ``_text_column``'s answer for a column the compiled put does not take as it is (it goes through ``Message``)
_MESSAGES = object()


def _text_column(name: str, col: Any, n: int) -> Any:
    """A keys/tags column for ``_bulk_put``: None when absent or only nulls, else ``(values, offsets, valid)``
    (its UTF-8 bytes, n + 1 int64 offsets, a uint8 validity array or None), made by one pyarrow conversion of
    the whole column (an Arrow string array is used as it is); ``_MESSAGES`` for what it cannot be (entries
    other than ``str``, such as lists of keys, or a separator \x01/\x02 in a text, which ``Message`` refuses
    with its own error)."""
    if col is None:
        return None
    if isinstance(col, str):
        raise TypeError("%s must be a sequence of one entry per message, not a str" % name)
    np, pa = _np(), _pa()
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not isinstance(col, pa.Array):
        try:
            col = pa.array(col, type=pa.large_string())
        except (pa.ArrowException, TypeError, ValueError):
            return _MESSAGES
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return _MESSAGES
    if len(col) != n:
        raise ValueError("%s holds %d entries for %d bodies" % (name, len(col), n))
    if col.null_count == n:
        return None
    _, offsets_buf, values_buf = col.buffers()
    otype = np.int32 if pa.types.is_string(col.type) else np.int64
    offsets = np.frombuffer(offsets_buf, dtype=otype)[col.offset:col.offset + n + 1].astype(np.int64)
    values = np.frombuffer(values_buf, dtype=np.uint8) if values_buf is not None else np.empty(0, np.uint8)
    used = values[offsets[0]:offsets[-1]]
    if np.any((used == 1) | (used == 2)):
        return _MESSAGES
    valid = col.is_valid().to_numpy(zero_copy_only=False).view(np.uint8) if col.null_count else None
    return values, offsets, valid


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
    (a body over the max size) goes alone, so that its refusal stops the put exactly there. The rule is the
    compiled path's (``_bulk_put.batch_ends``): both cut the same batches."""
    np = _np()
    cfg = store.config
    n = len(msgs)
    # a record too large for an int32 size goes alone anyway (its body is over the max message size)
    sizes = np.fromiter((min(record_length(m, cfg.store_host), _INT32_MAX) for m in msgs), dtype=np.int32, count=n)
    lens = np.fromiter((len(m.body) for m in msgs), dtype=np.int64, count=n)
    out: list[list[Message]] = []
    start = 0
    for end in batch_ends(sizes, lens, cfg.max_message_size, cfg.mapped_file_size_commit_log):
        out.append(msgs[start:end])
        start = end
    return out


def put_columns(store: MessageStore, topic: str, bodies: BodiesColumn, queue_id: int = 0, keys: KeysColumn | None = None,
                tags: TagsColumn | None = None, properties: PropertiesColumn | None = None,
                batch: bool = False) -> PutColumnsResult:
    """``MessageStore.put_columns`` (docs/api.md): the messages put one by one (``batch=False``) or as batches
    (``_chunks``), stopping at the first refusal.

    Messages with one properties mapping (or None) for all, no delay level, and keys and tags columns of
    ``str``/None entries (lists, numpy or Arrow string arrays) are stored by one compiled call
    (``_bulk_put.put_bodies``/``put_bytes``) straight from the caller's buffers or bytes, with no Python object
    per message. Others (a properties column, keys given as lists, ...) are made into ``Message``s and go
    through ``put_message``/``put_messages``; both ways store the same bytes."""
    packed = _packed(bodies)
    # one born time for the call, from the store's clock (a test's fake one included)
    born = store.clock()
    cl = store._put_log         # a follower of several writers puts through its own appender
    if cl is not None and (properties is None or isinstance(properties, Mapping)):
        done, packed = _compiled(cl.core, topic, packed, queue_id, keys, tags, properties, batch, born)
        if done is not None:
            return done
    return _put_messages(store, _messages(topic, _bodies(packed), queue_id, keys, tags, properties, born), batch)


def _compiled(cl: CommitLogCore, topic: str, packed: tuple[Any, Any], queue_id: int, keys: Any, tags: Any,
              properties: Mapping[str, str] | None, batch: bool,
              born: int) -> tuple[PutColumnsResult | None, tuple[Any, Any]]:
    """``put_columns`` by ``_bulk_put``; None (and the bodies, perhaps packed anew) when these columns need
    ``Message``s."""
    np = _np()
    n = len(packed[0]) if packed[1] is None else len(packed[1]) - 1
    ktext, ttext = _text_column("keys", keys, n), _text_column("tags", tags, n)
    if ktext is _MESSAGES or ttext is _MESSAGES:
        return None, packed
    tmpl = Message(topic, b"", None, None, 0, properties, queue_id, born_timestamp=born)
    # a key set both as a column and in the properties is stored once, where the column puts it: Message's way
    shared = tmpl.properties
    if tmpl.delay_time_level != 0 or (ktext is not None and "KEYS" in shared) or (
            ttext is not None and "TAGS" in shared):
        return None, packed
    out = np.empty((3, n), dtype=np.int64)
    if packed[1] is None:
        try:
            # it checks every item's type before it stores anything
            r = put_bytes(cl, tmpl, packed[0], batch, born, out[0], out[1], out[2], ttext, ktext)
        except TypeError:
            joined = _joined(packed[0])
            if joined is None:
                return None, packed
            packed = joined
    if packed[1] is not None:
        r = put_bodies(cl, tmpl, packed[0], packed[1], batch, born, out[0], out[1], out[2], ttext, ktext)
    status, count, waited = r
    if status is PutMessageStatus.PUT_OK:
        status = waited
    return PutColumnsResult(status, out[0, :count], out[1, :count], out[2, :count]), packed


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

#: A page of ``get_columns`` stops before this many record bytes (as a transfer cap would): the Arrow columns'
#: 32-bit offsets then hold any column, UTF-8 repair's growth of invalid text (at most 3x) included.
PAGE_BYTES = 1 << 29

#: The rows a page's fixed-width columns get room for at first (they grow past it).
_FIRST_ROWS = 1 << 15

#: Above this many rows asked for, a page's buffers are sized from its units first (``_reserve``).
_HINT_ROWS = 256

#: No record is larger (a unit's size above it is a filler's).
_MAX_RECORD = 1 << 30

_schema: Any = None


def lifted(limits: ReadLimits) -> ReadLimits:
    """``limits`` without the in-memory transfer caps (``max_transfer_*_on_message_in_memory``), but for
    ``PAGE_BYTES``."""
    return ReadLimits(PAGE_BYTES, 2**31 - 1, min(limits.bytes_in_disk, PAGE_BYTES), limits.count_in_disk,
                      limits.memory_window, limits.check_crc)


def columns_schema() -> Any:
    """The Arrow schema of a ``get_columns`` page: the export's (``pystore.columns.export.arrow_schema``)."""
    global _schema
    if _schema is None:
        from pystore.columns.export import arrow_schema

        _schema = arrow_schema()
    return _schema


def _reserve(reads: StoreReads, builder: Any, topic: str, queue_id: int, offset: int, max_msg_nums: int) -> None:
    """Room in ``builder`` for the page the units from ``offset`` point at (their record sizes bound the
    bodies): its buffers then never grow, and nothing is copied twice."""
    try:
        units = queue_units(reads, topic, queue_id, offset, max_msg_nums).view(_np().uint8)
    except (TypeError, ValueError):
        # below the local units: the archive's copy of the queue file sizes the page, if it has one
        archive = reads.parts.archive if reads.parts is not None else None
        if archive is None or not isinstance(offset, int) or not isinstance(max_msg_nums, int) or offset < 0:
            return                  # the read itself says what is wrong
        try:
            found = archive.unit_bytes(topic, queue_id, offset, max_msg_nums)
        except StoreError:
            return                  # the read itself refuses it, naming the object
        if not found:
            return
        units = _np().frombuffer(found, dtype=_np().uint8)
    rows, total = record_bytes(units, _MAX_RECORD)         # no fillers
    body = min(total, PAGE_BYTES)
    builder.reserve(rows, body, rows * len(topic.encode("utf-8", "replace")))


#: The schemas of the projections asked for (``_projected``), by their columns' names; at most
#: ``_PROJECTIONS`` are kept (a builder checks a schema object once, then knows it by identity).
_projections: dict[tuple[str, ...], Any] = {}
_PROJECTIONS = 64


def _projected(columns: Sequence[str] | None) -> Any:
    """The schema of a page of ``columns`` (names of ``columns_schema()``, in the order given; None: all of them).
    ValueError for unknown or repeated names, or none."""
    schema = columns_schema()
    if columns is None:
        return schema
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError("columns must be a sequence of column names (or None), got %s" % type(columns).__name__)
    names = tuple(columns)
    found = _projections.get(names)
    if found is not None:
        return found
    known = schema.names
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError("unknown columns %s (the columns are %s)" % (unknown, ", ".join(known)))
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError("columns named more than once: %s" % twice)
    if not names:
        raise ValueError("columns must name at least one column (None: all of them)")
    found = _pa().schema([schema.field(n) for n in names])
    if len(_projections) >= _PROJECTIONS:
        _projections.clear()
    _projections[names] = found
    return found


def get_columns(reads: StoreReads, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int = 1024,
                message_filter: MessageFilter | TagFilter | str | None = None, timeout_ms: int = 0,
                columns: Sequence[str] | None = None) -> tuple[GetMessageStatus, int, pyarrow.RecordBatch]:
    """``MessageStore.get_columns`` (docs/api.md): ``get_message``'s own scan and decision table, with the caps
    ``lifted``, handing each record it serves to the Arrow decoder (``_arrow.BatchBuilder``) in C, which builds
    only the ``columns`` asked for (every record served is checked all the same: structure, body CRC)."""
    pa = _pa()
    from pystore.columns._arrow import BatchBuilder

    schema = _projected(columns)
    rows = max_msg_nums if isinstance(max_msg_nums, int) and 0 < max_msg_nums < _FIRST_ROWS else _FIRST_ROWS
    builder = BatchBuilder(schema, False, max_rows=rows)
    if isinstance(max_msg_nums, int) and max_msg_nums > _HINT_ROWS and not timeout_ms:
        _reserve(reads, builder, topic, queue_id, offset, max_msg_nums)
    r = reads.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter, timeout_ms, lifted, builder)
    batch = builder.build(False)
    if batch is None:
        batch = pa.RecordBatch.from_pylist([], schema=schema)
    return r.status, r.next_begin_offset, batch


# -- queue_units ------------------------------------------------------------------------------------------


def queue_units(reads: StoreReads, topic: str, queue_id: int, start: int = 0,
                count: int | None = None) -> npt.NDArray[numpy.void]:
    """``MessageStore.queue_units`` (docs/api.md): a read-only numpy view of the units from ``start`` to ``count``
    or the end of the file holding ``start``. The array's base holds the file (a ``SelectMappedBufferResult``)
    and pins its mapping, so it stays readable after the store cleaned the file or closed."""
    np = _np()
    # a bool is refused here as before (it was never a position to start a view at); a float is a type error
    if isinstance(start, bool):
        raise TypeError("start must be an int, got bool")
    start = offset_arg(start, "start")
    if start < 0:
        raise ValueError("start must be an int >= 0, got %r" % (start,))
    if count is not None:
        if isinstance(count, bool):
            raise TypeError("count must be None or an int, got bool")
        count = offset_arg(count, "count")
        if count < 0:
            raise ValueError("count must be None or an int >= 0, got %r" % (count,))
    empty: npt.NDArray[numpy.void] = np.empty(0, dtype=UNIT_DTYPE)
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
    units: npt.NDArray[numpy.void] = np.frombuffer(view, dtype=UNIT_DTYPE, count=n)
    return units
