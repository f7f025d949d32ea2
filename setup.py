"""Build pystore's Cython extensions.

The hot path (record codec, mapped files, the put path, consume-queue and index scans) exists only as
compiled code: there is no pure-Python fallback, so a build that cannot compile stops here with a
message that says what is missing.

Environment switches:
  PYSTORE_DEBUG=1     compile with -O0 -g and Cython's bounds, wraparound and initialisation checks on
                      (the hot modules run without them otherwise)
  PYSTORE_NO_EXTENSIONS=1  build none (``make venv``'s editable install: it builds them out of tree itself)
  PYSTORE_ANNOTATE=1  write Cython's HTML annotation beside the generated C in build/cython/ (``make annotate``)
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

try:
    from Cython.Build import cythonize
except ImportError:  # pragma: no cover - exercised only on a broken machine
    sys.exit(
        "pystore: Cython 3 is required to build the compiled extensions "
        "(pip install 'Cython>=3'); there is no pure-Python fallback."
    )

from setuptools import Extension

DEBUG = os.environ.get("PYSTORE_DEBUG", "") not in ("", "0")
ANNOTATE = os.environ.get("PYSTORE_ANNOTATE", "") not in ("", "0")

# Every .pyx under pystore/ is an extension named by its path (pystore/log/_commitlog.pyx -> pystore.log._commitlog).
# The generated C goes to build/cython/ and the compiled modules to the build folder (out of tree: nothing
# lands beside a source); a wheel packs them in the usual place.
SOURCES = sorted(os.path.join(dp, f) for dp, _, fs in os.walk("pystore") for f in fs if f.endswith(".pyx"))
HEADERS = sorted(os.path.join(dp, f) for dp, _, fs in os.walk("pystore") for f in fs if f.endswith(".h"))
# The C headers (the body CRC, the pre-fault worker, the wake word, Arrow's C data interface) are included by
# name from the .pxd files of several packages: every folder that holds one is on the include path.
INCLUDE_DIRS = sorted({os.path.dirname(h) for h in HEADERS})
# Modules off the per-message path keep Cython's bounds and wraparound checks; the rest run without them.
COLD = {"pystore.log._mapped_view", "pystore.log._results", "pystore.read._notify", "pystore.log._flush_wait"}

compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-fno-strict-aliasing"]
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]


def _name(source: str) -> str:
    return source[: -len(".pyx")].replace(os.sep, ".")


def _ext(source: str) -> Extension:
    return Extension(
        _name(source),
        [source],
        libraries=["z"],
        include_dirs=INCLUDE_DIRS,
        # C kept in headers: a change there recompiles every module
        depends=HEADERS,
        extra_compile_args=compile_args,
        define_macros=macros,
    )


def _directives(name: str) -> dict:
    d = {"language_level": 3, "embedsignature": True, "cdivision": True}
    if name not in COLD and not DEBUG:
        d.update(boundscheck=False, wraparound=False, initializedcheck=False)
    return d


extensions = []
# `make venv` installs the package in editable mode for its Python files alone (PYSTORE_NO_EXTENSIONS=1) and then
# builds the extensions out of tree itself: an editable install would copy them beside their sources.
for src in [] if os.environ.get("PYSTORE_NO_EXTENSIONS") else SOURCES:
    extensions += cythonize(
        [_ext(src)],
        compiler_directives=_directives(_name(src)),
        annotate=ANNOTATE,
        build_dir=os.path.join("build", "cython"),
        compile_time_env={"PYSTORE_DEBUG": DEBUG},
        quiet=True,
    )


class StrictBuildExt(build_ext):
    """Turn a missing compiler or zlib header into one clear message instead of a traceback."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - we re-raise with context
            raise SystemExit(
                "pystore: building the C extensions failed (%s). pystore needs a C compiler (gcc or clang), "
                "the Python headers and zlib's headers (Debian: apt-get install build-essential python3-dev "
                "zlib1g-dev); there is no pure-Python fallback." % exc
            ) from exc


setup(ext_modules=extensions, cmdclass={"build_ext": StrictBuildExt})
