"""Types of ``pystore.format._hosts`` (compiled): a host's normal form.

Kept in step with ``_hosts.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""


def normalize_host(host: tuple[str, int] | list[str | int]) -> tuple[str, int]: ...
