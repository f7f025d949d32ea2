"""Build pystore's Cython extensions.

The hot path (record codec, mapped files, the put path, consume-queue and index scans) exists only as
compiled code: there is no pure-Python fallback, so a build that cannot compile stops here with a
message that says what is missing.

Environment switches:
  PYSTORE_DEBUG=1     compile with -O0 -g and Cython's bounds, wraparound and initialisation checks on
                      (the hot modules run without them otherwise)
  PYSTORE_ANNOTATE=1  write Cython's HTML annotation next to each .pyx (``make annotate``)
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

# Modules on the per-message path: no bounds or wraparound checks, C division.
HOT = {"_codec", "_jstring", "_hosts", "_props", "_message", "_message_batch", "_message_ext", "_mapped_file",
       "_put_lock", "_commitlog", "_records", "_units", "_timesearch", "_read", "_queue_reader", "_dispatch", "_index",
       "_index_walk", "_arrow", "_arrow_schema", "_arrow_decode", "_decode_worker", "_arrow_source", "_arrow_plan", "_sink",
       "_bulk_put"}
MODULES = ["_jstring", "_hosts", "_props", "_message", "_message_batch", "_message_ext", "_codec", "_mapped_file",
           "_mapped_view", "_results", "_put_lock", "_commitlog", "_records", "_units", "_timesearch", "_read",
           "_queue_reader", "_dispatch", "_index", "_index_walk", "_arrow_decode", "_arrow_schema", "_decode_worker",
           "_arrow", "_arrow_source", "_arrow_plan", "_notify", "_sink", "_bulk_put", "_flush_wait"]

compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-fno-strict-aliasing"]
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]


def _ext(name: str) -> Extension:
    return Extension(
        f"pystore.{name}",
        [f"pystore/{name}.pyx"],
        libraries=["z"],
        # C kept in headers (the body CRC, the prefault worker): a change there recompiles every module
        depends=sorted(f"pystore/{h}" for h in os.listdir("pystore") if h.endswith(".h")),
        extra_compile_args=compile_args,
        define_macros=macros,
    )


def _directives(name: str) -> dict:
    d = {"language_level": 3, "embedsignature": True, "cdivision": True}
    if name in HOT and not DEBUG:
        d.update(boundscheck=False, wraparound=False, initializedcheck=False)
    return d


extensions = []
for mod in MODULES:
    if os.path.exists(f"pystore/{mod}.pyx"):
        extensions += cythonize(
            [_ext(mod)],
            compiler_directives=_directives(mod),
            annotate=ANNOTATE,
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
