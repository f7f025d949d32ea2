"""The HA wire protocol's pieces (``pystore.ha.protocol``): the two frames' layouts, the heartbeat rule, address
parsing, and the socket helpers (``send_all`` over a real socket pair, ``wake_up`` from another thread). The
protocol spoken by each side: test_ha_master.py, test_ha_slave.py."""

from __future__ import annotations

import socket
import threading

import pytest

from pystore.ha.protocol import HEADER, REPORT, due, parse_address, send_all, wake_up


def test_the_frames_are_big_endian_offset_length_and_offset():
    assert HEADER.pack(0x0102030405060708, 5) == bytes.fromhex("0102030405060708 00000005")
    assert HEADER.size == 12
    assert REPORT.pack(-1) == b"\xff" * 8 and REPORT.size == 8


@pytest.mark.parametrize("now, last, interval, expected", [
    (1000, 0, 1000, True),
    (999, 0, 1000, False),
    (5000, 5000, 0, True),
    (4000, 5000, 1000, True),           # the clock went back: send now, not once it caught up
    (5999, 5000, 1000, False),
])
def test_due(now, last, interval, expected):
    assert due(now, last, interval) is expected


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:10912", ("127.0.0.1", 10912)),
    (" host.example:1 ", ("host.example", 1)),
    ("[::1]:10912", ("::1", 10912)),
    ("[fe80::1%eth0]:7", ("fe80::1%eth0", 7)),
])
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host", ":10912", "host:", "host:port", "host:-1", "host:1.5"])
def test_parse_address_refuses(text):
    with pytest.raises(ValueError, match="expected 'host:port'"):
        parse_address(text)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(60)
    b.settimeout(60)
    yield a, b
    a.close()
    b.close()


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("body", [None, b"", b"abc", bytes(range(256)) * 4096])
def test_send_all_sends_the_header_then_the_body_whole(pair, body):
    a, b = pair
    header = HEADER.pack(77, 0 if body is None else len(body))
    got = []
    reader = threading.Thread(target=lambda: got.append(_recv(b, len(header) + len(body or b""))))
    reader.start()
    send_all(a, header, None if body is None else memoryview(body))
    reader.join(60)
    assert got == [header + (body or b"")]


def test_wake_up_ends_a_blocked_receive_in_another_thread_and_leaves_closing_to_it(pair):
    a, _b = pair
    got = []
    started = threading.Event()

    def blocked():
        started.set()
        got.append(a.recv(10))

    t = threading.Thread(target=blocked)
    t.start()
    assert started.wait(60)
    wake_up(a)
    t.join(60)
    assert not t.is_alive() and got == [b""]
    assert a.fileno() != -1                     # not closed: its own thread closes it
    wake_up(a)                                  # again, already shut down: no error
