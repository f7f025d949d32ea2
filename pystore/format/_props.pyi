"""Types of ``pystore.format._props`` (compiled): the properties string of a record, both ways.

Kept in step with ``_props.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""


def properties_to_string(props: dict[str, str] | None) -> str: ...
def string_to_properties(s: str | None) -> dict[str, str]: ...
