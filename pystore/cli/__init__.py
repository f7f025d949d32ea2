"""The ``pystore`` command line (``python -m pystore`` too): the click group and its verbs, one module per
verb group (:mod:`.messages`: put, get, query; :mod:`.inspect`; :mod:`.verify`; :mod:`.recover`;
:mod:`.clean`; :mod:`.export`; :mod:`.demo`; :mod:`.bench`), their shared helpers in :mod:`.common`.

Every verb but ``bench`` takes the store root as its first argument; ``demo`` defaults to ``./pystore-demo``.
Exit codes (docs/cli.md): 0 the verb did what was asked (an answer with no message is an answer), 1 a
problem (no store at the path, a locked or damaged store, damage found) or a refused put, 2 a usage error,
130 stopped by Ctrl-C (one line on stderr, no traceback).

Verbs that only read (``get``, ``query``, ``inspect``, ``verify``, ``export``) open the store read-only: no
lock, no writes, safe next to a running writer. ``put``, ``recover`` and ``clean`` open it for writing (a
running writer elsewhere makes them fail with exit 1); ``put`` makes a new store only with ``--create``.
Stores opened here keep the geometry of their files (commit-log, consume-queue and index file sizes);
``--config broker.conf`` and ``-o key=value`` (StoreConfig fields in snake_case, or broker.conf keys) set
anything else.

This package is the one place that prints; the library logs through ``logging`` (shown on stderr from
WARNING, ``-v`` for INFO, ``-vv`` for DEBUG).
"""

from __future__ import annotations

import logging
import sys

import click

from pystore import __version__
from pystore.cli import bench, clean, demo, export, inspect, messages, recover, verify
from pystore.cli.common import INTERRUPTED, OK, PROBLEM, USAGE, CliGroup, _isatty, make_console

__all__ = ["INTERRUPTED", "OK", "PROBLEM", "USAGE", "cli", "main"]


@click.group(cls=CliGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("-v", "--verbose", count=True, help="log INFO (-v) or DEBUG (-vv) from the library on stderr")
@click.version_option(version=__version__, prog_name="pystore", message="%(prog)s %(version)s")
def cli(verbose: int) -> None:
    """pystore: an embedded message store with Apache RocketMQ's on-disk format.

    Every verb but bench takes the store root (ROOT) first. Exit codes: 0 done (an answer with no message
    too), 1 a problem (no store, a locked or damaged store, damage found) or a refused put, 2 a usage error,
    130 stopped by Ctrl-C.
    """
    from rich.logging import RichHandler

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root = logging.getLogger("pystore")
    for h in list(root.handlers):
        if getattr(h, "_pystore_cli", False):
            root.removeHandler(h)
    handler: logging.Handler
    if _isatty(sys.stderr):
        handler = RichHandler(console=make_console(stderr=True), show_time=False, show_path=False, markup=False)
    else:
        # off a terminal one plain line a record: rich's handler pads every line to its console's width, which
        # is as wide as nothing ever wraps there (a 100,000-byte line per warning)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler._pystore_cli = True  # type: ignore[attr-defined,union-attr]
    handler.setLevel(level)
    root.addHandler(handler)
    root.setLevel(min(level, root.level) if root.level else level)
    root.propagate = False


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``pystore`` script."""
    cli.main(args=argv, prog_name="pystore")


# the verbs live in one module each (the package attribute stays the module, so ``pystore.cli.export`` is
# something a test can patch); ``pystore --help`` lists them sorted by name
for _command in (
    demo.demo,
    messages.put,
    messages.get,
    messages.query,
    inspect.inspect,
    verify.verify,
    recover.recover,
    clean.clean,
    export.export,
    bench.bench,
):
    cli.add_command(_command)
