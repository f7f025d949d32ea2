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
    compiled = sorted(f.stem for f in (ROOT / "pystore").glob("*.pyx"))
    assert compiled, "no .pyx found"
    # every compiled module comes with its stub, and the package says it is typed
    assert [m for m in compiled if "pystore/%s.pyi" % m not in shipped] == []
    assert "pystore/py.typed" in shipped and "pystore/engine/store.py" in shipped


def test_the_license_is_the_one_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:3] == ["Apache", "License", "Version"] and "2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = "Apache-2.0"' in pyproject and 'license-files = ["LICENSE"]' in pyproject
