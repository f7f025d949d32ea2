"""Types of ``pystore.columns._arrow_decode`` (compiled): the row encoders of ``pystore.columns._arrow``'s decoder. C only (its
                functions are cimported through ``_arrow_decode.pxd``): nothing here for Python.

Kept in step with ``_arrow_decode.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""
