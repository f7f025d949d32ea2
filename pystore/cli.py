"""The ``pystore`` command line (``python -m pystore`` too).

Every verb but ``bench`` takes the store root as its first argument; ``demo`` defaults to ``./pystore-demo``.
Exit codes: 0 ok, 1 a problem found or an operation refused, 2 a usage error.

Verbs that only read (``get``, ``query``, ``inspect``, ``verify``, ``export``) open the store read-only: no
lock, no writes, safe next to a running writer. ``put``, ``recover`` and ``clean`` open it for writing (a
running writer elsewhere makes them fail with exit 1). Stores opened here keep the geometry of their files
(commit-log, consume-queue and index file sizes); ``--config broker.conf`` and ``-o key=value`` (StoreConfig
fields in snake_case, or broker.conf keys) set anything else.

This module is the one place that prints; the library logs through ``logging`` (shown on stderr from
WARNING, ``-v`` for INFO, ``-vv`` for DEBUG).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from pystore import __version__

__all__ = ["main", "cli"]

OK, PROBLEM, USAGE = 0, 1, 2

console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False)


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------


def _fail(message: str, code: int = PROBLEM) -> NoReturn:
    err_console.print("[red]error:[/red] " + _esc(message))
    sys.exit(code)


def _esc(text: object) -> str:
    from rich.markup import escape

    return escape(str(text))


def handle_store_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the store's exceptions into a message and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pystore.errors import ConfigError, StoreCorruptedError, StoreError, StoreLockedError

        try:
            return fn(*args, **kwargs)
        except StoreLockedError as e:
            _fail("%s\n(a writer has the store open; read-only verbs work next to it)" % e)
        except StoreCorruptedError as e:
            _fail("store corrupted: %s" % e)
        except ConfigError as e:
            _fail("bad configuration: %s" % e, USAGE)
        except StoreError as e:
            _fail(str(e))
        except FileNotFoundError as e:
            _fail("not found: %s" % (e.filename or e))
        except OSError as e:
            _fail("%s%s" % (e.strerror or e, ": %s" % e.filename if e.filename else ""))
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:  # noqa: BLE001 - a damaged store must not end in a traceback
            # what the library did not foresee in a file: one line, the traceback for -vv
            logging.getLogger("pystore.cli").debug("%s failed", fn.__name__, exc_info=True)
            _fail("cannot read the store (%s: %s); -vv shows where" % (type(e).__name__, e))

    return wrapper


def store_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--config broker.conf`` and ``-o key=value`` for verbs that open a store."""
    fn = click.option(
        "-o",
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="a StoreConfig field (snake_case) or broker.conf key; repeatable",
    )(fn)
    fn = click.option(
        "--config",
        "config_file",
        type=click.Path(exists=True, dir_okay=False),
        help="a RocketMQ broker.conf with store settings",
    )(fn)
    return fn


def build_config(
    root: str, config_file: str | None, sets: tuple[str, ...], read_only: bool, **defaults: Any
) -> Any:
    """The StoreConfig for ``root``: ``--config`` < the verb's own settings (``defaults``, e.g.
    ``--sync``) and the geometry of existing files < ``-o``."""
    from pystore.config import StoreConfig, UnknownConfigKeyWarning, _field_for_key
    from pystore.errors import ConfigError
    from pystore.geometry import detect_overrides

    lines = []
    explicit = set()
    for item in sets:
        if "=" not in item:
            raise click.BadParameter("expected KEY=VALUE, got %r" % item, param_hint="-o/--set")
        key = item.split("=", 1)[0].strip()
        name = _field_for_key(key)
        if name is None or name in ("store_path_root_dir", "read_only", "unknown_keys"):
            raise click.BadParameter("%r is not a store setting" % key, param_hint="-o/--set")
        explicit.add(name)
        lines.append(item)
    text = ""
    if config_file:
        with open(config_file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownConfigKeyWarning)
        try:
            cfg = StoreConfig.from_properties(text + "\n" + "\n".join(lines))
        except ConfigError as e:
            raise click.BadParameter(str(e), param_hint="--config/-o") from None
    changes = {k: v for k, v in defaults.items() if k not in explicit}
    changes.update({k: v for k, v in detect_overrides(root).items() if k not in explicit})
    return cfg.replace(store_path_root_dir=root, read_only=read_only, **changes)


@contextmanager
def open_store(
    root: str,
    config_file: str | None = None,
    sets: tuple[str, ...] = (),
    read_only: bool = True,
    **defaults: Any,
) -> Iterator[Any]:
    """A loaded and started store (shut down at the end of the block)."""
    from pystore.errors import StoreError
    from pystore.store import MessageStore

    cfg = build_config(root, config_file, sets, read_only, **defaults)
    if read_only and not any(os.path.isdir(p) for p in cfg.commit_log_paths()):
        _fail("no store at %s (no commit log folder %s)" % (root, cfg.commit_log_paths()[0]))
    store = MessageStore(cfg)
    try:
        if not store.load():
            raise StoreError("the store at %s cannot be loaded (see the log for the file at fault)" % root)
        store.start()
    except BaseException:
        store.shutdown()
        raise
    try:
        yield store
    finally:
        store.shutdown()


def iso(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def parse_time(value: str | None) -> int | None:
    """Epoch ms, or ISO-8601 (UTC when no zone is given)."""
    if value is None:
        return None
    v = value.strip()
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    try:
        t = datetime.datetime.fromisoformat(v)
    except ValueError:
        raise click.BadParameter("expected epoch milliseconds or an ISO-8601 time, got %r" % value) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.UTC)
    return int(t.timestamp() * 1000)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024
    return str(n)


def preview(body: bytes, width: int = 48) -> str:
    text = body[: width * 4].decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "." for c in text)
    return text if len(text) <= width and len(body) <= width * 4 else text[: width - 1] + "…"


def message_dict(m: Any) -> dict[str, Any]:
    """A JSON-able view of a MessageExt (body as text when it is UTF-8, else base64)."""
    import base64

    d: dict[str, Any] = {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "store_size": m.store_size,
        "tags": m.tags,
        "keys": m.keys,
        "properties": m.properties,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "born_host": "%s:%d" % m.born_host,
        "store_host": "%s:%d" % m.store_host,
        "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset,
        "body_crc": m.body_crc,
        "msg_id": m.msg_id,
    }
    body = m.body
    try:
        d["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        d["body_base64"] = base64.b64encode(body).decode("ascii")
    return d


def messages_table(messages: list[Any], title: str | None = None) -> Table:
    t = Table(title=title, title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("queue", "right"),
        ("queue off", "right"),
        ("commit-log off", "right"),
        ("tags", "left"),
        ("keys", "left"),
        ("store time (UTC)", "left"),
        ("size", "right"),
        ("body", "left"),
    )
    for col, just in columns:
        t.add_column(col, justify=just, overflow="fold" if col == "keys" else "ellipsis")
    for m in messages:
        t.add_row(
            str(m.queue_id),
            str(m.queue_offset),
            str(m.commit_log_offset),
            Text(m.tags or ""),
            Text(" ".join(m.keys)),
            iso(m.store_timestamp),
            str(m.store_size),
            Text(preview(m.body)),
        )
    return t


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


# ---------------------------------------------------------------------------------------------------------
# the group
# ---------------------------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("-v", "--verbose", count=True, help="log INFO (-v) or DEBUG (-vv) from the library on stderr")
@click.version_option(version=__version__, prog_name="pystore", message="%(prog)s %(version)s")
def cli(verbose: int) -> None:
    """pystore: an embedded message store with Apache RocketMQ's on-disk format.

    Every verb but bench takes the store root (ROOT) first. Exit codes: 0 ok, 1 a problem found or an
    operation refused, 2 a usage error.
    """
    from rich.logging import RichHandler

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root = logging.getLogger("pystore")
    for h in list(root.handlers):
        if getattr(h, "_pystore_cli", False):
            root.removeHandler(h)
    handler = RichHandler(console=Console(stderr=True), show_time=False, show_path=False, markup=False)
    handler._pystore_cli = True  # type: ignore[attr-defined]
    handler.setLevel(level)
    root.addHandler(handler)
    root.setLevel(min(level, root.level) if root.level else level)
    root.propagate = False


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``pystore`` script."""
    cli.main(args=argv, prog_name="pystore")


# ---------------------------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------------------------


@cli.command(short_help="put, read, query, restart: a tour in a demo store")
@click.argument("root", default="./pystore-demo", type=click.Path(file_okay=False))
@click.option("--fresh", is_flag=True, help="wipe the demo store first (else the demo appends to it)")
@click.option(
    "--spark/--no-spark",
    default=None,
    help="run the Spark part (default: when pystore.spark, pyspark and Java are there, unless "
    "PYSTORE_DEMO_SPARK=0)",
)
@click.option(
    "--messages",
    "-n",
    default=5000,
    show_default=True,
    type=click.IntRange(100, 1_000_000),
    help="single puts (batches add as many again)",
)
@handle_store_errors
def demo(root: str, fresh: bool, spark: bool | None, messages: int) -> None:
    """Put, read, query, restart and show what survived, in a store at ROOT (default ./pystore-demo)."""
    from pystore.demo import run_demo

    ok = run_demo(root, console, fresh=fresh, spark=spark, messages=messages)
    sys.exit(OK if ok else PROBLEM)


# ---------------------------------------------------------------------------------------------------------
# put / get / query
# ---------------------------------------------------------------------------------------------------------


def _split_keys(keys: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for k in keys:
        out.extend(x for x in re.split(r"[\s,]+", k) if x)
    return out


@cli.command(short_help="store messages (BODY, --file or --stdin)")
@click.argument("root", type=click.Path(file_okay=False))
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
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Store messages in TOPIC: BODY, or --file F, or --stdin (one message per line)."""
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
    defaults = {"flush_disk_type": "SYNC_FLUSH"} if sync else {}
    rows = []
    bad = 0
    with open_store(root, config_file, sets, read_only=False, **defaults) as store:
        for b in bodies:
            r = store.put_message(
                Message(topic, b, tags=tags, keys=key_list, queue_id=queue_id, properties=properties or None)
            )
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
                }
            )
    if not rows:
        _fail("nothing to put (empty input)")
    if as_json:
        print_json(rows if from_stdin else rows[0])
    else:
        t = Table(title="put into %s (queue %d)" % (topic, queue_id), title_justify="left")
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
    sys.exit(PROBLEM if bad else OK)


_GET_END_OK = {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_OVERFLOW_ONE"}


@cli.command(short_help="read a queue from an offset (get_message)")
@click.argument("root", type=click.Path(file_okay=False))
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
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Read messages of TOPIC/QUEUE_ID from queue offset OFFSET (get_message)."""
    from pystore import TagFilter

    flt = TagFilter(tags) if tags else None
    got: list[Any] = []
    with open_store(root, config_file, sets) as store:
        nxt = offset
        calls = 0
        statuses: list[str] = []
        while True:
            r = store.get_message(group, topic, queue_id, nxt, min(32, max_n - len(got)), flt)
            calls += 1
            if r is None:
                _fail("the store is not readable")
            if not statuses or statuses[-1] != r.status.name:
                statuses.append(r.status.name)
            got.extend(r.messages)
            moved = r.next_begin_offset != nxt
            nxt = r.next_begin_offset
            if len(got) >= max_n or r.status.name not in ("FOUND", "NO_MATCHED_MESSAGE") or not moved:
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
                    "messages": [message_dict(m) for m in got],
                }
            )
        else:
            if got:
                console.print(
                    messages_table(
                        got,
                        "%s/%d from offset %d%s"
                        % (topic, queue_id, offset, " (tags %s)" % flt.expression if flt else ""),
                    )
                )
            style = "green" if status in _GET_END_OK else "yellow"
            console.print(
                "status [%s]%s[/%s]  messages %d  next offset %d  queue min %d max %d  (%d call%s)"
                % (
                    style,
                    " -> ".join(statuses),
                    style,
                    len(got),
                    nxt,
                    r.min_offset,
                    r.max_offset,
                    calls,
                    "" if calls == 1 else "s",
                )
            )
    sys.exit(OK if got or status in _GET_END_OK else PROBLEM)


@cli.command(short_help="find messages by key, or one by --msg-id")
@click.argument("root", type=click.Path(file_okay=False))
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
        console.print("[yellow]no message found[/yellow] (%s)" % _esc(title))
    sys.exit(OK if found else PROBLEM)


# ---------------------------------------------------------------------------------------------------------
# inspect / verify
# ---------------------------------------------------------------------------------------------------------


@cli.command(short_help="topics, queues, offsets, files, disk ratio, checkpoint")
@click.argument("root", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@store_options
@handle_store_errors
def inspect(root: str, as_json: bool, config_file: str | None, sets: tuple[str, ...]) -> None:
    """Topics, queues, offsets, files, disk usage, checkpoint and shutdown state (read-only)."""
    from pystore.storeinfo import store_info

    cfg = build_config(root, config_file, sets, True)
    if not any(os.path.isdir(p) for p in cfg.commit_log_paths()):
        _fail("no store at %s (no commit log folder %s)" % (root, cfg.commit_log_paths()[0]))
    over = {
        k: getattr(cfg, k)
        for k in (
            "max_hash_slot_num",
            "max_index_num",
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue",
            "store_path_commit_log",
            "message_index_enable",
        )
    }
    info = store_info(root, **over)
    if as_json:
        print_json(info)
        return
    cl = info["commit_log"]
    cp = info["checkpoint"]
    disk = info["disk"]
    state = (
        "[yellow]a writer is running (pid %s)[/yellow]" % info["abort"]["pid"]
        if info["writer_running"]
        else "[red]unclean shutdown (abort file present): the next writer runs abnormal recovery[/red]"
        if info["unclean_shutdown"]
        else "[green]clean shutdown[/green]"
    )
    s = Table(title="store %s" % _esc(info["root"]), title_justify="left", show_header=False)
    s.add_column("what", style="bold")
    s.add_column("value")
    s.add_row("state", state)
    s.add_row(
        "commit log",
        "offsets %d .. %d (%s), %d file(s) of %s"
        % (
            cl["min_offset"],
            cl["max_offset"],
            human_bytes(max(0, cl["max_offset"] - max(cl["min_offset"], 0))),
            len(cl["files"]),
            human_bytes(cl["file_size"]),
        ),
    )
    s.add_row("earliest message", iso(_ts(cl["earliest_message_time"])))
    s.add_row(
        "topics",
        "%d topic(s), %d queue(s), %d message(s) in queues"
        % (len(info["topics"]), len(info["queues"]), sum(q["messages"] for q in info["queues"])),
    )
    s.add_row(
        "disk",
        "commit log %s, consume queues %s, index %s"
        % tuple(human_bytes(disk["bytes"][k]) for k in ("commitlog", "consumequeue", "index")),
    )
    ratio = disk["commit_log_disk_ratio"]
    s.add_row(
        "disk used ratio",
        "%.1f%% of the partition (clean above %d%%, forced %.0f%%, full %.0f%%)"
        % (
            ratio * 100,
            disk["disk_max_used_space_ratio"],
            disk["disk_space_clean_forcibly_ratio"] * 100,
            disk["disk_space_warning_level_ratio"] * 100,
        ),
    )
    s.add_row("dispatch behind", human_bytes(info["dispatch_behind_bytes"]))
    s.add_row(
        "checkpoint",
        "physic %s, logics %s, index %s%s"
        % (
            iso(cp["physic_msg_timestamp"]),
            iso(cp["logics_msg_timestamp"]),
            iso(cp["index_msg_timestamp"]),
            "" if cp["exists"] else " (no checkpoint file)",
        )
        + ("" if cp["trusted"] else " [red](not trusted)[/red]"),
    )
    if info["read_only_view"]["damage"]:
        s.add_row("damage", "[red]%s[/red] (run `pystore verify`)" % _esc(info["read_only_view"]["damage"]))
    console.print(s)
    q = Table(title="queues", title_justify="left")
    for col in (
        "topic",
        "queue",
        "min offset",
        "max offset",
        "messages",
        "first store time",
        "last store time",
    ):
        q.add_column(
            col, justify="right" if col in ("queue", "min offset", "max offset", "messages") else "left"
        )
    for row in info["queues"]:
        q.add_row(
            Text(row["topic"]),
            str(row["queue_id"]),
            str(row["min_offset"]),
            str(row["max_offset"]),
            str(row["messages"]),
            iso(_ts(row["first_store_time"])),
            iso(_ts(row["last_store_time"])),
        )
    console.print(q)
    f = Table(title="commit-log files", title_justify="left")
    for col in ("file", "size", "first store time"):
        f.add_column(col, justify="right" if col == "size" else "left")
    for row in cl["files"]:
        f.add_row(row["name"], human_bytes(row["size"]), iso(row["first_store_timestamp"]))
    console.print(f)
    if info["index_files"]:
        console.print(
            "index files: "
            + ", ".join("%s (%s)" % (x["name"], human_bytes(x["size"])) for x in info["index_files"])
        )


def _ts(iso_text: str | None) -> int | None:
    if not iso_text:
        return None
    return int(datetime.datetime.fromisoformat(iso_text).timestamp() * 1000)


@cli.command(short_help="CRC of the commit log, queues and index cross-checked")
@click.argument("root", type=click.Path(file_okay=False))
@click.option(
    "--index-sample",
    default=1000,
    show_default=True,
    type=click.IntRange(0, None),
    help="keys checked against the index (a uniform sample; 0 skips the index)",
)
@click.option("--max-problems", default=100, show_default=True, type=click.IntRange(1, None))
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@store_options
@handle_store_errors
def verify(
    root: str,
    index_sample: int,
    max_problems: int,
    as_json: bool,
    config_file: str | None,
    sets: tuple[str, ...],
) -> None:
    """Check CRCs of the commit log, every consume-queue unit against it, and the index (read-only)."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from pystore.verify import verify_store

    cfg = build_config(root, config_file, sets, True)
    if not os.path.isdir(os.path.join(root, "commitlog")):
        _fail("no store at %s (no commitlog folder)" % root)
    over = {k: getattr(cfg, k) for k in ("max_hash_slot_num", "max_index_num", "message_index_enable")}
    progress = Progress(
        TextColumn("{task.description:<15}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=err_console if as_json else console,
        transient=as_json,
    )
    tasks: dict[str, Any] = {}

    def on_progress(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=max(total, 1))
        progress.update(tasks[phase], completed=done, total=max(total, 1))

    with progress:
        report = verify_store(
            root, progress=on_progress, index_sample=index_sample, max_problems=max_problems, **over
        )
    if as_json:
        print_json(report.as_dict())
        sys.exit(OK if report.ok else PROBLEM)
    t = Table(title="verify %s" % _esc(os.path.abspath(root)), title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("result")
    t.add_row(
        "commit log",
        "%d message(s), %s in %d file(s), offsets %d .. %d, CRC checked"
        % (
            report.records,
            human_bytes(report.record_bytes),
            report.commit_log_files,
            max(report.min_offset, 0),
            report.end_offset,
        ),
    )
    t.add_row(
        "consume queues",
        "%d queue(s), %d unit(s): %d checked, %d below the commit log (cleaned), %d beyond "
        "its end"
        % (report.queues, report.units, report.units_checked, report.units_expired, report.units_beyond),
    )
    t.add_row(
        "index",
        (
            "%d key(s) sampled of %d, %d decided by a lookup"
            % (report.keys_sampled, report.keys_total, report.keys_checked)
        )
        if report.index_present
        else "no index files",
    )
    if report.unclean:
        t.add_row("abort file", "[yellow]present: a writer is running or did not shut down cleanly[/yellow]")
    for n in report.notes:
        t.add_row("note", _esc(n))
    t.add_row("time", "%.2f s" % report.seconds)
    t.add_row(
        "result",
        "[green]OK[/green]"
        if report.ok
        else "[red]%d problem(s)[/red]" % (len(report.problems) + report.problems_dropped),
    )
    console.print(t)
    if not report.ok:
        p = Table(title="problems", title_justify="left")
        for col in ("kind", "file", "offset", "what"):
            p.add_column(col, justify="right" if col == "offset" else "left", overflow="fold")
        for pr in report.problems:
            p.add_row(
                pr.kind, Text(pr.path or "-"), "-" if pr.offset is None else str(pr.offset), Text(pr.detail)
            )
        console.print(p)
        if report.problems_dropped:
            console.print("... and %d more" % report.problems_dropped)
        sys.exit(PROBLEM)


# ---------------------------------------------------------------------------------------------------------
# recover / clean
# ---------------------------------------------------------------------------------------------------------


def _cl_listing(cfg: Any) -> dict[str, int]:
    out = {}
    for folder in cfg.commit_log_paths():
        if os.path.isdir(folder):
            for n in os.listdir(folder):
                if len(n) == 20 and n.isdigit():
                    out[n] = os.path.getsize(os.path.join(folder, n))
    return out


def _first_cl_file(cfg: Any) -> str | None:
    names = sorted(_cl_listing(cfg))
    return names[0] if names else None


@cli.command(short_help="open for writing (recovery), report what was cut")
@click.argument("root", type=click.Path(file_okay=False))
@click.option(
    "--truncate",
    is_flag=True,
    help="cut the commit log at damage even when valid, flushed messages follow it (they are lost)",
)
@store_options
@handle_store_errors
def recover(root: str, truncate: bool, config_file: str | None, sets: tuple[str, ...]) -> None:
    """Open for writing (which recovers), report what was recovered or cut, and shut down cleanly."""
    from pystore.errors import StoreCorruptedError

    cfg = build_config(root, config_file, sets, False)
    if not any(os.path.isdir(p) for p in cfg.commit_log_paths()):
        _fail("no store at %s (no commit log folder)" % root)
    before = _cl_listing(cfg)
    abort = os.path.exists(cfg.abort_path())
    over = {"recover_truncate_corrupted": True} if truncate else {}
    try:
        with open_store(root, config_file, sets, read_only=False, **over) as store:
            rec = store.recovery
            table = store.get_topic_queue_table()
            max_phy = store.get_max_phy_offset()
            min_phy = store.get_min_phy_offset()
    except StoreCorruptedError as e:
        err_console.print("[red]the store is corrupted and was not changed:[/red] %s" % _esc(e))
        err_console.print(
            "`pystore recover --truncate %s` cuts the commit log at offset %d; every message after "
            "it is lost. `pystore verify %s` lists all the damage first." % (_esc(root), e.offset, _esc(root))
        )
        sys.exit(PROBLEM)
    after = _cl_listing(cfg)
    t = Table(title="recover %s" % _esc(os.path.abspath(root)), title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row(
        "last shutdown",
        "[yellow]unclean (abort file): abnormal recovery[/yellow]" if abort else "clean: normal recovery",
    )
    if rec is not None:
        t.add_row(
            "walk",
            "from %s: %d message(s), %s in %.3f s"
            % (
                os.path.basename(rec.start_file) if rec.start_file else "-",
                rec.records,
                human_bytes(rec.bytes_scanned),
                rec.seconds,
            ),
        )
        t.add_row("valid end", str(rec.process_offset))
        t.add_row("queues rebuilt from", str(rec.dispatch_from) if abort else "- (queues were current)")
        t.add_row("damage", "[red]%s (cut)[/red]" % _esc(rec.damage) if rec.damage else "none")
        first = _first_cl_file(cfg)
        if rec.start_file and first and os.path.basename(rec.start_file) != first:
            t.add_row(
                "note",
                "recovery walked from %s on (RocketMQ's rule: the last three files after a clean "
                "shutdown, the checkpoint's after a crash); `pystore verify` checks the whole log"
                % os.path.basename(rec.start_file),
            )
    t.add_row("commit log now", "offsets %d .. %d, %d file(s)" % (min_phy, max_phy, len(after)))
    t.add_row("queues", "%d queue(s), %d message(s)" % (len(table), sum(table.values())))
    gone = sorted(set(before) - set(after))
    if gone:
        t.add_row("files removed", ", ".join(gone))
    shrunk = [n for n in after if n in before and after[n] != before[n]]
    if shrunk:
        t.add_row("files resized", ", ".join(shrunk))
    t.add_row(
        "shutdown",
        "clean (abort file removed)"
        if not os.path.exists(cfg.abort_path())
        else "[red]the abort file stayed (see the log)[/red]",
    )
    console.print(t)
    sys.exit(PROBLEM if os.path.exists(cfg.abort_path()) else OK)


@cli.command(short_help="delete expired files, expired and unused queues")
@click.argument("root", type=click.Path(file_okay=False))
@click.option(
    "--expired",
    is_flag=True,
    help="delete expired commit-log files now, whatever the hour (execute_delete_files_manually)",
)
@click.option("--topic-keep", metavar="T1,T2", help="remove the consume queues of every other topic")
@store_options
@handle_store_errors
def clean(
    root: str, expired: bool, topic_keep: str | None, config_file: str | None, sets: tuple[str, ...]
) -> None:
    """A cleaning pass: expired commit-log files (--expired), then the files and queues left pointing below
    the commit log, and the queues of unused topics (--topic-keep)."""
    cfg = build_config(root, config_file, sets, False)
    if not any(os.path.isdir(p) for p in cfg.commit_log_paths()):
        _fail("no store at %s (no commit log folder)" % root)
    keep = {t.strip() for t in topic_keep.split(",") if t.strip()} if topic_keep is not None else None
    if topic_keep is not None and not keep:
        raise click.BadParameter("name at least one topic to keep", param_hint="--topic-keep")
    with open_store(root, config_file, sets, read_only=False) as store:
        min_before = store.get_min_phy_offset()
        rows: list[tuple[str, str]] = []
        if expired:
            store.execute_delete_files_manually()
        cl_n, other_n = store.clean_files()
        rows.append(("commit-log files deleted", str(cl_n)))
        rows.append(("consume-queue and index files deleted", str(other_n)))
        removed = store.clean_expired_consumer_queue()
        rows.append(("expired queues removed", _queues_text(removed)))
        if keep is not None:
            removed = store.clean_unused_topic(keep)
            rows.append(("queues of unused topics removed", _queues_text(removed)))
        rows.append(("commit log min offset", "%d -> %d" % (min_before, store.get_min_phy_offset())))
    t = Table(title="clean %s" % _esc(os.path.abspath(root)), title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("result")
    for a, b in rows:
        t.add_row(a, Text(b))
    console.print(t)


def _queues_text(removed: Any) -> str:
    if not removed:
        return "none"
    if isinstance(removed, int):
        return str(removed)
    items = sorted(removed)
    text = ", ".join("%s/%d" % q for q in items[:20])
    return text + (" and %d more" % (len(items) - 20) if len(items) > 20 else "")


# ---------------------------------------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------------------------------------


@cli.command(short_help="messages to Parquet (pyarrow, or Spark with --spark)")
@click.argument("root", type=click.Path(file_okay=False))
@click.argument("out", type=click.Path(dir_okay=True))
@click.option("--topic", "-t", "topics", multiple=True, help="only this topic; repeatable")
@click.option(
    "--spark",
    "use_spark",
    is_flag=True,
    help="go through Spark (pystore.spark) instead of pyarrow; OUT is then a Parquet folder",
)
@click.option("--no-verify-crc", is_flag=True, help="export records with a bad body CRC as stored")
@handle_store_errors
def export(root: str, out: str, topics: tuple[str, ...], use_spark: bool, no_verify_crc: bool) -> None:
    """Write the messages of ROOT to the Parquet file OUT (API.md's Spark columns)."""
    if not os.path.isdir(os.path.join(root, "commitlog")) and not os.path.isdir(root):
        _fail("no store at %s" % root)
    if use_spark:
        _export_spark(root, out, topics, not no_verify_crc)
        return
    from pystore import export as ex

    try:
        ex._pa()
    except ImportError:
        _fail(ex.MISSING_PYARROW)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("export"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("export", total=None)
        res = ex.export_parquet(
            root,
            out,
            topics=topics or None,
            verify_crc=not no_verify_crc,
            progress=lambda done, total: progress.update(task, completed=done, total=total),
        )
    console.print(
        "wrote %d message(s) (%s of records) to %s in %.2f s"
        % (res.rows, human_bytes(res.bytes_in), _esc(res.path), res.seconds)
    )
    if res.rows == 0:
        console.print(
            "[yellow]no messages%s[/yellow]" % (" in topic(s) %s" % ", ".join(topics) if topics else "")
        )


def _export_spark(root: str, out: str, topics: tuple[str, ...], verify_crc: bool) -> None:
    try:
        import pystore.spark as ps
    except ImportError as e:
        _fail("--spark needs pystore.spark and pyspark (install pystore-mq[spark]): %s" % e)
    if not hasattr(ps, "register"):
        _fail("pystore.spark has no register(spark) in this version")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pystore-export")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        ps.register(spark)
        reader = spark.read.format("pystore").option("verify_crc", str(verify_crc).lower())
        df = reader.load(os.path.abspath(root))
        if topics:
            df = df.where(df.topic.isin(list(topics)))
        t0 = time.perf_counter()
        df.write.mode("overwrite").parquet(out)
        n = spark.read.parquet(out).count()
        console.print(
            "wrote %d message(s) through Spark to %s in %.1f s" % (n, _esc(out), time.perf_counter() - t0)
        )
    finally:
        spark.stop()


# ---------------------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------------------


def _bench_dir() -> str | None:
    env = os.environ.get("PYSTORE_BENCH_DIR")
    if env:
        return env if os.path.isdir(env) else None
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cand = os.path.join(here, "bench")
    return cand if os.path.isfile(os.path.join(cand, "peers.py")) else None


@cli.command(short_help="run the benchmarks (pytest-benchmark suite, or --peers)")
@click.option(
    "--peers", is_flag=True, help="pystore next to lmdb, sqlite3, persist-queue ... (bench/peers.py)"
)
@click.option("--quick", is_flag=True, help="small counts: a smoke run")
def bench(peers: bool, quick: bool) -> None:
    """Run the benchmarks: the pytest-benchmark suite (bench/), or the peers comparison (--peers)."""
    folder = _bench_dir()
    if folder is None:
        _fail(
            "no bench folder: the benchmarks ship with the source tree, not the installed package "
            "(run from a checkout, or set PYSTORE_BENCH_DIR)"
        )
    if peers:
        cmd = [sys.executable, os.path.join(folder, "peers.py")] + (["--quick"] if quick else [])
        rc = _run_peers(cmd, folder)
    else:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", folder]
        cmd += (
            ["--benchmark-disable"]
            if quick
            else ["--benchmark-only", "--benchmark-columns=min,median,mean,ops,rounds"]
        )
        console.print("running: %s" % " ".join(cmd))
        rc = subprocess.call(cmd, cwd=os.path.dirname(folder))
    sys.exit(OK if rc == 0 else PROBLEM)


def _run_peers(cmd: list[str], folder: str) -> int:
    """Run bench/peers.py, with a progress bar over its "rep i/n contender" lines."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = None
    try:
        sys.path.insert(0, folder)
        import importlib

        peers_mod = importlib.import_module("peers")
        total = len(peers_mod.CONTENDERS) * (peers_mod.QUICK if "--quick" in cmd else peers_mod.FULL)["reps"]
    except Exception:  # noqa: BLE001 - the bar just has no total
        total = None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    rep = re.compile(r"^\s*rep (\d+)/(\d+)\s+(\S+)")
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS=str(max(console.width, 160)))
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env=env,
        cwd=os.path.dirname(folder),
    )
    assert proc.stdout is not None
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("peers", total=total)
        for line in proc.stdout:
            m = rep.match(line)
            if m:
                progress.update(task, advance=1, description="peers: %s" % m.group(3))
            else:
                progress.console.print(Text(line.rstrip("\n")))
    return proc.wait()
