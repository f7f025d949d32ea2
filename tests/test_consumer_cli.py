"""The consumer side of the CLI: ``pystore get --follow`` (a read-only store following a live writer through its
long-polling get; Ctrl-C exits 130 with one line, a reader that goes away ends it with 0) and the consumer
groups' lag in ``pystore inspect`` (docs/cli.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from test_consumer_wake import Lines

from pystore import Message, MessageStore
from pystore.cli import cli

REPO = Path(__file__).resolve().parents[1]
SMALL = {"mapped_file_size_commit_log": 64 * 1024}
OPTS = ["-o", "mapped_file_size_commit_log=65536"]


def follow(root: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("COLUMNS", None)
    # SIGINT at its default: a test run started in the background inherits it ignored
    return subprocess.Popen([sys.executable, "-m", "pystore", "get", str(root), "T", "0", "0", "--follow", *OPTS,
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_get_follow_prints_what_arrives_until_ctrl_c(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, **SMALL) as store:
        for i in range(3):
            store.put_message(Message("T", b"m%d" % i, tags="A"))
        p = follow(root)
        try:
            out = Lines(p)
            assert out.next("queue").split("\t")[:2] == ["queue", "queue_offset"]
            for i in range(3):
                row = out.next("0\t").split("\t")
                assert row[1] == str(i) and row[-1] == "m%d" % i
            for i in range(3, 6):
                store.put_message(Message("T", b"m%d" % i, tags="A"))
            for i in range(3, 6):
                row = out.next("0\t").split("\t")
                assert row[1] == str(i) and row[-1] == "m%d" % i
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == 130, err
    assert err == b"interrupted\n"


def test_get_follow_json_lines_and_a_tag_filter(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, **SMALL) as store:
        store.put_message(Message("T", b"m0", tags="A"))        # a store without a commit log is no store yet
        p = follow(root, "--json", "--tags", "B")
        try:
            out = Lines(p)
            for i in range(1, 6):
                store.put_message(Message("T", b"m%d" % i, tags="AB"[i % 2]))
            got = [json.loads(out.next("{")) for _ in range(3)]
            assert [(m["queue_offset"], m["body"]) for m in got] == [(1, "m1"), (3, "m3"), (5, "m5")]
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == 130


def test_get_follow_ends_quietly_when_its_reader_goes_away(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, **SMALL) as store:
        store.put_message(Message("T", b"first"))
        p = follow(root)
        try:
            Lines(p).next("queue")
            assert p.stdout is not None
            p.stdout.close()
            for i in range(200):                         # rows until one meets the closed pipe
                store.put_message(Message("T", b"x" * 1000))
                if p.poll() is not None:
                    break
            p.wait(60)
            err = p.stderr.read() if p.stderr is not None else b""
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == 0 and err == b""


def test_inspect_shows_each_groups_lag_per_queue(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, **SMALL) as store:
        for i in range(8):
            store.put_message(Message("T", b"m%d" % i, queue_id=i % 2))
        runner = CliRunner()
        r = runner.invoke(cli, ["inspect", str(root), "--json", *OPTS], catch_exceptions=False)
        assert r.exit_code == 0 and json.loads(r.output)["consumer_groups"] == []
        assert "consumer groups" not in runner.invoke(cli, ["inspect", str(root), *OPTS]).output
        store.commit_offset("g1", "T", 0, 1)
        store.commit_offset("g1", "T", 1, 4)
        store.commit_offset("g2", "T", 0, 0)
        store.commit_offset("g2", "Gone", 3, 7)
    r = runner.invoke(cli, ["inspect", str(root), "--json", *OPTS], catch_exceptions=False)
    assert r.exit_code == 0
    assert json.loads(r.output)["consumer_groups"] == [
        {"group": "g2", "topic": "Gone", "queue_id": 3, "committed": 7, "max_offset": None, "lag": None},
        {"group": "g1", "topic": "T", "queue_id": 0, "committed": 1, "max_offset": 4, "lag": 3},
        {"group": "g1", "topic": "T", "queue_id": 1, "committed": 4, "max_offset": 4, "lag": 0},
        {"group": "g2", "topic": "T", "queue_id": 0, "committed": 0, "max_offset": 4, "lag": 4},
    ]
    r = runner.invoke(cli, ["inspect", str(root), *OPTS], catch_exceptions=False)
    assert r.exit_code == 0
    lines = r.output.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("consumer groups")))
    rows = [x.split() for x in lines[at + 1:at + 6]]
    assert rows[0] == ["group", "topic", "queue", "committed", "max", "offset", "lag"]
    assert rows[1:] == [["g2", "Gone", "3", "7", "-", "-"], ["g1", "T", "0", "1", "4", "3"],
                        ["g1", "T", "1", "4", "4", "0"], ["g2", "T", "0", "0", "4", "4"]]
