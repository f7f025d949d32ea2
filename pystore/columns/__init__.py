"""Columns: records to and from Arrow (the column put, ``get_columns``, the Spark source's decoder and
its planning, Parquet export).
"""

# a checkout's compiled modules are built out of tree (see pystore/__init__.py): look there too
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

_FACE = {"columns_schema": "pystore.columns.api", "decode_worker": "pystore.columns._arrow",
         "decode_worker_state": "pystore.columns._arrow"}


def __getattr__(name: str) -> object:
    # the names users reach through this package, imported on first use (no import cycle with the engine)
    if name in _FACE:
        import importlib

        return getattr(importlib.import_module(_FACE[name]), name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
