# cython: language_level=3
"""Hosts: ``(address, port)`` <-> the 8 (IPv4) or 20 (IPv6) bytes a record stores (docs/format.md §1.2 fields 10
and 12): 4 or 16 address bytes, then the port as a big-endian int. Both directions keep a bounded cache: a
store sees few distinct hosts, and every put encodes one, every read of a host decodes one.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t

from pystore.format._args cimport index_slow
from pystore.format._bytes cimport get_i32

import socket

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
        port = index_slow(port, "the port of host %r" % (host,))
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
    """The ``(address, port)`` of ``n`` stored host bytes at ``p``."""
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
