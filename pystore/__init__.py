"""pystore: an embedded message store with Apache RocketMQ's on-disk format.

The public names are docs/api.md's; everything else is internal.
"""

try:
    from pystore._message import Message
    from pystore._message_batch import MessageBatch
    from pystore._message_ext import MessageExt
    from pystore._results import AppendMessageResult, PutMessageResult
except ImportError as exc:  # pragma: no cover - a broken install
    raise ImportError(
        "pystore's compiled extensions are missing or do not load (%s). Build them with `make venv` or "
        "`pip install -e .` (a C compiler, the Python headers and zlib's headers are needed); there is no "
        "pure-Python fallback." % exc
    ) from exc

from pystore import tools  # noqa: E402  (a module of the public API)
from pystore._mapped_view import SelectMappedBufferResult
from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.errors import ConfigError, FileCleanedError, StoreClosedError, StoreCorruptedError, StoreError, StoreLockedError
from pystore.message import MessageConst, MessageFilter, SysFlag, TagFilter
from pystore.results import GetMessageResult, PutColumnsResult, QueryMessageResult
from pystore.status import AppendMessageStatus, GetMessageStatus, PutMessageStatus
from pystore.store import MessageStore

__all__ = [
    "AppendMessageResult", "AppendMessageStatus", "BrokerRole", "ConfigError", "FileCleanedError", "FlushDiskType",
    "GetMessageResult", "GetMessageStatus", "Message", "MessageBatch", "MessageConst", "MessageExt",
    "MessageFilter", "MessageStore", "PutColumnsResult", "PutMessageResult", "PutMessageStatus",
    "QueryMessageResult",
    "SelectMappedBufferResult", "StoreClosedError", "StoreConfig", "StoreCorruptedError", "StoreError",
    "StoreLockedError", "SysFlag", "TagFilter", "tools",
]

__version__ = "0.1.0"
