"""Master→slave replication of the commit log (RocketMQ's classic HA: ``HAService``, ``HAConnection``,
``HAClient``; FORMAT.md names the settings, this module the behaviour).

One TCP connection per slave; the slave speaks first and the master never waits for an answer::

    slave -> master   every report, 8 bytes:   [ maxPhyOffset : int64 big-endian ]
                      the end of the slave's commit log: where it wants data from, and what it holds
    master -> slave   every transfer, 12 + n:  [ phyOffset : int64 ][ n : int32 ][ n bytes of commit log ]
                      n = 0 is a heartbeat

* **Master** (``HAService``, started when ``ha_listen_port`` is not None and the store is not a slave): a
  listener thread accepts slaves; each ``HAConnection`` has a reader thread (the slave's reports) and a writer
  thread (transfers). The slave's first report says where to start: 0 means "from the first byte of the
  master's last commit-log file" (a fresh slave does not copy history), any other offset is used as is. A
  transfer carries at most ``ha_transfer_batch_size`` bytes and never crosses a commit-log file: it is the
  bytes ``get_commit_log_data`` returns. With nothing to send, the writer sends a heartbeat every
  ``ha_send_heartbeat_interval`` ms. A connection whose slave has not reported for
  ``ha_housekeeping_interval`` ms is closed.
* **SYNC_MASTER**: a put that waits (``wait_store_msg_ok``) returns ``SLAVE_NOT_AVAILABLE`` when no slave is
  connected or the best slave acknowledged less than ``end - ha_slave_fallbehind_max``; otherwise it waits up
  to ``slave_timeout`` ms (RocketMQ 5.x's ``slaveTimeout``; 4.x used ``syncFlushTimeout``) for a slave to
  report an offset at or past the end of its record, else ``FLUSH_SLAVE_TIMEOUT``. In every case the message
  is stored: these statuses count as ok. With SYNC_FLUSH the disk flush comes first; a flush timeout is
  reported as such, without waiting for a slave.
* **Slave** (``HAClient``, started when ``broker_role`` is SLAVE): connects to ``ha_master_address``, reports
  where it wants data from at once (below), then what it holds after each transfer it applied and every
  heartbeat interval; appends each
  transfer's bytes to its commit log where they belong (``appendToCommitLog``), then builds its consume queues
  and index from the whole records (the reput path). A slave refuses puts (``SERVICE_NOT_AVAILABLE``).

Where this differs from RocketMQ, and why:

* A slave checks that a transfer starts at its own end once it holds data, and a master closes the
  connection of a slave that reports an offset past the master's end (RocketMQ 4.9, #3015). Both log the two
  offsets and drop the connection; the slave reconnects. Nothing ever truncates what a slave holds: a slave
  whose master lost data stays stopped until an operator deals with it, as in RocketMQ.
* A slave that holds data does not ask for its log's end but for up to 64 KiB before it, within its last file
  (never for offset 0: that is an empty slave's report), and compares what arrives with the bytes it holds
  before it appends anything; until they matched it reports only how far they did. A master that lost data
  the slave holds and wrote other records at those offsets since (an ASYNC_FLUSH power cut, a restored
  backup) is refused, and logged, on every connection. RocketMQ ships such a master's bytes after the
  slave's own as soon as its log has grown past the slave's end, and counts them as replicated: the slave
  diverges silently. A log that ends exactly at a file's end is not checked (the master may have deleted
  that file since). The cost is up to 64 KiB sent again per connection.
* A slave judges a transfer by its 12-byte header: a body it could not apply (larger than a commit-log file,
  across a file's end, or not at its end) drops the connection before it arrives instead of being buffered.
* A SYNC_FLUSH slave flushes its commit log to its end before every report that follows an append (and before
  its first report on a connection), once per read from the socket, whatever number of transfers it held:
  what it acknowledges survives its power cut. RocketMQ's slave reports on receipt whatever its flush type;
  an ASYNC_FLUSH slave here does too, and a power cut of it loses the acknowledged bytes past its last flush.
  Why not always: an fsync per acknowledgement round cost SYNC_MASTER puts 3-5x (2-core VM, ext4, one
  slave process: 1 thread about 4 000 puts/s on receipt against 1 100-1 800 flushed first; 8 threads
  8 000-13 000 against 2 000-2 700), the price a SYNC_FLUSH slave's owner chose to pay.
* RocketMQ's slave makes its first report at its first heartbeat (up to 5 s after connecting); pystore's
  reports at once, so a slave starts receiving as soon as it is connected.
* RocketMQ 5.x drops ``SLAVE_NOT_AVAILABLE`` and waits for ``inSyncReplicas``; pystore keeps 4.x's rule
  (FORMAT.md, API.md) with 5.x's ``slave_timeout`` setting.
* A transfer may end inside a record. A slave that shuts down cleanly cuts such a torn tail off (the next
  connection asks for it again), so its commit log, like a master's, always ends at a record boundary; after
  a crash, recovery cuts it as it cuts any torn tail.
* The master's writer is woken by every put that waits for a slave; an ASYNC_MASTER's puts do not wake it
  (that would put Python on the put path), so it polls every few milliseconds while connected.
* The slave retries a failed connection every second (RocketMQ: every 5 s).
* With SYNC_FLUSH and SYNC_MASTER, the slave is asked even when the flush timed out, and its verdict
  (``SLAVE_NOT_AVAILABLE``, ``FLUSH_SLAVE_TIMEOUT``) replaces ``FLUSH_DISK_TIMEOUT``, as in 4.x ``handleHA``.
* Async puts waiting for a slave are completed (or timed out) by one ``GroupTransferService`` thread, never
  by a connection's reader, so callbacks on their futures cannot hold up acknowledgements. A callback that
  makes such a put itself hands the loop to a new thread, so it may wait for that put's future.

Time (``pystore.service``): whether a heartbeat is due (both sides) and whether the master has been silent too
long (the slave's ``ha_housekeeping_interval``) are policy, read from the store's clock when the loop wakes
(every ``_POLL_S`` on the master's writer, at most every second on the slave), so a test moves a fake clock
to make them happen. How long a put waits for a slave (``slave_timeout``, both ``wait_for_slave`` and the
async futures' deadlines) is a real wait, measured with ``time.monotonic``: it bounds a caller's blocking, and
a fake clock nobody advances must not hang it. The master closes a connection whose slave has not reported
for ``ha_housekeeping_interval`` by a socket timeout, also real: the same timeout bounds a send to a slave
that stopped reading, which only the real time can measure.

Limits, as in RocketMQ: master and slave must have the same ``mapped_file_size_commit_log`` (the protocol
does not carry it; a slave with other files misplaces the master's end-of-file blanks). With the transient
store pool, a master ships only what its commit service has committed, so a SYNC_MASTER put waits for the
next commit (up to ``commit_interval_commit_log`` or the thorough interval).

Thread-safety: ``HAService`` is called from put threads (``wait_for_slave``, ``is_slave_ok``) and its own
threads; its shared state is under one condition. ``HAClient`` is the only writer of a slave's commit log.
A socket is closed only by the thread(s) that use it, once they are done (a connection's last thread, the
client's thread, the listener's owner after joining its accept thread); anyone else only shuts it down,
which wakes them. ``shutdown`` joins every thread it started.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pystore.errors import StoreClosedError
from pystore.service import Clock, ServiceThread, real_clock
from pystore.status import PutMessageStatus

__all__ = ["HAService", "HAConnection", "HAClient", "parse_address"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">qi")
_REPORT = struct.Struct(">q")
#: how often an idle ASYNC_MASTER writer looks for new data (s); a waiting put wakes it at once
_POLL_S = 0.005
#: a slave's pause before it tries a failed connection again (s)
_RECONNECT_S = 1.0
_CONNECT_TIMEOUT_S = 3.0
#: how much of the end of its log a slave that holds data asks its master for again on each connection, to
#: check that the master still holds those very bytes before it appends anything after them
_VERIFY_BYTES = 64 * 1024


def _due(now: int, last: int, interval_ms: int) -> bool:
    """Is a periodic send due ``interval_ms`` after ``last`` (clock ms)? Also when the clock went back: one
    send too many costs 12 bytes, one missing until the clock caught up could cost the connection."""
    return now - last >= interval_ms or now < last


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[ipv6]:port"`` -> ``(host, port)``."""
    host, _, port = address.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("expected 'host:port', got %r" % address)
    return host.strip("[]"), int(port)


def _wake_up(sock: socket.socket) -> None:
    """End a connection (or stop a listener) from any thread: a thread blocked on it returns at once. Only
    the thread that uses the socket closes it, once it is done with it: a descriptor closed under a thread
    that is about to use it may already be some other file or connection's."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass                  # already disconnected


def _send_all(sock: socket.socket, header: bytes, body: memoryview | None = None) -> None:
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


# ----------------------------------------------------------------------------------------------------------
# master
# ----------------------------------------------------------------------------------------------------------


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

    def __init__(self, store: Any, config: Any, clock: Clock | None = None, file_size: int | None = None) -> None:
        """``store``: what the connections read through its public methods (``get_commit_log_data``,
        ``get_max_phy_offset``, ``get_min_phy_offset``); ``clock``: the store's (heartbeats);
        ``file_size``: the size of the commit-log files the store found (where an empty slave starts);
        ``config.mapped_file_size_commit_log`` when None."""
        self.store = store
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
            _wake_up(sock)
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

    def _remove(self, conn: HAConnection) -> None:
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
        _wake_up(self.sock)
        self.service._remove(self)
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
                (offset,) = _REPORT.unpack_from(buf, whole - 8)
                buf = buf[whole:]
                if offset < 0:
                    log.error("HA: slave %s reported a negative offset %d; closing", self.address, offset)
                    return
                master = self.service.store.get_max_phy_offset()
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
        except StoreClosedError:
            pass
        finally:
            self._loop_ended()

    # -- transfers -----------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        svc = self.service
        cfg = svc.config
        store = svc.store
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
                    self.next_transfer_from = self._first_offset(store)
                    log.info("HA: transfers to slave %s start at offset %d", self.address, self.next_transfer_from)
                offset = self.next_transfer_from
                buf = store.get_commit_log_data(offset)
                if buf is not None:
                    with buf, memoryview(buf) as whole:
                        size = min(len(whole), batch)
                        _send_all(self.sock, _HEADER.pack(offset, size), whole[:size])
                    self.next_transfer_from = offset + size
                    last_write = clock()
                    continue
                if not warned_low:
                    low = store.get_min_phy_offset()
                    if 0 <= offset < low:
                        warned_low = True
                        log.error("HA: slave %s wants offset %d, but the master's commit log starts at %d: "
                                  "nothing can be sent to it", self.address, offset, low)
                if _due(clock(), last_write, heartbeat_ms):
                    _send_all(self.sock, _HEADER.pack(offset, 0))
                    last_write = clock()
                self._wake.wait(_POLL_S)
                self._wake.clear()
        except OSError:
            if not self._closed:
                log.info("HA: writing to slave %s failed", self.address, exc_info=True)
        except StoreClosedError:
            pass                  # the store shuts down before its services stop: this connection ends
        except Exception:
            if not self._closed:
                log.exception("HA: transfer to slave %s stopped", self.address)
        finally:
            self._loop_ended()

    def _first_offset(self, store: Any) -> int:
        if self.slave_request_offset != 0:
            return self.slave_request_offset
        # a slave with nothing starts at the master's last file: history stays with the master
        master = store.get_max_phy_offset()
        size = self.service.file_size     # the files' own size: a store keeps its geometry
        return master - master % size


# ----------------------------------------------------------------------------------------------------------
# slave
# ----------------------------------------------------------------------------------------------------------


class HAClient(ServiceThread):
    """The slave's side: one connection to its master, transfers appended to the commit log."""

    def __init__(self, config: Any, max_offset: Callable[[], int], append: Callable[[int, memoryview], bool],
                 file_size: int, read: Callable[[int], Any], clock: Callable[[], int] | None = None,
                 flush: Callable[[], object] | None = None) -> None:
        """``max_offset()``: the end of this slave's commit log; ``append(offset, data)``: put a transfer
        there; ``file_size``: its commit-log files' size (the geometry of the files the store found), no
        transfer may cross one; ``read(offset)``: its own bytes from ``offset`` to the end of that file's data
        (the store's ``get_commit_log_data``), used to check a master's bytes; ``flush()``: make the whole log
        durable (raising OSError if it cannot), called before every report that follows an append."""
        super().__init__("HAClient", clock)
        self.config = config
        self.max_offset = max_offset
        self.append = append
        #: None reports on receipt, as RocketMQ does (the throughput measurement compares both)
        self.flush = flush
        #: the size of this slave's commit-log files: no transfer can cross one
        self.file_size: int = file_size
        self.read = read
        #: on each connection, ``[_verify_at, _verify_end)`` is the part of this slave's log the master has yet to
        #: send again and match; only past ``_verify_end`` are its bytes appended
        self._verify_at = self._verify_end = 0
        #: times a master's bytes differed from those this slave holds, and the offset of the last difference
        self.divergences = 0
        self.diverged_at: int | None = None
        self.sock: socket.socket | None = None
        self.connected = threading.Event()
        #: the offset last reported to the master
        self.current_reported_offset = -1
        #: transfers applied and heartbeats received, since start
        self.transfers = 0
        self.heartbeats = 0

    def shutdown(self, join: bool = True) -> None:
        self._stopped = True
        sock = self.sock
        if sock is not None:
            _wake_up(sock)           # the client's own thread closes it as it leaves the connection
        super().shutdown(join)
        if join:
            self._close()            # in case that thread did not stop in time

    def run(self) -> None:
        while not self.is_stopped():
            address = self.config.ha_master_address
            if not address:
                self.wait_for_running(_RECONNECT_S * 1000)
                continue
            try:
                self._connect(address)
            except OSError as e:
                log.info("HA: cannot connect to master %s: %s", address, e)
                self.wait_for_running(_RECONNECT_S * 1000)
                continue
            try:
                self._follow()
            except StoreClosedError:
                return                # the store is shutting down: it stops this client next
            except OSError as e:
                if not self.is_stopped():
                    log.warning("HA: connection to master %s lost: %s", address, e)
            except Exception:
                log.exception("HA: following master %s failed", address)
            finally:
                self._close()
            if not self.is_stopped():
                self.wait_for_running(_RECONNECT_S * 1000)

    def _connect(self, address: str) -> None:
        host, port = parse_address(address)
        sock = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.connected.set()
        log.info("HA: connected to master %s", address)

    def _close(self) -> None:
        sock, self.sock = self.sock, None
        self.connected.clear()
        if sock is not None:
            _wake_up(sock)
            sock.close()

    def _report(self, sock: socket.socket, offset: int) -> None:
        sock.sendall(_REPORT.pack(offset))
        self.current_reported_offset = offset

    def _follow(self) -> None:
        sock = self.sock
        assert sock is not None
        cfg = self.config
        clock = self.clock
        heartbeat_ms = cfg.ha_send_heartbeat_interval
        expire_ms = cfg.ha_housekeeping_interval
        end = self.max_offset()
        start = self._verify_from(end)
        self._verify_at, self._verify_end = start, end
        if start < end:
            log.info("HA: asking the master for offset %d on: it must hold the %d bytes this slave's log has there",
                     start, end - start)
        if self.flush is not None:
            # what a killed slave left in the page cache and recovery kept may not be on disk yet: it is
            # acknowledged once the master matched it, so it is made durable first
            self.flush()
        self._report(sock, start)
        last_report = last_read = clock()
        buf = bytearray()
        # a real wait, at most a second: the loop wakes to read the clock for the heartbeat and the expiry
        sock.settimeout(min(heartbeat_ms / 1000, 1.0))
        while not self.is_stopped():
            now = clock()
            if _due(now, last_report, heartbeat_ms):
                self._report(sock, self._held())
                last_report = now
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                now = clock()
                if now < last_read:
                    last_read = now          # the clock went back: the silence is counted from now
                elif now - last_read > expire_ms:
                    log.warning("HA: master sent nothing for %d ms; reconnecting", cfg.ha_housekeeping_interval)
                    return
                continue
            if not data:
                log.info("HA: the master closed the connection")
                return
            last_read = clock()
            buf += data
            applied = self._apply(buf)
            if applied is None:
                return
            if applied:
                if self.flush is not None:
                    self.flush()        # durable before acknowledged: one flush for all the transfers of a read
                self._report(sock, self._held())
                last_report = clock()

    def _verify_from(self, end: int) -> int:
        """Where to ask a master for data, for a log ending at ``end``: up to ``_VERIFY_BYTES`` before it, within
        its last file (a master that still has ``end`` has that file; an earlier one may be deleted). A log that
        is empty, or ends at a file's end, starts at ``end``: nothing is checked."""
        within = end % self.file_size
        if end <= 0 or within == 0:
            return end
        # never 0: a report of 0 means "an empty slave", which a master answers from its last file
        start = max(end - min(within, _VERIFY_BYTES), 1)
        if start >= end:
            return end
        held = self.read(start)
        if held is None:
            return end
        with held:
            return start if held.start_offset + held.size >= end else end

    def _held(self) -> int:
        """What to report: the end of this slave's log, or while a master is still matching it, how far it
        matched (a slave never acknowledges bytes a master has not shown it holds too)."""
        return self._verify_at if self._verify_at < self._verify_end else self.max_offset()

    def _differs(self, offset: int, data: memoryview) -> int:
        """The first offset from ``offset`` where ``data`` is not what this slave holds, or -1."""
        held = self.read(offset)
        if held is None:
            return offset
        with held, memoryview(held) as mine:
            n = min(len(mine), len(data))
            if n == len(data) and mine[:n] == data:
                return -1
            a, b = bytes(mine[:n]), bytes(data[:n])
            return offset + next((i for i in range(n) if a[i] != b[i]), n)

    def _apply(self, buf: bytearray) -> bool | None:
        """Apply every whole transfer at the front of ``buf`` (consumed from it): True if data was
        appended or matched, None when the connection must be dropped."""
        pos = 0
        appended = False
        n = len(buf)
        with memoryview(buf) as view:
            while n - pos >= _HEADER.size:
                offset, size = _HEADER.unpack_from(view, pos)
                # judged on its header: a body that can never be applied is not waited for, nor buffered
                if not self._header_ok(offset, size):
                    return None
                end = pos + _HEADER.size + size
                if end > n:
                    break
                pos = end
                if size == 0:
                    self.heartbeats += 1
                    continue
                took = self._take(offset, view[end - size:end])
                if took is None:
                    return None
                appended = appended or took
        del buf[:pos]
        return appended

    def _take(self, offset: int, body: memoryview) -> bool | None:
        """One whole transfer: match the part a master is to show it holds, append the rest. True if the
        reportable offset moved, None when the connection must be dropped."""
        if self._verify_at < self._verify_end:
            n = min(len(body), self._verify_end - offset)
            bad = self._differs(offset, body[:n])
            if bad >= 0:
                self.divergences += 1
                self.diverged_at = bad
                log.error("HA: the master's commit log differs from this slave's at offset %d (this slave holds up "
                          "to %d): the master lost or rewrote data this slave has. Nothing is appended or "
                          "acknowledged; rebuild this slave or give it a master that holds its data. Retrying",
                          bad, self._verify_end)
                return None
            self._verify_at += n
            if self._verify_at == self._verify_end:
                log.info("HA: the master holds this slave's data up to %d; following it", self._verify_end)
            if n == len(body):
                return True
            offset, body = offset + n, body[n:]
        if not self.append(offset, body):
            log.error("HA: cannot append %d bytes at offset %d to the commit log", len(body), offset)
            return None
        self.transfers += 1
        return True

    def _header_ok(self, offset: int, size: int) -> bool:
        if size == 0:
            return True                      # a heartbeat: it carries the master's next offset, nothing to apply
        file_size = self.file_size
        if size < 0 or offset < 0 or offset % file_size + size > file_size:
            log.error("HA: the master sent a transfer of %d bytes at offset %d, which no commit-log file of %d "
                      "bytes can hold; reconnecting", size, offset, file_size)
            return False
        if self._verify_at < self._verify_end:
            if offset != self._verify_at:
                log.error("HA: the master sent offset %d but this slave asked for %d; reconnecting", offset,
                          self._verify_at)
                return False
            return True
        mine = self.max_offset()
        if mine != 0 and mine != offset:
            log.error("HA: the master sent offset %d but this slave's commit log ends at %d; reconnecting",
                      offset, mine)
            return False
        return True
