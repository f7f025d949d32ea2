"""What a wheel of pystore holds: setuptools' ``build_py`` (the step of ``pip wheel`` that lays out the package
files; seconds, no compiling) run on this checkout. The compiled modules join those files in a wheel; ``make
wheel`` builds a whole one and checks it the same way, with ``auditwheel``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_stubs_and_no_sources(tmp_path):
    p = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    shipped = {f.relative_to(tmp_path).as_posix() for f in tmp_path.rglob("*") if f.is_file()}
    sources = sorted(f for f in shipped if f.endswith((".pyx", ".pxd", ".c", ".h")))
    assert sources == []
    compiled = sorted(f.relative_to(ROOT).with_suffix("").as_posix() for f in (ROOT / "pystore").rglob("*.pyx"))
    assert compiled, "no .pyx found"
    # every compiled module comes with its stub, and the package says it is typed
    assert [m for m in compiled if "%s.pyi" % m not in shipped] == []
    assert "pystore/py.typed" in shipped and "pystore/engine/store.py" in shipped


def test_a_build_leaves_nothing_beside_the_sources():
    # `make venv` compiles out of tree (C into build/cython/, modules into build/ext/): a source folder holds sources
    built = sorted(f.relative_to(ROOT).as_posix() for f in (ROOT / "pystore").rglob("*")
                   if f.suffix in (".c", ".so", ".html", ".o") or f.name.endswith(".cpp"))
    assert built == []


def test_every_compiled_module_loads_from_its_package():
    import importlib

    for pyx in sorted((ROOT / "pystore").rglob("*.pyx")):
        name = pyx.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        mod = importlib.import_module(name)
        # the module is the one built from this source, in the package folder that holds the source
        assert mod.__name__ == name and Path(mod.__file__).parent.name == pyx.parent.name, (name, mod.__file__)


def test_the_license_is_the_one_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:3] == ["Apache", "License", "Version"] and "2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
