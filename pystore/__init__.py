"""pystore: an embedded message store with Apache RocketMQ's on-disk format.

The public names are docs/api.md's; everything else is internal.
"""

import os as _os

# A checkout built with `make venv` keeps its compiled modules out of tree, in build/ext/pystore/<package>/ beside
# the sources' folder; each package finds its own there (pkgutil.extend_path over this __path__). An installed
# pystore has them beside its sources, and no such folder.
_build_ext_dir = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "build", "ext", "pystore")
if _os.path.isdir(_build_ext_dir):
    __path__.append(_build_ext_dir)

try:
    from pystore.log._results import AppendMessageResult, PutMessageResult
    from pystore.message._message import Message
    from pystore.message._message_batch import MessageBatch
    from pystore.message._message_ext import MessageExt
except ImportError as exc:  # pragma: no cover - a broken install
    raise ImportError(
        "pystore's compiled extensions are missing or do not load (%s). Build them with `make venv` or "
        "`pip install -e .` (a C compiler, the Python headers and zlib's headers are needed); there is no "
        "pure-Python fallback." % exc
    ) from exc

from pystore import tools  # a module of the public API
from pystore.config import BrokerRole, FlushDiskType, StoreConfig
from pystore.engine.store import MessageStore
from pystore.errors import ConfigError, FileCleanedError, StoreClosedError, StoreCorruptedError, StoreError, StoreLockedError
from pystore.log._mapped_view import SelectMappedBufferResult
from pystore.message.constants import MessageConst, MessageFilter, SysFlag, TagFilter
from pystore.read.results import GetMessageResult, PutColumnsResult, QueryMessageResult
from pystore.status import AppendMessageStatus, GetMessageStatus, PutMessageStatus

__all__ = [
    "AppendMessageResult", "AppendMessageStatus", "BrokerRole", "ConfigError", "FileCleanedError", "FlushDiskType",
    "GetMessageResult", "GetMessageStatus", "Message", "MessageBatch", "MessageConst", "MessageExt",
    "MessageFilter", "MessageStore", "PutColumnsResult", "PutMessageResult", "PutMessageStatus",
    "QueryMessageResult",
    "SelectMappedBufferResult", "StoreClosedError", "StoreConfig", "StoreCorruptedError", "StoreError",
    "StoreLockedError", "SysFlag", "TagFilter", "tools",
]

__version__ = "0.1.0"
