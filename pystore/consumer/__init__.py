"""Consumers: committed offsets (``config/consumerOffset.json``), the ``Consumer`` loop, and the
reading and atomic writing of the broker's ``config/*.json`` files.
"""

_FACE = {"Consumer": "pystore.consumer.consumer"}


def __getattr__(name: str) -> object:
    # the names users reach through this package, imported on first use (no import cycle with the engine)
    if name in _FACE:
        import importlib

        return getattr(importlib.import_module(_FACE[name]), name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
