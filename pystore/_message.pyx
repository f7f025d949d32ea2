# cython: language_level=3
"""Messages: what users build (``Message``, ``MessageBatch``) and what reads return (``MessageExt``).

A ``Message`` prepares, once, everything the record encoder copies: the UTF-8 topic, the stored
properties string (FORMAT.md §1.7, in the order API.md settles: ``TAGS``, ``KEYS``, ``DELAY``,
``WAIT=false``, then the message's own properties in insertion order), the born host bytes, the
tags hash code and the verdict of the put checks (topic rules, property characters and size). The
body CRC is computed on first use and kept: the body is an immutable ``bytes``. So putting a prebuilt
message costs the copy into the file and nothing else, and a message can be put many times.

A ``MessageExt`` holds a private copy of one stored record; its fixed fields (the header ``check_record``
decoded, kept as one struct) and its body are taken when it is made (by ``_codec``), the other strings and
the properties map on first access. Readers take the body of nearly every message they read, so it is made
up front and read as a member slot, the cheapest attribute CPython has. Strings decode like Java's
replacing UTF-8 decoder: invalid bytes become U+FFFD, never an exception.

Thread-safety: a ``Message`` may be put from several threads at once (nothing on it changes during a
put except the cached CRC, which every thread computes to the same value); setting its attributes while
another thread puts it is not safe. ``MessageExt`` is immutable.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int32_t, int64_t, uint32_t
from libc.string cimport memcpy
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM

cdef extern from *:
    """
    /* Ask for the first lines of a bytes object (its header, which the batch's copy of the list writes when it
       takes a reference, and up to 192 bytes of its data, which the put's CRC reads): bodies a caller built
       long ago are not in the cache, and fetched one after another each costs a full memory latency. */
    static inline void ps_prefetch_object(const void *o) {
        const char *p = (const char *)o;
        __builtin_prefetch(p, 1, 3);
        __builtin_prefetch(p + 64, 0, 3);
        __builtin_prefetch(p + 128, 0, 3);
        __builtin_prefetch(p + 192, 0, 3);
    }
    """
    void prefetch_object "ps_prefetch_object"(const void *o) noexcept nogil

from pystore._bytes cimport body_crc32, get_i32, now_ms

import operator
import socket

cdef enum:
    # Sys-flag bits (FORMAT.md §1.6).
    TRANSACTION_TYPE_MASK = 0xC
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20
    # Put checks (FORMAT.md "pystore's choices": size limits).
    MAX_TOPIC_BYTES = 255
    MAX_V1_TOPIC_CHARS = 127
    MAX_PROPERTIES_BYTES = 32767

cdef extern from *:
    int PyUnicode_IS_ASCII(object o)


cdef object _index_slow(object v, str name):
    """``v`` as an ``int`` when it is an integer of another type (an int subclass, numpy's integers: anything
    with ``__index__``); a float, str or bool is refused rather than truncated or read as 0/1."""
    if isinstance(v, bool):
        raise TypeError("%s must be an int, got bool" % name)
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError("%s must be an int, got %s" % (name, type(v).__name__)) from None


cdef extern from *:
    """
    /* An exact int of one 30-bit digit (CPython 3.11's layout; other versions take the slow path): the
       integer fields' common case, read without a call. */
    static inline int ps_small_int(PyObject *o, long long *out) {
    #if PY_VERSION_HEX < 0x030C0000 && !defined(PYPY_VERSION)
        if (Py_TYPE(o) == &PyLong_Type) {
            Py_ssize_t size = Py_SIZE(o);
            if (size == 0) { *out = 0; return 1; }
            if (size == 1) { *out = (long long)((PyLongObject *)o)->ob_digit[0]; return 1; }
            if (size == -1) { *out = -(long long)((PyLongObject *)o)->ob_digit[0]; return 1; }
        }
    #endif
        return 0;
    }
    """
    bint ps_small_int(object o, long long *out) noexcept


cdef inline long long _int_arg(object v, str name, long long lo, long long hi) except? -1:
    """An integer field checked against the range its record field can hold as given."""
    cdef long long x
    if ps_small_int(v, &x) and lo <= x <= hi:
        return x
    return _int_arg_slow(v, name, lo, hi)


cdef long long _int_arg_slow(object v, str name, long long lo, long long hi) except? -1:
    cdef int overflow = 0
    cdef long long x
    if type(v) is not int:
        v = _index_slow(v, name)
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or x < lo or x > hi:
        raise ValueError("%s=%d is out of range [%d, %d]" % (name, v, lo, hi))
    return x


cdef inline int32_t _sys_flag_arg(object v, tuple host) except? -1:
    cdef long long x
    if ps_small_int(v, &x) and 0 <= x and not (x & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)):
        return <int32_t>x
    return _sys_flag_arg_slow(v, host)


cdef inline bint _bool_arg(object v) except -1:
    # a truth test would take "false" or "no" for True
    if v is True:
        return True
    if v is False:
        return False
    raise TypeError("wait_store_msg_ok must be a bool, got %s" % type(v).__name__)


cdef int32_t _sys_flag_arg_slow(object v, tuple host) except? -1:
    """A user's sys flag: the store derives the host bits, so only values it stores as given pass."""
    cdef bint v6 = False
    cdef int32_t f = <int32_t>_int_arg(v, "sys_flag", 0, INT32_MAX)
    if f & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        if f & STOREHOSTADDRESS_V6_FLAG:
            raise ValueError("sys_flag=%#x: bit 0x20 (STOREHOSTADDRESS_V6_FLAG) is set by the store from its "
                             "store host" % f)
        encode_host(host, &v6)
        if not v6:
            raise ValueError("sys_flag=%#x: bit 0x10 (BORNHOST_V6_FLAG) with the IPv4 born host %r"
                             % (f, host))
    return f

# Allowed topic characters: [%|a-zA-Z0-9_-] (RocketMQ TopicValidator).
cdef bytes _TOPIC_OK = bytes(
    1 if (chr(c).isascii() and (chr(c).isalnum() or chr(c) in "%|_-")) else 0 for c in range(256)
)


# ----------------------------------------------------------------------------------------------
# Java String.hashCode over UTF-16 code units, from UTF-8 bytes (FORMAT.md §2.2, §14)
# ----------------------------------------------------------------------------------------------

cdef inline bint _cont(unsigned char b) noexcept nogil:
    return (b & 0xC0) == 0x80


cdef int64_t java_hash_utf8(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """``String.hashCode`` of the string these UTF-8 bytes decode to (invalid bytes → U+FFFD, maximal
    subparts as Java and Python replace them), sign-extended to 64 bits as the consume queue stores it."""
    return <int64_t>(<int32_t>java_hash_utf8_from(0, p, n))


cdef uint32_t java_hash_utf8_from(uint32_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """``java_hash_utf8`` going on from the hash ``h`` of a string before these bytes: the hash of the
    concatenation (``topic + "#" + key`` without building it), each part decoded on its own."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, lo, hi
    cdef uint32_t cp
    cdef int need, k
    while i < n:
        c = p[i]
        if c < 0x80:
            h = 31 * h + c
            i += 1
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
            cp = c & 0x1F
        elif 0xE0 <= c <= 0xEF:
            need = 2
            cp = c & 0x0F
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif 0xF0 <= c <= 0xF4:
            need = 3
            cp = c & 0x07
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            h = 31 * h + 0xFFFD
            i += 1
            continue
        i += 1
        k = 0
        while k < need:
            if i >= n or p[i] < lo or p[i] > hi:
                break
            cp = (cp << 6) | (p[i] & 0x3F)
            lo = 0x80
            hi = 0xBF
            i += 1
            k += 1
        if k < need:
            h = 31 * h + 0xFFFD          # one replacement for the maximal valid prefix
            continue
        if cp >= 0x10000:
            cp -= 0x10000
            h = 31 * h + (0xD800 + (cp >> 10))
            h = 31 * h + (0xDC00 + (cp & 0x3FF))
        else:
            h = 31 * h + cp
    return h


cdef int32_t java_hash_str(str s) except? -1:
    """Java ``String.hashCode`` of a Python string, over its UTF-16 code units (lone surrogates included)."""
    cdef bytes b = s.encode("utf-16-be", "surrogatepass")
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(b)
    cdef Py_ssize_t i, n = PyBytes_GET_SIZE(b)
    cdef uint32_t h = 0
    for i in range(0, n, 2):
        h = 31 * h + ((<uint32_t>p[i] << 8) | p[i + 1])
    return <int32_t>h


def java_string_hash(s):
    """Java's ``String.hashCode`` of ``s`` (a ``str``), as a signed 32-bit int."""
    if not isinstance(s, str):
        raise TypeError("expected str, got %s" % type(s).__name__)
    return java_hash_str(s)


# ----------------------------------------------------------------------------------------------
# Hosts: (address, port) <-> 8 or 20 bytes (FORMAT.md §1.2 fields 10 and 12)
# ----------------------------------------------------------------------------------------------

cdef dict _host_cache = {}
cdef dict _host_text_cache = {}


cdef tuple _last_host = (None, None)          # (host tuple, its encoding): one entry, replaced as a whole


cdef bytes encode_host(object host, bint *is_v6):
    """Encode ``(address, port)``: 4 or 16 address bytes, then the port as a big-endian int."""
    global _last_host
    cdef bytes out
    cdef tuple last = _last_host
    if last[0] is host:
        # the same tuple object again (the default born host, a caller's constant): no hashing
        out = <bytes>last[1]
        is_v6[0] = PyBytes_GET_SIZE(out) == 20
        return out
    if (type(host) is not tuple or len(<tuple>host) != 2 or type((<tuple>host)[0]) is not str
            or type((<tuple>host)[1]) is not int):
        out = None           # checked (and refused) by the slow path; never looked up: (a, True) == (a, 1)
    else:
        out = _host_cache.get(host)
    if out is None:
        out = _encode_host_slow(host)
        if len(_host_cache) < 4096:
            _host_cache[host] = out
    if type(host) is tuple:
        _last_host = (host, out)
    is_v6[0] = PyBytes_GET_SIZE(out) == 20
    return out


cdef bytes _encode_host_slow(object host):
    if not isinstance(host, tuple) or len(host) != 2:
        raise TypeError("a host is an (address: str, port: int) tuple, got %r" % (host,))
    addr, port = host
    if not isinstance(addr, str):
        raise TypeError("a host is an (address: str, port: int) tuple, got %r" % (host,))
    if type(port) is not int:
        port = _index_slow(port, "the port of host %r" % (host,))
    if not 0 <= port <= 65535:
        raise ValueError("port out of range in host %r" % (host,))
    try:
        raw = socket.inet_pton(socket.AF_INET, addr)
    except OSError:
        try:
            raw = socket.inet_pton(socket.AF_INET6, addr.strip("[]"))
        except OSError:
            raise ValueError("not an IPv4 or IPv6 address in host %r" % (host,)) from None
    return raw + int(port).to_bytes(4, "big")


cdef tuple decode_host(const unsigned char *p, int n):
    cdef bytes raw = p[:n - 4]
    cdef int32_t port = get_i32(p + n - 4)
    addr = _host_text_cache.get(raw)
    if addr is None:
        if n == 8:
            addr = socket.inet_ntop(socket.AF_INET, raw)
        else:
            import ipaddress
            addr = ipaddress.IPv6Address(raw).compressed
        if len(_host_text_cache) < 4096:
            _host_text_cache[raw] = addr
    return (addr, port)


def normalize_host(host):
    """``(address, port)`` with the address in its compressed text form; raises for a bad host."""
    cdef bint v6
    cdef bytes b = encode_host(tuple(host) if isinstance(host, list) else host, &v6)
    return decode_host(<const unsigned char *>PyBytes_AS_STRING(b), <int>PyBytes_GET_SIZE(b))


# ----------------------------------------------------------------------------------------------
# Properties string (FORMAT.md §1.7)
# ----------------------------------------------------------------------------------------------

def properties_to_string(dict props):
    """``name \\x01 value \\x02`` for each entry, as RocketMQ's ``messageProperties2String``."""
    if not props:
        return ""
    parts = []
    for k, v in props.items():
        parts.append(k)
        parts.append("\x01")
        parts.append(v)
        parts.append("\x02")
    return "".join(parts)


def string_to_properties(str s):
    """RocketMQ 5.x's decoder: an item is kept iff it has a non-empty name and a non-empty value."""
    cdef dict out = {}
    cdef Py_ssize_t i
    if not s:
        return out
    for item in s.split("\x02"):
        if len(item) < 3:
            continue
        i = item.find("\x01")
        if i <= 0 or i == len(item) - 1:
            continue
        out[item[:i]] = item[i + 1:]
    return out


cdef int _check_text(str s, str what, object name) except -1:
    # the decoder (RocketMQ's string2messageProperties) drops an empty name or value and splits on the
    # separators, and UTF-8 has no encoding for a lone surrogate: such a property would not read back as given
    if not s:
        raise ValueError("%s of property %r is empty" % (what, name))
    if "\x01" in s or "\x02" in s:
        raise ValueError("%s of property %r contains a separator (\\x01 or \\x02): %r" % (what, name, s))
    if not PyUnicode_IS_ASCII(s):
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("%s of property %r cannot be stored in UTF-8 (%s): %r"
                             % (what, name, e.reason, s)) from None
    return 0


cdef int _check_prop(object k, object v) except -1:
    if not isinstance(k, str) or not isinstance(v, str):
        raise TypeError("message properties are str -> str, got %r: %r" % (k, v))
    _check_text(<str>k, "the name", k)
    _check_text(<str>v, "the value", k)
    return 0


# ----------------------------------------------------------------------------------------------
# Message
# ----------------------------------------------------------------------------------------------

cdef object _NO = object()
cdef object _ZERO = 0


@cython.final
# Per-topic work of a Message (UTF-8 bytes, record version, the topic verdict, the topic-queue keys of the
# first queue ids) done once per topic instead of once per message; bounded, cleared when full.
cdef dict _TOPIC_CACHE = {}
cdef int _TOPIC_CACHE_MAX = 4096
cdef int _TQ_KEYS = 16


cdef tuple _last_topic = (None, None)         # (topic str, its entry): one entry, replaced as a whole


cdef tuple _topic_entry(str topic):
    global _last_topic
    cdef tuple last = _last_topic
    if <object>PyTuple_GET_ITEM(last, 0) is topic:
        # the same str object again (a caller's constant): no hashing, no dict lookup
        return <tuple>PyTuple_GET_ITEM(last, 1)
    cdef tuple entry = _TOPIC_CACHE.get(topic)
    cdef bytes t
    cdef Py_ssize_t i, n
    cdef const unsigned char *tp
    cdef const unsigned char *ok
    cdef bint illegal = False
    cdef int version
    if entry is not None:
        _last_topic = (topic, entry)
        return entry
    try:
        t = topic.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("topic %r cannot be stored in UTF-8 (%s)" % (topic, e.reason)) from None
    n = PyBytes_GET_SIZE(t)
    tp = <const unsigned char *>PyBytes_AS_STRING(t)
    ok = <const unsigned char *>PyBytes_AS_STRING(_TOPIC_OK)
    # 5.x switches on String.length(): UTF-16 code units (never more than the UTF-8 bytes)
    if n <= MAX_V1_TOPIC_CHARS:
        version = 1
    else:
        version = 2 if len(topic.encode("utf-16-le", "surrogatepass")) // 2 > MAX_V1_TOPIC_CHARS else 1
    if n == 0 or n > MAX_TOPIC_BYTES:
        illegal = True
    else:
        for i in range(n):
            if not ok[tp[i]]:
                illegal = True
                break
    entry = (t, version, illegal, ["%s-%d" % (topic, i) for i in range(_TQ_KEYS)])
    if len(_TOPIC_CACHE) >= _TOPIC_CACHE_MAX:
        _TOPIC_CACHE.clear()
    _TOPIC_CACHE[topic] = entry
    _last_topic = (topic, entry)
    return entry


cdef int32_t _delay_level_of(object d):
    """The DELAY property as a level: missing, unparsable or negative is none (0), beyond an int the largest
    level (Message and MessageExt read it alike)."""
    cdef object lvl
    if d is None:
        return 0
    try:
        lvl = int(d)
    except ValueError:
        return 0
    return 0 if lvl < 0 else (lvl if lvl < 0x7FFFFFFF else 0x7FFFFFFF)


cdef bytes _as_body(object body):
    """A message body as ``bytes``: bytes as they are, any other buffer copied; str and None refused."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str) or body is None:
        raise TypeError("body must be bytes or a buffer, got %s" % type(body).__name__)
    try:
        return bytes(memoryview(body).cast("B"))
    except TypeError:
        raise TypeError("body must be bytes or a buffer, got %s" % type(body).__name__) from None


cdef inline tuple _checked_host(object host):
    """``host`` as the tuple a Message keeps, checked (a bad one raises before the message changes); its encoding
    is cached, so the ``_refresh`` that follows finds it again at no cost."""
    cdef bint v6 = False
    cdef tuple t = host if isinstance(host, tuple) else tuple(host)
    encode_host(t, &v6)
    return t


cdef object _keys_text(keys):
    """The stored KEYS text of ``keys`` (str, or an iterable of str joined by spaces), None for None. A C
    function, not a static method: a Message is built per put, and the method lookup cost ~300 instructions."""
    if keys is None:
        return None
    if isinstance(keys, str):
        return keys
    if isinstance(keys, (bytes, bytearray)):
        raise TypeError("keys must be str or an iterable of str")
    items = list(keys)
    for k in items:
        if not isinstance(k, str):
            raise TypeError("keys must be str or an iterable of str, got item %r" % (k,))
    return " ".join(items)


@cython.freelist(32)      # built per put by most callers: reuse the memory of the last ones dropped
cdef class Message:
    """A message to put: ``Message(topic, body, tags=None, keys=None, flag=0, properties=None, queue_id=0,
    delay_time_level=0, wait_store_msg_ok=True, born_timestamp=None, born_host=("127.0.0.1", 0), sys_flag=0,
    reconsume_times=0, prepared_transaction_offset=0)``.

    ``tags`` and ``keys`` are stored as the ``TAGS`` / ``KEYS`` properties (several keys space-separated);
    ``delay_time_level`` as ``DELAY`` and ``wait_store_msg_ok=False`` as ``WAIT=false``; empty ``tags`` or
    ``keys`` are not set (as RocketMQ's ``Message``).

    Every argument is stored as given or refused, here and in every setter: a wrong Python type raises
    ``TypeError`` (integer fields take ``int`` and other integers with ``__index__``, never a float, str or
    bool; ``wait_store_msg_ok`` takes a bool only), a value the record cannot hold as given raises ``ValueError``: an integer outside its field
    (``flag``, ``queue_id``, ``reconsume_times``: int32; ``born_timestamp``, ``prepared_transaction_offset``:
    int64; ``delay_time_level``: 0 to 2**31-1), a property name or value (tags and keys included) that is
    empty, contains ``\\x01`` or ``\\x02`` or a lone surrogate, a topic with a lone surrogate.
    ``sys_flag`` is 0 to 2**31-1 without bit 0x20 (``STOREHOSTADDRESS_V6_FLAG``, the store sets it from its
    store host); bit 0x10 (``BORNHOST_V6_FLAG``) follows ``born_host`` and may be given only with an IPv6
    born host; every other bit is stored as given.
    A message the store must refuse by RocketMQ's put checks (a topic with characters outside
    ``[%|a-zA-Z0-9_-]`` or too long, a negative queue id, oversized properties) is still built, and
    ``put_message`` returns its status.
    """

    def __init__(self, topic, body, tags=None, keys=None, flag=0, properties=None, queue_id=0,
                 delay_time_level=0, wait_store_msg_ok=True, born_timestamp=None,
                 born_host=("127.0.0.1", 0), sys_flag=0, reconsume_times=0, prepared_transaction_offset=0):
        self._mutable()                 # __init__ called again on a shared template would bypass the setters
        # everything is checked before anything is set: a second __init__ that raises leaves the message whole
        cdef int64_t born
        cdef int32_t flag_v, qid, delay, sys_flag_v, reconsume
        cdef int64_t prep
        if not isinstance(topic, str):
            raise TypeError("topic must be str, got %s" % type(topic).__name__)
        entry = _topic_entry(<str>topic)    # a topic UTF-8 cannot hold raises here, before anything is set
        body_b = _as_body(body)
        if born_timestamp is None:
            born = now_ms()
        else:
            born = _int_arg(born_timestamp, "born_timestamp", INT64_MIN, INT64_MAX)
        qid = <int32_t>_int_arg(queue_id, "queue_id", INT32_MIN, INT32_MAX)
        host = _checked_host(born_host)
        if (flag is _ZERO and delay_time_level is _ZERO and sys_flag is _ZERO and reconsume_times is _ZERO
                and prepared_transaction_offset is _ZERO):
            # the defaults (CPython's one small int 0, which every 0 literal is): nothing to check
            flag_v = delay = sys_flag_v = reconsume = 0
            prep = 0
        else:
            flag_v = <int32_t>_int_arg(flag, "flag", INT32_MIN, INT32_MAX)
            delay = <int32_t>_int_arg(delay_time_level, "delay_time_level", 0, INT32_MAX)
            reconsume = <int32_t>_int_arg(reconsume_times, "reconsume_times", INT32_MIN, INT32_MAX)
            prep = _int_arg(prepared_transaction_offset, "prepared_transaction_offset", INT64_MIN, INT64_MAX)
            sys_flag_v = _sys_flag_arg(sys_flag, host)
        props = self._build_props(tags, keys, delay, _bool_arg(wait_store_msg_ok), properties)
        self._topic = topic
        self._body = body_b
        self._crc_known = False
        self._queue_id = qid
        self._flag = flag_v
        self._sys_flag = sys_flag_v & ~BORNHOST_V6_FLAG
        self._reconsume_times = reconsume
        self._prepared_transaction_offset = prep
        self._born_timestamp = born
        self._born_host = host
        self._props = props
        self._refresh_with(entry)

    cdef int _set_body(self, object body) except -1:
        self._body = _as_body(body)
        self._crc_known = False
        return 0

    cdef dict _build_props(self, tags, keys, int delay_level, bint wait, properties):
        cdef dict out = {}
        # like RocketMQ's Message(topic, tags, keys, ...), empty tags or keys are not set
        if tags is not None:
            if not isinstance(tags, str):
                raise TypeError("tags must be str or None, got %s" % type(tags).__name__)
            if tags:
                _check_text(<str>tags, "the value", "TAGS")
                out["TAGS"] = tags
        kt = _keys_text(keys)
        if kt:
            _check_text(<str>kt, "the value", "KEYS")
            out["KEYS"] = kt
        if delay_level > 0:
            out["DELAY"] = str(delay_level)
        if not wait:
            out["WAIT"] = "false"
        if properties is not None:
            if not hasattr(properties, "items"):
                raise TypeError("properties must be a mapping of str to str")
            for k, v in properties.items():
                _check_prop(k, v)
                if k not in out:
                    out[k] = v
        return out

    cdef int _refresh(self) except -1:
        """Recompute what the encoder copies and the verdict of the put checks."""
        return self._refresh_with(_topic_entry(self._topic))

    cdef int _refresh_with(self, tuple entry) except -1:
        """``_refresh`` with the topic's cache entry at hand."""
        cdef bint v6 = False
        cdef list keys = <list>entry[3]
        self._topic_b = <bytes>entry[0]
        self._version = <int>entry[1]
        self._born_host_b = encode_host(self._born_host, &v6)
        if v6:
            self._sys_flag |= BORNHOST_V6_FLAG
        else:
            self._sys_flag &= ~BORNHOST_V6_FLAG
        if 0 <= self._queue_id < len(keys):
            self._tq_key = <str>keys[self._queue_id]
        else:
            self._tq_key = "%s-%d" % (self._topic, self._queue_id)
        self._illegal = 1 if (<bint>entry[2] or self._queue_id < 0) else 0
        if not self._props:
            # the common message without tags, keys or properties: nothing to look up or encode
            self._props_b = b""
            self._tags_code = 0
            self._has_keys = False
            self._delay_level = 0
            return 0
        # every way into _props checked the names and values (_check_prop): non-empty, no separators, UTF-8
        cdef str ps = properties_to_string(self._props)
        self._props_b = ps.encode("utf-8")
        if self._illegal == 0 and PyBytes_GET_SIZE(self._props_b) > MAX_PROPERTIES_BYTES:
            self._illegal = 2
        tags = self._props.get("TAGS")
        if tags:
            tb = (<str>tags).encode("utf-8")
            self._tags_code = java_hash_utf8(<const unsigned char *>PyBytes_AS_STRING(tb), PyBytes_GET_SIZE(tb))
        else:
            self._tags_code = 0
        self._has_keys = "KEYS" in self._props or "UNIQ_KEY" in self._props
        self._delay_level = _delay_level_of(self._props.get("DELAY"))
        return 0

    cdef int32_t body_crc(self) noexcept:
        if not self._crc_known:
            self._body_crc = body_crc32(<const unsigned char *>PyBytes_AS_STRING(self._body),
                                        PyBytes_GET_SIZE(self._body))
            self._crc_known = True
        return self._body_crc

    # -- attributes --------------------------------------------------------------------------

    cdef int _mutable(self) except -1:
        if self._frozen:
            # a template shared by batches built from bodies: their sizes were taken from it before the put
            # lock, and other batches reuse it (reachable only through the gc module)
            raise AttributeError("this Message is the template of a batch built from bodies and cannot change")
        return 0

    @property
    def topic(self):
        return self._topic

    @topic.setter
    def topic(self, value):
        self._mutable()
        if not isinstance(value, str):
            raise TypeError("topic must be str")
        _topic_entry(<str>value)
        self._topic = value
        self._refresh()

    @property
    def body(self):
        return self._body

    @body.setter
    def body(self, value):
        self._mutable()
        self._set_body(value)

    @property
    def tags(self):
        return self._props.get("TAGS")

    @tags.setter
    def tags(self, value):
        self._mutable()
        self._put_special("TAGS", value)

    @property
    def keys(self):
        """The keys, as a list (the ``KEYS`` property split on spaces)."""
        k = self._props.get("KEYS")
        return [] if not k else [x for x in (<str>k).split(" ") if x]

    @keys.setter
    def keys(self, value):
        self._mutable()
        self._put_special("KEYS", _keys_text(value))

    def _put_special(self, name, value):
        # an empty value is "not set", as the constructor takes empty tags or keys
        if value is None or (type(value) is str and not value):
            self._props.pop(name, None)
        else:
            if not isinstance(value, str):
                raise TypeError("%s must be str or None" % name.lower())
            _check_text(<str>value, "the value", name)
            self._props[name] = value
        self._refresh()

    @property
    def properties(self):
        """Every stored property (``TAGS``, ``KEYS`` ... included), a copy in stored order."""
        return dict(self._props)

    @properties.setter
    def properties(self, value):
        self._mutable()
        cdef dict d = {}
        for k, v in dict(value).items():
            _check_prop(k, v)
            d[k] = v
        self._props = d
        self._refresh()

    def put_property(self, str name not None, str value not None):
        self._mutable()
        _check_prop(name, value)
        self._props[name] = value
        self._refresh()

    def get_property(self, str name not None, default=None):
        return self._props.get(name, default)

    def clear_property(self, str name not None):
        self._mutable()
        self._props.pop(name, None)
        self._refresh()

    @property
    def flag(self):
        return self._flag

    @flag.setter
    def flag(self, value):
        self._mutable()
        self._flag = <int32_t>_int_arg(value, "flag", INT32_MIN, INT32_MAX)

    @property
    def queue_id(self):
        return self._queue_id

    @queue_id.setter
    def queue_id(self, value):
        self._mutable()
        self._queue_id = <int32_t>_int_arg(value, "queue_id", INT32_MIN, INT32_MAX)
        self._refresh()

    @property
    def delay_time_level(self):
        return self._delay_level

    @delay_time_level.setter
    def delay_time_level(self, value):
        self._mutable()
        cdef int32_t level = <int32_t>_int_arg(value, "delay_time_level", 0, INT32_MAX)
        self._put_special("DELAY", str(level) if level > 0 else None)

    @property
    def wait_store_msg_ok(self):
        return self._props.get("WAIT") != "false"

    @wait_store_msg_ok.setter
    def wait_store_msg_ok(self, value):
        self._mutable()
        self._put_special("WAIT", None if _bool_arg(value) else "false")

    @property
    def born_timestamp(self):
        return self._born_timestamp

    @born_timestamp.setter
    def born_timestamp(self, value):
        self._mutable()
        self._born_timestamp = _int_arg(value, "born_timestamp", INT64_MIN, INT64_MAX)

    @property
    def born_host(self):
        return decode_host(<const unsigned char *>PyBytes_AS_STRING(self._born_host_b),
                           <int>PyBytes_GET_SIZE(self._born_host_b))

    @born_host.setter
    def born_host(self, value):
        self._mutable()
        self._born_host = _checked_host(value)
        self._refresh()

    @property
    def sys_flag(self):
        return self._sys_flag

    @sys_flag.setter
    def sys_flag(self, value):
        self._mutable()
        self._sys_flag = _sys_flag_arg(value, self._born_host) & ~BORNHOST_V6_FLAG
        self._refresh()

    @property
    def reconsume_times(self):
        return self._reconsume_times

    @reconsume_times.setter
    def reconsume_times(self, value):
        self._mutable()
        self._reconsume_times = <int32_t>_int_arg(value, "reconsume_times", INT32_MIN, INT32_MAX)

    @property
    def prepared_transaction_offset(self):
        return self._prepared_transaction_offset

    @prepared_transaction_offset.setter
    def prepared_transaction_offset(self, value):
        self._mutable()
        self._prepared_transaction_offset = _int_arg(value, "prepared_transaction_offset", INT64_MIN,
                                                     INT64_MAX)

    @property
    def tags_code(self):
        """The consume-queue tags code: Java ``String.hashCode`` of the tags, 0 without tags."""
        return self._tags_code

    @property
    def transaction_type(self):
        return self._sys_flag & TRANSACTION_TYPE_MASK

    def __reduce__(self):
        return (_rebuild_message, (self._topic, self._body, self._props, self._flag, self._queue_id,
                                   self._born_timestamp, self.born_host, self._sys_flag,
                                   self._reconsume_times, self._prepared_transaction_offset))

    def __repr__(self):
        return "Message(topic=%r, body=<%d bytes>, properties=%r, queue_id=%d)" % (
            self._topic, len(self._body), self._props, self._queue_id)


def _rebuild_message(topic, body, props, flag, queue_id, born_ts, born_host, sys_flag, reconsume, prep):
    m = Message(topic, body, flag=flag, queue_id=queue_id, born_timestamp=born_ts, born_host=born_host,
                sys_flag=sys_flag, reconsume_times=reconsume, prepared_transaction_offset=prep)
    m.properties = props
    return m


# ----------------------------------------------------------------------------------------------
# MessageBatch
# ----------------------------------------------------------------------------------------------

_DEFAULT_BORN_HOST = ("127.0.0.1", 0)
cdef Message _last_plain = None


cdef Message _plain_template(str topic, int queue_id):
    """The template of ``from_bodies(topic, bodies, queue_id=...)`` with nothing else given: the last one built
    for this topic and queue (a full ``Message`` is ~0.2 us, a fixed cost of every batch). Batches share it:
    templates never leave their batch, nothing changes them, and a batch keeps its own born time."""
    global _last_plain
    cdef Message last = _last_plain
    if last is None or last._queue_id != queue_id or not (last._topic is topic or last._topic == topic):
        last = Message(topic, b"", None, None, 0, None, queue_id, 0, True, None, _DEFAULT_BORN_HOST)
        last._frozen = True
        _last_plain = last
    return last


cdef Message copy_message(Message src, bint own_properties):
    """A copy of ``src`` with every encoded field as it is now (no re-validation). ``own_properties``: a copy
    of the properties map too, so that changes to ``src`` made later, in place or not, never reach it."""
    cdef Message t = Message.__new__(Message)
    t._topic = src._topic
    t._body = src._body
    t._props = dict(src._props) if own_properties else src._props
    t._queue_id = src._queue_id
    t._flag = src._flag
    t._sys_flag = src._sys_flag
    t._reconsume_times = src._reconsume_times
    t._born_timestamp = src._born_timestamp
    t._prepared_transaction_offset = src._prepared_transaction_offset
    t._born_host = src._born_host
    t._topic_b = src._topic_b
    t._props_b = src._props_b
    t._born_host_b = src._born_host_b
    t._tq_key = src._tq_key
    t._body_crc = src._body_crc
    t._crc_known = src._crc_known
    t._illegal = src._illegal
    t._version = src._version
    t._tags_code = src._tags_code
    t._delay_level = src._delay_level
    t._has_keys = src._has_keys
    return t


@cython.final
cdef class MessageBatch:
    """Several messages of one topic and queue, stored as one RocketMQ batch: consecutive queue offsets,
    one lock hold, never split across two commit-log files. Inner messages keep their own born host,
    born time, flag and reconsume times."""

    def __init__(self, messages):
        cdef list ms = list(messages)
        if not ms:
            raise ValueError("a MessageBatch needs at least one message")
        for m in ms:
            if not isinstance(m, Message):
                raise TypeError("a MessageBatch holds Message objects, got %s" % type(m).__name__)
        first = <Message>ms[0]
        for m in ms:
            if (<Message>m)._topic != first._topic:
                raise ValueError("all messages of a batch must have one topic (%r != %r)"
                                 % ((<Message>m)._topic, first._topic))
            if (<Message>m)._queue_id != first._queue_id:
                raise ValueError("all messages of a batch must have one queue id (%d != %d)"
                                 % ((<Message>m)._queue_id, first._queue_id))
        self._messages = tuple(ms)
        self._topic = first._topic
        self._queue_id = first._queue_id
        self._tq_key = first._tq_key

    @staticmethod
    def from_bodies(topic, bodies, tags=None, keys=None, flag=0, properties=None, queue_id=0,
                    born_timestamp=None, born_host=_DEFAULT_BORN_HOST):
        """A batch of ``bodies`` (bytes or buffers) that share everything else: topic, queue, tags, keys,
        flag, properties, born time and host, as ``Message`` takes them. Stored exactly as the same batch of
        ``Message`` objects would be, but no ``Message`` is made per body: the put encodes each record
        straight from its body (the way to append many payloads one holds as ``bytes``)."""
        cdef Message t
        cdef int64_t born
        if (tags is None and keys is None and type(flag) is int and flag == 0 and properties is None
                and born_timestamp is None and born_host is _DEFAULT_BORN_HOST and type(topic) is str):
            t = _plain_template(<str>topic, <int32_t>_int_arg(queue_id, "queue_id", INT32_MIN, INT32_MAX))
            born = now_ms()
        else:
            # positional: Cython parses them without a keyword dict
            t = Message(topic, b"", tags, keys, flag, properties, queue_id, 0, True, born_timestamp, born_host)
            t._frozen = True
            born = t._born_timestamp
        cdef tuple bs
        cdef Py_ssize_t i
        cdef MessageBatch batch
        if type(bodies) is list:
            for i in range(PyList_GET_SIZE(bodies)):
                prefetch_object(<const void *>PyList_GET_ITEM(bodies, i))
        # a tuple: the put reads the bodies through borrowed references, some without the GIL
        bs = tuple(bodies)
        if not bs:
            raise ValueError("a MessageBatch needs at least one message")
        for i in range(len(bs)):
            if type(<object>PyTuple_GET_ITEM(bs, i)) is not bytes:
                bs = tuple([_as_body(b) for b in bs])
                break
        batch = MessageBatch.__new__(MessageBatch)
        batch._bodies = bs
        batch._template = t
        batch._born_ts = born
        batch._topic = t._topic
        batch._queue_id = t._queue_id
        batch._tq_key = t._tq_key
        return batch

    cdef list _materialize(self):
        """The batch's messages (made from the template and bodies for a batch built from bodies)."""
        cdef Message t = self._template
        if self._bodies is None:
            return list(self._messages)
        return [Message(t._topic, b, flag=t._flag, properties=t._props, queue_id=t._queue_id,
                        born_timestamp=self._born_ts, born_host=t._born_host) for b in self._bodies]

    @property
    def messages(self):
        return list(self._materialize())

    @property
    def wait_store_msg_ok(self):
        """The batch's (its first message's): RocketMQ waits for a batch unless that says ``WAIT=false``."""
        return (self._template if self._bodies is not None else <Message>self._messages[0]).wait_store_msg_ok

    @property
    def topic(self):
        return self._topic

    @property
    def queue_id(self):
        return self._queue_id

    def __len__(self):
        return len(self._messages if self._bodies is None else self._bodies)

    def __iter__(self):
        return iter(self._materialize())

    def __reduce__(self):
        return (MessageBatch, (self._materialize(),))

    def __repr__(self):
        return "MessageBatch(topic=%r, queue_id=%d, %d messages)" % (self._topic, self._queue_id, len(self))


# ----------------------------------------------------------------------------------------------
# MessageExt
# ----------------------------------------------------------------------------------------------

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
            self._properties = string_to_properties(_utf8(self._raw, self._after_body() + self._v.props_pos,
                                                          self._v.props_len))
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
        return _delay_level_of(self._props().get("DELAY"))

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
        from pystore._codec import decode_record
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
    #define PS_EXT_BODY_OFFSET offsetof(struct __pyx_obj_7pystore_8_message_MessageExt, _body)
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
