"""The type stubs of the compiled modules (``pystore/*.pyi``): they match the extensions (mypy's stubtest), and a
user's program type-checks against them with real types, not ``Any`` (mypy's ``reveal_type``).

Both run mypy in a subprocess against this checkout (``PYTHONPATH`` and ``MYPYPATH`` point here, not at whatever
``pystore`` the interpreter's editable install would find)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy.stubtest", reason="mypy is not installed (the dev extra)")

ROOT = Path(__file__).resolve().parents[1]
# every compiled module has its stub (tests/test_packaging.py): all of them are checked
STUBBED = sorted(p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".") for p in (ROOT / "pystore").rglob("*.pyx"))
ALLOWLIST = ROOT / "tests" / "stubtest_allowlist.txt"


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, MYPYPATH=str(ROOT))


def test_stubtest_finds_the_stubs_match_the_extensions():
    p = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *STUBBED, "--allowlist", str(ALLOWLIST)],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr


# Each `reveal_type` line ends with the type mypy must reveal there ("builtins." left out: mypy 2 omits it).
# The program also runs, so each revealed static type is checked against the runtime type it names.
USER_PROGRAM = """\
from __future__ import annotations

import sys
from typing import reveal_type

from pystore import Message
from pystore import MessageBatch
from pystore import MessageExt
from pystore import MessageStore
from pystore import PutMessageStatus


def main(root: str) -> None:
    with MessageStore.open(root) as store:
        reveal_type(store)  # pystore.engine.store.MessageStore
        msg = Message("TopicTest", b"hello", tags="TagA", keys=["k1", "k2"], properties={"a": "b"})
        r = store.put_message(msg)
        reveal_type(r)  # pystore.log._results.PutMessageResult
        reveal_type(r.status)  # pystore.status.PutMessageStatus
        reveal_type(r.is_ok())  # bool
        reveal_type(r.append_message_result)  # pystore.log._results.AppendMessageResult | None
        assert r.status is PutMessageStatus.PUT_OK
        batch = MessageBatch.from_bodies("TopicTest", [b"x", bytearray(b"y")], tags="TagB")
        reveal_type(batch)  # pystore.message._message_batch.MessageBatch
        reveal_type(store.put_messages(batch).next_offset)  # int
        res = store.get_message("group", "TopicTest", 0, 0)
        reveal_type(res)  # pystore.read._read.GetMessageResult
        assert res.message_count == 3
        reveal_type(res.messages)  # list[pystore.message._message_ext.MessageExt]
        m = res.messages[0]
        reveal_type(m.body)  # bytes
        reveal_type(m.keys)  # list[str]
        reveal_type(m.properties)  # dict[str, str]
        reveal_type(m.born_host)  # tuple[str, int]
        reveal_type(m.tags)  # str | None
        reveal_type(m.queue_offset)  # int
        reveal_type(m.msg_id)  # str
        reveal_type(m.to_message())  # pystore.message._message.Message
        data = store.get_commit_log_data(0)
        reveal_type(data)  # pystore.log._mapped_view.SelectMappedBufferResult | None
        assert data is not None
        with data as d:
            reveal_type(d.buffer)  # memoryview[int]
            reveal_type(bytes(d))  # bytes
        same: MessageExt | None = store.look_message_by_offset(m.commit_log_offset)
        assert same is not None and same.body == b"hello" and same.keys == ["k1", "k2"]
    if len(sys.argv) > 2:  # never at runtime: what the stubs must refuse
        Message("TopicTest", "a str body")  # E: arg-type
        m.body = b"read-only"  # E: misc
        r.status = PutMessageStatus.UNKNOWN_ERROR  # E: misc


if __name__ == "__main__":
    main(sys.argv[1])
"""


def _outer_names(static: str) -> set[str]:
    """``pystore.read._read.GetMessageResult | None`` -> {"GetMessageResult", "NoneType"}; ``list[str]`` -> {"list"}."""
    names = set()
    for member in static.split(" | "):
        name = member.split("[", 1)[0].rsplit(".", 1)[-1]
        names.add("NoneType" if name == "None" else name)
    return names


def test_a_user_program_sees_real_types(tmp_path):
    prog = tmp_path / "user_program.py"
    prog.write_text(USER_PROGRAM)
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\nfollow_imports = silent\n")
    lines = USER_PROGRAM.splitlines()
    expected_types = {i: line.rsplit("# ", 1)[1] for i, line in enumerate(lines, 1) if "reveal_type(" in line}
    expected_errors = {i: line.rsplit("# E: ", 1)[1] for i, line in enumerate(lines, 1) if "# E: " in line}

    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
         "--cache-dir", str(tmp_path / ".mypy_cache"), "user_program.py"],
        capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120,
    )
    revealed, errors = {}, {}
    for m in re.finditer(r'^user_program\.py:(\d+): note: Revealed type is "(.*)"$', p.stdout, re.M):
        revealed[int(m[1])] = m[2].replace("builtins.", "")
    for m in re.finditer(r"^user_program\.py:(\d+): error: .*\[([\w-]+)\]$", p.stdout, re.M):
        errors[int(m[1])] = m[2]
    assert revealed == expected_types, p.stdout + p.stderr
    assert errors == expected_errors, p.stdout + p.stderr

    # the same program at runtime: every value has a type the static one names
    run = subprocess.run(
        [sys.executable, str(prog), str(tmp_path / "store")],
        capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    runtime = re.findall(r"^Runtime type is '(\w+)'$", run.stderr, re.M)
    assert len(runtime) == len(expected_types), run.stderr
    for (line, static), name in zip(sorted(expected_types.items()), runtime):
        assert name in _outer_names(static), "line %d: runtime %s, static %s" % (line, name, static)


def test_the_package_ships_its_stubs():
    for mod in STUBBED:
        assert (ROOT / (mod.replace(".", "/") + ".pyi")).is_file(), mod
    assert (ROOT / "pystore" / "py.typed").is_file()


def test_the_package_type_checks(tmp_path):
    """``mypy pystore`` (pyproject's settings, as ``make typecheck``) finds nothing: the library's own
    annotations agree with its code and with the stubs above."""
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / ".mypy_cache"), "pystore"],
        capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
