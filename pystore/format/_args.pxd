# cython: language_level=3
# Argument checks of the message constructors and setters: an integer field takes an ``int`` or another
# integer (``__index__``) within the range its record field holds as given, a bool flag takes a bool.
# Inline: a Message is built per put, and its fields are checked on every build.
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.number cimport PyNumber_Index

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


cdef inline object index_slow(object v, str name):
    """``v`` as an ``int`` when it is an integer of another type (an int subclass, numpy's integers: anything
    with ``__index__``); a float, str or bool is refused rather than truncated or read as 0/1."""
    if isinstance(v, bool):
        raise TypeError("%s must be an int, got bool" % name)
    try:
        return PyNumber_Index(v)
    except TypeError:
        raise TypeError("%s must be an int, got %s" % (name, type(v).__name__)) from None


cdef inline long long int_arg(object v, str name, long long lo, long long hi) except? -1:
    """An integer field checked against the range its record field can hold as given."""
    cdef long long x
    if ps_small_int(v, &x) and lo <= x <= hi:
        return x
    return int_arg_slow(v, name, lo, hi)


cdef inline long long int_arg_slow(object v, str name, long long lo, long long hi) except? -1:
    cdef int overflow = 0
    cdef long long x
    if type(v) is not int:
        v = index_slow(v, name)
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or x < lo or x > hi:
        raise ValueError("%s=%d is out of range [%d, %d]" % (name, v, lo, hi))
    return x


cdef inline bint bool_arg(object v) except -1:
    # a truth test would take "false" or "no" for True
    if v is True:
        return True
    if v is False:
        return False
    raise TypeError("wait_store_msg_ok must be a bool, got %s" % type(v).__name__)
