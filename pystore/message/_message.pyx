# cython: language_level=3
"""Messages to put: ``Message`` and ``MessageBatch`` (what reads return, ``MessageExt``, is ``_message_ext``).

A ``Message`` prepares, once, everything the record encoder copies: the UTF-8 topic, the stored
properties string (docs/format.md §1.7, in the order docs/api.md settles: ``TAGS``, ``KEYS``, ``DELAY``,
``WAIT=false``, then the message's own properties in insertion order), the born host bytes, the
tags hash code and the verdict of the put checks (topic rules, property characters and size). The
body CRC is computed on first use and kept: the body is an immutable ``bytes``. So putting a prebuilt
message costs the copy into the file and nothing else, and a message can be put many times.

Thread-safety: a ``Message`` may be put from several threads at once (nothing on it changes during a
put except the cached CRC, which every thread computes to the same value); setting its attributes while
another thread puts it is not safe.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int32_t, int64_t

from pystore.format._args cimport bool_arg, int_arg, ps_small_int
from pystore.format._bytes cimport body_crc32, now_ms
from pystore.format._hosts cimport decode_host, encode_host
from pystore.format._jstring cimport java_hash_utf8
from pystore.format._props cimport check_prop, check_text, delay_level_of, properties_to_string

cdef enum:
    # Sys-flag bits (docs/format.md §1.6).
    TRANSACTION_TYPE_MASK = 0xC
    BORNHOST_V6_FLAG = 0x10
    STOREHOSTADDRESS_V6_FLAG = 0x20
    # Put checks (docs/format.md "pystore's choices": size limits).
    MAX_TOPIC_BYTES = 255
    MAX_V1_TOPIC_CHARS = 127


cdef inline int32_t _sys_flag_arg(object v, tuple host) except? -1:
    cdef long long x
    if ps_small_int(v, &x) and 0 <= x and not (x & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)):
        return <int32_t>x
    return _sys_flag_arg_slow(v, host)


cdef int32_t _sys_flag_arg_slow(object v, tuple host) except? -1:
    """A user's sys flag: the store derives the host bits, so only values it stores as given pass."""
    cdef bint v6 = False
    cdef int32_t f = <int32_t>int_arg(v, "sys_flag", 0, INT32_MAX)
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
# Message
# ----------------------------------------------------------------------------------------------

cdef object _ZERO = 0


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


cdef bytes as_body(object body):
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


cdef tuple _timer_property(object deliver_at_ms, object delay_ms):
    """(property name, value) of ``Message(deliver_at_ms=..., delay_ms=...)``: one of the two, a non-negative int
    that fits the Java long RocketMQ parses it into."""
    if deliver_at_ms is not None and delay_ms is not None:
        raise ValueError("deliver_at_ms and delay_ms are two delays for one message: give one of them")
    if deliver_at_ms is not None:
        return "TIMER_DELIVER_MS", str(int_arg(deliver_at_ms, "deliver_at_ms", 0, INT64_MAX))
    return "TIMER_DELAY_MS", str(int_arg(delay_ms, "delay_ms", 0, INT64_MAX))


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
    reconsume_times=0, prepared_transaction_offset=0, deliver_at_ms=None, delay_ms=None)``.

    ``tags`` and ``keys`` are stored as the ``TAGS`` / ``KEYS`` properties (several keys space-separated);
    ``delay_time_level`` as ``DELAY`` and ``wait_store_msg_ok=False`` as ``WAIT=false``; empty ``tags`` or
    ``keys`` are not set (as RocketMQ's ``Message``).

    ``deliver_at_ms`` (epoch ms) and ``delay_ms`` make a RocketMQ 5 timer message: they set the
    ``TIMER_DELIVER_MS`` or ``TIMER_DELAY_MS`` property (over one of that name in ``properties``), as the
    Java client's ``setDeliverTimeMs`` / ``setDelayTimeMs`` do. At most one of them, an ``int`` (not bool or
    float: ``TypeError``) that is not negative (``ValueError``); whether the store takes the delay is decided
    when it is put (docs/api.md "Timers").

    Every argument is stored as given or refused, here and in every setter: a wrong Python type raises
    ``TypeError`` (integer fields take ``int`` and other integers with ``__index__``, never a float, str or
    bool; ``wait_store_msg_ok`` takes a bool only), a value the record cannot hold as given raises
    ``ValueError``: an integer outside its field (``flag``, ``queue_id``, ``reconsume_times``: int32;
    ``born_timestamp``, ``prepared_transaction_offset``: int64; ``delay_time_level``: 0 to 2**31-1), a
    property name or value (tags and keys included) that is empty, contains ``\\x01`` or ``\\x02`` or a lone
    surrogate, a topic with a lone surrogate.
    ``sys_flag`` is 0 to 2**31-1 without bit 0x20 (``STOREHOSTADDRESS_V6_FLAG``, the store sets it from its
    store host); bit 0x10 (``BORNHOST_V6_FLAG``) follows ``born_host`` and may be given only with an IPv6
    born host; every other bit is stored as given.
    A message the store must refuse by RocketMQ's put checks (a topic with characters outside
    ``[%|a-zA-Z0-9_-]`` or too long, a negative queue id, oversized properties) is still built, and
    ``put_message`` returns its status.
    """

    def __init__(self, topic, body, tags=None, keys=None, flag=0, properties=None, queue_id=0,
                 delay_time_level=0, wait_store_msg_ok=True, born_timestamp=None,
                 born_host=("127.0.0.1", 0), sys_flag=0, reconsume_times=0, prepared_transaction_offset=0,
                 deliver_at_ms=None, delay_ms=None):
        self._mutable()                 # __init__ called again on a shared template would bypass the setters
        # everything is checked before anything is set: a second __init__ that raises leaves the message whole
        cdef int64_t born
        cdef int32_t flag_v, qid, delay, sys_flag_v, reconsume
        cdef int64_t prep
        if not isinstance(topic, str):
            raise TypeError("topic must be str, got %s" % type(topic).__name__)
        entry = _topic_entry(<str>topic)    # a topic UTF-8 cannot hold raises here, before anything is set
        body_b = as_body(body)
        if born_timestamp is None:
            born = now_ms()
        else:
            born = int_arg(born_timestamp, "born_timestamp", INT64_MIN, INT64_MAX)
        qid = <int32_t>int_arg(queue_id, "queue_id", INT32_MIN, INT32_MAX)
        host = _checked_host(born_host)
        if (flag is _ZERO and delay_time_level is _ZERO and sys_flag is _ZERO and reconsume_times is _ZERO
                and prepared_transaction_offset is _ZERO):
            # the defaults (CPython's one small int 0, which every 0 literal is): nothing to check
            flag_v = delay = sys_flag_v = reconsume = 0
            prep = 0
        else:
            flag_v = <int32_t>int_arg(flag, "flag", INT32_MIN, INT32_MAX)
            delay = <int32_t>int_arg(delay_time_level, "delay_time_level", 0, INT32_MAX)
            reconsume = <int32_t>int_arg(reconsume_times, "reconsume_times", INT32_MIN, INT32_MAX)
            prep = int_arg(prepared_transaction_offset, "prepared_transaction_offset", INT64_MIN, INT64_MAX)
            sys_flag_v = _sys_flag_arg(sys_flag, host)
        props = self._build_props(tags, keys, delay, bool_arg(wait_store_msg_ok), properties)
        if deliver_at_ms is not None or delay_ms is not None:
            name, value = _timer_property(deliver_at_ms, delay_ms)
            props[name] = value
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
        self._body = as_body(body)
        self._crc_known = False
        return 0

    cdef dict _build_props(self, tags, keys, int delay_level, bint wait, properties):
        cdef dict out = {}
        # like RocketMQ's Message(topic, tags, keys, ...), empty tags or keys are not set
        if tags is not None:
            if not isinstance(tags, str):
                raise TypeError("tags must be str or None, got %s" % type(tags).__name__)
            if tags:
                check_text(<str>tags, "the value", "TAGS")
                out["TAGS"] = tags
        kt = _keys_text(keys)
        if kt:
            check_text(<str>kt, "the value", "KEYS")
            out["KEYS"] = kt
        if delay_level > 0:
            out["DELAY"] = str(delay_level)
        if not wait:
            out["WAIT"] = "false"
        if properties is not None:
            if not hasattr(properties, "items"):
                raise TypeError("properties must be a mapping of str to str")
            for k, v in properties.items():
                check_prop(k, v)
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
            self._timer = False
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
        self._delay_level = delay_level_of(self._props.get("DELAY"))
        # three lookups per message with properties; the put path then calls no Python for a message without
        self._timer = ("TIMER_DELIVER_MS" in self._props or "TIMER_DELAY_MS" in self._props
                       or "TIMER_DELAY_SEC" in self._props)
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
            check_text(<str>value, "the value", name)
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
            check_prop(k, v)
            d[k] = v
        self._props = d
        self._refresh()

    def put_property(self, str name not None, str value not None):
        self._mutable()
        check_prop(name, value)
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
        self._flag = <int32_t>int_arg(value, "flag", INT32_MIN, INT32_MAX)

    @property
    def queue_id(self):
        return self._queue_id

    @queue_id.setter
    def queue_id(self, value):
        self._mutable()
        self._queue_id = <int32_t>int_arg(value, "queue_id", INT32_MIN, INT32_MAX)
        self._refresh()

    @property
    def delay_time_level(self):
        return self._delay_level

    @delay_time_level.setter
    def delay_time_level(self, value):
        self._mutable()
        cdef int32_t level = <int32_t>int_arg(value, "delay_time_level", 0, INT32_MAX)
        self._put_special("DELAY", str(level) if level > 0 else None)

    @property
    def wait_store_msg_ok(self):
        return self._props.get("WAIT") != "false"

    @wait_store_msg_ok.setter
    def wait_store_msg_ok(self, value):
        self._mutable()
        self._put_special("WAIT", None if bool_arg(value) else "false")

    @property
    def born_timestamp(self):
        return self._born_timestamp

    @born_timestamp.setter
    def born_timestamp(self, value):
        self._mutable()
        self._born_timestamp = int_arg(value, "born_timestamp", INT64_MIN, INT64_MAX)

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
        self._reconsume_times = <int32_t>int_arg(value, "reconsume_times", INT32_MIN, INT32_MAX)

    @property
    def prepared_transaction_offset(self):
        return self._prepared_transaction_offset

    @prepared_transaction_offset.setter
    def prepared_transaction_offset(self, value):
        self._mutable()
        self._prepared_transaction_offset = int_arg(value, "prepared_transaction_offset", INT64_MIN,
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
    t._timer = src._timer
    t._has_keys = src._has_keys
    return t
