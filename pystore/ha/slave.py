"""Replication, the slave's side (``pystore.ha`` is the overview): ``HAClient`` follows one master over the
wire protocol (``pystore.ha.protocol``), and ``SlaveLog`` is what it does to this store's commit log: append
a transfer where it belongs (RocketMQ ``appendToCommitLog``), flush before acknowledging (SYNC_FLUSH), build
the queues and index of what arrived, and cut a torn tail at shutdown.

Time: a heartbeat being due and the master having been silent too long (``ha_housekeeping_interval``) are
read from the store's clock when the loop wakes (at most every second), so a test moves a fake clock to make
them happen.

Thread-safety: ``HAClient``'s thread is the only writer of a slave's commit log; its socket is closed only by
that thread (anyone else shuts it down, which wakes it).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pystore.config import FlushDiskType, StoreConfig
from pystore.errors import StoreClosedError
from pystore.format._codec import REASONS, RECORD_SHORT
from pystore.ha.protocol import HEADER, REPORT, due, parse_address, wake_up
from pystore.log._records import scan_file
from pystore.system.service import ServiceThread

if TYPE_CHECKING:
    from pystore.engine.checkpoint import StoreCheckpoint
    from pystore.log.commitlog import CommitLog
    from pystore.queue._dispatch import QueueDispatcher
    from pystore.queue.dispatch import ReputService

__all__ = ["HAClient", "SlaveLog"]

log = logging.getLogger(__name__)

#: a slave's pause before it tries a failed connection again (s)
_RECONNECT_S = 1.0
_CONNECT_TIMEOUT_S = 3.0
#: how much of the end of its log a slave that holds data asks its master for again on each connection, to
#: check that the master still holds those very bytes before it appends anything after them
_VERIFY_BYTES = 64 * 1024


class SlaveLog:
    """A slave's commit log as replication writes it; the parts are the store's (``pystore.engine.parts``)."""

    def __init__(self, commitlog: CommitLog, reput: ReputService, dispatcher: QueueDispatcher | None,
                 checkpoint: StoreCheckpoint, config: StoreConfig) -> None:
        # the dispatcher ``reput`` dispatches with: a loaded store's parts always hold one (``open_parts``
        # makes both), only the parts' field is optional
        assert dispatcher is not None
        self.commitlog = commitlog
        self.reput = reput
        self.dispatcher = dispatcher
        self.checkpoint = checkpoint
        self.config = config
        #: the store's folder, for the log
        self.name = config.store_path_root_dir
        #: set once the store shuts down: a client thread that outlived its join must not touch the files
        self.closed = False

    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosedError("the store at %s is shutdown" % self.name)

    def append(self, offset: int, data: memoryview) -> bool:
        """RocketMQ ``appendToCommitLog``: put a transfer's bytes at ``offset``, the end of this commit log (a
        new file where the last is full, or where the log is empty), then build the queues and index of the
        whole records that arrived (under SYNC_FLUSH, the group commit does that after it flushed, through
        ``dispatch_flushed``). False if the bytes do not belong at the end of this log or do not fit its file."""
        self._check_open()
        queue = self.commitlog.queue
        size = queue.mapped_file_size
        files = queue.files
        if not any(f.wrote_position for f in files):
            # an empty log (perhaps a lone file a trim emptied) starts wherever its master's data does, at a file
            # boundary: the master sends an empty slave its last file
            if offset % size:
                log.error("%s: an empty slave cannot start at offset %d, inside a commit-log file of %d bytes",
                          self.name, offset, size)
                return False
            while files and files[-1].file_from_offset != offset:
                queue.delete_last_file()
                files = queue.files
        mf = queue.get_last_mapped_file(offset, True)
        if mf is None:
            return False
        if mf.file_from_offset + mf.wrote_position != offset or not mf.append_message(data):
            log.error("%s: a transfer of %d bytes at offset %d does not fit the end of %s (%d bytes written)",
                      self.name, len(data), offset, mf.file_name, mf.wrote_position)
            return False
        if self.config.flush_disk_type != FlushDiskType.SYNC_FLUSH:
            self.reput.dispatch_until(offset + len(data))
            ts = self.dispatcher.last_store_ts
            if ts > mf.store_timestamp:
                mf.store_timestamp = ts      # the checkpoint's physicMsgTimestamp, as a master's puts set it
        return True

    def flush(self) -> None:
        """SYNC_FLUSH slave, before it reports an offset to its master: flush the commit log to its end, so
        that what it acknowledges survives a power cut (RocketMQ's slave reports on receipt, as an
        ASYNC_FLUSH slave here does). Raises OSError when the log cannot be flushed, which drops the
        connection without a report."""
        self._check_open()
        queue = self.commitlog.queue
        end = queue.get_max_offset()
        # the flush itself, not the group commit's sync: that would also build the queues and index on this
        # thread before the report (the group commit's next pass dispatches what this flushed)
        for _ in range(len(queue.files) + 1):
            if queue.flushed_where >= end or queue.flush(0):
                break
        if queue.flushed_where < end:
            raise OSError("the slave's commit log is flushed to %d, not to its end %d" % (queue.flushed_where, end))

    def dispatch_flushed(self, flushed: int) -> int:
        """A SYNC_FLUSH slave's group commit, after each flush: queues and index follow the flushed records,
        and the checkpoint's physicMsgTimestamp their store time (a master's puts set it; a slave has none)."""
        reached = self.reput.dispatch_until(flushed)
        ts = self.dispatcher.last_store_ts
        if ts > self.checkpoint.physic_msg_timestamp:
            self.checkpoint.physic_msg_timestamp = ts
        return reached

    def trim_torn_tail(self) -> None:
        """Slave shutdown: a transfer may have ended inside a record; cut that record off so the log ends where
        a master's would (the master sends it again on the next connection). Only a record that runs past the
        end of the last file's data is cut: anything else that stops the walk is left for recovery to judge."""
        cl = self.commitlog
        end = cl.get_max_offset()
        reached = self.reput.dispatch_until(end)
        last = cl.queue.last()
        if reached >= end or last is None or reached < last.file_from_offset:
            if reached < end:
                log.error("%s: the slave's records stop being readable at offset %d (its log ends at %d); left "
                          "for recovery", self.name, reached, end)
            return
        pos = reached - last.file_from_offset
        stop, reason, _, _ = scan_file(last, pos, False, last.wrote_position)
        if stop == pos and reason == RECORD_SHORT:
            log.info("%s: cutting the %d bytes of a partly received record at offset %d", self.name,
                     end - reached, reached)
            cl.queue.truncate_dirty_files(reached)
        else:
            log.error("%s: the record at offset %d is damaged (%s); left for recovery", self.name, reached,
                      REASONS.get(reason, reason))


class HAClient(ServiceThread):
    """The slave's side: one connection to its master, transfers appended to the commit log."""

    def __init__(self, config: Any, max_offset: Callable[[], int], append: Callable[[int, memoryview], bool],
                 file_size: int, read: Callable[[int], Any], clock: Callable[[], int] | None = None,
                 flush: Callable[[], object] | None = None) -> None:
        """``max_offset()``: the end of this slave's commit log; ``append(offset, data)``: put a transfer
        there; ``file_size``: its commit-log files' size (the geometry of the files the store found), no
        transfer may cross one; ``read(offset)``: its own bytes from ``offset`` to the end of that file's data
        (``CommitLog.select_data``), used to check a master's bytes; ``flush()``: make the whole log durable
        (raising OSError if it cannot), called before every report that follows an append."""
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
            wake_up(sock)           # the client's own thread closes it as it leaves the connection
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
            wake_up(sock)
            sock.close()

    def _report(self, sock: socket.socket, offset: int) -> None:
        sock.sendall(REPORT.pack(offset))
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
            if due(now, last_report, heartbeat_ms):
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
            while n - pos >= HEADER.size:
                offset, size = HEADER.unpack_from(view, pos)
                # judged on its header: a body that can never be applied is not waited for, nor buffered
                if not self._header_ok(offset, size):
                    return None
                end = pos + HEADER.size + size
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
