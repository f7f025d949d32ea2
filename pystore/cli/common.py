"""What every verb shares: the consoles, exit codes, error handling (a broken pipe included), the store
options and opening a store, and the formatting helpers (times, sizes, message rows, JSON).

The exit-code rule (docs/cli.md): :data:`OK` when the verb did what was asked, an answer that holds no
message included; :data:`PROBLEM` when something is wrong (no store at the path, a locked or damaged store,
damage found) or the store refused a change; :data:`USAGE` for a command line click cannot take;
:data:`INTERRUPTED` (130) when Ctrl-C stops the verb. A reader that goes away (``| head``) ends the verb quietly
with :data:`OK`, as Unix tools do.

Output to a terminal is rich (tables, colour, wrapped to its width); output to a pipe or file is plain:
no colour and no wrapping, so a path or a line stays whole for ``grep`` and ``cut``.

This package is the one place that prints; the library logs through ``logging``.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

OK, PROBLEM, USAGE = 0, 1, 2
#: Ctrl-C (SIGINT): 128 + the signal's number, as shells report a command the signal ended
INTERRUPTED = 130

#: the width given to rich when the output is not a terminal: wide enough that nothing wraps
PLAIN_WIDTH = 100_000


#: the spaces that end a line: a table pads every cell to its column's width, the last one too
_TRAILING_SPACES = re.compile(r" +(?=\n)")


class _Console(Console):
    """A rich console whose broken pipe is a :class:`BrokenPipeError` for :class:`CliGroup` to end quietly
    (rich's own answer is ``SystemExit(1)``). A plain one (not a terminal) ends no line with spaces: the
    padding of a table's last column is no part of the data, and a row of ``inspect`` would otherwise run to
    its widest row's length."""

    def __init__(self, *args: Any, plain: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plain = plain

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(32, "Broken pipe")

    def _render_buffer(self, buffer: Any) -> str:
        text = super()._render_buffer(buffer)
        return _TRAILING_SPACES.sub("", text) if self._plain else text


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def make_console(stderr: bool = False) -> Console:
    """A console for stdout (or stderr): rich on a terminal, plain lines otherwise (see the module doc)."""
    if _isatty(sys.stderr if stderr else sys.stdout):
        return _Console(stderr=stderr, highlight=False)
    return _Console(stderr=stderr, highlight=False, width=PLAIN_WIDTH, soft_wrap=True, plain=True)


console = make_console()
err_console = make_console(stderr=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of a closed pipe is not an error."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):  # no file descriptor (click's test runner)
        pass


class CliGroup(click.Group):
    """The ``pystore`` group: a verb whose reader went away ends with exit 0 and nothing on stderr; one that
    Ctrl-C stops ends with :data:`INTERRUPTED` and one line on stderr (click's own answer is exit 1, the code
    of a problem found, after an empty line and ``Aborted!``)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:
                # a pipe closed early shows here rather than in the interpreter's flush at exit
                sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(OK)
        except KeyboardInterrupt:
            # the verb's `with` blocks have closed the store on the way out (a second Ctrl-C there leaves
            # it for recovery, as a crash would)
            err_console.print("interrupted")
            ctx.exit(INTERRUPTED)


def fail(message: str, code: int = PROBLEM) -> NoReturn:
    err_console.print("[red]error:[/red] " + esc(message))
    sys.exit(code)


def esc(text: object) -> str:
    from rich.markup import escape

    return escape(str(text))


def handle_store_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the store's exceptions into a message and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from pystore.errors import ConfigError, StoreCorruptedError, StoreError, StoreLockedError

        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise  # the reader went away: CliGroup ends quietly
        except StoreLockedError as e:
            from pystore.engine.checkpoint import lock_holders

            holders = lock_holders(e.path) or []
            pids = ", ".join(str(pid) for pid, _ in holders) or "unknown"
            shared = any(s for _, s in holders)
            fail(
                "the store at %s is locked: %s (lock file %s). The read-only verbs (get, query, inspect, verify, "
                "export) work next to it; put, recover, clean and demo need it closed first%s"
                % (os.path.dirname(e.path) or ".",
                   "%d process(es) write it as shared writers (pid %s)" % (len(holders), pids) if shared
                   else "another process has it open for writing (pid %s)" % pids, e.path,
                   " (put --shared-writers joins them)" if shared else "")
            )
        except StoreCorruptedError as e:
            fail("store corrupted: %s" % e)
        except ConfigError as e:
            fail("bad configuration: %s" % e, USAGE)
        except StoreError as e:
            fail(str(e))
        except FileNotFoundError as e:
            fail("not found: %s" % (e.filename or e))
        except OSError as e:
            fail("%s%s" % (e.strerror or e, ": %s" % e.filename if e.filename else ""))
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as e:  # noqa: BLE001 - a damaged store must not end in a traceback
            # what the library did not foresee in a file: one line, the traceback for -vv
            logging.getLogger("pystore.cli").debug("%s failed", fn.__name__, exc_info=True)
            fail("cannot read the store (%s: %s); -vv shows where" % (type(e).__name__, e))

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
    from pystore.log.geometry import detect_overrides

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
    if cfg.unknown_keys:
        # said once, as a log line (stderr) naming the file rather than a Python warning naming this source line;
        # -o keys were checked above, so every unknown key is the file's
        logging.getLogger("pystore.cli").warning("%s: keys that are not store settings were ignored: %s",
                                                 config_file, ", ".join(cfg.unknown_keys))
    changes = {k: v for k, v in defaults.items() if k not in explicit}
    changes.update({k: v for k, v in detect_overrides(root).items() if k not in explicit})
    return cfg.replace(store_path_root_dir=root, read_only=read_only, **changes)


def no_store_reason(root: str, cfg: Any = None) -> str | None:
    """Why ``root`` holds no store (None when it holds one); ``cfg`` places the commit log elsewhere."""
    if not os.path.exists(root):
        return "no such folder"
    if not os.path.isdir(root):
        return "it is not a folder"
    folders = cfg.commit_log_paths() if cfg is not None else [os.path.join(root, "commitlog")]
    if not any(os.path.isdir(p) for p in folders):
        return "no commit-log folder %s" % folders[0]
    return None


def require_store(root: str, cfg: Any = None, hint: str = "") -> None:
    """Exit with the one phrase of this error, ``no store at ROOT (why)``, when ``root`` holds no store."""
    why = no_store_reason(root, cfg)
    if why is not None:
        fail("no store at %s (%s)%s" % (root, why, hint))


@contextmanager
def open_store(
    root: str,
    config_file: str | None = None,
    sets: tuple[str, ...] = (),
    read_only: bool = True,
    create: bool = False,
    hint: str = "",
    **defaults: Any,
) -> Iterator[Any]:
    """A loaded and started store (shut down at the end of the block). A path that holds no store is an
    error (``hint`` is added to it) unless ``create`` (a writer's first open makes the store)."""
    from pystore.engine.store import MessageStore
    from pystore.errors import StoreError

    cfg = build_config(root, config_file, sets, read_only, **defaults)
    if create:
        if os.path.exists(root) and not os.path.isdir(root):
            fail("no store at %s (%s)" % (root, no_store_reason(root, cfg)))
    else:
        require_store(root, cfg, hint)
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


#: a get of more messages than this prints plain rows as it reads them (:func:`print_rows`), not a table:
#: rich lays a table out whole, which takes minutes for 100,000 rows and shows nothing meanwhile
TABLE_ROWS = 100

#: the columns of :func:`print_rows`, tab-separated (the table's, without spaces)
ROW_HEADER = "\t".join(
    ("queue", "queue_offset", "commit_log_offset", "tags", "keys", "store_time_utc", "size", "body")
)


def _cell(text: str) -> str:
    # a tab or line break inside a field would shift the columns of the row
    return text.replace("\t", " ").replace("\n", " ").replace("\r", " ") or "-"


def print_rows(messages: list[Any]) -> None:
    """Messages as tab-separated rows (:data:`ROW_HEADER`), one write per call."""
    if not messages:
        return
    lines = [
        "%d\t%d\t%d\t%s\t%s\t%s\t%d\t%s"
        % (
            m.queue_id,
            m.queue_offset,
            m.commit_log_offset,
            _cell(m.tags or ""),
            _cell(" ".join(m.keys)),
            iso(m.store_timestamp),
            m.store_size,
            _cell(preview(m.body)),
        )
        for m in messages
    ]
    click.echo("\n".join(lines))


def table(title: str | Text | None = None, **kw: Any) -> Table:
    """A table titled on its left: boxed on a terminal; off one, without box lines (columns apart by spaces,
    no edge), so each row is one line that ``grep`` and ``cut`` take whole."""
    if not console.is_terminal:
        kw.setdefault("box", None)
        kw.setdefault("show_edge", False)
        kw.setdefault("pad_edge", False)
    return Table(title=title, title_justify="left", **kw)


def messages_table(messages: list[Any], title: str | None = None) -> Table:
    """Messages as a rich table; ``title`` is plain text (no markup)."""
    t = table(Text(title) if title is not None else None)
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
