"""Master→slave replication of the commit log (RocketMQ's classic HA), as a whole: this module states the
behaviour and re-exports the names; the code is in three modules:

* ``pystore.ha.protocol``: the two frames below and the socket helpers both sides use;
* ``pystore.ha.master``: ``HAService`` (the listener and the acknowledged offset), ``HAConnection`` (one
  slave), ``ReplicaWait`` (what a SYNC_MASTER put waits for);
* ``pystore.ha.slave``: ``HAClient`` (following a master) and ``SlaveLog`` (what it does to the slave's
  commit log: append, flush, dispatch, trim a torn tail).

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
  (docs/format.md, docs/api.md) with 5.x's ``slave_timeout`` setting.
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

Time (``pystore.system.service``): heartbeats and the slave's silence limit follow the store's clock; how long a put
waits for a slave and the master's silence limit are real waits (``pystore.ha.master`` says why).

Limits, as in RocketMQ: master and slave must have the same ``mapped_file_size_commit_log`` (the protocol
does not carry it; a slave with other files misplaces the master's end-of-file blanks). With the transient
store pool, a master ships only what its commit service has committed, so a SYNC_MASTER put waits for the
next commit (up to ``commit_interval_commit_log`` or the thorough interval).
"""

from pystore.ha.master import HAConnection, HAService, ReplicaWait
from pystore.ha.protocol import parse_address
from pystore.ha.slave import HAClient, SlaveLog

__all__ = ["HAClient", "HAConnection", "HAService", "ReplicaWait", "SlaveLog", "parse_address"]
