"""A host's normal form (``pystore.format._hosts.normalize_host``): the ``(address, port)`` a message's born and store
hosts are kept as, IPv6 compressed as Java prints it, and what is refused."""

from __future__ import annotations

import pytest

from pystore.format._hosts import normalize_host


@pytest.mark.parametrize("host,expected", [
    (("127.0.0.1", 80), ("127.0.0.1", 80)),
    (("0:0:0:0:0:0:0:1", 1), ("::1", 1)),
    (("2001:DB8:0:0:0:0:0:1", 65535), ("2001:db8::1", 65535)),
    (("fe80:0000::0001", 0), ("fe80::1", 0)),
    (["10.1.2.3", 7], ("10.1.2.3", 7)),
])
def test_normalize_host(host, expected):
    assert normalize_host(host) == expected


@pytest.mark.parametrize("host,exc", [
    (("127.0.0.1",), TypeError),
    (("127.0.0.1", 1, 2), TypeError),
    ((b"127.0.0.1", 1), TypeError),
    (("127.0.0.1", "80"), TypeError),
    (("127.0.0.2", 1.5), TypeError),
    (("127.0.0.3", True), TypeError),
    (("localhost", 1), ValueError),
    (("1.2.3.256", 1), ValueError),
    (("127.0.0.1", -1), ValueError),
    (("127.0.0.1", 65536), ValueError),
])
def test_normalize_host_rejects(host, exc):
    with pytest.raises(exc):
        normalize_host(host)


def test_an_ipv6_address_in_brackets_is_taken():
    assert normalize_host(("[::1]", 9876)) == ("::1", 9876)
    assert normalize_host(("[2001:db8:0:0:0:0:0:7]", 1)) == ("2001:db8::7", 1)


def test_a_port_that_is_an_integer_of_another_type_is_taken():
    np = pytest.importorskip("numpy")
    host = normalize_host(("10.0.0.1", np.int32(10911)))
    assert host == ("10.0.0.1", 10911) and type(host[1]) is int


def test_the_cache_of_the_last_host_never_answers_for_another():
    v6, v4 = ("0:0:0:0:0:0:0:1", 5), ("127.0.0.1", 5)
    for _ in range(3):
        assert normalize_host(v6) == ("::1", 5)
        assert normalize_host(v4) == ("127.0.0.1", 5)
        assert normalize_host(v6) == ("::1", 5)
    with pytest.raises(ValueError):
        normalize_host(("127.0.0.1", 70000))      # a refused host is not cached as the last one
    assert normalize_host(v4) == ("127.0.0.1", 5)
