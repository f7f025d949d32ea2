"""The exceptions pystore raises.

Every error is a :class:`StoreError`. A refused put is never an exception (it is a
:class:`~pystore.PutMessageStatus`); exceptions are for the store itself: a folder locked by another
writer, a file that is not what it should be, a configuration that cannot be used, or an object used
after it was closed.
"""

from __future__ import annotations

__all__ = [
    "StoreError",
    "StoreLockedError",
    "StoreCorruptedError",
    "ConfigError",
    "StoreClosedError",
    "FileCleanedError",
]


class StoreError(Exception):
    """Base class of every pystore error."""


class StoreLockedError(StoreError):
    """Another writer holds the store folder's ``lock`` file; nothing was touched.

    ``path`` is the lock file.
    """

    def __init__(self, path: str, message: str | None = None) -> None:
        self.path = path
        super().__init__(message or "store is locked by another writer: %s (open it with read_only=True to inspect)" % path)


class StoreCorruptedError(StoreError):
    """A store file holds bytes that are not a valid record or unit.

    ``path`` is the file and ``offset`` the absolute offset in the log the file belongs to
    (the file's start offset, its 20-digit name, plus the position inside it).
    """

    def __init__(self, path: str, offset: int, reason: str = "corrupted data") -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__("%s: %s at offset %d" % (path, reason, offset))

    def __reduce__(self) -> tuple[type[StoreCorruptedError], tuple[str, int, str]]:
        # keep attributes across pickling (Spark executors, multiprocessing)
        return (type(self), (self.path, self.offset, self.reason))


class ConfigError(StoreError, ValueError):
    """A configuration key has a value of the wrong type or out of range.

    ``key`` names the field (snake_case, or the ``broker.conf`` key it came from) and ``value`` is what was given.
    """

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__("%s=%r: %s" % (key, value, reason))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[str, object, str]]:
        return (type(self), (self.key, self.value, self.reason))


class StoreClosedError(StoreError):
    """The store, a released file or a stale view was used after it was closed."""


class FileCleanedError(StoreError):
    """A file a read had listed was deleted before the read reached it (the store cleaned its head under a
    ``pystore.tools`` iteration that had already yielded the records before it): the records from ``offset``
    on in ``path`` are gone, and going on with the next file would skip them silently.

    ``path`` is the deleted file and ``offset`` its start offset in the log it belongs to (its 20-digit name).
    """

    def __init__(self, path: str, offset: int, reason: str = "deleted (cleaned) before the iteration reached it") -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__("%s: %s at offset %d" % (path, reason, offset))

    def __reduce__(self) -> tuple[type[FileCleanedError], tuple[str, int, str]]:
        return (type(self), (self.path, self.offset, self.reason))
