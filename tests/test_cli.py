"""The ``pystore`` command line: every verb through ``click.testing.CliRunner`` (exit codes and what is
printed), plus real subprocess runs of ``python -m pystore --help`` and ``demo``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

from pystore import Message, MessageStore
from pystore.cli import cli
from pystore.tools import iter_commitlog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 1000 * 20,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
}
SMALL_OPTS = [x for k, v in SMALL.items() for x in ("-o", "%s=%d" % (k, v))]
#: the characters of rich's table boxes, which plain output (not a terminal) has none of
BOX = set("│┃┏┓┗┛┡┩┠┨━─┌┐└┘├┤┬┴┼╇╈╋")
VERBS = ("demo", "bench", "put", "get", "query", "inspect", "verify", "recover", "clean", "export")


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env, catch_exceptions=False)


def make_store(root, n: int = 300, topics=("T0", "T1"), queues: int = 2) -> list:
    """A closed store of ``n`` messages (keys ``key<i>``, tags ``Tag<i%3>``); the put results."""
    results = []
    with MessageStore.open(root, **SMALL) as s:
        for i in range(n):
            m = Message(
                topics[i % len(topics)],
                b"body %d " % i * 20,
                tags="Tag%d" % (i % 3),
                keys=["key%d" % i],
                queue_id=i % queues,
            )
            r = s.put_message(m)
            assert r.is_ok()
            results.append(r)
    return results


def flip_body_byte(root, index: int) -> tuple[str, int]:
    """Flip a byte in the body of the index-th record; (file, record offset)."""
    m = list(iter_commitlog(root))[index]
    size = SMALL["mapped_file_size_commit_log"]
    base = m.commit_log_offset // size * size
    path = os.path.join(str(root), "commitlog", "%020d" % base)
    pos = m.commit_log_offset - base + m.raw.find(m.body) + 3
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x40]))
    return path, m.commit_log_offset


# -- the group --------------------------------------------------------------------------------------------


def test_help_lists_every_verb():
    r = run("--help")
    assert r.exit_code == 0
    for verb in VERBS:
        assert "\n  %s " % verb in r.output
    assert run("nosuchverb").exit_code == 2
    assert run("--version").output.startswith("pystore ")


@pytest.mark.parametrize("verb", VERBS)
def test_help_names_no_document(verb):
    """A pip install has no docs/: a verb's help says what it needs to, rather than pointing at a file."""
    r = run(verb, "--help")
    assert r.exit_code == 0 and ".md" not in r.output and "docs/" not in r.output, r.output


def test_python_m_pystore_help_subprocess():
    env = dict(os.environ, PYTHONPATH=REPO)
    p = subprocess.run(
        [sys.executable, "-m", "pystore", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert p.returncode == 0, p.stderr
    for verb in VERBS:
        assert verb in p.stdout


def test_demo_subprocess_twice(tmp_path):
    """`make demo` runs this: it must pass without Spark, well within 30 s, and again on the same store."""
    env = dict(os.environ, PYTHONPATH=REPO, PYSTORE_DEMO_SPARK="0")
    root = tmp_path / "demo"
    outs = []
    for _ in range(2):
        p = subprocess.run(
            [sys.executable, "-m", "pystore", "demo", str(root)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd=tmp_path,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        outs.append(p.stdout)
    assert "run 1" in outs[0] and "demo passed" in outs[0]
    assert "run 2 (appending" in outs[1] and "FAILED" not in outs[1]
    assert "msgs/s" in outs[1] and "spark: skipped (PYSTORE_DEMO_SPARK=0)" in outs[1]
    assert "runs in this store: #1" in outs[1]
    # piped, as `make demo > log` is: tables without box lines, lines without trailing padding
    assert not BOX & set(outs[1]) and "\ncheck " in outs[1]
    assert [line for line in outs[1].splitlines() if line.endswith(" ")] == []
    r = run("demo", root, "--fresh", "--no-spark", "-n", "200")
    assert r.exit_code == 0 and "run 1;" in r.output
    assert run("verify", root).exit_code == 0


def test_demo_refuses_a_folder_that_is_not_a_store(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    r = run("demo", tmp_path, "--no-spark")
    assert r.exit_code == 1 and "holds no store" in r.output
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_unknown_config_keys_are_reported_once_subprocess(tmp_path):
    """A broker.conf's broker-only keys: one line on stderr naming the file and the keys, no Python warning."""
    make_store(tmp_path / "s", n=3)
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\nnamesrvAddr=127.0.0.1:9876\nflushDiskType=ASYNC_FLUSH\n")
    env = dict(os.environ, PYTHONPATH=REPO, COLUMNS="200")
    p = subprocess.run([sys.executable, "-m", "pystore", "inspect", str(tmp_path / "s"), "--config", str(conf)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr.count("namesrvAddr") == 1 and p.stderr.count("brokerName") == 1, p.stderr
    assert str(conf) in p.stderr and "UnknownConfigKeyWarning" not in p.stderr
    # off a terminal a log record is one plain line, not padded to rich's no-wrap width
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("WARNING ") and len(lines[0]) < 500, p.stderr[:300]


# -- put / get / query ------------------------------------------------------------------------------------


def test_put_get_query_round_trip(tmp_path):
    root = tmp_path / "s"
    r = run(
        "put",
        root,
        "-t",
        "Orders",
        "--tags",
        "TagA",
        "-k",
        "k1 k2",
        "-p",
        "color=red",
        "--create",
        *SMALL_OPTS,
        "hello [bold]world",
    )
    assert r.exit_code == 0, r.output
    assert "PUT_OK" in r.output and "7F00000100002A9F0000000000000000" in r.output
    r = run("put", root, "-t", "Orders", "--stdin", "-q", "1", "--json", input="one\ntwo\nthree\n")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert [x["queue_offset"] for x in rows] == [0, 1, 2] and all(x["status"] == "PUT_OK" for x in rows)
    body = tmp_path / "body.bin"
    body.write_bytes(b"\xff\xfebinary")
    assert run("put", root, "-t", "Orders", "-f", body, "-q", "1").exit_code == 0

    r = run("get", root, "Orders", "0", "0")
    assert r.exit_code == 0
    assert "hello [bold]world" in r.output and "TagA" in r.output and "k1 k2" in r.output
    r = run("get", root, "Orders", "1", "0", "--json")
    data = json.loads(r.stdout)
    assert [m["body"] for m in data["messages"][:3]] == ["one", "two", "three"]
    assert data["messages"][3]["body_base64"] and data["next_begin_offset"] == 4
    assert data["status"] == "OFFSET_OVERFLOW_ONE"
    r = run("get", root, "Orders", "0", "0", "--tags", "TagB || TagC")
    assert r.exit_code == 0 and "NO_MATCHED_MESSAGE" in r.output

    r = run("query", root, "Orders", "k2", "--json")
    assert r.exit_code == 0
    (m,) = json.loads(r.stdout)["messages"]
    assert m["body"] == "hello [bold]world" and m["properties"]["color"] == "red"
    r = run("query", root, "--msg-id", m["msg_id"])
    assert r.exit_code == 0 and "hello [bold]world" in r.output
    # finding nothing is an answer: exit 0 (docs/cli.md)
    r = run("query", root, "Orders", "nokey")
    assert r.exit_code == 0 and "no message found" in r.output
    r = run("query", root, "Orders", "k1", "--begin", "2000-01-01T00:00", "--end", "2000-01-02")
    assert r.exit_code == 0 and "no message found" in r.output
    r = run("query", root, "--msg-id", "7F00000100002A9F00000000000FFFFF")
    assert r.exit_code == 0 and "no message found" in r.output


def test_put_stdin_that_has_no_binary_buffer(tmp_path, monkeypatch):
    # IDLE's or an embedding program's stdin is text only (no .buffer): its lines are str, not bytes
    root = tmp_path / "s"
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\r\ntwo\n\u00e9\n"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["put", str(root), "-t", "T", "--stdin", "--create", *SMALL_OPTS], prog_name="pystore")
    assert exc.value.code == 0
    with MessageStore.open(root, read_only=True, **SMALL) as store:
        r = store.get_message("g", "T", 0, 0, 32)
        assert r is not None
        assert [m.body for m in r.messages] == [b"one", b"two", "\u00e9".encode()]


def test_usage_errors_exit_2(tmp_path):
    root = tmp_path / "s"
    assert run("put", root, "-t", "T").exit_code == 2  # no body
    assert run("put", root, "-t", "T", "x", "--stdin").exit_code == 2  # two bodies
    assert run("put", root, "x").exit_code == 2  # no topic
    r = run("put", root, "-t", "T", "x", "-o", "nosuch=1")
    assert r.exit_code == 2 and "nosuch" in r.output
    assert run("put", root, "-t", "T", "x", "-o", "mapped_file_size_commit_log=big").exit_code == 2
    assert run("get", root, "T", "zero", "0").exit_code == 2
    assert run("query", root, "T").exit_code == 2
    assert run("query", root, "T", "k", "--msg-id", "AB").exit_code == 2
    assert run("query", root, "T", "k", "--begin", "yesterday").exit_code == 2
    assert not os.path.exists(root)


def test_get_statuses_are_answers(tmp_path):
    root = tmp_path / "s"
    make_store(root, 10)
    r = run("get", root, "Nope", "0", "0")
    assert r.exit_code == 0 and "NO_MESSAGE_IN_QUEUE" in r.output
    r = run("get", root, "T0", "0", "99")
    assert r.exit_code == 0 and "OFFSET_OVERFLOW_BADLY" in r.output
    r = run("get", root, "T0", "0", "0", "-n", "2")
    assert r.exit_code == 0 and "next offset 2" in r.output
    assert run("get", tmp_path / "absent", "T0", "0", "0").exit_code == 1


def test_put_into_a_locked_store_exits_1_and_reads_still_work(tmp_path):
    root = tmp_path / "s"
    make_store(root, 5)
    with MessageStore.open(root, **SMALL):
        r = run("put", root, "-t", "T0", "x")
        assert r.exit_code == 1 and "locked" in r.output
        assert run("get", root, "T0", "0", "0").exit_code == 0  # read-only next to the writer
        info = json.loads(run("inspect", root, "--json").stdout)
        assert info["writer_running"] and not info["unclean_shutdown"]


# -- inspect / verify --------------------------------------------------------------------------------------


def test_inspect(tmp_path):
    root = tmp_path / "s"
    make_store(root, 300)
    r = run("inspect", root, "--json")
    assert r.exit_code == 0
    info = json.loads(r.stdout)
    assert info["topics"] == ["T0", "T1"]
    assert sum(q["messages"] for q in info["queues"]) == 300
    assert {(q["topic"], q["queue_id"]) for q in info["queues"]} == {("T0", 0), ("T1", 1)}
    assert not info["abort"]["exists"] and not info["unclean_shutdown"]
    assert info["commit_log"]["min_offset"] == 0 and len(info["commit_log"]["files"]) >= 2
    assert info["commit_log"]["file_size"] == SMALL["mapped_file_size_commit_log"]
    assert info["checkpoint"]["physic_msg_timestamp"] > 0
    assert 0 <= info["disk"]["commit_log_disk_ratio"] <= 1 and info["dispatch_behind_bytes"] == 0
    r = run("inspect", root)
    assert r.exit_code == 0
    for word in (
        "clean shutdown",
        "T1",
        "commit-log files",
        "00000000000000065536",
        "disk used ratio",
        "checkpoint",
    ):
        assert word in r.output
    (tmp_path / "s" / "abort").write_text("999999999")
    assert "unclean shutdown" in run("inspect", root).output
    assert run("inspect", tmp_path / "absent").exit_code == 1
    assert run("inspect", tmp_path).exit_code == 1  # a folder, not a store


def test_inspect_shows_the_timer_store(tmp_path):
    root = tmp_path / "s"
    now = [1_700_000_000_000]
    store = MessageStore.open(str(root), clock=lambda: now[0], **SMALL)
    for i in range(3):
        assert store.put_message(Message("T0", b"t%d" % i, delay_ms=60_000)).is_ok()
    deadline = time.monotonic() + 20
    while store.timer_stats()["pending"] != 3 or store.timer_stats()["enqueue_behind"] != 0:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    store.shutdown()
    info = json.loads(run("inspect", root, "--json").stdout)["timer"]
    assert info["pending"] == 3 and info["next_due_ms"] == now[0] + 60_000
    assert info["checkpoint"]["last_timer_log_flush_pos"] == 3 * 52
    assert info["checkpoint"]["last_timer_queue_offset"] == 3
    assert info["files"]["timerwheel"] == 2 * 604800 * 32 and info["files"]["timercheck"] == 4096
    out = run("inspect", root).output
    assert "timers" in out and "3 pending" in out
    # a store without timers shows none
    make_store(tmp_path / "plain", 5)
    plain = json.loads(run("inspect", tmp_path / "plain", "--json").stdout)["timer"]
    assert (plain["pending"], plain["checkpoint"]) == (0, None)
    assert "timers" not in run("inspect", tmp_path / "plain").output


def test_inspect_reports_allocated_and_apparent_sizes(sparse_tmp):
    root = sparse_tmp / "s"
    with MessageStore.open(root) as s:     # default sizes: a 1 GiB commit-log file, a 400 MB index file
        for i in range(500):
            assert s.put_message(Message("T0", b"x" * 100, keys=["k%d" % i])).is_ok()
    info = json.loads(run("inspect", root, "--json").stdout)

    def stat(path):
        st = os.stat(path)
        return st.st_size, st.st_blocks * 512

    for f in info["commit_log"]["files"]:
        assert (f["size"], f["allocated"]) == stat(f["path"])
        assert f["sparse"] == (f["allocated"] < f["size"]) is True
    for f in info["index_files"]:
        assert (f["size"], f["allocated"]) == stat(root / "index" / f["name"])
        assert f["sparse"] is True
    cq = [stat(os.path.join(d, n)) for d, _, names in os.walk(root / "consumequeue") for n in names]
    disk = info["disk"]
    assert disk["bytes"]["consumequeue"] == sum(size for size, _ in cq)
    assert disk["allocated_bytes"]["consumequeue"] == sum(allocated for _, allocated in cq)
    assert disk["allocated_bytes"]["commitlog"] == sum(f["allocated"] for f in info["commit_log"]["files"])
    assert disk["bytes"]["commitlog"] == 1 << 30
    assert disk["allocated_bytes"]["commitlog"] < 8 << 20
    assert disk["sparse"] == {"commitlog": True, "consumequeue": True, "index": True}
    out = run("inspect", root).output
    assert "allocated / apparent" in out and "(sparse)" in out and "1.0 GiB" in out


def test_verify_ok(tmp_path):
    root = tmp_path / "s"
    make_store(root, 300)
    r = run("verify", root)
    assert r.exit_code == 0, r.output
    assert "300 message(s)" in r.output and "OK" in r.output
    rep = json.loads(run("verify", root, "--json").stdout)
    assert rep["ok"] and rep["units_checked"] == 300 and rep["keys_checked"] == 300 and not rep["problems"]


def test_verify_finds_a_flipped_body_byte(tmp_path):
    root = tmp_path / "s"
    make_store(root, 300)
    path, offset = flip_body_byte(root, 150)
    r = run("verify", root)
    assert r.exit_code == 1
    text = " ".join(r.output.split())
    assert "body CRC mismatch" in text and str(offset) in text and os.path.basename(path) in text
    rep = json.loads(run("verify", root, "--json").stdout)
    assert not rep["ok"]
    first = rep["problems"][0]
    assert (first["kind"], first["path"], first["offset"]) == ("commitlog", path, offset)
    assert rep["records"] == 299  # the walk went on after the damage
    assert any(p["kind"] == "consumequeue" and p["offset"] == offset for p in rep["problems"])


def test_verify_finds_a_consume_queue_unit_that_lies(tmp_path):
    root = tmp_path / "s"
    make_store(root, 40)
    cq = tmp_path / "s" / "consumequeue" / "T1" / "1" / ("%020d" % 0)
    with open(cq, "r+b") as f:  # unit 3: tags code
        f.seek(3 * 20 + 12)
        f.write((12345).to_bytes(8, "big"))
    rep = json.loads(run("verify", root, "--json").stdout)
    (p,) = rep["problems"]
    assert p["kind"] == "consumequeue" and "tags code 12345" in p["detail"] and p["path"].endswith("T1/1")


def test_verify_without_a_store(tmp_path):
    assert run("verify", tmp_path).exit_code == 1


# -- recover / clean ---------------------------------------------------------------------------------------


def test_recover_refuses_durable_damage_then_truncates(tmp_path):
    root = tmp_path / "s"
    results = make_store(root, 300)
    last_file = max(r.append_message_result.wrote_offset for r in results) // 65536 * 65536
    index = next(i for i, r in enumerate(results) if r.append_message_result.wrote_offset > last_file + 2000)
    _, offset = flip_body_byte(root, index)
    r = run("recover", root)
    assert r.exit_code == 1
    text = " ".join(r.output.split())
    assert "corrupted" in text and str(offset) in text and "--truncate" in text
    # worded as every verb words damage (get, export ... : `error: store corrupted: ...`)
    assert r.output.startswith("error: store corrupted: ") and "nothing was changed" in text
    assert len(list(iter_commitlog(root, verify_crc=False))) == 300  # nothing was changed
    r = run("recover", root, "--truncate")
    assert r.exit_code == 0, r.output
    assert "damage" in r.output and str(offset) in " ".join(r.output.split())
    assert run("verify", root).exit_code == 0
    info = json.loads(run("inspect", root, "--json").stdout)
    assert info["commit_log"]["max_offset"] == offset
    assert sum(q["messages"] for q in info["queues"]) == index


def test_recover_a_clean_store(tmp_path):
    root = tmp_path / "s"
    make_store(root, 50)
    r = run("recover", root)
    assert r.exit_code == 0 and "normal recovery" in r.output and "damage" in r.output
    (tmp_path / "s" / "abort").write_text("1")
    r = run("recover", root)
    assert r.exit_code == 0 and "abnormal recovery" in r.output
    assert not (tmp_path / "s" / "abort").exists()
    assert run("recover", tmp_path / "absent").exit_code == 1


def test_clean(tmp_path):
    root = tmp_path / "s"
    make_store(root, 600)
    files = sorted(os.listdir(tmp_path / "s" / "commitlog"))
    assert len(files) >= 3
    old = os.path.getmtime(tmp_path / "s" / "commitlog" / files[0]) - 7200
    for name in files:  # two hours old: expired with file_reserved_time=1
        os.utime(tmp_path / "s" / "commitlog" / name, (old, old))
    r = run(
        "clean", root, "--expired", "-o", "file_reserved_time=1", "-o", "delete_commit_log_files_interval=0"
    )
    assert r.exit_code == 0, r.output
    assert "commit-log files deleted" in r.output
    assert len(os.listdir(tmp_path / "s" / "commitlog")) < len(files)
    r = run("clean", root, "--topic-keep", "T0")
    assert r.exit_code == 0, r.output
    assert "T1/1" in r.output
    info = json.loads(run("inspect", root, "--json").stdout)
    assert {q["topic"] for q in info["queues"]} <= {"T0"}


def test_clean_usage(tmp_path):
    assert run("clean", tmp_path / "absent").exit_code == 1
    make_store(tmp_path / "s", 5)
    assert run("clean", tmp_path / "s", "--topic-keep", " , ").exit_code == 2


# -- export ------------------------------------------------------------------------------------------------


def test_export_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from pystore.columns.export import COLUMNS

    root = tmp_path / "s"
    results = make_store(root, 300)
    out = tmp_path / "all.parquet"
    r = run("export", root, out)
    assert r.exit_code == 0, r.output
    assert "300 message(s)" in r.output
    t = pq.read_table(out)
    assert t.column_names == [c for c, _ in COLUMNS] and t.num_rows == 300
    row = t.slice(7, 1).to_pylist()[0]
    assert row["commit_log_offset"] == results[7].append_message_result.wrote_offset
    assert row["body"] == b"body 7 " * 20 and row["keys"] == ["key7"] and row["tags"] == "Tag1"
    assert row["store_host"] == "127.0.0.1:10911" and dict(row["properties"])["KEYS"] == "key7"
    assert row["msg_id"] == results[7].append_message_result.msg_id
    assert row["store_timestamp"].timestamp() * 1000 == results[7].append_message_result.store_timestamp
    r = run("export", root, tmp_path / "t1.parquet", "--topic", "T1")
    assert r.exit_code == 0
    assert set(pq.read_table(tmp_path / "t1.parquet").column("topic").to_pylist()) == {"T1"}
    flip_body_byte(root, 10)
    r = run("export", root, tmp_path / "bad.parquet")
    assert r.exit_code == 1 and "corrupted" in r.output and not (tmp_path / "bad.parquet").exists()
    assert run("export", root, tmp_path / "raw.parquet", "--no-verify-crc").exit_code == 0


def test_export_without_pyarrow(tmp_path, monkeypatch):
    import pystore.columns.export as ex

    def no_pyarrow():
        raise ImportError(ex.MISSING_PYARROW)

    monkeypatch.setattr(ex, "_pa", no_pyarrow)
    make_store(tmp_path / "s", 5)
    r = run("export", tmp_path / "s", tmp_path / "o.parquet")
    assert r.exit_code == 1 and "pystore-mq[spark]" in r.output


# -- bench -------------------------------------------------------------------------------------------------


def test_bench_without_the_bench_folder(tmp_path):
    r = run("bench", env={"PYSTORE_BENCH_DIR": str(tmp_path / "nope")})
    assert r.exit_code == 1 and "bench folder" in r.output


def test_bench_peers_streams_with_a_progress_bar(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "peers.py").write_text(
        textwrap.dedent("""
        import sys
        CONTENDERS = [1, 2]
        QUICK = FULL = {"reps": 1}
        if __name__ == "__main__":
            print("pystore peers run")
            print("  rep 1/1  pystore   0.1 s")
            print("  rep 1/1  lmdb      0.1 s")
            print("quick" if "--quick" in sys.argv else "full")
            sys.exit(3 if "--fail" in sys.argv else 0)
    """)
    )
    r = run("bench", "--peers", "--quick", env={"PYSTORE_BENCH_DIR": str(bench)})
    assert r.exit_code == 0, r.output
    assert "pystore peers run" in r.output and "quick" in r.output and "2/2" in r.output
    assert "rep 1/1" not in r.output  # those lines drive the bar


def test_bench_runs_the_pytest_suite(tmp_path):
    pytest.importorskip("pytest_benchmark")
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "peers.py").write_text("")
    (bench / "test_fake.py").write_text("def test_ok(benchmark):\n    benchmark(sum, [1, 2])\n")
    r = run("bench", "--quick", env={"PYSTORE_BENCH_DIR": str(bench)})
    assert r.exit_code == 0, r.output
    (bench / "test_fake.py").write_text("def test_bad():\n    assert False\n")
    assert run("bench", "--quick", env={"PYSTORE_BENCH_DIR": str(bench)}).exit_code == 1


# -- a user's first hour: exit codes, pipes, plain output, streaming, wording, --create, refusals --------------

DOC = os.path.join(REPO, "docs", "cli.md")
STORE_VERBS = ("put", "get", "query", "inspect", "verify", "recover", "clean", "export")


def verb_args(verb: str, root, tmp_path) -> list:
    """The shortest command line of each verb that opens the store at ``root``."""
    return {
        "put": ["put", root, "-t", "T0", "x"],
        "get": ["get", root, "T0", "0", "0"],
        "query": ["query", root, "T0", "key1"],
        "inspect": ["inspect", root],
        "verify": ["verify", root],
        "recover": ["recover", root],
        "clean": ["clean", root],
        "export": ["export", root, tmp_path / "out.parquet"],
    }[verb]


def pystore_subprocess(*args, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop("COLUMNS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "pystore", *[str(a) for a in args]], env=env, stderr=subprocess.PIPE, **kwargs
    )


def test_exit_code_rule_an_empty_answer_is_0(tmp_path):
    """docs/cli.md: 0 when the verb answered (also with nothing), 1 a problem or a refusal, 2 a usage error."""
    root = tmp_path / "s"
    make_store(root, 10)
    for args in (
        ("get", root, "Nope", "0", "0"),  # NO_MESSAGE_IN_QUEUE (was 1)
        ("get", root, "T0", "0", "0", "--tags", "Nope"),  # NO_MATCHED_MESSAGE (was 0)
        ("get", root, "T0", "0", "99"),  # OFFSET_OVERFLOW_BADLY (was 1)
        ("query", root, "T0", "nokey"),  # nothing found (was 1)
        ("query", root, "--msg-id", "7F00000100002A9F00000000000FFFFF"),
    ):
        r = run(*args)
        assert r.exit_code == 0, (args, r.output)
    r = run("export", root, tmp_path / "none.parquet", "-t", "Nope")
    assert r.exit_code == 0 and "no messages" in r.output
    r = run("put", root, "-t", "T0", "--stdin", input="")
    assert r.exit_code == 0 and "nothing to put" in r.output


def test_exit_code_rule_a_root_without_a_store_is_1_for_every_verb(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    for root in (tmp_path / "absent", a_file, empty):
        for verb in STORE_VERBS:
            r = run(*verb_args(verb, root, tmp_path))
            assert r.exit_code == 1, (verb, root, r.output)
            assert "no store at %s" % root in " ".join(r.output.split()), (verb, r.output)
    assert sorted(os.listdir(tmp_path)) == ["empty", "file"] and not os.listdir(empty)


def test_docs_cli_md_states_the_rule_with_an_example_per_verb():
    text = open(DOC, encoding="utf-8").read()
    assert "Exit codes" in text
    for verb in VERBS:
        assert "pystore %s" % verb in text, verb


@pytest.mark.parametrize("args", [("inspect",), ("get", "T0", "0", "0", "-n", "3000"), ("verify", "--json")])
def test_a_broken_pipe_ends_quietly_with_exit_0(tmp_path, args):
    root = tmp_path / "s"
    make_store(root, 3000, topics=("T0",), queues=1)
    for _ in range(3):
        p = pystore_subprocess(args[0], root, *args[1:], stdout=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.close()  # the reader went away before the first line: every write meets EPIPE
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
        assert err == b"", err.decode()


def test_output_that_is_not_a_terminal_is_plain(tmp_path):
    deep = tmp_path / ("a-rather-long-folder-name-[x]-" * 4) / "store"
    make_store(deep, 10)
    p = pystore_subprocess("inspect", deep, stdout=subprocess.PIPE)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()
    text = out.decode()
    assert str(deep) in text.splitlines()[0]  # not wrapped at 80 columns, its [x] not eaten as markup
    assert "\x1b[" not in text
    p = pystore_subprocess("get", deep / "absent", "T0", "0", "0", stdout=subprocess.PIPE)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1 and ("no store at %s" % (deep / "absent")) in err.decode().splitlines()[0]


def test_demo_install_hint_keeps_its_brackets(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    r = run("demo", tmp_path / "d", "--spark", "-n", "100")
    assert r.exit_code == 0, r.output
    assert "pip install pystore-mq[spark]" in r.output


def test_get_streams_large_outputs(tmp_path):
    root = tmp_path / "s"
    make_store(root, 5000, topics=("T0",), queues=1)
    r = run("get", root, "T0", "0", "0", "-n", "5000")
    assert r.exit_code == 0, r.output[-500:]
    rows = [line for line in r.stdout.splitlines() if line[:1].isdigit()]
    assert len(rows) == 5000 and all(len(line.split("\t")) == 8 for line in rows)
    assert rows[4999].split("\t")[1] == "4999"
    assert "│" not in r.stdout and "next offset 5000" in r.output
    r = run("get", root, "T0", "0", "0", "-n", "20")
    assert "queue off  commit-log off" in r.stdout  # a small answer is still a table (without box lines)


def test_one_wording_per_error_and_the_lock_error_speaks_cli(tmp_path):
    root = tmp_path / "s"
    make_store(root, 5)
    with MessageStore.open(root, **SMALL):
        for args in (*(verb_args(verb, root, tmp_path) for verb in ("put", "recover", "clean")),
                     ("demo", root, "--no-spark", "-n", "100")):
            r = run(*args)
            assert r.exit_code == 1 and "locked" in r.output, r.output
            assert "read_only" not in r.output and "read-only verbs" in r.output, r.output
            # the message names every verb that writes, the one just refused among them
            assert "put, recover, clean and demo need it closed" in r.output, r.output


def test_put_creates_a_store_only_with_create(tmp_path):
    root = tmp_path / "new"
    r = run("put", root, "-t", "T", "x")
    assert r.exit_code == 1 and "no store at %s" % root in r.output and "--create" in r.output
    assert not root.exists()
    r = run("put", root, "-t", "T", "x", "--create", *SMALL_OPTS)
    assert r.exit_code == 0, r.output
    assert run("put", root, "-t", "T", "y").exit_code == 0
    a_file = tmp_path / "f"
    a_file.write_text("x")
    r = run("put", a_file, "-t", "T", "x", "--create")
    assert r.exit_code == 1 and "no store at %s" % a_file in r.output


def test_export_spark_sets_the_python_of_its_workers(tmp_path, monkeypatch):
    sql = pytest.importorskip("pyspark.sql")
    seen = {}

    class Stop(BaseException):  # past handle_store_errors, which turns an Exception into exit 1
        pass

    class Builder:
        def __getattr__(self, name):
            return lambda *a, **k: self

        def config(self, key, value):
            seen[key] = value
            return self

        def getOrCreate(self):
            seen.update({k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")})
            raise Stop

    class FakeSession:
        builder = Builder()

    monkeypatch.setattr(sql, "SparkSession", FakeSession)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    make_store(tmp_path / "s", 5)
    with pytest.raises(Stop):
        CliRunner().invoke(cli, ["export", str(tmp_path / "s"), str(tmp_path / "o"), "--spark"], catch_exceptions=False)
    assert seen["PYSPARK_PYTHON"] == seen["PYSPARK_DRIVER_PYTHON"] == sys.executable
    # the same timestamps as the pyarrow path; off a terminal no stage bar drawn with carriage returns
    assert seen["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MILLIS"
    assert seen["spark.ui.showConsoleProgress"] == "false"


def test_export_progress_counts_records_not_file_sizes(tmp_path):
    pytest.importorskip("pyarrow")
    from pystore.columns.export import export_parquet

    root = tmp_path / "s"
    make_store(root, 300)
    calls = []
    res = export_parquet(root, tmp_path / "o.parquet", topics=["T1"], progress=lambda *a: calls.append(a))
    assert calls[-1] == (150, res.bytes_in)
    assert all(a[0] <= 150 and a[1] <= res.bytes_in for a in calls)


def test_ctrl_c_exits_130_with_one_line_and_closes_the_store(tmp_path):
    """SIGINT while ``put --stdin`` waits for input: exit 130 (not click's 1, the code of a problem), one line
    on stderr and no traceback; what was put before stays, and the store was shut down cleanly."""
    import signal
    import time

    root = tmp_path / "s"
    make_store(root, 3)
    env = dict(os.environ, PYTHONPATH=REPO)
    # SIGINT at its default in the child: a test run started in the background (``make test &``) inherits it
    # ignored, and a Python started so never sees Ctrl-C
    p = subprocess.Popen([sys.executable, "-m", "pystore", "put", str(root), "-t", "T9", "--stdin"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        p.stdin.write(b"first\nsecond\n")
        p.stdin.flush()
        deadline = time.monotonic() + 60
        while [m.body for m in iter_commitlog(root) if m.topic == "T9"] != [b"first", b"second"]:
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() is not None else ""
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert err == b"interrupted\n" and out == b""
    assert not (root / "abort").exists()                       # shut down, not crashed
    assert run("verify", root).exit_code == 0


def test_a_refused_put_says_why(tmp_path):
    root = tmp_path / "s"
    make_store(root, 5)
    r = run("put", root, "-t", "bad topic!", "x")
    assert r.exit_code == 1 and "MESSAGE_ILLEGAL" in r.output
    assert "topic 'bad topic!' has characters outside [%|a-zA-Z0-9_-]" in " ".join(r.output.split())
    big = tmp_path / "big"
    big.write_bytes(b"x" * (5 << 20))
    r = run("put", root, "-t", "T0", "-f", big)
    assert r.exit_code == 1 and "MESSAGE_ILLEGAL" in r.output
    assert "body of 5242880 bytes is larger than max_message_size (4194304)" in " ".join(r.output.split())
    r = run("put", root, "-t", "T0", "-p", "big=" + "v" * 40000, "x")
    assert r.exit_code == 1 and "PROPERTIES_SIZE_EXCEEDED" in r.output and "32767" in r.output
    rows = json.loads(run("put", root, "-t", "T0", "-f", big, "--json").stdout)
    assert rows["reason"].startswith("body of 5242880 bytes")


def test_the_spark_writers_append_says_why_with_the_same_words(tmp_path):
    """The Spark writer's driver half (no Spark needed) explains a refusal with refusal_reason."""
    pa = pytest.importorskip("pyarrow")
    from pystore.spark.append import append_staged

    schema = pa.schema(
        [
            ("topic", pa.string()),
            ("body", pa.binary()),
            ("tags", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("queue_id", pa.int32()),
            ("properties", pa.map_(pa.string(), pa.string())),
        ]
    )
    staged = str(tmp_path / "part.arrow")
    batch = pa.record_batch([["W"], [b"x" * 300], [None], [[]], [0], [None]], schema=schema)
    with pa.OSFile(staged, "wb") as f, pa.ipc.new_file(f, schema) as w:
        w.write_batch(batch)
    with pytest.raises(RuntimeError) as exc:
        append_staged(str(tmp_path / "s"), [staged], dict(SMALL, max_message_size=200))
    assert "MESSAGE_ILLEGAL (body of 300 bytes is larger than max_message_size (200))" in str(exc.value)


@pytest.mark.parametrize("verb", [("verify",), ("clean",), ("recover",), ("get", "T0", "0", "0"), ("inspect",)])
def test_tables_off_a_terminal_are_plain_rows(tmp_path, verb):
    """Off a terminal a table has no box lines: every row is one line of space-separated columns that grep
    and cut take whole (the title stays its own line)."""
    root = tmp_path / "s"
    make_store(root, n=20)
    r = run(verb[0], root, *verb[1:])
    assert r.exit_code == 0, r.output
    assert not BOX & set(r.output), r.output
    assert str(root) in r.output or verb[0] == "get"
    # a cell is padded to its column's width: not the last one of a line
    assert [line for line in r.output.splitlines() if line.endswith(" ")] == []


def test_put_joins_shared_writers_only_with_the_flag(tmp_path):
    root = tmp_path / "s"
    with MessageStore.open(root, shared_writers=True, **SMALL) as store:
        assert store.put_message(Message("T", b"first")).is_ok()
        r = run("put", root, "-t", "T", "x")
        assert r.exit_code == 1 and "shared writers (pid %d)" % os.getpid() in r.output, r.output
        assert "put --shared-writers joins them" in r.output
        r = run("put", root, "--shared-writers", "-t", "T", "joined")
        assert r.exit_code == 0, r.output
        deadline = time.monotonic() + 5
        while store.get_max_offset_in_queue("T", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [m.body for m in store.get_message("G", "T", 0, 0).messages] == [b"first", b"joined"]
