"""The user documentation (README.md, docs/*.md) against the code: it must not rot.

* every public name (``pystore.__all__``, ``MessageStore``'s methods and properties, ``StoreConfig``'s
  fields) is in docs/api.md, and every ``pystore.X`` / ``store.x(`` that docs/api.md names exists;
* every relative link of README.md and docs/*.md reaches its file and, with ``#anchor``, a heading there;
* every "docs/format.md §N", "docs/api.md "Heading"" and "docs/architecture.md "Heading"" that the code
  cites (also in its older spelling, before the references were moved into the repository) exists;
* nothing in README.md or docs/ points at design notes that are not part of the repository
  (:func:`references_outside_repo`);
* the README's example (the fenced block after ``<!-- readme-example -->``) runs, verbatim, in a temp dir,
  and prints what the README's next block says it prints; and ``mypy --strict`` takes it as it stands.

``make docs`` runs this module alone; ``make test`` runs it first.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import pystore
from pystore import MessageStore, StoreConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API = DOCS / "api.md"
FORMAT = DOCS / "format.md"
ARCHITECTURE = DOCS / "architecture.md"
README = ROOT / "README.md"
USER_DOCS = [README, *sorted(DOCS.glob("*.md"))]
#: Where the code that cites the docs lives (generated C is left out: it repeats the .pyx docstrings).
CODE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".h")
CODE_DIRS = ("pystore", "tests", "bench")

EXAMPLE_MARK = "<!-- readme-example -->"

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_OUTSIDE = re.compile(r"\.\./shared|/work/shared|(?<![\w/.-])(?:API|FORMAT|DESIGN|STYLE)\.md\b")


def references_outside_repo(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[str, int, str]]:
    """``(file, line number, line)`` of every mention of the design notes kept outside the repository.

    Those are ``../shared``, ``/work/shared`` and the bare names ``API.md``, ``FORMAT.md``, ``DESIGN.md``,
    ``STYLE.md`` (``docs/api.md`` and the like are the repository's own and do not match: lower case).
    ``paths`` may hold files and folders; folders are walked for text files of the docs and the code. This
    module is skipped: it names those files to find them.
    """
    found: list[tuple[str, int, str]] = []
    for path in _files(paths):
        if path.resolve() == Path(__file__).resolve():
            continue
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                found.append((str(path), number, line.strip()))
    return found


def _files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".md", *CODE_SUFFIXES)))
        else:
            out.append(p)
    return out


def _prose(text: str) -> str:
    """The text outside fenced code blocks (links and headings in code are not links or headings)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link in a heading: its text
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.group(2).strip() for m in re.finditer(r"^(#{1,6})\s+(.*?)\s*#*\s*$", _prose(path.read_text()), re.M)]


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(path):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def _code_text() -> str:
    parts = []
    for d in CODE_DIRS:
        for f in sorted((ROOT / d).rglob("*")):
            if f.is_file() and f.suffix in CODE_SUFFIXES and f.name != "test_docs.py":
                parts.append(f.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def _public_store_names() -> list[str]:
    return [n for n in dir(MessageStore) if not n.startswith("_")]


# -- the API reference holds every public name ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(pystore.__all__))
def test_every_exported_name_is_in_api_md(name):
    assert re.search(r"`%s\b" % re.escape(name), API.read_text()), "docs/api.md does not mention `%s`" % name


@pytest.mark.parametrize("name", _public_store_names())
def test_every_message_store_method_is_in_api_md(name):
    assert re.search(r"\b%s\b" % re.escape(name), API.read_text()), "docs/api.md does not mention MessageStore.%s" % name


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(StoreConfig) if f.name != "unknown_keys"])
def test_every_store_config_field_is_in_api_md(name):
    assert re.search(r"`%s`" % re.escape(name), API.read_text()), "docs/api.md does not list StoreConfig.%s" % name


def _resolve(dotted: str) -> bool:
    """Whether ``pystore.a.b.c`` names a module or an attribute that exists."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError as exc:
            if "pyspark" in str(exc).lower() or "pyarrow" in str(exc).lower():
                pytest.skip("needs the spark extra to check %s" % dotted)
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _mentioned(pattern: str, path: Path = API) -> list[str]:
    return sorted(set(re.findall(pattern, path.read_text())))


@pytest.mark.parametrize("dotted", _mentioned(r"\b(pystore(?:\.[A-Za-z_]\w*)+)"))
def test_every_pystore_name_in_api_md_exists(dotted):
    assert _resolve(dotted), "docs/api.md names %s, which does not exist" % dotted


@pytest.mark.parametrize("name", _mentioned(r"\b(?:store|MessageStore)\.([A-Za-z_]\w*)\("))
def test_every_store_call_in_api_md_exists(name):
    assert callable(getattr(MessageStore, name, None)), "docs/api.md calls store.%s(), which MessageStore lacks" % name


def test_name_checks_can_fail():
    assert not _resolve("pystore.no_such_name")
    assert not _resolve("pystore.tools.no_such_function")
    assert _resolve("pystore.tools.iter_commitlog")


# -- links, and the references the code makes into the docs ---------------------------------------------


def _links() -> list[tuple[Path, str]]:
    out = []
    for doc in USER_DOCS:
        for target in _LINK.findall(_prose(doc.read_text())):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked
                out.append((doc, target))
    return out


@pytest.mark.parametrize("doc,target", _links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_relative_links_resolve(doc, target):
    path, _, anchor = target.partition("#")
    dest = (doc.parent / path).resolve() if path else doc
    assert dest.exists(), "%s links to %s, which does not exist" % (doc.name, target)
    if anchor:
        assert dest.suffix == ".md", "%s: #%s into a file that is not markdown" % (doc.name, anchor)
        assert anchor in anchors(dest), "%s links to %s: no such heading (have: %s)" % (
            doc.name, target, ", ".join(sorted(anchors(dest))))


def _tables(text: str) -> list[list[str]]:
    """The markdown tables of ``text`` (outside code blocks), each a list of its row lines."""
    tables: list[list[str]] = []
    previous = False
    for line in _prose(text).splitlines():
        row = line.startswith("|")
        if row and not previous:
            tables.append([])
        if row:
            tables[-1].append(line)
        previous = row
    return tables


def _cells(row: str) -> int:
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_tables_have_as_many_cells_as_their_header(doc):
    """A ``|`` inside a cell (even in `code`) must be written ``\\|``, or the row gets a column too many."""
    for table in _tables(doc.read_text()):
        width = _cells(table[0])
        bad = [row for row in table if _cells(row) != width]
        assert not bad, "%s: rows with other than %d cells: %s" % (doc.name, width, bad)


def test_readme_links_every_doc():
    linked = {(README.parent / target.partition("#")[0]).resolve() for doc, target in _links() if doc == README}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, "README.md does not link %s" % unlinked


def test_slug_is_githubs():
    assert slug("8.1 ConsumeQueue.recover") == "81-consumequeuerecover"
    assert slug("Configuration — `StoreConfig`") == "configuration--storeconfig"
    assert slug("§1.2 Record layout") == "12-record-layout"


def _section_numbers() -> set[str]:
    return {m.group(1).rstrip(".") for h in headings(FORMAT) for m in [re.match(r"§([0-9][0-9.]*)\s", h)] if m}


def test_every_format_section_the_code_cites_exists():
    # "FORMAT.md §6.2, §8" and "docs/format.md §1 and §4" cite every section of the list
    lists = re.findall(r"(?:FORMAT\.md|docs/format\.md)((?:,?\s(?:and\s)?§[0-9]+(?:\.[0-9]+)*)+)", _code_text())
    cited = {n for group in lists for n in re.findall(r"§([0-9]+(?:\.[0-9]+)*)", group)}
    assert cited, "the code cites no section: the pattern is stale"
    missing = sorted(cited - _section_numbers(), key=lambda s: [int(x) for x in s.split(".")])
    assert not missing, "docs/format.md has no section %s" % ", ".join("§" + s for s in missing)


@pytest.mark.parametrize("doc,names", [(API, r"API\.md|docs/api\.md"), (FORMAT, r"FORMAT\.md|docs/format\.md"),
                                       (ARCHITECTURE, r"DESIGN\.md|docs/architecture\.md")])
def test_every_heading_the_code_cites_exists(doc, names):
    # a quoted heading may run over a line break, inside a comment too
    cited = {re.sub(r"\s*\n\s*(?:#\s*)?", " ", c) for c in re.findall(r"(?:%s) \"([^\"]+)\"" % names, _code_text())}
    have = [re.sub(r"[`*]", "", h) for h in headings(doc)]
    # a citation names a heading, or the part of it before its " — " subtitle ("The store" for
    # "The store — MessageStore")
    missing = sorted(c for c in cited if not any(h == c or h.startswith(c + " — ") for h in have))
    assert not missing, "%s has no heading %s" % (doc.name, missing)


def test_docs_point_only_inside_the_repository():
    assert references_outside_repo([README, DOCS]) == []


def test_code_points_only_inside_the_repository():
    """Docstrings and comments cite the repository's own docs (docs/format.md, docs/api.md ...), never the
    design notes kept outside it."""
    root = README.parent
    paths = [root / d for d in CODE_DIRS] + [root / f for f in ("Makefile", "setup.py", "pyproject.toml")]
    assert references_outside_repo([p for p in paths if p.exists()]) == []


def test_references_outside_repo_finds_them(tmp_path):
    f = tmp_path / "x.md"
    f.write_text("see docs/format.md §1\nsee FORMAT.md §1\nsee ../shared/x\n(API.md \"Reading\")\n")
    (tmp_path / "y.py").write_text('"""Layout (FORMAT.md §1.2)."""\n# docs/api.md "Reading"\n')
    assert [(Path(p).name, n) for p, n, _ in references_outside_repo([tmp_path])] == [
        ("x.md", 2), ("x.md", 3), ("x.md", 4), ("y.py", 1)]
    assert references_outside_repo([Path(__file__)]) == []


# -- the README's example runs -------------------------------------------------------------------------


def _block(lines: list[str], start: int) -> tuple[str, int]:
    """The fenced block opening at ``lines[start]``, and the index of its closing fence."""
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start + 1:end]) + "\n", end


def readme_example() -> tuple[str, str]:
    """The README's example (the python block after the marker) and what it prints (the next block)."""
    lines = README.read_text().splitlines()
    start = lines.index(EXAMPLE_MARK) + 1
    assert lines[start].startswith("```python"), "the line after %s must open a python block" % EXAMPLE_MARK
    code, end = _block(lines, start)
    output_start = next(i for i in range(end + 1, len(lines)) if lines[i].startswith("```"))
    output, _ = _block(lines, output_start)
    return code, output


def test_readme_example_runs(tmp_path):
    script = tmp_path / "example.py"
    code, printed = readme_example()
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == printed, "the README says the example prints:\n%s\nit printed:\n%s" % (printed, run.stdout)


def test_readme_example_type_checks(tmp_path):
    """A user who runs mypy on the README's example (with the package's stubs and ``py.typed``) sees no error:
    a result that can be ``None`` (``append_message_result`` of a refused put) is checked before use."""
    pytest.importorskip("mypy", reason="mypy (the dev extra) type-checks the README example")
    code, _ = readme_example()
    (tmp_path / "example.py").write_text(code)
    # the package from this checkout, its own errors not ours to report here (make typecheck does that)
    env = dict(os.environ, MYPYPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
                          "--cache-dir", str(tmp_path / "cache"), "example.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr


def test_install_extra_named_in_readme_exists():
    extras = re.findall(r"pip install \"?\.\[(\w+)\]", README.read_text())
    assert extras, "README.md names no `pip install .[extra]`"
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extra in extras:
        assert re.search(r"^%s = \[" % extra, pyproject, re.M), "README.md installs .[%s]: no such extra" % extra

