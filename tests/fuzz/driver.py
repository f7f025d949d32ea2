"""One fuzz case's reads, in a child process: ``python -m tests.fuzz.driver CASE.json``.

CASE.json names the damaged store (``root``), the reference (``ref``: manifest and clean files), the damage
(``mutate.apply``'s answer) and whether to run the CLI. The driver prints ``STEP <what>`` before each read
path (so a timeout says where it hung), ``OBS <json>`` for each observation (``corrupt``, ``exception``,
``wrong``, ``loss``, ``timeout``), and ``DONE`` at the end.

Order: the CLI (``pystore verify`` / ``inspect``, read-only), the offline tools (``iter_commitlog``,
``iter_consume_queue``), the Spark source's planner and decoder over the whole log when the case asks for it
(``spark``: no session, the slices read one by one), a read-only open and every read path, then a read-write
open (recovery), every read path, a few new puts read back.

What is checked against the manifest:

* a served message must be a manifest record at the offset it was asked for (or found at), of the queue it
  was read from, at the unit it came from; its body must be the one put (the body CRC lets a store see
  any change to it). When the record's bytes are *intact* (outside every damaged range) every field is
  compared: topic, queue id, queue offset, commit-log offset, body, tags, keys;
* an unfiltered FOUND page may not skip units (``next_begin_offset - offset == len(messages)``);
* an acknowledged put (PUT_OK) must read back;
* after an open that succeeded, every *protected* record (intact, and not after commit-log damage when the
  checkpoint that would make it durable was damaged too) must be served by ``get_message`` on its queue and
  by ``look_message_by_offset``, unless that read raised ``StoreCorruptedError`` (reported as ``corrupt``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import traceback

from tests.fuzz.common import BASE_MS, CL_FILE, CLI_SETS, CONFIG, CQ_FILE, SCHEDULE_TOPIC, half_full, load

CQ_UNIT = 20

MAX_NOTES = 3


class Case:
    def __init__(self, spec: dict) -> None:
        self.root = spec["root"]
        self.ref = spec["ref"]
        self.cli = spec.get("cli", False)
        self.spark = spec.get("spark", False)
        self.cli_timeout = spec.get("cli_timeout", 10)
        self.manifest: list[dict] = load(os.path.join(self.ref, "manifest.json"))  # type: ignore[assignment]
        self.by_off = {r["off"]: r for r in self.manifest}
        for r in self.manifest:
            r["body"] = bytes.fromhex(r["body"])
        self.queues: dict[tuple[str, int], dict[int, dict]] = {}
        for r in self.manifest:
            self.queues.setdefault((r["topic"], r["qid"]), {})[r["qoff"]] = r
        self.keys: dict[tuple[str, str], list[dict]] = {}
        for r in self.manifest:
            for k in r["keys"]:
                self.keys.setdefault((r["topic"], k), []).append(r)
        dmg = spec["damage"]
        self.ranges: dict[str, list[list[int]]] = dmg["ranges"]
        self.dead = set(dmg["dead"])
        cl_hits = [int(f[-20:]) + s for f, rs in self.ranges.items() if f.startswith("commitlog/") for s, _ in rs]
        cl_hits += [int(f[-20:]) for f in self.dead if f.startswith("commitlog/")]
        first = min(cl_hits, default=None)
        self.intact = {r["off"] for r in self.manifest if self._intact(r)}
        # with the checkpoint damaged the store cannot tell durable records from a torn tail: whatever follows
        # the first commit-log damage may be cut (RocketMQ's recovery)
        self.protected = {o for o in self.intact if not (dmg["checkpoint"] and first is not None and o > first)}
        # commit-log files deleted from the head of the log (with every file before them): what the cleaner
        # does to expired files, so skipping their units is the expected answer, not a hidden message
        self.head_gone: set[str] = set()
        for name in sorted({r["file"] for r in self.manifest}):
            if name not in self.dead or name in dmg.get("swapped", ()):
                break
            self.head_gone.add(name)
        # the timer reference: the bodies each real topic and queue may receive from the timer store (a timer's
        # delivery may come again after damage: at least once), and every topic a delivery may create
        self.timers = spec.get("timers", False)
        self.timer_bodies = {(r["real"][0], r["real"][1], r["body"]) for r in self.manifest if "real" in r}
        self.ref_files: dict[str, bytes] = {}
        self.counts: dict[str, int] = {}
        self.part = "tools"              # which part of the run observations belong to (cli, tools, a mode)

    def _intact(self, r: dict) -> bool:
        return self._bytes_intact(r["file"], r["pos"], r["pos"] + r["size"])

    def _bytes_intact(self, name: str, start: int, end: int) -> bool:
        """Are bytes [start, end) of store file ``name`` as put (the file there, no damaged range over them)?"""
        return name not in self.dead and not any(s < end and start < e for s, e in self.ranges.get(name, ()))

    def ref_bytes(self, r: dict) -> bytes:
        if r["file"] not in self.ref_files:
            with open(os.path.join(self.ref, "clean", r["file"]), "rb") as f:
                self.ref_files[r["file"]] = f.read()
        return self.ref_files[r["file"]][r["pos"]:r["pos"] + r["size"]]

    # ---- output --------------------------------------------------------------------------------
    def obs(self, kind: str, msg: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        n = self.counts[kind + " " + self.part] = self.counts.get(kind + " " + self.part, 0) + 1
        if n <= MAX_NOTES:
            out("OBS " + json.dumps({"kind": kind, "msg": msg[:400]}))

    def error(self, where: str, e: BaseException) -> None:
        from pystore.errors import StoreCorruptedError
        if isinstance(e, StoreCorruptedError) and isinstance(getattr(e, "path", None), str) and e.path and \
                isinstance(getattr(e, "offset", None), int) and not isinstance(e.offset, bool):
            self.obs("corrupt", "%s: %s" % (where, e))
        else:
            tb = traceback.extract_tb(e.__traceback__)
            at = "%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else "?"
            self.obs("exception", "%s: %s: %s (at %s)" % (where, type(e).__name__, str(e)[:200], at))

    # ---- checks --------------------------------------------------------------------------------
    def check(self, m, where: str, off: int | None = None, queue: tuple[str, int] | None = None,
              unit: int | None = None) -> bool:
        """Is served message ``m`` right? ``off``: the offset asked for; ``queue``/``unit``: where it was read."""
        got = m.commit_log_offset
        if off is not None and got != off:
            self.obs("wrong", "%s: asked for commit-log offset %d, got a record claiming offset %d (%s/%d qoff %d)"
                     % (where, off, got, m.topic, m.queue_id, m.queue_offset))
            return False
        rec = self.by_off.get(got)
        if rec is None and off is None and (m.topic, m.queue_id, m.body) in self.timer_bodies:
            return True         # a timer delivered by this open, to its own topic and queue, with its own body
        if rec is None:
            self.obs("wrong", "%s: served a message at commit-log offset %d, where no message was put%s" % (
                where, got, " (a timer delivery?: %s/%d, a body no timer to it has)" % (m.topic, m.queue_id)
                if self.timers else ""))
            return False
        if queue is not None:
            if (m.topic, m.queue_id) != queue or (rec["topic"], rec["qid"]) != queue:
                self.obs("wrong", "%s: served offset %d, a record of %s/%d (served as %s/%d)" % (
                    where, got, rec["topic"], rec["qid"], m.topic, m.queue_id))
                return False
            if unit is not None and self.queues[queue].get(unit) is not rec:
                want = self.queues[queue].get(unit)
                self.obs("wrong", "%s: unit %d is offset %s, served offset %d (qoff %d)" % (
                    where, unit, want and want["off"], got, rec["qoff"]))
                return False
            if m.queue_offset != rec["qoff"]:
                self.obs("wrong", "%s: offset %d served with queue offset %d, put at %d" % (
                    where, got, m.queue_offset, rec["qoff"]))
                return False
        if m.body != rec["body"]:
            self.obs("wrong", "%s: offset %d served a body of %d bytes that differs from the one put (%d bytes)%s"
                     % (where, got, len(m.body), len(rec["body"]),
                        "" if got not in self.intact else " though its record is intact"))
            return False
        if got in self.intact:
            mine = (m.topic, m.queue_id, m.queue_offset, m.tags, list(m.keys))
            put = (rec["topic"], rec["qid"], rec["qoff"], rec["tags"], rec["keys"])
            if mine != put:
                self.obs("wrong", "%s: intact offset %d served as %r, put as %r" % (where, got, mine, put))
                return False
        return True

    # ---- read paths ----------------------------------------------------------------------------
    def run(self) -> None:
        if self.cli:
            self.part = "cli"
            for verb in ("verify", "inspect"):
                step("cli " + verb)
                self.run_cli(verb)
        self.part = "tools"
        step("iter_commitlog")
        self.guard("iter_commitlog", self.tool_commitlog)
        step("iter_consume_queue")
        self.guard("iter_consume_queue", self.tool_consume_queue)
        if self.spark:
            self.part = "spark"
            step("spark plan and read")
            self.guard("spark read", self.spark_read)
            step("spark read of the queues")
            self.guard("spark queue read", self.spark_queue_read)
        self.phase(True)
        self.phase(False)

    def guard(self, where: str, fn, *args) -> object:
        try:
            return fn(*args)
        except Exception as e:          # noqa: BLE001 - every exception is an outcome
            self.error(where, e)
            return e

    def run_cli(self, verb: str) -> None:
        cmd = [sys.executable, "-m", "pystore", verb, self.root] + CLI_SETS
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.cli_timeout,
                               env=dict(os.environ, COLUMNS="200", NO_COLOR="1"))
        except subprocess.TimeoutExpired:
            self.obs("timeout", "`pystore %s` did not finish in %d s" % (verb, self.cli_timeout))
            return
        text = p.stdout + p.stderr
        if p.returncode not in (0, 1) or "Traceback" in text:
            last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or [""]
            self.obs("exception", "`pystore %s` exit %d%s: %s" % (
                verb, p.returncode, " with a traceback" if "Traceback" in text else "", last[0][:200]))

    def tool_commitlog(self) -> None:
        from pystore.tools import iter_commitlog
        prev = -1
        for m in iter_commitlog(os.path.join(self.root, "commitlog")):
            if m.commit_log_offset <= prev:
                self.obs("wrong", "iter_commitlog: yielded offset %d after %d" % (m.commit_log_offset, prev))
                return
            prev = m.commit_log_offset
            if not self.check(m, "iter_commitlog"):
                return

    def tool_consume_queue(self) -> None:
        from pystore.tools import iter_consume_queue
        base = os.path.join(self.root, "consumequeue")
        for topic in sorted(os.listdir(base)):
            for qid in sorted(os.listdir(os.path.join(base, topic))):
                where = "iter_consume_queue(%s/%s)" % (topic, qid)
                self.guard(where, lambda d: sum(1 for _ in iter_consume_queue(d)), os.path.join(base, topic, qid))

    def spark_read(self) -> None:
        """What a Spark task set reads of the whole log, offline (the data source's planner and decoder,
        without a Spark session): the slices planned from the damaged files, every one read. A Spark job
        fails when any task does, so one slice refusing (``StoreCorruptedError``) refuses the read; a read
        that completes must serve each record at most once, as put, and every intact record."""
        import pystore.spark.batch as batch
        from pystore.spark.batch import Filters, plan_commit_log_slices, read_slice
        from pystore.spark.schema import arrow_schema

        # the cuts asked of the (possibly damaged) consume queues, not a walk, which a log this small gets
        batch._WALK_BELOW = 0
        schema = arrow_schema()
        # slices of a fifth of a file, at least four: cuts inside files, taken from the consume queues
        rows = self._spark_rows("spark read", plan_commit_log_slices(self.root, CL_FILE // 5, 4),
                                lambda part: read_slice(part, Filters([], -1, None, None, True), schema))
        if rows is None:
            return
        seen: set[int] = set()
        for r in rows:
            off = r["commit_log_offset"]
            rec = self.by_off.get(off)
            if off in seen:
                self.obs("wrong", "spark read: the record at %d served twice" % off)
                return
            seen.add(off)
            if rec is None or r["body"] != rec["body"]:
                self.obs("wrong", "spark read: a row at %d that is not the record put there" % off)
                return
            if off in self.intact and (r["topic"], r["queue_id"], r["queue_offset"]) != (
                    rec["topic"], rec["qid"], rec["qoff"]):
                self.obs("wrong", "spark read: intact record %d served as %s/%d qoff %d" % (
                    off, r["topic"], r["queue_id"], r["queue_offset"]))
                return
        missing = sorted(self.intact - seen)
        if missing:
            r = self.by_off[missing[0]]
            self.obs("loss", "spark read: %d intact records not served, first offset %d (file %s)" % (
                len(missing), r["off"], r["file"][-20:]))

    def spark_queue_read(self) -> None:
        """What a Spark read of every topic (``topics``: through the consume queues, ``failOnDataLoss``
        false, slices of a few units) returns, offline as above: a row must be the record its queue's unit
        points at, at most once; every intact record must be served unless the read refused, or its unit's
        record lies in a file deleted from the log's head (the loss that option accepts)."""
        from pystore.spark.source import PystoreDataSource

        topics = sorted({t for t, _ in self.queues})
        ds = PystoreDataSource({"path": self.root, "topics": ",".join(topics), "failOnDataLoss": "false",
                                "messages_per_partition": "7", "minPartitions": "4"})
        reader = ds.reader(ds.schema())
        rows = self._spark_rows("spark queue read", reader.partitions(), reader.read)
        if rows is None:
            return
        seen: set[tuple[str, int, int]] = set()
        served: set[int] = set()
        for r in rows:
            key = (r["topic"], r["queue_id"], r["queue_offset"])
            rec = self.queues.get(key[:2], {}).get(key[2])
            if key in seen:
                self.obs("wrong", "spark queue read: %s/%d qoff %d served twice" % key)
                return
            seen.add(key)
            if rec is None or rec["off"] != r["commit_log_offset"] or rec["body"] != r["body"]:
                self.obs("wrong", "spark queue read: %s/%d qoff %d served offset %d, which is not the message put "
                         "there" % (key + (r["commit_log_offset"],)))
                return
            served.add(rec["off"])
        # a record whose unit is damaged or gone may be missing: a queue whose last units are lost reads as a
        # shorter queue, as nothing in the queue's own files says otherwise (the store's open finds them in the
        # commit log; a read of the log serves them); every intact unit's record must be served
        missing = sorted(o for o in self.intact - served if self.by_off[o]["topic"] in topics
                         and self._unit_intact(self.by_off[o]))
        if missing:
            r = self.by_off[missing[0]]
            self.obs("loss", "spark queue read: %d intact messages not served, first offset %d (%s/%d qoff %d)" % (
                len(missing), r["off"], r["topic"], r["qid"], r["qoff"]))

    def _spark_rows(self, where: str, parts, read) -> list[dict] | None:
        """The rows of every partition, as ``read(partition)`` yields them in Arrow batches, or None when one
        refused (``StoreCorruptedError``, observed): a Spark job fails when any of its tasks does."""
        from pystore.errors import StoreCorruptedError

        rows: list[dict] = []
        try:
            for part in parts:
                for rb in read(part):
                    rows.extend(rb.select(["commit_log_offset", "topic", "queue_id", "queue_offset", "body"])
                                .to_pylist())
        except StoreCorruptedError as e:
            self.error(where, e)
            return None
        return rows

    def _unit_place(self, r: dict) -> tuple[str, int]:
        """The consume-queue file (relative to the root) and the position in it of record ``r``'s unit."""
        byte = r["qoff"] * CQ_UNIT
        first = byte - byte % CQ_FILE
        return "consumequeue/%s/%d/%020d" % (r["topic"], r["qid"], first), byte - first

    def _unit_intact(self, r: dict) -> bool:
        name, pos = self._unit_place(r)
        return self._bytes_intact(name, pos, pos + CQ_UNIT)

    def phase(self, read_only: bool) -> None:
        from pystore import MessageStore
        mode = self.part = "read-only" if read_only else "read-write"
        step("open " + mode)
        t0 = time.monotonic()
        clock = lambda: BASE_MS + 600_000 + int((time.monotonic() - t0) * 1000)  # noqa: E731
        # the open's warnings are let through to one handler (logging is off otherwise), which keeps them quiet
        said = _LagSaid()
        logging.getLogger("pystore").addHandler(said)
        logging.disable(logging.INFO)
        try:
            store = MessageStore.open(self.root, read_only=read_only, clock=clock, disk_usage=half_full, **CONFIG)
        except Exception as e:          # noqa: BLE001
            self.error("open " + mode, e)
            return
        finally:
            logging.disable(logging.CRITICAL)
            logging.getLogger("pystore").removeHandler(said)
        self.lag_from = said.offset if read_only else None
        try:
            if not read_only and self.timers:
                step("timer catch-up")
                self.guard("timer catch-up", self.timer_catch_up, store, clock)
            self.reads(store, mode)
            if not read_only:
                step("puts")
                self.guard("%s puts" % mode, self.puts, store, mode)
        finally:
            step("shutdown " + mode)
            self.guard("shutdown " + mode, store.shutdown)
        if not read_only and self.timers:
            # a timer delivered anywhere but the topics put to (or the fuzz puts') is a wrong delivery
            known = {r["topic"] for r in self.manifest} | {"TopicA", "TopicB", "TopicC", "TopicNew"}
            base = os.path.join(self.root, "consumequeue")
            for topic in sorted(set(os.listdir(base)) - known if os.path.isdir(base) else ()):
                self.obs("wrong", "read-write: a queue of topic %r appeared, where nothing was put" % topic)

    def timer_catch_up(self, store, clock) -> None:
        """Give the timer store of a read-write open up to 3 s to deliver what is due at the open (its threads run
        beside the reads either way: this only makes them meet what it delivers)."""
        ts = store.timer_message_store
        deadline = time.monotonic() + 3
        while ts is not None and ts.opened and time.monotonic() < deadline:
            if ts.curr_read_time_ms >= clock() // 1000 * 1000 - 1000:
                return
            time.sleep(0.02)

    def reads(self, store, mode: str) -> None:
        from pystore import TagFilter
        excused: set[int] = set()       # a read of it raised: reported as corrupt / exception, not as loss
        self.stops: dict[tuple[str, int], str] = {}     # how each unfiltered queue read ended
        self.skips: dict[tuple[str, int], str] = {}     # the first page that went past messages it did not serve
        seen_get: set[int] = set()
        seen_look: set[int] = set()
        for (topic, qid), units in sorted(self.queues.items()):
            step("get_message %s %s/%d" % (mode, topic, qid))
            where = "%s get_message(%s, %d)" % (mode, topic, qid)
            if self.guard(where, self.read_queue, store, mode, topic, qid, seen_get, None) is not None:
                excused.update(r["off"] for r in units.values())
            if topic != SCHEDULE_TOPIC:
                self.guard(where + " TagA||TagB", self.read_queue, store, mode, topic, qid, set(),
                           TagFilter("TagA || TagB"))
        step("look_message_by_offset " + mode)
        for r in self.manifest:
            got = self.guard("%s look_message_by_offset(%d)" % (mode, r["off"]), store.look_message_by_offset,
                             r["off"])
            if isinstance(got, Exception):
                excused.add(r["off"])
            elif got is not None and self.check(got, "%s look_message_by_offset(%d)" % (mode, r["off"]), r["off"]):
                seen_look.add(r["off"])
        for r in self.manifest[::29]:
            for d in (1, 4, 8):
                if r["off"] + d in self.by_off:
                    continue
                got = self.guard("%s look_message_by_offset(%d)" % (mode, r["off"] + d),
                                 store.look_message_by_offset, r["off"] + d)
                if got is not None and not isinstance(got, Exception):
                    self.obs("wrong", "%s look_message_by_offset(%d) (inside the record at %d) returned a message "
                             "claiming offset %d" % (mode, r["off"] + d, r["off"], got.commit_log_offset))
        step("view_message_by_id " + mode)
        for r in self.manifest[::3]:
            got = self.guard("%s view_message_by_id(%s)" % (mode, r["msg_id"]), store.view_message_by_id, r["msg_id"])
            if got is not None and not isinstance(got, Exception):
                self.check(got, "%s view_message_by_id(%d)" % (mode, r["off"]), r["off"])
        step("query_message " + mode)
        keys = sorted(self.keys)
        if mode == "read-only":         # each read-only query refreshes the view first: a sample
            keys = keys[::5]
        for (topic, key) in keys:
            where = "%s query_message(%s, %s)" % (mode, topic, key)
            step(where)
            res = self.guard(where, store.query_message, topic, key)
            if isinstance(res, Exception):
                continue
            for m in res.messages:
                if m.topic != topic or key not in m.keys:
                    self.obs("wrong", "%s: served offset %d of topic %s keys %r" % (
                        where, m.commit_log_offset, m.topic, list(m.keys)))
                else:
                    self.check(m, where)
        step("get_offset_in_queue_by_time " + mode)
        for (topic, qid) in sorted(self.queues):
            for ts in (0, BASE_MS + 1500, BASE_MS + 10 ** 7):
                for b in ("lower", "upper"):
                    where = "%s get_offset_in_queue_by_time(%s, %d, %d, %s)" % (mode, topic, qid, ts, b)
                    v = self.guard(where, store.get_offset_in_queue_by_time, topic, qid, ts, b)
                    if not isinstance(v, (int, Exception)):
                        self.obs("exception", "%s returned %r" % (where, v))
        step("get_commit_log_data " + mode)
        starts = sorted({r["off"] - r["off"] % CL_FILE for r in self.manifest})
        for off in starts + [r["off"] for r in self.manifest[::7]]:
            self.guard("%s get_commit_log_data(%d)" % (mode, off), self.commit_log_data, store, off)
        step("loss check " + mode)
        for kind, seen in (("get_message", seen_get), ("look_message_by_offset", seen_look)):
            missing = sorted(self.protected - seen - excused)
            if missing and kind == "get_message" and self.lag_from is not None:
                # said in the log and served by offset: the lag of a crashed store's reader, not a loss
                lag = [o for o in missing if o >= self.lag_from and o in seen_look]
                if lag:
                    self.obs("lag", "%s get_message: %d records after the furthest unit (from %d), said in the log "
                             "and served by offset" % (mode, len(lag), self.lag_from))
                    missing = [o for o in missing if o not in lag]
            if missing:
                r = self.by_off[missing[0]]
                how = ""
                if kind == "get_message":
                    q = (r["topic"], r["qid"])
                    how = "; reading %s/%d: %s" % (q + (self.skips.get(q) or self.stops.get(q, "?"),))
                self.obs("loss", "%s %s: %d intact messages not served, first offset %d (%s/%d qoff %d, file %s)%s"
                         % (mode, kind, len(missing), r["off"], r["topic"], r["qid"], r["qoff"], r["file"][-20:], how))

    def read_queue(self, store, mode: str, topic: str, qid: int, seen: set[int], filt) -> None:
        from pystore import GetMessageStatus
        queue = (topic, qid)
        off = 0
        where = "%s get_message(%s, %d%s)" % (mode, topic, qid, ", TagA||TagB" if filt else "")
        for _ in range(1000):
            r = store.get_message("fuzz", topic, qid, off, 32, filt)
            if r is None:
                self.stops[queue] = "get_message(offset %d) returned None" % off
                return
            if filt is None:
                self.stops[queue] = "the last page: offset %d %s next %d (min %d max %d)" % (
                    off, r.status.name, r.next_begin_offset, r.min_offset, r.max_offset)
            nxt = r.next_begin_offset
            if r.status == GetMessageStatus.FOUND:
                msgs = r.messages
                skipped = nxt - off - len(msgs)
                served = {m.commit_log_offset for m in msgs}
                units = self.queues.get(queue, {})
                hidden = [units[u] for u in range(off, nxt) if u in units and units[u]["off"] not in served]
                if filt is None and skipped > 0 and not all(h["file"] in self.head_gone for h in hidden):
                    n_intact = sum(h["off"] in self.intact for h in hidden)
                    self.obs("wrong", "%s at %d: FOUND %d messages but next_begin_offset is %d (%d units skipped: %d "
                             "intact records, %d damaged or gone)" % (where, off, len(msgs), nxt, skipped, n_intact,
                                                                      len(hidden) - n_intact))
                for j, m in enumerate(msgs):
                    unit = off + j if filt is None and skipped == 0 else None
                    if filt is not None and m.tags not in ("TagA", "TagB"):
                        self.obs("wrong", "%s at %d: served tags %r" % (where, off, m.tags))
                    elif self.check(m, "%s at %d" % (where, off), queue=queue, unit=unit):
                        seen.add(m.commit_log_offset)
                if nxt <= off:
                    if not msgs:
                        return
                    self.obs("wrong", "%s at %d: FOUND but next_begin_offset %d does not advance" % (where, off, nxt))
                    return
            elif nxt <= off or r.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE,
                                            GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                                            GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                                            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
                return
            if filt is None and queue not in self.skips:
                units = self.queues.get(queue, {})
                served = {m.commit_log_offset for m in r.messages} if r.status == GetMessageStatus.FOUND else set()
                hidden = [u for u in range(off, min(nxt, off + 100_000)) if u in units and units[u]["off"] not in served]
                if hidden:
                    self.skips[queue] = "at offset %d %s with %d messages, next_begin_offset %d (queue offsets %s " \
                        "not served)" % (off, r.status.name, len(r.messages), nxt, _span(hidden))
            off = nxt

    def commit_log_data(self, store, off: int) -> None:
        buf = store.get_commit_log_data(off)
        if buf is None:
            return
        try:
            data = buf.tobytes()
        finally:
            buf.release()
        rec = self.by_off.get(off)
        if rec is not None and off in self.intact:
            want = self.ref_bytes(rec)
            n = min(len(want), len(data))
            if data[:n] != want[:n]:
                self.obs("wrong", "get_commit_log_data(%d): bytes differ from the intact record there" % off)

    def puts(self, store, mode: str) -> None:
        from pystore import GetMessageStatus, Message, MessageBatch, PutMessageStatus
        msgs = [Message(t, b"fuzz put %d" % n, tags="TagZ", keys=["fz%d" % n], queue_id=q)
                for n, (t, q) in enumerate([("TopicA", 0), ("TopicB", 1), ("TopicC", 0), ("TopicNew", 0)])]
        written = []
        for m in msgs:
            r = store.put_message(m)
            if r.status == PutMessageStatus.PUT_OK:
                a = r.append_message_result
                written.append((m, a.wrote_offset, a.logics_offset))
        batch = [Message("TopicA", b"fuzz batch %d" % n, tags="TagZ", keys=["fzb%d" % n], queue_id=1) for n in range(3)]
        r = store.put_messages(MessageBatch(batch))
        if r.status == PutMessageStatus.PUT_OK:
            a = r.append_message_result
            off = a.wrote_offset
            for n, m in enumerate(batch):
                got = store.look_message_by_offset(off)
                if got is None:
                    self.obs("wrong", "%s: batch put PUT_OK at %d, message %d at %d cannot be read back" % (
                        mode, a.wrote_offset, n, off))
                    break
                written.append((m, off, a.logics_offset + n))
                off += got.store_size
        for m, off, qoff in written:
            got = store.look_message_by_offset(off)
            want = (m.topic, m.queue_id, qoff, off, m.body, m.tags, list(m.keys))
            have = got and (got.topic, got.queue_id, got.queue_offset, got.commit_log_offset, got.body, got.tags,
                            list(got.keys))
            if have != want:
                self.obs("wrong", "%s: put PUT_OK at %d, look_message_by_offset read back %r" % (mode, off, have))
                continue
            g = store.get_message("fuzz", m.topic, m.queue_id, qoff, 1)
            if g is None or g.status != GetMessageStatus.FOUND or not g.messages or \
                    g.messages[0].commit_log_offset != off or g.messages[0].body != m.body:
                self.obs("wrong", "%s: put PUT_OK at %d (%s/%d qoff %d), get_message gives %s" % (
                    mode, off, m.topic, m.queue_id, qoff, g and g.status))


def _span(units: list[int]) -> str:
    return str(units[0]) if len(units) == 1 else "%d..%d" % (units[0], units[-1]) if \
        units[-1] - units[0] + 1 == len(units) else "%s (%d)" % (",".join(map(str, units[:5])), len(units))


def out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _LagSaid(logging.Handler):
    """Catches the reader's word that records lie after the furthest consume-queue unit (``recovery``), and
    swallows every other record."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.offset: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r"after the furthest consume-queue unit \(from offset (\d+)\)", record.getMessage())
        if m:
            self.offset = int(m.group(1))


def step(what: str) -> None:
    out("STEP " + what)


def main() -> None:
    logging.disable(logging.CRITICAL)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    case = Case(load(sys.argv[1]))       # type: ignore[arg-type]
    case.run()
    out("COUNTS " + json.dumps({k: v for k, v in case.counts.items() if " " not in k}))
    out("DONE")


if __name__ == "__main__":
    main()
