"""Types of ``pystore.log._batch_put`` (compiled): the batch put, which ``CommitLogCore.put_messages`` and
``append_messages`` call through a C pointer. The module has no Python API: importing it registers the put.
Internal to pystore.

Kept in step with ``_batch_put.pyx`` by ``tests/test_stubs.py`` (mypy's stubtest).
"""
