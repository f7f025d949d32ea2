"""``pystore bench``: the benchmarks of a source checkout (the pytest-benchmark suite, or bench/peers.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import click
from rich.text import Text

from pystore.cli.common import OK, PROBLEM, console, fail


def _bench_dir() -> str | None:
    env = os.environ.get("PYSTORE_BENCH_DIR")
    if env:
        return env if os.path.isdir(env) else None
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cand = os.path.join(here, "bench")
    return cand if os.path.isfile(os.path.join(cand, "peers.py")) else None


@click.command(short_help="run the benchmarks (pytest-benchmark suite, or --peers)")
@click.option(
    "--peers", is_flag=True, help="pystore next to lmdb, sqlite3, persist-queue ... (bench/peers.py)"
)
@click.option("--quick", is_flag=True, help="small counts: a smoke run")
def bench(peers: bool, quick: bool) -> None:
    """Run the benchmarks: the pytest-benchmark suite (bench/), or the peers comparison (--peers)."""
    folder = _bench_dir()
    if folder is None:
        fail(
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
