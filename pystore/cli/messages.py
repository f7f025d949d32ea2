"""``pystore put``, ``get`` and ``query``: store messages, read a queue, find messages by key or id."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import click
from rich.text import Text

from pystore.cli.common import (
    OK,
    PROBLEM,
    ROW_HEADER,
    TABLE_ROWS,
    console,
    err_console,
    esc,
    handle_store_errors,
    message_dict,
    messages_table,
    open_store,
    parse_time,
    print_json,
    print_rows,
    store_options,
    table,
)


def _split_keys(keys: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for k in keys:
        out.extend(x for x in re.split(r"[\s,]+", k) if x)
    return out


@click.command(short_help="store messages (BODY, --file or --stdin)")
@click.argument("root", type=click.Path())
@click.argument("body", required=False)
@click.option("--topic", "-t", required=True, help="topic")
@click.option("--tags", help="tags (one string, as RocketMQ)")
@click.option("--keys", "-k", multiple=True, help="keys, space- or comma-separated; repeatable")
@click.option("--queue-id", "-q", default=0, show_default=True, type=click.IntRange(0, 2**31 - 1))
@click.option(
    "--property", "-p", "props", multiple=True, metavar="KEY=VALUE", help="a user property; repeatable"
)
@click.option("--file", "-f", "file_", type=click.File("rb"), help="the body is this file")
@click.option("--stdin", "from_stdin", is_flag=True, help="one message per line of stdin")
@click.option("--sync", is_flag=True, help="SYNC_FLUSH: each put returns once on disk")
@click.option("--create", is_flag=True, help="make a new store at ROOT when there is none (else an error)")
@click.option("--shared-writers", is_flag=True,
              help="open as one of several writer processes (the store's other writers must open it so too)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@store_options
@handle_store_errors
def put(
    root: str,
    body: str | None,
    topic: str,
    tags: str | None,
    keys: tuple[str, ...],
    queue_id: int,
    props: tuple[str, ...],
    file_: Any,
    from_stdin: bool,
    sync: bool,
    create: bool,
    shared_writers: bool,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Store messages in TOPIC: BODY, or --file F, or --stdin (one message per line). ROOT must hold a
    store, unless --create makes one. A refused put says why, and exits 1."""
    from pystore import Message

    sources = sum(x is not None and x is not False for x in (body, file_, from_stdin or None))
    if sources != 1:
        raise click.UsageError("give exactly one of BODY, --file or --stdin")
    properties = {}
    for p in props:
        if "=" not in p:
            raise click.BadParameter("expected KEY=VALUE, got %r" % p, param_hint="--property")
        k, v = p.split("=", 1)
        properties[k] = v
    if body is not None:
        bodies: Any = [body.encode("utf-8")]
    elif file_ is not None:
        bodies = [file_.read()]
    else:
        binary = getattr(sys.stdin, "buffer", None)
        if binary is not None:
            bodies = (line.rstrip(b"\r\n") for line in binary)
        else:
            # a text-only stdin (IDLE, an embedding program's StringIO) yields str: encode as BODY is
            bodies = (line.rstrip("\r\n").encode("utf-8") for line in sys.stdin)
    key_list = _split_keys(keys) or None
    defaults: dict[str, Any] = {"flush_disk_type": "SYNC_FLUSH"} if sync else {}
    if shared_writers:
        defaults["shared_writers"] = True
    rows = []
    bad = 0
    hint = "; `pystore put --create %s ...` makes one" % root
    with open_store(root, config_file, sets, read_only=False, create=create, hint=hint, **defaults) as store:
        for b in bodies:
            try:
                m = Message(topic, b, tags=tags, keys=key_list, queue_id=queue_id, properties=properties or None)
            except (TypeError, ValueError) as e:  # a separator character in a key, tag or property
                raise click.BadParameter(str(e)) from None
            r = store.put_message(m)
            a = r.append_message_result
            ok = r.is_ok()
            bad += not ok
            rows.append(
                {
                    "status": r.status.name,
                    "commit_log_offset": a.wrote_offset if a is not None and ok else None,
                    "queue_offset": a.logics_offset if a is not None and ok else None,
                    "msg_id": a.msg_id if a is not None and ok else None,
                    "size": len(b),
                    # derived only for a refusal: the accepted put does no extra work
                    "reason": r.reason,
                }
            )
    if not rows:
        # an empty input is nothing to do, not a failure (as `xargs` with no input)
        if as_json:
            print_json([])
        else:
            err_console.print("nothing to put (empty input)")
        sys.exit(OK)
    if as_json:
        print_json(rows if from_stdin else rows[0])
    else:
        t = table("put into %s (queue %d)" % (topic, queue_id))
        for col in ("#", "status", "commit-log offset", "queue offset", "msg id", "body bytes"):
            t.add_column(col, justify="left" if col in ("status", "msg id") else "right")
        shown = rows if len(rows) <= 20 else rows[:10] + rows[-10:]
        for i, row in enumerate(shown):
            n = i if len(rows) <= 20 or i < 10 else len(rows) - 20 + i
            t.add_row(
                str(n),
                Text(row["status"], style="green" if row["status"] == "PUT_OK" else "red"),
                str(row["commit_log_offset"] if row["commit_log_offset"] is not None else "-"),
                str(row["queue_offset"] if row["queue_offset"] is not None else "-"),
                row["msg_id"] or "-",
                str(row["size"]),
            )
        console.print(t)
        if len(rows) > 20:
            console.print("(%d messages; first and last 10 shown)" % len(rows))
        if bad:
            console.print("[red]%d of %d puts refused[/red]" % (bad, len(rows)))
            reasons: dict[tuple[str, str], int] = {}
            for row in rows:
                if row["status"] != "PUT_OK":
                    key = (row["status"], row["reason"] or "no reason known")
                    reasons[key] = reasons.get(key, 0) + 1
            for (status, reason), n in reasons.items():
                console.print("refused (%s%s): %s" % (status, "" if n == 1 else ", %d puts" % n, esc(reason)))
    sys.exit(PROBLEM if bad else OK)


# the statuses of a read that went as far as it could (shown green; the others yellow, all exit 0)
_GET_END_OK = {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_OVERFLOW_ONE"}
#: ms one waiting get of ``get --follow`` waits before it gets again (a bound, not a poll: a put wakes it)
_FOLLOW_WAIT_MS = 1000
#: s ``get --follow`` pauses after an answer that neither waited nor moved on (an offset past the end)
_FOLLOW_PAUSE_S = 0.2


def _follow(
    root: str,
    topic: str,
    queue_id: int,
    offset: int,
    flt: Any,
    group: str,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """``get --follow``: rows (or one JSON object a line) as the messages arrive, flushed after each get, until
    Ctrl-C (exit 130) or the reader of the output goes away (exit 0); common.CliGroup ends both."""
    import time

    from pystore.status import GetMessageStatus

    waits = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE,
             GetMessageStatus.NO_MATCHED_MESSAGE)
    with open_store(root, config_file, sets) as store:
        if not as_json:
            click.echo(ROW_HEADER)
        nxt = offset
        while True:
            r = store.get_message(group, topic, queue_id, nxt, 32, flt, timeout_ms=_FOLLOW_WAIT_MS)
            if r.messages:
                if as_json:
                    click.echo("\n".join(json.dumps(message_dict(m), default=str) for m in r.messages))
                else:
                    print_rows(r.messages)
                sys.stdout.flush()
            elif r.next_begin_offset == nxt and r.status not in waits:
                time.sleep(_FOLLOW_PAUSE_S)
            nxt = r.next_begin_offset


@click.command(short_help="read a queue from an offset (get_message)")
@click.argument("root", type=click.Path())
@click.argument("topic")
@click.argument("queue_id", type=click.IntRange(0, 2**31 - 1))
@click.argument("offset", type=click.IntRange(0, None))
@click.option(
    "--max",
    "-n",
    "max_n",
    default=32,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="messages to read (several get_message calls past 32)",
)
@click.option("--tags", help='tag filter, RocketMQ style: "TagA || TagB"')
@click.option("--group", default="pystore-cli", show_default=True, help="consumer group name")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="keep printing messages as they arrive (no --max; Ctrl-C ends it): rows, or JSON lines with --json",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@store_options
@handle_store_errors
def get(
    root: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_n: int,
    tags: str | None,
    group: str,
    follow: bool,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Read messages of TOPIC/QUEUE_ID from queue offset OFFSET (get_message); with --follow, go on reading
    as a writer in another process puts more (a long-polling get: no CPU while nothing arrives)."""
    from pystore import TagFilter

    flt = TagFilter(tags) if tags else None
    if follow:
        _follow(root, topic, queue_id, offset, flt, group, as_json, config_file, sets)
        return
    title = "%s/%d from offset %d%s" % (topic, queue_id, offset, " (tags %s)" % flt.expression if flt else "")
    held: list[Any] = []  # for the table or the JSON; streamed rows are not held
    count = 0
    streaming = False
    with open_store(root, config_file, sets) as store:
        nxt = offset
        calls = 0
        statuses: list[str] = []
        while True:
            r = store.get_message(group, topic, queue_id, nxt, min(32, max_n - count), flt)
            calls += 1
            if not statuses or statuses[-1] != r.status.name:
                statuses.append(r.status.name)
            count += len(r.messages)
            if streaming:
                print_rows(r.messages)
            else:
                held.extend(r.messages)
                if not as_json and len(held) > TABLE_ROWS:
                    # too many for a table (rich lays one out whole): plain rows from here, as they are read
                    streaming = True
                    click.echo(ROW_HEADER)
                    print_rows(held)
                    held = []
            moved = r.next_begin_offset != nxt
            nxt = r.next_begin_offset
            if count >= max_n or r.status.name not in ("FOUND", "NO_MATCHED_MESSAGE") or not moved:
                break
        status = r.status.name
        if as_json:
            print_json(
                {
                    "status": status,
                    "statuses": statuses,
                    "next_begin_offset": nxt,
                    "min_offset": r.min_offset,
                    "max_offset": r.max_offset,
                    "messages": [message_dict(m) for m in held],
                }
            )
            return
        if held:
            console.print(messages_table(held, title))
        style = "green" if status in _GET_END_OK else "yellow"
        # every status is the store's answer (exit 0); after streamed rows the line goes to stderr, so
        # stdout stays rows only
        (err_console if streaming else console).print(
            "status [%s]%s[/%s]  messages %d  next offset %d  queue min %d max %d  (%d call%s)"
            % (
                style,
                " -> ".join(statuses),
                style,
                count,
                nxt,
                r.min_offset,
                r.max_offset,
                calls,
                "" if calls == 1 else "s",
            )
        )


@click.command(short_help="find messages by key, or one by --msg-id")
@click.argument("root", type=click.Path())
@click.argument("topic", required=False)
@click.argument("key", required=False)
@click.option("--msg-id", help="view the message with this offset message id instead")
@click.option("--max", "-n", "max_n", default=32, show_default=True, type=click.IntRange(1, 64))
@click.option("--begin", help="store time from (epoch ms or ISO-8601, UTC by default)")
@click.option("--end", help="store time to (epoch ms or ISO-8601)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@store_options
@handle_store_errors
def query(
    root: str,
    topic: str | None,
    key: str | None,
    msg_id: str | None,
    max_n: int,
    begin: str | None,
    end: str | None,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Find messages of TOPIC by KEY (keys or UNIQ_KEY, through the index), or one by --msg-id."""
    if msg_id is not None:
        if topic is not None or key is not None:
            raise click.UsageError("--msg-id takes no TOPIC or KEY")
    elif topic is None or key is None:
        raise click.UsageError("give TOPIC and KEY, or --msg-id")
    b = parse_time(begin)
    e = parse_time(end)
    with open_store(root, config_file, sets) as store:
        if msg_id is not None:
            try:
                m = store.view_message_by_id(msg_id.strip())
            except ValueError as err:
                raise click.BadParameter(str(err), param_hint="--msg-id") from None
            found = [m] if m is not None else []
            title = "message %s" % msg_id
            extra = {}
        else:
            r = store.query_message(topic, key, max_n, 0 if b is None else b, 2**63 - 1 if e is None else e)
            found = r.messages
            title = "%s key %r" % (topic, key)
            extra = {
                "index_last_update_timestamp": r.index_last_update_timestamp,
                "index_last_update_phyoffset": r.index_last_update_phyoffset,
            }
    if as_json:
        print_json(dict(extra, messages=[message_dict(m) for m in found]))
    elif found:
        t = messages_table(found, title)
        console.print(t)
        if msg_id is not None:
            m = found[0]
            console.print(
                "topic %s  queue %d  store host %s:%d  born host %s:%d"
                % (m.topic, m.queue_id, m.store_host[0], m.store_host[1], m.born_host[0], m.born_host[1])
            )
    else:
        # finding nothing is an answer (exit 0), as an empty get or export is
        console.print("[yellow]no message found[/yellow] (%s)" % esc(title))
