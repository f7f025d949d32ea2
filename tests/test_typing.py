"""The engine and recovery modules type-check under ``mypy --strict`` (issue 35: "No ``Any`` in recovery's
signatures; ``mypy --strict`` clean for the engine and recovery modules at least"), and keep ``Any`` out of their
signatures.

One mypy run over the modules below; mypy follows their imports, so what they use (the stubs of the compiled
modules, the flush services, the errors ...) is checked as strictly. ``PYTHONPATH`` is left out of mypy's
environment on purpose: with it pointing at this checkout, mypy takes the modules it follows for an installed
package and reports none of their errors, only those of the files named on its command line."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed (the dev extra)")

ROOT = Path(__file__).resolve().parents[1]

#: recovery and the engine: the store facade, checkpoint, cleaning, put waits, delay levels, inspection,
#: verification, flags, refusals
ENGINE = ["recovery", "recovery_plan", "queue_damage", "store", "checkpoint", "clean", "put_waits", "schedule",
          "storeinfo", "engine/verify", "running_flags", "refusal"]
#: with the modules whose errors recovery's own check reported
STRICT = [*ENGINE, "errors", "pool", "slave", "flush"]

#: the one kind of ``Any`` left in their signatures: keyword overrides handed on to ``StoreConfig(**...)``, whose
#: fields have as many types (it checks each value itself)
CONFIG_OVERRIDES = {"config_overrides", "overrides"}


def _source(module: str) -> Path:
    """The file of ``module`` wherever it lies under ``pystore/`` (but ``pystore/cli``, whose commands share some of
    the names), so that the lists above outlive moving the modules into subpackages. A name another subpackage
    also uses is given with its folder (``engine/verify``: the archive has its own ``verify``)."""
    found = [p for p in (ROOT / "pystore").rglob(module + ".py") if "cli" not in p.relative_to(ROOT).parts]
    assert len(found) == 1, (module, found)
    return found[0]


def test_the_engine_and_recovery_modules_are_mypy_strict_clean(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".mypy_cache"),
         *(str(_source(m).relative_to(ROOT)) for m in STRICT)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr


def _names_any(ann: ast.expr) -> bool:
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):      # a quoted annotation
        ann = ast.parse(ann.value, mode="eval").body
    return any(isinstance(n, ast.Name) and n.id == "Any" or isinstance(n, ast.Attribute) and n.attr == "Any"
               or isinstance(n, ast.Constant) and isinstance(n.value, str) and n is not ann and _names_any(n)
               for n in ast.walk(ann))


def _any_in_signatures(source: str) -> list[str]:
    """``name:line`` of each function parameter, return or annotated variable whose annotation names ``Any``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        annotated: list[tuple[str, ast.expr]] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
            annotated += [(x.arg, x.annotation) for x in params
                          if x.annotation is not None and x.arg not in CONFIG_OVERRIDES]
            if node.returns is not None:
                annotated.append((node.name, node.returns))
        elif isinstance(node, ast.AnnAssign):
            annotated.append((ast.unparse(node.target), node.annotation))
        found += ["%s:%d" % (name, ann.lineno) for name, ann in annotated if _names_any(ann)]
    return found


def test_the_signature_check_finds_any():
    src = ("def f(a: Any, b: 'list[typing.Any]', c: int, **config_overrides: Any) -> dict[str, Any]: ...\n"
           "x: tuple['Any', int] = (1, 2)\n")
    assert sorted(_any_in_signatures(src)) == ["a:1", "b:1", "f:1", "x:2"]


@pytest.mark.parametrize("module", ENGINE)
def test_no_any_in_the_signatures_of(module):
    assert _any_in_signatures(_source(module).read_text()) == []
