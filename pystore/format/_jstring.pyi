"""Types of ``pystore.format._jstring`` (compiled): Java's ``String.hashCode`` of a ``str``.

Kept in step with ``_jstring.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""


def java_string_hash(s: str) -> int: ...
