"""Replication, the master's side (``pystore.ha`` is the overview): ``HAService`` listens for slaves and
keeps the offset they acknowledged, an ``HAConnection`` per slave reads its reports and sends it the commit
log, and ``ReplicaWait`` is what a SYNC_MASTER put waits for after its record is stored (RocketMQ
``handleHA``).

Time: a heartbeat being due is read from the store's clock when the writer wakes (every ``POLL_S``); how
long a put waits for a slave (``slave_timeout``) is a real wait (``time.monotonic``): it bounds a caller's
blocking, and a fake clock nobody advances must not hang it. A connection whose slave has not reported for
``ha_housekeeping_interval`` is closed by a socket timeout, also real: the same timeout bounds a send to a
slave that stopped reading.

Thread-safety: ``HAService`` is called from put threads (``wait_for_slave``, ``is_slave_ok``, ``request``)
and its own threads; its shared state is under one condition. A socket is closed only by the thread(s) that
use it, once they are done (a connection's last thread, the listener's owner after joining its accept
thread); anyone else only shuts it down (``wake_up``), which wakes them. ``shutdown`` joins every thread it
started.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pystore.ha.protocol import HEADER, REPORT, due, send_all, wake_up
from pystore.log._results import PutMessageResult
from pystore.status import PutMessageStatus
from pystore.system.service import Clock, real_clock

__all__ = ["HAConnection", "HAService", "ReplicaWait"]

log = logging.getLogger(__name__)

#: how often an idle ASYNC_MASTER writer looks for new data (s); a waiting put wakes it at once
POLL_S = 0.005


class _SlaveRequest:
    """One async put waiting for a slave to acknowledge ``next_offset`` until ``deadline`` (monotonic s)."""

    __slots__ = ("next_offset", "future", "result", "deadline")

    def __init__(self, next_offset: int, future: Future[Any], result: Any, deadline: float) -> None:
        self.next_offset = next_offset
        self.future = future
        self.result = result
        self.deadline = deadline


class HAService:
    """The master's side: the listener, its connections, and the acknowledged offset puts wait for."""

    def __init__(self, read: Callable[[int], Any], max_offset: Callable[[], int], min_offset: Callable[[], int],
                 config: Any, clock: Clock | None = None, file_size: int | None = None) -> None:
        """What the connections read of the master's commit log (``CommitLog``'s methods): ``read(offset)`` its
        bytes from ``offset`` to the end of that file's data, ``max_offset()`` and ``min_offset()`` its ends;
        ``clock``: the store's (heartbeats); ``file_size``: the size of the commit-log files the store found
        (where an empty slave starts); ``config.mapped_file_size_commit_log`` when None."""
        self.read = read
        self.max_offset = max_offset
        self.min_offset = min_offset
        self.config = config
        self.clock = clock or real_clock
        self.file_size = file_size or config.mapped_file_size_commit_log
        #: the highest offset any slave acknowledged (RocketMQ ``push2SlaveMaxOffset``)
        self.push2slave_max_offset = 0
        self._cond = threading.Condition()
        #: the connections counted as slaves (a connection leaves as soon as it closes)
        self._connections: list[HAConnection] = []
        #: every connection whose threads may still run: shutdown joins them all
        self._started: list[HAConnection] = []
        self._pending: list[_SlaveRequest] = []
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._transfer_thread: threading.Thread | None = None
        #: the loop's thread and those that handed it over but still run callbacks: shutdown joins them all
        self._transfer_threads: list[threading.Thread] = []
        self._stopped = False
        self.port: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def bind(self) -> None:
        """Open the listening socket (``ha_listen_port`` 0: any free port; ``port`` tells which)."""
        cfg = self.config
        family = socket.AF_INET6 if ":" in cfg.ha_listen_address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((cfg.ha_listen_address, cfg.ha_listen_port))
            sock.listen(16)
        except OSError:
            sock.close()
            raise
        self._listener = sock
        self.port = sock.getsockname()[1]

    def start(self) -> None:
        """Accept slaves (binds first if ``bind`` was not called)."""
        if self._listener is None:
            self.bind()
        self._stopped = False
        self._accept_thread = threading.Thread(target=self._accept_loop, name="pystore-HAAcceptService",
                                               daemon=True)
        self._accept_thread.start()
        self._start_transfer_thread()
        log.info("HA listening on %s:%d", self.config.ha_listen_address, self.port)

    def shutdown(self) -> None:
        """Close the listener and every connection; puts still waiting for a slave time out now."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        sock = self._listener
        if sock is not None:
            wake_up(sock)
        if self._accept_thread is not None:
            self._accept_thread.join(10)
        self._listener = None
        if sock is not None:
            sock.close()
        with self._cond:
            conns, self._started = self._started, []     # closed ones too: their threads may still be running
        for c in conns:
            c.close()
        for c in conns:
            c.join(10)
            if c.running():
                log.warning("HA: a thread of the connection of slave %s did not stop within 10 s", c.address)
        for t in list(self._transfer_threads):
            if t is not threading.current_thread():    # (a callback may shut the store down)
                t.join(10)                     # the loop's own times out every request still pending as it ends
        with self._cond:
            pending, self._pending = self._pending, []
        for r in pending:
            _finish(r, False)

    def _start_transfer_thread(self) -> None:
        """A thread to run ``_transfer_loop``; the one that ran it before (if any) stops once its callbacks
        return. Called with ``_cond`` held, or before any put can reach the service."""
        t = threading.Thread(target=self._transfer_loop, name="pystore-GroupTransferService", daemon=True)
        self._transfer_thread = t
        self._transfer_threads = [old for old in self._transfer_threads if old.is_alive()] + [t]
        t.start()

    def _transfer_loop(self) -> None:
        """RocketMQ ``GroupTransferService``: complete the async puts a slave's acknowledgement covers and time
        out those past their deadline, here rather than on a connection's reader thread, so a future's
        callbacks (user code, perhaps a put that itself waits for a slave) never hold up acknowledgements.
        Completing a future runs its callbacks on this thread: one that makes an async put waiting for a slave
        hands this loop to a new thread (``request``), since it may block until that put completes."""
        me = threading.current_thread()
        while True:
            with self._cond:
                if self._transfer_thread is not me:
                    return                     # a callback run here handed the loop over: its batch is done
                while True:
                    now = time.monotonic()
                    pending = self._pending
                    if self._stopped or any(r.next_offset <= self.push2slave_max_offset or r.deadline <= now
                                            for r in pending):
                        break
                    # deadlines only grow (one timeout for all), so the first pending one is the nearest
                    self._cond.wait(min(pending[0].deadline - now, 1.0) if pending else 1.0)
                acked = self.push2slave_max_offset
                done = [r for r in pending if r.next_offset <= acked]
                late = [r for r in pending if r.next_offset > acked and (r.deadline <= now or self._stopped)]
                if done or late:
                    self._pending = [r for r in pending if r.next_offset > acked and not (r.deadline <= now
                                                                                           or self._stopped)]
                stopped = self._stopped
            for r in done:
                _finish(r, True)
            for r in late:
                _finish(r, False)
            if stopped:
                return

    def _accept_loop(self) -> None:
        while not self._stopped:
            sock = self._listener
            if sock is None:
                return
            try:
                conn, addr = sock.accept()
            except OSError:
                if not self._stopped:
                    log.exception("HA accept failed")
                    time.sleep(0.1)
                continue
            if self._stopped:
                conn.close()
                return
            log.info("HA: slave connected from %s", addr)
            c = HAConnection(self, conn, addr)
            with self._cond:
                self._connections.append(c)
                self._started = [s for s in self._started if s.running()]
                self._started.append(c)
            c.start()

    def forget(self, conn: HAConnection) -> None:
        """A connection closed (``HAConnection.close``): it no longer counts for the puts that wait."""
        with self._cond:
            if conn in self._connections:
                self._connections.remove(conn)

    @property
    def started(self) -> bool:
        return self._accept_thread is not None

    # -- what puts ask --------------------------------------------------------------------------------

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def is_slave_ok(self, master_put_where: int) -> bool:
        """RocketMQ ``isSlaveOK``: a slave is connected and the best one is less than
        ``ha_slave_fallbehind_max`` bytes behind ``master_put_where``."""
        return (len(self._connections) > 0
                and master_put_where - self.push2slave_max_offset < self.config.ha_slave_fallbehind_max)

    def notify_transfer_some(self, offset: int) -> None:
        """A slave acknowledged ``offset``: wake the puts it may cover."""
        with self._cond:
            if offset <= self.push2slave_max_offset:
                return
            self.push2slave_max_offset = offset
            self._cond.notify_all()

    def wakeup_all(self) -> None:
        """New data: every connection's writer looks for it now."""
        for c in self._connections:
            c.wakeup()

    def wait_for_slave(self, next_offset: int, timeout_s: float) -> bool:
        """Block until a slave acknowledged ``next_offset`` (True) or ``timeout_s`` passed (False)."""
        self.wakeup_all()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.push2slave_max_offset < next_offset:
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped:
                    return False
                self._cond.wait(left)
            return True

    def request(self, next_offset: int, result: Any, timeout_s: float) -> Future[Any]:
        """A future of ``result`` completed once a slave acknowledged ``next_offset``, or with
        ``FLUSH_SLAVE_TIMEOUT`` after ``timeout_s``."""
        fut: Future[Any] = Future()
        req = _SlaveRequest(next_offset, fut, result, time.monotonic() + timeout_s)
        with self._cond:
            acked = self.push2slave_max_offset >= next_offset
            if not acked and not self._stopped:
                self._pending.append(req)
                self._cond.notify_all()
                if threading.current_thread() is self._transfer_thread:
                    # a callback of a put this thread completed: if it waits for this put, only another thread
                    # can complete it
                    self._start_transfer_thread()
        if acked:
            fut.set_result(result)
        elif self._stopped:
            _finish(req, False)
        else:
            self.wakeup_all()
        return fut


def _finish(req: _SlaveRequest, ok: bool) -> None:
    if not req.future.done():
        req.future.set_result(req.result if ok else req.result.with_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT))


class HAConnection:
    """One slave's connection on the master: a reader thread for its reports, a writer for transfers."""

    def __init__(self, service: HAService, sock: socket.socket, address: Any) -> None:
        self.service = service
        self.sock = sock
        self.address = address
        #: where the slave asked to start (its first report), -1 until it reported
        self.slave_request_offset = -1
        #: the last offset the slave reported holding
        self.slave_ack_offset = -1
        #: the offset the next transfer starts at (-1 until the first report fixed it)
        self.next_transfer_from = -1
        self._closed = False
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._running = 0
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def start(self) -> None:
        loops = ((self._read_loop, "ReadSocketService"), (self._write_loop, "WriteSocketService"))
        self._running = len(loops)
        for target, name in loops:
            t = threading.Thread(target=target, name="pystore-HA" + name, daemon=True)
            self._threads.append(t)
            t.start()

    def wakeup(self) -> None:
        self._wake.set()

    def running(self) -> bool:
        """Whether one of its threads may still run (closed or not)."""
        return self._running > 0

    def close(self) -> None:
        """End the connection from any thread: both loops wake and stop. The socket itself is released by
        the last of them (``_loop_ended``), so no thread ever uses a descriptor number that was reused."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        wake_up(self.sock)
        self.service.forget(self)
        log.info("HA: connection of slave %s closed", self.address)

    def _loop_ended(self) -> None:
        self.close()
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.sock.close()

    def join(self, timeout_s: float) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout_s)

    # -- the slave's reports ------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        cfg = self.service.config
        buf = b""
        try:
            self.sock.settimeout(cfg.ha_housekeeping_interval / 1000)     # sends too: a slave that never reads
            while not self._closed:
                try:
                    data = self.sock.recv(4096)
                except TimeoutError:
                    log.warning("HA: slave %s sent nothing for %d ms; closing its connection", self.address,
                                cfg.ha_housekeeping_interval)
                    return
                if not data:
                    return
                buf += data
                whole = len(buf) - len(buf) % 8
                if whole == 0:
                    continue
                # only the newest report counts (RocketMQ reads the last whole 8 bytes)
                (offset,) = REPORT.unpack_from(buf, whole - 8)
                buf = buf[whole:]
                if offset < 0:
                    log.error("HA: slave %s reported a negative offset %d; closing", self.address, offset)
                    return
                master = self.service.max_offset()
                if offset > master:
                    # RocketMQ 4.9 (#3015): a slave ahead of its master holds data the master never had
                    log.error("HA: slave %s reports offset %d, past this master's end %d; closing", self.address,
                              offset, master)
                    return
                self.slave_ack_offset = offset
                if self.slave_request_offset < 0:
                    self.slave_request_offset = offset
                    log.info("HA: slave %s asks for data from offset %d", self.address, offset)
                    self._wake.set()
                self.service.notify_transfer_some(offset)
        except OSError:
            if not self._closed:
                log.info("HA: reading from slave %s failed", self.address, exc_info=True)
        finally:
            self._loop_ended()

    # -- transfers -----------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        svc = self.service
        cfg = svc.config
        batch = cfg.ha_transfer_batch_size
        clock = svc.clock
        heartbeat_ms = cfg.ha_send_heartbeat_interval
        last_write = clock()
        warned_low = False
        try:
            while not self._closed:
                if self.slave_request_offset < 0:
                    self._wake.wait(0.01)
                    self._wake.clear()
                    continue
                if self.next_transfer_from < 0:
                    self.next_transfer_from = self._first_offset()
                    log.info("HA: transfers to slave %s start at offset %d", self.address, self.next_transfer_from)
                offset = self.next_transfer_from
                buf = svc.read(offset)
                if buf is not None:
                    with buf, memoryview(buf) as whole:
                        size = min(len(whole), batch)
                        send_all(self.sock, HEADER.pack(offset, size), whole[:size])
                    self.next_transfer_from = offset + size
                    last_write = clock()
                    continue
                if not warned_low:
                    low = svc.min_offset()
                    if 0 <= offset < low:
                        warned_low = True
                        log.error("HA: slave %s wants offset %d, but the master's commit log starts at %d: "
                                  "nothing can be sent to it", self.address, offset, low)
                if due(clock(), last_write, heartbeat_ms):
                    send_all(self.sock, HEADER.pack(offset, 0))
                    last_write = clock()
                self._wake.wait(POLL_S)
                self._wake.clear()
        except OSError:
            if not self._closed:
                log.info("HA: writing to slave %s failed", self.address, exc_info=True)
        except Exception:
            if not self._closed:
                log.exception("HA: transfer to slave %s stopped", self.address)
        finally:
            self._loop_ended()

    def _first_offset(self) -> int:
        if self.slave_request_offset != 0:
            return self.slave_request_offset
        # a slave with nothing starts at the master's last file: history stays with the master
        master = self.service.max_offset()
        size = self.service.file_size     # the files' own size: a store keeps its geometry
        return master - master % size


class ReplicaWait:
    """SYNC_MASTER (RocketMQ 4.x ``handleHA``): a put that waits, waits for a slave to hold its record, after
    its flush; the message stays stored whatever the wait says, and the slave's verdict replaces a flush
    timeout. ``service`` is None when the master does not listen: every such put is ``SLAVE_NOT_AVAILABLE``."""

    def __init__(self, service: HAService | None, config: Any, name: str) -> None:
        self.service = service
        self.config = config
        #: the store's folder, for the log
        self.name = name

    def _ready(self, result: PutMessageResult) -> HAService | None:
        """The HA service when a slave can take ``result``'s record (RocketMQ ``isSlaveOK``: one is connected
        and less than ``ha_slave_fallbehind_max`` behind); None means ``SLAVE_NOT_AVAILABLE``."""
        ha = self.service
        return ha if ha is not None and ha.is_slave_ok(result.next_offset) else None

    def wait(self, result: PutMessageResult) -> PutMessageResult:
        """Block until a slave acknowledged ``result``'s record or ``slave_timeout`` passed."""
        ha = self._ready(result)
        if ha is None:
            return result.with_status(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        if not ha.wait_for_slave(result.next_offset, self.config.slave_timeout / 1000):
            log.warning("%s: no slave acknowledged offset %d within %d ms", self.name, result.next_offset,
                        self.config.slave_timeout)
            return result.with_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        return result

    def after(self, flushed: Future[PutMessageResult]) -> Future[PutMessageResult]:
        """The async form of ``wait``: a future of the slave's verdict on the result ``flushed`` completes
        with (completed by the HA service's ``GroupTransferService`` thread, never a connection's)."""
        out: Future[PutMessageResult] = Future()

        def replicate(done: Future[PutMessageResult]) -> None:
            r = done.result()
            try:
                ha = self._ready(r)
                if ha is None:
                    out.set_result(r.with_status(PutMessageStatus.SLAVE_NOT_AVAILABLE))
                else:
                    ha.request(r.next_offset, r, self.config.slave_timeout / 1000).add_done_callback(
                        lambda acked: out.set_result(acked.result()))
            except Exception:
                log.exception("%s: waiting for a slave failed", self.name)
                if not out.done():
                    out.set_result(r.with_status(PutMessageStatus.FLUSH_SLAVE_TIMEOUT))

        flushed.add_done_callback(replicate)
        return out
