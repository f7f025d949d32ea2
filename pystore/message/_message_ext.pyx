# cython: language_level=3
"""``MessageExt``: a stored message, as reads return it.

A ``MessageExt`` holds a private copy of one stored record; its fixed fields (the header ``check_record``
decoded, kept as one struct) and its body are taken when it is made (by ``_codec``), the other strings and
the properties map on first access. Readers take the body of nearly every message they read, so it is made
up front and read as a member slot, the cheapest attribute CPython has. Strings decode like Java's
replacing UTF-8 decoder: invalid bytes become U+FFFD, never an exception. A ``MessageExt`` is immutable, so
any thread may read it.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int32_t
from libc.string cimport memcpy

from pystore.format._hosts cimport decode_host
from pystore.format._jstring cimport java_hash_str, utf8_text
from pystore.message._message cimport Message
from pystore.format._props cimport delay_level_of, props_from_utf8

cdef enum:
    # Sys-flag bits (docs/format.md §1.6).
    TRANSACTION_TYPE_MASK = 0xC
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20


cdef inline str _utf8(bytes raw, int32_t pos, int32_t n):
    return utf8_text(<const unsigned char *>PyBytes_AS_STRING(raw) + pos, n)


@cython.final
@cython.no_gc           # holds bytes, str, tuples and a dict of str: it can never be part of a cycle
@cython.freelist(64)
cdef class MessageExt:
    """A stored message, as reads return it. Every field is read-only; the object holds a private copy of
    the record (``raw``), so it stays valid after the file it came from is deleted. The messages of one
    ``get_message`` page that lie next to each other in the commit log share one copy (at most 64 KiB of
    records, a record larger than that has its own): one allocation per run instead of one per message."""

    def __init__(self, *args, **kwargs):
        raise TypeError("MessageExt objects come from reads; use pystore.tools.decode_record(bytes)")

    @property
    def raw(self):
        """The stored record's bytes."""
        cdef bytes full
        cdef char *q
        cdef int32_t head, n
        if self._split:
            # put the record together again: the part before the body, the body, the part after it
            head = self._v.body_pos
            n = self._v.body_len
            full = PyBytes_FromStringAndSize(NULL, self._v.total_size)
            q = PyBytes_AS_STRING(full)
            memcpy(q, PyBytes_AS_STRING(self._raw), head)
            memcpy(q + head, PyBytes_AS_STRING(self._body), n)
            memcpy(q + head + n, PyBytes_AS_STRING(self._raw) + head, self._v.total_size - head - n)
            self._raw = full
            self._split = False
        elif self._base != 0 or PyBytes_GET_SIZE(self._raw) != self._v.total_size:
            self._detach()
        return self._raw

    cdef int32_t _after_body(self) noexcept:
        """Where the bytes after the body (topic, properties) start in ``_raw``, minus their record position."""
        return self._base - (self._v.body_len if self._split else 0)

    cdef _detach(self):
        """Take this record's own copy out of a shared run (the positions in ``_v`` are the record's own)."""
        self._raw = PyBytes_FromStringAndSize(PyBytes_AS_STRING(self._raw) + self._base, self._v.total_size)
        self._base = 0

    # the fixed fields, as check_record decoded them
    @property
    def store_size(self):
        return self._v.total_size

    @property
    def magic_code(self):
        return self._v.magic

    @property
    def body_crc(self):
        return self._v.body_crc

    @property
    def queue_id(self):
        return self._v.queue_id

    @property
    def flag(self):
        return self._v.flag

    @property
    def queue_offset(self):
        return self._v.queue_offset

    @property
    def commit_log_offset(self):
        return self._v.phy_offset

    @property
    def sys_flag(self):
        return self._v.sys_flag

    @property
    def born_timestamp(self):
        return self._v.born_ts

    @property
    def store_timestamp(self):
        return self._v.store_ts

    @property
    def reconsume_times(self):
        return self._v.reconsume_times

    @property
    def prepared_transaction_offset(self):
        return self._v.prepared_tx_offset

    @property
    def topic(self):
        if self._topic is None:
            self._topic = _utf8(self._raw, self._after_body() + self._v.topic_pos, self._v.topic_len)
        return self._topic

    # ``body`` is a member slot, installed below the class: set when the message is made (make_ext_shared)

    @property
    def properties(self):
        return dict(self._props())

    cdef dict _props(self):
        if self._properties is None:
            self._properties = props_from_utf8(
                <const unsigned char *>PyBytes_AS_STRING(self._raw) + self._after_body() + self._v.props_pos,
                self._v.props_len, "replace")
        return self._properties

    @property
    def tags(self):
        return self._props().get("TAGS")

    @property
    def keys(self):
        k = self._props().get("KEYS")
        return [] if not k else [x for x in (<str>k).split(" ") if x]

    @property
    def uniq_key(self):
        return self._props().get("UNIQ_KEY")

    @property
    def delay_time_level(self):
        return delay_level_of(self._props().get("DELAY"))

    @property
    def wait_store_msg_ok(self):
        return self._props().get("WAIT") != "false"

    @property
    def tags_code(self):
        tags = self._props().get("TAGS")
        return java_hash_str(tags) if tags else 0

    @property
    def transaction_type(self):
        return self._v.sys_flag & TRANSACTION_TYPE_MASK

    @property
    def born_host(self):
        if self._born_host is None:
            self._born_host = decode_host(<const unsigned char *>PyBytes_AS_STRING(self._raw) + self._base
                                          + self._v.born_host_pos, self._v.born_host_len)
        return self._born_host

    @property
    def store_host(self):
        if self._store_host is None:
            self._store_host = decode_host(<const unsigned char *>PyBytes_AS_STRING(self._raw) + self._base
                                           + self._v.store_host_pos, self._v.store_host_len)
        return self._store_host

    @property
    def msg_id(self):
        """The offset message id: store host address, port and commit-log offset, upper-case hex."""
        cdef int32_t p = self._base + self._v.store_host_pos
        raw = self._raw[p:p + self._v.store_host_len]
        return (raw + (<long long>self._v.phy_offset).to_bytes(8, "big", signed=True)).hex().upper()

    @property
    def version(self):
        return 2 if self._v.magic == -626843477 else 1

    def to_message(self):
        """A ``Message`` with this message's topic, body, properties and producer-side fields."""
        # the host bits are the hosts': the new message's born host sets its own, the store its store host's
        m = Message(self.topic, self._body, flag=self._v.flag, queue_id=self._v.queue_id,
                    born_timestamp=self._v.born_ts, born_host=self.born_host,
                    sys_flag=self._v.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG),
                    reconsume_times=self._v.reconsume_times,
                    prepared_transaction_offset=self._v.prepared_tx_offset)
        m.properties = self._props()
        return m

    def __reduce__(self):
        from pystore.format._codec import decode_record
        return (decode_record, (self.raw,))

    def __repr__(self):
        return ("MessageExt(topic=%r, queue_id=%d, queue_offset=%d, commit_log_offset=%d, store_size=%d, "
                "body=<%d bytes>)" % (self.topic, self._v.queue_id, self._v.queue_offset, self._v.phy_offset,
                                      self._v.total_size, self._v.body_len))


# ``MessageExt.body`` is a read-only member slot (a ``PyMemberDef``), not a property: CPython 3.11 turns an
# attribute load of a member slot into a direct read of the object (LOAD_ATTR_SLOT), where a property costs a
# type lookup, a descriptor call and the getter (~150 instructions, 12 ns a message in ``[m.body for m in
# page]``; the read path takes every body). Cython writes properties only, so the slot is added here. Every
# ``MessageExt`` gets its body when it is made, so the slot is never empty.
cdef extern from *:
    """
    #include <structmember.h>
    static PyMemberDef ps_ext_members[2] = {
        {"body", T_OBJECT_EX, 0, READONLY, "The message body (bytes, a copy of the stored one)."},
        {NULL, 0, 0, 0, NULL}
    };
    #define PS_EXT_BODY_OFFSET offsetof(struct __pyx_obj_7pystore_7message_12_message_ext_MessageExt, _body)
    static int ps_install_members(PyTypeObject *t, PyMemberDef *m) {
        for (; m->name != NULL; m++) {
            PyObject *d = PyDescr_NewMember(t, m);
            if (d == NULL) return -1;
            if (PyDict_SetItemString(t->tp_dict, m->name, d) < 0) { Py_DECREF(d); return -1; }
            Py_DECREF(d);
        }
        PyType_Modified(t);
        return 0;
    }
    """
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    PyMemberDef ps_ext_members[2]
    Py_ssize_t PS_EXT_BODY_OFFSET
    int ps_install_members(type t, PyMemberDef *m) except -1

ps_ext_members[0].offset = PS_EXT_BODY_OFFSET
ps_install_members(MessageExt, ps_ext_members)
