"""The HA wire protocol, shared by the master (``pystore.ha.master``) and the slave (``pystore.ha.slave``); the
overview of replication is ``pystore.ha``'s.

One TCP connection per slave: the slave sends 8-byte reports (``REPORT``: the offset it holds or wants), the
master sends transfers (``HEADER``: offset and length, then that many bytes of commit log; length 0 is a
heartbeat). ``pystore.ha`` draws the frames and states the rules.

Here are the two frames, the heartbeat rule both sides apply, and the socket helpers both use (who may
close a socket: see ``wake_up``).
"""

from __future__ import annotations

import socket
import struct

__all__ = ["HEADER", "REPORT", "due", "parse_address", "send_all", "wake_up"]

#: master -> slave: a transfer's header (its offset and the length of the bytes that follow)
HEADER = struct.Struct(">qi")
#: slave -> master: a report (the offset the slave holds, or where it wants data from)
REPORT = struct.Struct(">q")


def due(now: int, last: int, interval_ms: int) -> bool:
    """Is a periodic send due ``interval_ms`` after ``last`` (clock ms)? Also when the clock went back: one
    send too many costs 12 bytes, one missing until the clock caught up could cost the connection."""
    return now - last >= interval_ms or now < last


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[ipv6]:port"`` -> ``(host, port)``."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("expected 'host:port', got %r" % address)
    return host.strip("[]"), int(port)


def wake_up(sock: socket.socket) -> None:
    """End a connection (or stop a listener) from any thread: a thread blocked on it returns at once. Only
    the thread that uses the socket closes it, once it is done with it: a descriptor closed under a thread
    that is about to use it may already be some other file or connection's."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass                  # already disconnected


def send_all(sock: socket.socket, header: bytes, body: memoryview | None = None) -> None:
    """Header and body in one system call where the kernel takes them whole."""
    if body is None or len(body) == 0:
        sock.sendall(header)
        return
    sent = sock.sendmsg([header, body])
    if sent < len(header):
        sock.sendall(header[sent:])
        sock.sendall(body)
    elif sent < len(header) + len(body):
        sock.sendall(body[sent - len(header):])
