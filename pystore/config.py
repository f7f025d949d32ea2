"""Store configuration: :class:`StoreConfig`, and reading/writing a RocketMQ ``broker.conf``.

Every field keeps the name (in snake_case) and the default of RocketMQ's ``MessageStoreConfig``
(docs/format.md §6.1, §9), so a broker's ``broker.conf`` configures a pystore store the same way.
pystore deviates where an embedded store needs it, or where RocketMQ versions disagree:

* ``store_path_root_dir`` is ``"./store"`` (RocketMQ: ``${user.home}/store``), and
  ``store_path_commit_log=None`` means ``<root>/commitlog`` (5.x; in 4.8 it ignored the root).
* ``flush_commit_log_timed`` and ``use_reentrant_lock_when_put_message`` are ``False``: the 4.8
  defaults (4.9.1+ and 5.x switched both to ``True``); see docs/format.md "pystore's choices".
* ``disk_space_clean_forcibly_ratio`` / ``disk_space_warning_level_ratio`` are fractions (0.85 / 0.90,
  4.8's system properties). 5.x writes them as percent integers (85 / 90): a value above 1 is read as a
  percent, and :meth:`StoreConfig.to_properties` writes the percent form whenever it is exact.
* ``store_host`` stands for the broker's ``brokerIP1`` and ``listenPort``; ``ha_listen_port`` is ``None``
  (no HA socket unless asked; RocketMQ listens on 10912); ``ha_listen_address``, ``allocate_wait_timeout``
  (RocketMQ hard-codes 5 s) and ``read_only`` are pystore's own.
* ``mapped_file_size_commit_log`` may be up to 2**40 (RocketMQ: a Java ``int``); every other integer
  must fit a Java ``int`` (the few RocketMQ ``long`` timeouts have no sensible value beyond 24 days).

Construction validates and normalises (see :meth:`StoreConfig.validate`); a bad value raises
:class:`~pystore.errors.ConfigError` naming the field, or the ``broker.conf`` key it came from.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import json
import logging
import os
import re
import types
import typing
import warnings
from dataclasses import dataclass, field

from pystore.errors import ConfigError
from pystore.format._codec import UNIT_SIZE as _CQ_STORE_UNIT_SIZE  # docs/format.md §2.1
from pystore.system.java_properties import decode_properties, escape_properties, parse_properties

__all__ = ["StoreConfig", "FlushDiskType", "BrokerRole", "UnknownConfigKeyWarning"]

log = logging.getLogger(__name__)


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class UnknownConfigKeyWarning(UserWarning):
    """A ``broker.conf`` held keys that are not store settings (``brokerName``, ``namesrvAddr`` ...)."""


@dataclass
class StoreConfig:
    """Settings of one store; RocketMQ's names and defaults (see the module docstring).

    Construction validates and normalises every field. Not thread-safe to mutate: once a store uses a
    config, treat it as immutable and derive changed copies with :meth:`replace`.
    """

    store_path_root_dir: str = "./store"
    store_path_commit_log: str | None = None
    mapped_file_size_commit_log: int = 1 << 30
    mapped_file_size_consume_queue: int = 300_000 * _CQ_STORE_UNIT_SIZE
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_commit_log_timed: bool = False
    sync_flush_timeout: int = 5_000
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: int = 200
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120_000
    redelete_hanged_file_interval: int = 120_000
    max_message_size: int = 4 * 1024 * 1024
    check_crc_on_recover: bool = True
    # pystore: reads check each served record's body CRC and that its header is the one asked for (Kafka's
    # consumer ``check.crcs``); damage raises StoreCorruptedError instead of serving the record.
    check_crc_on_read: bool = True
    # RocketMQ's BrokerConfig (a broker.conf key all the same): ms between writes of config/consumerOffset.json
    flush_consumer_offset_interval: int = 5_000
    message_index_enable: bool = True
    message_index_safe: bool = False
    # pystore: with ASYNC_FLUSH, index entries are written by a builder thread that follows the commit log
    # (IndexBuildService, as RocketMQ's reput builds the index), not under the put lock; False writes them
    # inline with each put. query_message catches the builder up first either way
    index_build_async: bool = True
    # pystore: how much the index builder lowers its own thread's scheduling priority (its nice value; Linux).
    # When every core is busy, the put threads then win the CPU and the builder catches up when there is
    # room (a lookup indexes what it lags itself). 0: not lowered
    index_build_nice: int = 10
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    os_page_cache_busy_timeout_mills: int = 1000
    use_reentrant_lock_when_put_message: bool = False
    warm_mapped_file_enable: bool = False
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_memory: int = 32
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    ha_listen_port: int | None = None
    ha_listen_address: str = "127.0.0.1"
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: int = 5_000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    # Beyond docs/api.md's table: RocketMQ's names and defaults, except the pystore-only ones noted.
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    delete_file_batch_max: int = 10
    flush_least_pages_when_warm_mapped_file: int = 4096
    fast_fail_if_no_buffer_in_store_pool: bool = False
    flush_delay_offset_interval: int = 10_000
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    allocate_wait_timeout: int = 5_000  # pystore: ms a put waits for the next commit-log file
    put_message_timeout: int = 8_000
    slave_timeout: int = 3_000
    read_only: bool = False  # pystore: open without the lock and without writing
    shared_writers: bool = False  # pystore: several writer processes (pystore.engine.shared_writers)
    shared_writers_stuck_ms: int = 5_000  # pystore: a live holder of their append lock this long is reported
    # pystore: slots of their queue-offset table (set by the first opener; 0: none, every writer walks the others')
    shared_writers_queue_slots: int = 16_384
    # pystore: the archive tier (pystore.archive): sealed files copied to this pyarrow.fs URI ("": none), the
    # options its file system is made with, hours kept locally once archived (0: file_reserved_time), the bytes
    # of archived data cached locally for reads, and the ms between two upload passes
    archive_uri: str = ""
    archive_options: dict[str, typing.Any] = field(default_factory=dict)
    archive_local_retention_hours: int = 0
    # with an archive: the local commit log's size above which its oldest archived files are deleted at once,
    # whatever their age (0: no such bound; files still go only once their copy finished)
    archive_local_retention_bytes: int = 0
    archive_cache_bytes: int = 256 * 1024 * 1024
    archive_interval_ms: int = 1_000
    # with an archive: a sealed commit-log file is copied as soon as it is flushed and dispatched (looked for every
    # 50 ms), not at the next pass; False: only the passes copy (a test or a tool that runs them itself)
    archive_on_seal: bool = True
    # pystore: recovery truncates at damage that valid, already-flushed records follow, instead of raising
    # StoreCorruptedError (RocketMQ always truncates; pystore refuses to drop durable messages silently).
    recover_truncate_corrupted: bool = False
    # pystore: bytes of disk allocated and of pages pre-faulted ahead of each writer (commit log, consume queue):
    # a file holds what was written plus this window, not its full size (warm_mapped_file_enable still takes
    # the whole commit-log file). Smaller saves disk at the cost of more page faults on the put path.
    prefault_window_bytes: int = 4 * 1024 * 1024
    # pystore: while the thread that puts is pinned to one CPU (os.sched_setaffinity), the async flush service,
    # the index builder and the prefault worker move to that CPU, beside it rather than on a core another pinned
    # thread holds (a spinning consumer); unpinned, they stay where the scheduler puts them. False: never moved
    follow_put_cpu: bool = True
    # pystore: the least ms between two flushes of the async flush service while puts keep dirtying pages
    # (RocketMQ's service flushes whenever flush_commit_log_least_pages are dirty). Each flush wakes a thread,
    # and its msync sleeps on the disk and wakes it again several times, on whatever core: beside a consumer
    # spinning on the other core of two, that is most of what delays it. 100 ms of puts then reach the disk in
    # one msync (what ASYNC_FLUSH may lose to a power cut grows by as much; RocketMQ's timed interval is
    # 500 ms). 0: none
    flush_commit_log_min_gap: int = 100
    # RocketMQ 5's timer messages (pystore.timer; docs/api.md "Timers"): the put-side transform and the timer
    # store's services. timer_precision_ms is rounded down to 100, 200, 500 or 1000 as RocketMQ's setter does;
    # timer_roll_window_slots is RocketMQ's timerRollWindowSlot (slots, whatever the precision)
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3600 * 24 * 3
    timer_roll_window_slots: int = 3600 * 24 * 2
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    timer_flush_interval_ms: int = 1000
    timer_congest_num_each_slot: int = 2**31 - 1
    timer_enable_retry_until_success: bool = False
    timer_skip_unknown_error: bool = False
    timer_stop_enqueue: bool = False
    timer_stop_dequeue: bool = False
    timer_progress_log_interval_ms: int = 10_000
    # What from_properties() could not place; not a setting.
    unknown_keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field and normalise it in place; raise :class:`ConfigError` at the first bad one.

        Normalising makes equal settings compare equal whatever their spelling: enum names become
        members, ratios become fractions, hosts become ``(compressed address, port)``,
        ``mapped_file_size_consume_queue`` is rounded up to whole 20-byte units and
        ``disk_max_used_space_ratio`` is clamped into [10, 95], both as RocketMQ's getters do.
        """
        for name in _FIELD_NAMES:
            value = _normalise(name, getattr(self, name), self.store_path_root_dir)
            setattr(self, name, value)

    def replace(self, **changes: typing.Any) -> StoreConfig:
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    # -- derived paths (docs/format.md §4.4) -------------------------------------------------------------

    def commit_log_paths(self) -> list[str]:
        """The commit-log folders; several only for a multi-disk store (5.x MultiPathMappedFileQueue)."""
        if self.store_path_commit_log is not None:
            return _split_paths(self.store_path_commit_log)
        return [os.path.join(self.store_path_root_dir, "commitlog")]

    def consume_queue_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    def index_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")

    def config_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "config")

    # -- derived values ----------------------------------------------------------------------------

    def delay_level_table(self) -> dict[int, int]:
        """Delay level (1-based, as in a message's ``DELAY`` property) → delay in ms (docs/format.md §10)."""
        return {
            level: int(token[:-1]) * _DELAY_UNITS[token[-1]]
            for level, token in enumerate(self.message_delay_level.split(), start=1)
        }

    def max_delay_level(self) -> int:
        return len(self.message_delay_level.split())

    def delete_when_hours(self) -> frozenset[int]:
        """Local hours at which expired files are deleted (docs/format.md §9.2)."""
        return frozenset(int(hour) for hour in self.delete_when.split(";"))

    # -- broker.conf -------------------------------------------------------------------------------

    @classmethod
    def from_properties(cls, path_or_text: str | os.PathLike[str], **overrides: typing.Any) -> StoreConfig:
        """Read a RocketMQ ``broker.conf`` (a file path, or the text itself); ``overrides`` win.

        Keys not meant for the store are the rule in a broker's file (``brokerName``, ``namesrvAddr``),
        so they are listed in ``unknown_keys`` and warned about, never fatal. A value that does not parse
        or validate raises :class:`ConfigError` naming the key as written in the file.
        """
        if isinstance(path_or_text, os.PathLike) or os.path.isfile(path_or_text):
            source = os.fspath(path_or_text)
            with open(source, "rb") as f:
                text = decode_properties(f.read())
        else:
            source, text = "broker.conf text", path_or_text
        kwargs: dict[str, typing.Any] = {}
        origin: dict[str, tuple[str, str]] = {}  # field -> (key as written, raw value)
        unknown: list[str] = []
        address, port = _DEFAULTS["store_host"]
        host_given = False
        for key, raw in parse_properties(text).items():
            if key == "brokerIP1":
                address, host_given = _check_address(key, raw), True
            elif key == "listenPort":
                port, host_given = _check_port(key, _parse_value(key, int, raw), 0, raw), True
            elif (name := _field_for_key(key)) is None:
                unknown.append(key)
            else:
                kwargs[name] = _parse_value(key, _HINTS[name], raw)
                origin[name] = (key, raw)
        if host_given:
            kwargs["store_host"] = (address, port)
            origin.pop("store_host", None)
        if unknown:
            # one report, a warning rather than a log line: it is the caller's input at fault, and a caller may
            # filter it by its class (the CLI turns it into one line of its own)
            warnings.warn(UnknownConfigKeyWarning(f"{source}: keys that are not store settings were ignored: "
                                                  f"{', '.join(unknown)}"), stacklevel=2)
        kwargs.update(overrides)
        try:
            config = cls(**kwargs)
        except ConfigError as exc:
            if exc.key in origin and exc.key not in overrides:
                key, raw = origin[exc.key]
                raise ConfigError(key, raw, exc.reason) from exc
            raise
        config.unknown_keys = tuple(unknown)
        return config

    def to_properties(self, all: bool = False) -> str:
        """The ``broker.conf`` text of this config (RocketMQ's keys); only non-defaults unless ``all``.

        ``StoreConfig.from_properties(c.to_properties(all=True)) == c``. Text is written as Java's
        ``Properties.store`` does (non-ASCII as ``\\uXXXX``), so either reader accepts it.
        """
        lines = []
        for name in _FIELD_NAMES:
            value = getattr(self, name)
            if value is None or (not all and value == _DEFAULTS[name]):
                continue
            if name == "store_host":
                lines.append("brokerIP1=" + escape_properties(value[0]))
                lines.append(f"listenPort={value[1]}")
            else:
                lines.append(escape_properties(_key_for_field(name), key=True) + "=" + escape_properties(_format(value)))
        return "".join(line + "\n" for line in lines)


# -- validation -------------------------------------------------------------------------------------

_DEFAULTS: dict[str, typing.Any] = {
    f.name: typing.cast(typing.Callable[[], typing.Any], f.default_factory)() if f.default is dataclasses.MISSING
    else f.default
    for f in dataclasses.fields(StoreConfig)
}
_HINTS: dict[str, typing.Any] = {
    name: hint for name, hint in typing.get_type_hints(StoreConfig).items() if name in _DEFAULTS
}
_FIELD_NAMES = tuple(name for name in _HINTS if name != "unknown_keys")

_JAVA_INT_MAX = 2**31 - 1
# (lowest, highest) of each integer field; others are 1 .. _JAVA_INT_MAX.
_INT_RANGES = {
    "mapped_file_size_commit_log": (64, 2**40),
    "mapped_file_size_consume_queue": (_CQ_STORE_UNIT_SIZE, _JAVA_INT_MAX),
    "prefault_window_bytes": (0, 2**40),
    "shared_writers_queue_slots": (0, 1 << 22),
    "archive_local_retention_hours": (0, _JAVA_INT_MAX),
    "archive_local_retention_bytes": (0, 2**62),
    "archive_cache_bytes": (1 << 20, 2**50),
    "archive_interval_ms": (10, 3_600_000),
    "flush_commit_log_min_gap": (0, 60_000),
    "index_build_nice": (0, 19),
    # a timer-log file holds at least one 52-byte unit and the 16-byte blank that ends it (TimerLog)
    "mapped_file_size_timer_log": (68, _JAVA_INT_MAX),
    "timer_flush_interval_ms": (10, 3_600_000),
    "disk_max_used_space_ratio": (10, 95),
    "access_message_in_memory_max_ratio": (0, 100),
    "ha_listen_port": (0, 65535),
    # 0 is meaningful: flush/commit whatever is dirty, no pause between deletions, destroy at once.
    **dict.fromkeys(
        (
            "flush_commit_log_least_pages",
            "commit_commit_log_least_pages",
            "flush_consume_queue_least_pages",
            "flush_least_pages_when_warm_mapped_file",
            "delete_commit_log_files_interval",
            "delete_consume_queue_files_interval",
            "destroy_mapped_file_interval_forcibly",
            # RocketMQ: 0 hours = every commit-log file but the current one has expired (broker.conf uses it)
            "file_reserved_time",
        ),
        (0, _JAVA_INT_MAX),
    ),
}
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY_TOKEN = re.compile(r"[0-9]+[smhd]")
_HOUR = re.compile(r"[0-9]{1,2}")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://.+")
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*):([0-9]{1,5})")


def _normalise(name: str, value: typing.Any, root: typing.Any) -> typing.Any:
    hint = _HINTS[name]
    if isinstance(hint, types.UnionType):  # ``X | None``
        if value is None:
            return None
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    if name == "store_host":
        return _check_store_host(name, value)
    if name == "archive_uri":
        return _check_archive_uri(name, value)
    if name == "archive_options":
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(name, value, "expected a dict with str keys (handed to the pyarrow.fs file system)")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(name, value, "expected a bool")
        return value
    if hint is int:
        return _check_int(name, value, root)
    if hint is float:
        return _check_ratio(name, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        if isinstance(value, str) and value.strip().upper() in hint.__members__:
            return hint[value.strip().upper()]
        raise ConfigError(name, value, "expected one of " + ", ".join(hint.__members__))
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, value, "expected a non-empty string")
    if name == "delete_when":
        hours = [hour.strip() for hour in value.split(";") if hour.strip()]
        for hour in hours or [value]:
            if not _HOUR.fullmatch(hour) or int(hour) > 23:
                raise ConfigError(name, value, f"expected hours 0-23 separated by ';', got {hour!r}")
        return ";".join(hours)
    if name == "message_delay_level":
        levels = value.split()
        for level in levels:
            if not _DELAY_TOKEN.fullmatch(level):
                raise ConfigError(name, value, f"expected space-separated <number><s|m|h|d>, got {level!r}")
        return " ".join(levels)
    if name == "store_path_commit_log" and not _split_paths(value):
        raise ConfigError(name, value, "no folder named")
    if name == "ha_master_address":
        match = _HOST_PORT.fullmatch(value.strip())
        if match is None or not match.group(1).strip("[]"):
            raise ConfigError(name, value, "expected 'host:port' or '[ipv6]:port'")
        _check_port(name, int(match.group(2)), 1)
    return value


def _check_archive_uri(name: str, value: typing.Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(name, value, "expected a string")
    uri = value.strip().rstrip("/")
    if uri and not _URI.fullmatch(uri):
        raise ConfigError(name, uri, "expected a URI such as s3://bucket/prefix or file:///absolute/path")
    return uri


def _check_int(name: str, value: typing.Any, root: typing.Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "expected an int")
    lowest, highest = _INT_RANGES.get(name, (1, _JAVA_INT_MAX))
    if name == "mapped_file_size_consume_queue" and value > 0:
        value = -(-value // _CQ_STORE_UNIT_SIZE) * _CQ_STORE_UNIT_SIZE
    elif name == "timer_precision_ms" and lowest <= value <= highest:
        # MessageStoreConfig.setTimerPrecisionMs: the largest of 100, 200, 500, 1000 not above the value
        rounded = max([p for p in (100, 200, 500, 1000) if p <= value] or [100])
        if rounded != value:
            log.debug("%s: timer_precision_ms %d rounded to %d as RocketMQ does", root, value, rounded)
        return rounded
    elif name == "disk_max_used_space_ratio" and not lowest <= value <= highest:
        clamped = min(max(value, lowest), highest)
        log.debug("%s: disk_max_used_space_ratio %d clamped to %d as RocketMQ does", root, value, clamped)
        return clamped
    if not lowest <= value <= highest:
        raise ConfigError(name, value, f"must be between {lowest} and {highest}")
    return int(value)


def _check_ratio(name: str, value: typing.Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, value, "expected a number")
    if not 0 < value <= 100:  # also refuses NaN
        raise ConfigError(name, value, "expected a fraction in (0, 1] or a percent in (1, 100]")
    return value / 100 if value > 1 else float(value)


def _check_store_host(name: str, value: typing.Any) -> tuple[str, int]:
    if isinstance(value, str):
        match = _HOST_PORT.fullmatch(value.strip())
        if match is None:
            raise ConfigError(name, value, "expected 'address:port' or '[ipv6]:port'")
        address, port = match.group(1).strip("[]"), int(match.group(2))
        return _check_address(name, address, value), _check_port(name, port, 0, value)
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ConfigError(name, value, "expected (address, port)")
    return _check_address(name, value[0], value), _check_port(name, value[1], 0, value)


def _check_address(key: str, address: typing.Any, shown: typing.Any = None) -> str:
    """The compressed text form of an IP address: records store 4 or 16 bytes, never a name."""
    shown = address if shown is None else shown
    try:
        ip = ipaddress.ip_address(address.strip()) if isinstance(address, str) else None
    except ValueError:
        ip = None
    if ip is None or getattr(ip, "scope_id", None):
        raise ConfigError(key, shown, "expected an IPv4 or IPv6 address without a zone")
    return ip.compressed


def _check_port(key: str, port: typing.Any, lowest: int, shown: typing.Any = None) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not lowest <= port <= 65535:
        raise ConfigError(key, port if shown is None else shown, f"expected a port {lowest}-65535")
    return port


def _split_paths(paths: str) -> list[str]:
    return [path.strip() for path in re.split(r"[;,]", paths) if path.strip()]


# -- broker.conf keys and values ---------------------------------------------------------------------

# RocketMQ's spelling where it is not the camelCase of the field name.
_ROCKETMQ_KEYS = {
    "check_crc_on_recover": "checkCRCOnRecover",
    "os_page_cache_busy_timeout_mills": "osPageCacheBusyTimeOutMills",
    "destroy_mapped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",
    "warm_mapped_file_enable": "warmMapedFileEnable",
    "flush_least_pages_when_warm_mapped_file": "flushLeastPagesWhenWarmMapedFile",
    "timer_roll_window_slots": "timerRollWindowSlot",
}
# Also read: the spellings of RocketMQ before 4.4.
_KEY_TO_FIELD = {
    "mapedFileSizeCommitLog": "mapped_file_size_commit_log",
    "mapedFileSizeConsumeQueue": "mapped_file_size_consume_queue",
    **{key: name for name, key in _ROCKETMQ_KEYS.items()},
}


def _field_for_key(key: str) -> str | None:
    if key in _KEY_TO_FIELD:
        return _KEY_TO_FIELD[key]
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", key)).lower()
    return name if name in _FIELD_NAMES else None


def _key_for_field(name: str) -> str:
    head, *rest = name.split("_")
    return _ROCKETMQ_KEYS.get(name, head + "".join(word.capitalize() for word in rest))


def _parse_value(key: str, hint: typing.Any, raw: str) -> typing.Any:
    """Turn a broker.conf string into the field's type; validation happens in the constructor."""
    if isinstance(hint, types.UnionType):
        if raw == "":
            return None
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    if hint is bool:
        if raw.lower() not in ("true", "false"):
            raise ConfigError(key, raw, "expected true or false")
        return raw.lower() == "true"
    if hint is int:
        if not re.fullmatch(r"[+-]?[0-9]+", raw):
            raise ConfigError(key, raw, "expected an integer")
        return int(raw)
    if typing.get_origin(hint) is dict:
        try:
            options = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            raise ConfigError(key, raw, "expected a JSON object (%s)" % e) from None
        return options
    if hint is float:
        if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", raw):
            raise ConfigError(key, raw, "expected a number")
        return float(raw)
    return raw


def _format(value: typing.Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, float):  # a ratio: 5.x's percent integer when that is exact and unambiguous
        percent = round(value * 100)
        return str(percent) if percent > 1 and percent / 100 == value else repr(value)
    return str(value)


# -- Java .properties syntax (java.util.Properties.load / store) ----------------------------------------
