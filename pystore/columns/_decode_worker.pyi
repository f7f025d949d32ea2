"""Types of ``pystore.columns._decode_worker`` (compiled): the decode worker thread of ``pystore.columns._arrow``'s builder and
its switch. Internal to pystore (``pystore.columns._arrow`` re-exports both functions); typed so that its own modules
type-check.

Kept in step with ``_decode_worker.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""

def decode_worker_state() -> dict[str, int]: ...
def decode_worker(enabled: bool | None = None) -> bool: ...
