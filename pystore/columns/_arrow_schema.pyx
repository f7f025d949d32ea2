# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The columns of the Arrow decoder (docs/api.md "Spark"): their names and order (``COLUMNS``), the check of a
schema asked for (any of them in any order, with their types; Spark's and the export's schemas differ in the
timestamps' unit), which of ``_arrow.BatchBuilder``'s buffers each column writes, and a built batch's
description for Arrow's C data interface (``describe``: the ``ArrowArray`` structs pointing into those buffers,
``_arrow_export.pxd``).
"""

from libc.stdint cimport int64_t, uint32_t, uint64_t

from pystore.columns._arrow_decode cimport (
            B_BH, B_BH_O, B_BODY, B_BODY_O, B_BORN, B_CLO, B_CRC, B_FLAG, B_ID, B_ID_O, B_KEYS, B_KEYS_LO, B_KEYS_O, B_MAP_O,
            B_PK, B_PK_O, B_PREP, B_PV, B_PV_O, B_QID, B_QOFF, B_RC, B_SH, B_SH_O, B_SIZE, B_STORE, B_SYS, B_TAGS, B_TAGS_O,
            B_TAGS_V, B_TOPIC, B_TOPIC_O, C_KEYS, C_PROPS, C_TAGS, N_COLS, PROPS_COLS, Buf, Dec)
from pystore.columns._arrow_export cimport ArrowArray, Exporting, PS_ARRAYS, _array, ps_batch

import pyarrow as pa

#: Column order of the data source (docs/api.md "Spark").
COLUMNS = ("topic", "queue_id", "queue_offset", "commit_log_offset", "store_size", "body", "tags", "keys",
           "properties", "flag", "sys_flag", "born_timestamp", "store_timestamp", "born_host", "store_host",
           "reconsume_times", "prepared_transaction_offset", "body_crc", "msg_id")


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


def schema_columns(schema):
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
# and properties also write the buffers of their one shared parse (``buffers_of``)
cdef int _COL_FIRST[N_COLS]
cdef int _COL_SECOND[N_COLS]
_COL_FIRST[:] = [B_TOPIC_O, B_QID, B_QOFF, B_CLO, B_SIZE, B_BODY_O, B_TAGS_O, B_KEYS_LO, B_MAP_O, B_FLAG, B_SYS,
                 B_BORN, B_STORE, B_BH_O, B_SH_O, B_RC, B_PREP, B_CRC, B_ID_O]
_COL_SECOND[:] = [B_TOPIC, -1, -1, -1, -1, B_BODY, B_TAGS, -1, -1, -1, -1, -1, -1, B_BH, B_SH, -1, -1, -1, B_ID]


cdef uint64_t buffers_of(uint32_t cols) noexcept:
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


cdef int64_t row_bytes(int i, int64_t r) noexcept nogil:
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


cdef int describe(Dec *d, const int *col_ids, int n_cols, ps_batch *e, int64_t n) except -1:
    """Fill ``e`` with the ArrowArrays of the ``n`` rows in ``d``'s buffers: columns ``col_ids`` (C_*), in that
    order (docs/api.md), then the children of the keys and properties among them."""
    cdef Exporting x
    cdef Buf *b = d.bufs
    cdef ArrowArray *top
    cdef ArrowArray *a
    cdef ArrowArray *c
    cdef ArrowArray *keys = NULL
    cdef ArrowArray *props = NULL
    cdef int k, col
    x.e = e
    x.arrays = x.kids = x.bufs = 0
    top = _array(&x, n, 0, 1, n_cols)
    top.buffers[0] = NULL
    for k in range(n_cols):
        col = col_ids[k]
        if col == C_TAGS:
            a = _col(b, &x, n, d.tags_nulls, B_TAGS_O, B_TAGS)
            if d.tags_nulls:
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
        keys.children[0] = _col(b, &x, d.n_keys, 0, B_KEYS_O, B_KEYS)
    if props != NULL:
        c = _array(&x, d.n_items, 0, 1, 2)
        c.buffers[0] = NULL
        props.children[0] = c
        c.children[0] = _col(b, &x, d.n_items, 0, B_PK_O, B_PK)
        c.children[1] = _col(b, &x, d.n_items, 0, B_PV_O, B_PV)
    assert x.arrays <= PS_ARRAYS
    return 0
