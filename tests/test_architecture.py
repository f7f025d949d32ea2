"""The house against its map: docs/architecture.md's module map names every module of ``pystore/`` (and nothing
that is gone), and the subsystem packages import each other only downwards, but for the exceptions listed here
with their reasons."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "pystore"
MAP = ROOT / "docs" / "architecture.md"
SOURCES = (".py", ".pyx", ".pxd", ".h")

# The packages from the ground up: a package may import from a lower rank (or its own), not from a higher one.
RANK: dict[str, float] = {"system": 0, "format": 1, "message": 1, "log": 2, "index": 3, "queue": 4, "timer": 4.5, "read": 5,
        "archive": 5.5, "columns": 6, "consumer": 6, "ha": 6, "engine": 7, "spark": 8, "cli": 9}
# The top-level modules: the errors and statuses at the ground (anyone may import them); the configuration just
# above the record format (it takes the unit size from there); the offline tools beside the reads.
TOP_GROUND = {"errors", "status"}
TOP_ABOVE: dict[str, float] = {"config": 1.5, "tools": 5}
# packages of one rank that may import each other, one way
SAME = {("message", "format")}
# Imports that run against the ranks, each with its reason. A new one fails the test until it is listed here.
UPWARD = {
    # a record is encoded from a Message and decoded into a MessageExt; those objects use the properties and
    # host codecs beneath them: format and message are one layer, split for the reader
    ("format/_codec.pyx", "message"): "the codec encodes a Message and builds a MessageExt",
    ("format/_codec.pxd", "message"): "the codec's cdef signatures name Message and MessageExt",
    # the commit log's time queries and file lookup reuse the compiled searches of the queues' units
    ("log/commitlog.py", "queue"): "time queries use the unit time search (_timesearch)",
    ("log/mapped_file_queue.py", "queue"): "find_file is exported by _units for every log",
    # a queue's load and recovery read its files and ask recovery's pure decisions about them (no file, no
    # state: engine/queue_damage.py imports nothing above format), so that every recovery decision is in one place
    ("queue/consume_queue.py", "engine"): "a queue's damage is judged by engine/queue_damage.py (pure)",
    ("queue/queue_store.py", "engine"): "a damaged queue is rebuilt or refused as engine/queue_damage.py decides",
    # query_message's result is made where the lookup runs
    ("index/service.py", "read"): "the index lookup builds QueryMessageResult (read/results.py)",
}


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*") if p.suffix in SOURCES and "__pycache__" not in p.parts)


def _map_sections() -> list[tuple[list[str], str]]:
    text = MAP.read_text()
    body = text[text.index("## Module map"):]
    body = body[: body.index("\n## ", 3)]
    sections = []
    for part in body.split("\n### ")[1:]:
        heading, _, rest = part.partition("\n")
        pkgs = ["" if p == "pystore/" else p for p in re.findall(r"`([\w/]*/)`", heading)]
        sections.append((pkgs, rest))
    return sections


def _named() -> set[str]:
    """Every module the map names, as a path under pystore/."""
    names = set()
    for pkgs, rest in _map_sections():
        for row in rest.splitlines():
            if not row.startswith("| `"):
                continue
            first = row.split("|")[1]
            for tok in re.findall(r"`([\w./]+)`", first):
                if "/" in tok:
                    names.add(tok)
                else:
                    assert len(pkgs) == 1, "%r names %s without its package in a section of several" % (row, tok)
                    names.add(pkgs[0] + tok)
    return names


def test_the_map_names_every_module():
    # a .pxd is its .pyx's interface, named with it
    have = {p.relative_to(PKG).as_posix() for p in _sources()
            if not (p.suffix == ".pxd" and p.with_suffix(".pyx").exists())}
    # a subpackage's __init__.py is its face (its docstring says what the package holds): named only where it holds code
    required = have - {"%s/__init__.py" % k for k in RANK}
    named = _named()
    assert sorted(required - named) == [], "modules docs/architecture.md's map does not name"
    assert sorted(named - have) == [], "names in docs/architecture.md's map that are not modules"


def test_the_map_check_can_fail(monkeypatch, tmp_path):
    fake = tmp_path / "architecture.md"
    fake.write_text(MAP.read_text().replace("| `_commitlog.pyx`, `commitlog.py` |", "| `commitlog.py` |"))
    monkeypatch.setattr(__import__(__name__), "MAP", fake)
    with pytest.raises(AssertionError, match="does not name"):
        test_the_map_names_every_module()


def _imports(path: Path) -> list[str]:
    """The pystore modules ``path`` imports at run time (imports under ``if TYPE_CHECKING:`` are left out)."""
    src = path.read_text()
    if path.suffix != ".py":
        return re.findall(r"^\s*(?:from|cimport|import)\s+(pystore(?:\.\w+)+)", src, re.M)
    tree = ast.parse(src)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pystore"):
            out.append(node.module)
            out += ["%s.%s" % (node.module, a.name) for a in node.names if node.module == "pystore"]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("pystore")]
    return out


def _rank(dotted: str) -> tuple[str, int] | None:
    parts = dotted.split(".")
    if len(parts) < 2:
        return None
    head = parts[1]
    if head in RANK:
        return head, RANK[head]
    if head in TOP_ABOVE:
        return head, TOP_ABOVE[head]
    return None  # the ground: config, errors, status, results, the package itself


def _upward() -> dict[tuple[str, str], str]:
    found = {}
    for path in _sources():
        rel = path.relative_to(PKG)
        if len(rel.parts) == 1:
            if rel.stem not in TOP_ABOVE and rel.stem not in TOP_GROUND:
                continue  # __init__, __main__: the face and the entry point stand above everything
            own = (rel.stem, TOP_ABOVE.get(rel.stem, -1))
        else:
            own = (rel.parts[0], RANK[rel.parts[0]])
        for dotted in _imports(path):
            tgt = _rank(dotted)
            if tgt and tgt[0] != own[0] and tgt[1] >= own[1] and not (tgt[1] == own[1] and (own[0], tgt[0]) in SAME):
                found[(rel.as_posix(), tgt[0])] = dotted
    return found



def test_packages_import_only_downwards():
    found = _upward()
    unlisted = {k: v for k, v in found.items() if k not in UPWARD}
    assert unlisted == {}, "imports against the package ranks (list them in UPWARD with a reason, or move the code)"
    stale = sorted(set(UPWARD) - set(found))
    assert stale == [], "UPWARD lists imports that no longer exist"


def test_every_package_is_ranked():
    assert sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()) == sorted(RANK)
