"""StoreConfig: docs/api.md's defaults, validation, broker.conf reading and writing."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pystore.config import BrokerRole, FlushDiskType, StoreConfig, UnknownConfigKeyWarning
from pystore.errors import ConfigError

# docs/api.md "Configuration — StoreConfig", row by row.
API_DEFAULTS = [
    ("store_path_root_dir", "./store"),
    ("store_path_commit_log", None),
    ("mapped_file_size_commit_log", 1 << 30),
    ("mapped_file_size_consume_queue", 300_000 * 20),
    ("flush_disk_type", FlushDiskType.ASYNC_FLUSH),
    ("flush_interval_commit_log", 500),
    ("flush_commit_log_least_pages", 4),
    ("flush_commit_log_thorough_interval", 10_000),
    ("flush_commit_log_timed", False),
    ("sync_flush_timeout", 5_000),
    ("transient_store_pool_enable", False),
    ("transient_store_pool_size", 5),
    ("commit_interval_commit_log", 200),
    ("commit_commit_log_least_pages", 4),
    ("commit_commit_log_thorough_interval", 200),
    ("flush_interval_consume_queue", 1000),
    ("flush_consume_queue_least_pages", 2),
    ("flush_consume_queue_thorough_interval", 60_000),
    ("file_reserved_time", 72),
    ("delete_when", "04"),
    ("disk_max_used_space_ratio", 75),
    ("disk_space_clean_forcibly_ratio", 0.85),
    ("disk_space_warning_level_ratio", 0.90),
    ("clean_file_forcibly_enable", True),
    ("clean_resource_interval", 10_000),
    ("delete_commit_log_files_interval", 100),
    ("delete_consume_queue_files_interval", 100),
    ("destroy_mapped_file_interval_forcibly", 120_000),
    ("redelete_hanged_file_interval", 120_000),
    ("max_message_size", 4 * 1024 * 1024),
    ("check_crc_on_recover", True),
    ("check_crc_on_read", True),
    ("flush_consumer_offset_interval", 5_000),
    ("message_index_enable", True),
    ("message_index_safe", False),
    ("index_build_async", True),
    ("index_build_nice", 10),
    ("max_hash_slot_num", 5_000_000),
    ("max_index_num", 20_000_000),
    ("message_delay_level", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"),
    ("os_page_cache_busy_timeout_mills", 1000),
    ("use_reentrant_lock_when_put_message", False),
    ("warm_mapped_file_enable", False),
    ("broker_role", BrokerRole.ASYNC_MASTER),
    ("max_transfer_bytes_on_message_in_memory", 256 * 1024),
    ("max_transfer_count_on_message_in_memory", 32),
    ("store_host", ("127.0.0.1", 10911)),
    ("ha_listen_port", None),
    ("ha_listen_address", "127.0.0.1"),
    ("ha_master_address", None),
    ("ha_send_heartbeat_interval", 5_000),
    ("ha_housekeeping_interval", 20_000),
    ("ha_transfer_batch_size", 32 * 1024),
    ("ha_slave_fallbehind_max", 256 * 1024 * 1024),
]

EXTRA_DEFAULTS = [
    ("max_transfer_bytes_on_message_in_disk", 64 * 1024),
    ("max_transfer_count_on_message_in_disk", 8),
    ("access_message_in_memory_max_ratio", 40),
    ("delete_file_batch_max", 10),
    ("flush_least_pages_when_warm_mapped_file", 4096),
    ("fast_fail_if_no_buffer_in_store_pool", False),
    ("flush_delay_offset_interval", 10_000),
    ("max_msgs_num_batch", 64),
    ("default_query_max_num", 32),
    ("allocate_wait_timeout", 5_000),
    ("put_message_timeout", 8_000),
    ("slave_timeout", 3_000),
    ("read_only", False),
    ("shared_writers", False),
    ("shared_writers_stuck_ms", 5_000),
    ("shared_writers_queue_slots", 16_384),
    ("archive_uri", ""),
    ("archive_options", {}),
    ("archive_local_retention_hours", 0),
    ("archive_local_retention_bytes", 0),
    ("archive_cache_bytes", 256 * 1024 * 1024),
    ("archive_interval_ms", 1_000),
    ("archive_on_seal", True),
    ("recover_truncate_corrupted", False),
    ("prefault_window_bytes", 4 * 1024 * 1024),
    ("follow_put_cpu", True),
    ("flush_commit_log_min_gap", 100),
    ("timer_wheel_enable", True),
    ("timer_precision_ms", 1000),
    ("timer_max_delay_sec", 259_200),
    ("timer_roll_window_slots", 172_800),
    ("mapped_file_size_timer_log", 100 * 1024 * 1024),
    ("timer_flush_interval_ms", 1000),
    ("timer_congest_num_each_slot", 2**31 - 1),
    ("timer_enable_retry_until_success", False),
    ("timer_skip_unknown_error", False),
    ("timer_stop_enqueue", False),
    ("timer_stop_dequeue", False),
    ("timer_progress_log_interval_ms", 10_000),
]


@pytest.mark.parametrize(("name", "default"), API_DEFAULTS + EXTRA_DEFAULTS)
def test_default(name, default):
    value = getattr(StoreConfig(), name)
    assert value == default
    assert type(value) is type(default)


def test_field_order_is_api_order_then_extras():
    names = [f.name for f in dataclasses.fields(StoreConfig) if f.name != "unknown_keys"]
    assert names == [name for name, _ in API_DEFAULTS + EXTRA_DEFAULTS]


# -- broker.conf -----------------------------------------------------------------------------------

BROKER_CONF = r"""
# A RocketMQ 4.x broker.conf, with what a hand-edited file has in it.
! a bang comment too
brokerClusterName = DefaultCluster
brokerName=broker-a
brokerId=1
namesrvAddr=10.0.0.1:9876;10.0.0.2:9876
brokerIP1 = 10.0.0.7
listenPort=10921
storePathRootDir=/data/rocketmq/store
storePathCommitLog=/disk1/commitlog;\
    /disk2/commitlog
mappedFileSizeCommitLog: 104857600
mappedFileSizeConsumeQueue 300000
deleteWhen=04;16
fileReservedTime=48
brokerRole=SLAVE
flushDiskType=SYNC_FLUSH
haMasterAddress=10.0.0.6:10912
checkCRCOnRecover=False
diskMaxUsedSpaceRatio=88
diskSpaceWarningLevelRatio=90
diskSpaceCleanForciblyRatio=0.8
destroyMapedFileIntervalForcibly=60000
warmMappedFileEnable=true
messageDelayLevel=1s 10s 1m 1h 1d
storePathRootDir=/data/rocketmq/store\u00e9\ttab
"""


def test_broker_conf():
    with pytest.warns(UnknownConfigKeyWarning):
        config = StoreConfig.from_properties(BROKER_CONF)
    assert config.store_host == ("10.0.0.7", 10921)
    assert config.store_path_root_dir == "/data/rocketmq/store\u00e9\ttab"  # a repeated key: the last wins
    assert config.commit_log_paths() == ["/disk1/commitlog", "/disk2/commitlog"]
    assert config.mapped_file_size_commit_log == 100 * 1024 * 1024
    assert config.mapped_file_size_consume_queue == 300_000
    assert config.delete_when_hours() == frozenset({4, 16})
    assert config.file_reserved_time == 48
    assert config.broker_role is BrokerRole.SLAVE
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.ha_master_address == "10.0.0.6:10912"
    assert config.check_crc_on_recover is False
    assert config.disk_max_used_space_ratio == 88
    assert config.disk_space_warning_level_ratio == 0.90
    assert config.disk_space_clean_forcibly_ratio == 0.80
    assert config.destroy_mapped_file_interval_forcibly == 60_000
    assert config.warm_mapped_file_enable is True
    assert config.delay_level_table() == {1: 1000, 2: 10_000, 3: 60_000, 4: 3_600_000, 5: 86_400_000}
    assert config.read_only is False


def test_unknown_keys_warn_once_and_are_listed(caplog):
    with caplog.at_level(logging.DEBUG, logger="pystore"):
        with pytest.warns(UnknownConfigKeyWarning, match="brokerName.*namesrvAddr") as record:
            config = StoreConfig.from_properties(BROKER_CONF)
    assert len(record) == 1 and record[0].filename == __file__  # one warning, blamed on the caller
    assert config.unknown_keys == ("brokerClusterName", "brokerName", "brokerId", "namesrvAddr")
    assert "namesrvAddr" not in caplog.text                     # and no log line saying it again


def test_known_keys_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = StoreConfig.from_properties("storePathRootDir=/x\nmax_message_size=1024\n")
    assert (config.store_path_root_dir, config.max_message_size, config.unknown_keys) == ("/x", 1024, ())


def test_prefault_window_bytes_reads_and_writes_its_properties_key():
    config = StoreConfig.from_properties("prefaultWindowBytes=65536\n")
    assert config.prefault_window_bytes == 65536 and config.unknown_keys == ()
    assert "prefaultWindowBytes=65536" in config.to_properties()
    assert StoreConfig(prefault_window_bytes=0).prefault_window_bytes == 0     # allocate as each put writes
    with pytest.raises(ConfigError):
        StoreConfig(prefault_window_bytes=-1)


def test_properties_syntax():
    text = (
        "  key\\ with\\ spaces = v\n"
        "maxMessageSize\t:\t  2048  \n"
        "deleteWhen=\\\n"
        "    1;\\\n"
        "    2\n"
        "haListenAddress=0.0.0.0\\\n"
        "\n"
        "storePathRootDir=C:\\\\store\\u0041\\n\n"
        "#storePathCommitLog=/ignored\n"
        "haMasterAddress =\n"
    )
    with pytest.warns(UnknownConfigKeyWarning, match="key with spaces"):
        config = StoreConfig.from_properties(text)
    assert config.max_message_size == 2048
    assert config.delete_when == "1;2"
    assert config.ha_listen_address == "0.0.0.0"
    assert config.store_path_root_dir == "C:\\storeA"  # the escaped newline is trimmed with the value
    assert config.store_path_commit_log is None
    assert config.ha_master_address is None


def test_from_file_and_overrides(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_text("storePathRootDir=/from/file\nfileReservedTime=12\n", encoding="utf-8")
    for source in (path, str(path)):
        config = StoreConfig.from_properties(source, file_reserved_time=6, read_only=True)
        assert config.store_path_root_dir == "/from/file"
        assert (config.file_reserved_time, config.read_only) == (6, True)
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_properties(path, file_reserved_time="6")
    assert info.value.key == "file_reserved_time"


def test_latin1_file(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_bytes("storePathRootDir=/d\u00e9p\u00f4t\n".encode("latin-1"))
    assert StoreConfig.from_properties(os.fspath(path)).store_path_root_dir == "/d\u00e9p\u00f4t"


@pytest.mark.filterwarnings("ignore::pystore.config.UnknownConfigKeyWarning")
@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("mappedFileSizeCommitLog=abc", "mappedFileSizeCommitLog", "abc"),
        ("flushDiskType=FAST", "flushDiskType", "FAST"),
        ("checkCRCOnRecover=yes", "checkCRCOnRecover", "yes"),
        ("deleteWhen=25", "deleteWhen", "25"),
        ("diskSpaceWarningLevelRatio=150", "diskSpaceWarningLevelRatio", "150"),
        ("diskMaxUsedSpaceRatio=75.5", "diskMaxUsedSpaceRatio", "75.5"),
        ("listenPort=70000", "listenPort", "70000"),
        ("brokerIP1=broker-a.local", "brokerIP1", "broker-a.local"),
        ("messageDelayLevel=1s 5x", "messageDelayLevel", "1s 5x"),
        ("haMasterAddress=10.0.0.6", "haMasterAddress", "10.0.0.6"),
        ("store_path_root_dir=", "store_path_root_dir", ""),
        ("storePathRootDir=\\u00zz", "storePathRootDir", "\\u00zz"),
    ],
)
def test_bad_broker_conf_value(line, key, value):
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_properties("brokerName=a\n" + line + "\n")
    assert isinstance(info.value, ValueError)
    assert (info.value.key, info.value.value) == (key, value)
    assert key in str(info.value) and str(value) in str(info.value)


# -- validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_message_size", "4"),
        ("max_message_size", 0),
        ("max_message_size", 4.0),
        ("check_crc_on_recover", 1),
        ("flush_interval_commit_log", True),
        ("flush_disk_type", "FAST"),
        ("broker_role", 2),
        ("disk_space_clean_forcibly_ratio", 0),
        ("disk_space_clean_forcibly_ratio", float("nan")),
        ("disk_space_warning_level_ratio", True),
        ("mapped_file_size_commit_log", 32),
        ("mapped_file_size_commit_log", 2**40 + 1),
        ("mapped_file_size_consume_queue", 0),
        ("transient_store_pool_size", 0),
        ("max_hash_slot_num", 0),
        ("max_index_num", -1),
        ("flush_interval_consume_queue", 2**31),
        ("delete_when", "4;24"),
        ("delete_when", ";"),
        ("delete_when", "4pm"),
        ("message_delay_level", ""),
        ("message_delay_level", "1s 2w"),
        ("store_host", ("localhost", 10911)),
        ("store_host", ("127.0.0.1", 65536)),
        ("store_host", ("127.0.0.1", "10911")),
        ("store_host", "::1:10911"),
        ("store_host", "fe80::1%eth0"),
        ("store_host", "[fe80::1%eth0]:1"),
        ("ha_listen_port", -1),
        ("ha_master_address", "10.0.0.6:0"),
        ("ha_master_address", ":10912"),
        ("store_path_root_dir", ""),
        ("store_path_commit_log", " ; , "),
        ("read_only", None),
    ],
)
def test_bad_field(name, value):
    with pytest.raises(ConfigError) as info:
        StoreConfig(**{name: value})
    assert info.value.key == name
    assert name in str(info.value)


def test_zero_where_zero_means_something():
    config = StoreConfig(
        flush_commit_log_least_pages=0,
        commit_commit_log_least_pages=0,
        flush_consume_queue_least_pages=0,
        delete_commit_log_files_interval=0,
        ha_listen_port=0,
    )
    assert config.flush_commit_log_least_pages == 0 and config.ha_listen_port == 0
    with pytest.raises(ConfigError):
        StoreConfig(flush_interval_commit_log=0)


def test_normalisation():
    config = StoreConfig(
        flush_disk_type="sync_flush",
        broker_role=" Sync_Master ",
        disk_space_warning_level_ratio=90,
        disk_space_clean_forcibly_ratio=1,
        store_host="[0:0:0:0:0:0:0:1]:10911",
        delete_when=" 4 ; 16 ",
        message_delay_level="  1s   2m ",
    )
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.broker_role is BrokerRole.SYNC_MASTER
    assert config.disk_space_warning_level_ratio == 0.90
    assert config.disk_space_clean_forcibly_ratio == 1.0
    assert config.store_host == ("::1", 10911)
    assert config.delete_when == "4;16"
    assert config.message_delay_level == "1s 2m"
    assert StoreConfig(store_host=["10.1.2.3", 1]).store_host == ("10.1.2.3", 1)
    assert StoreConfig(store_host="10.1.2.3:0").store_host == ("10.1.2.3", 0)
    assert StoreConfig(ha_master_address="[::1]:10912").ha_master_address == "[::1]:10912"


@pytest.mark.parametrize(
    ("given", "rounded"), [(1, 20), (20, 20), (21, 40), (300_001, 300_020), (6_000_000, 6_000_000)]
)
def test_consume_queue_size_rounds_up_to_whole_units(given, rounded):
    assert StoreConfig(mapped_file_size_consume_queue=given).mapped_file_size_consume_queue == rounded


@pytest.mark.parametrize(("given", "clamped"), [(-5, 10), (9, 10), (10, 10), (95, 95), (100, 95)])
def test_disk_max_used_space_ratio_is_clamped(given, clamped):
    assert StoreConfig(disk_max_used_space_ratio=given).disk_max_used_space_ratio == clamped


@pytest.mark.parametrize(("given", "rounded"), [(1, 100), (100, 100), (199, 100), (200, 200), (499, 200),
                                                 (500, 500), (999, 500), (1000, 1000), (60_000, 1000)])
def test_timer_precision_ms_is_rounded_down_as_rocketmq(given, rounded):
    # MessageStoreConfig.setTimerPrecisionMs keeps 100, 200, 500 or 1000
    assert StoreConfig(timer_precision_ms=given).timer_precision_ms == rounded
    assert StoreConfig.from_properties("timerPrecisionMs=%d" % given).timer_precision_ms == rounded


def test_timer_keys_are_rocketmqs():
    text = StoreConfig(timer_roll_window_slots=7200, mapped_file_size_timer_log=4096, timer_max_delay_sec=60,
                       timer_wheel_enable=False).to_properties()
    assert set(text.splitlines()) == {"timerRollWindowSlot=7200", "mappedFileSizeTimerLog=4096",
                                      "timerMaxDelaySec=60", "timerWheelEnable=false"}
    with pytest.raises(ConfigError, match="mapped_file_size_timer_log"):
        StoreConfig(mapped_file_size_timer_log=67)


def test_validate_after_mutation_and_replace():
    config = StoreConfig()
    config.flush_disk_type = "SYNC_FLUSH"
    config.validate()
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    config.max_message_size = "big"
    with pytest.raises(ConfigError):
        config.validate()
    base = StoreConfig()
    changed = base.replace(broker_role="SLAVE", ha_master_address="10.0.0.6:10912")
    assert changed.broker_role is BrokerRole.SLAVE and base.broker_role is BrokerRole.ASYNC_MASTER
    with pytest.raises(ConfigError):
        base.replace(max_message_size=-1)
    with pytest.raises(TypeError):
        StoreConfig(no_such_field=1)


# -- derived values ----------------------------------------------------------------------------------


def test_paths():
    config = StoreConfig(store_path_root_dir="/r")
    assert config.commit_log_paths() == [os.path.join("/r", "commitlog")]
    assert config.consume_queue_path() == os.path.join("/r", "consumequeue")
    assert config.index_path() == os.path.join("/r", "index")
    assert config.checkpoint_path() == os.path.join("/r", "checkpoint")
    assert config.abort_path() == os.path.join("/r", "abort")
    assert config.lock_path() == os.path.join("/r", "lock")
    assert config.config_path() == os.path.join("/r", "config")
    multi = config.replace(store_path_commit_log="/a/commitlog; /b/commitlog,,/c/commitlog;")
    assert multi.commit_log_paths() == ["/a/commitlog", "/b/commitlog", "/c/commitlog"]
    assert multi.consume_queue_path() == os.path.join("/r", "consumequeue")


def test_delay_level_table():
    config = StoreConfig()
    table = config.delay_level_table()
    assert config.max_delay_level() == len(table) == 18
    assert list(table) == list(range(1, 19))
    assert table[1] == 1000
    assert table[5] == 60_000
    assert table[18] == 7_200_000


def test_delete_when_hours():
    assert StoreConfig().delete_when_hours() == frozenset({4})
    assert StoreConfig(delete_when="0;23").delete_when_hours() == frozenset({0, 23})


# -- to_properties ------------------------------------------------------------------------------------


def test_to_properties_writes_only_changes_in_rocketmq_spelling():
    assert StoreConfig().to_properties() == ""
    text = StoreConfig(
        check_crc_on_recover=False,
        destroy_mapped_file_interval_forcibly=1,
        disk_space_warning_level_ratio=0.5,
        disk_space_clean_forcibly_ratio=0.333,
        store_host=("::1", 1),
    ).to_properties()
    assert text.splitlines() == [
        "diskSpaceCleanForciblyRatio=0.333",
        "diskSpaceWarningLevelRatio=50",
        "destroyMapedFileIntervalForcibly=1",
        "checkCRCOnRecover=false",
        "brokerIP1=\\:\\:1",
        "listenPort=1",
    ]


def test_round_trip_all():
    config = StoreConfig(
        store_path_root_dir="/p\u00e4th with spaces=and:colons#! \U0001f600",
        store_path_commit_log="/a;/b",
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        ha_listen_port=10912,
        ha_master_address="[::1]:10912",
        disk_space_clean_forcibly_ratio=0.01,
    )
    text = config.to_properties(all=True)
    assert text.isascii()
    assert StoreConfig.from_properties(text) == config


# -- hypothesis: any valid config survives to_properties / from_properties ----------------------------

_INT_MAX = 2**31 - 1
_has_path = re.compile(r"[^;,\s]").search
_stripped_text = st.text(min_size=1).filter(lambda s: s == s.strip())  # values are trimmed, as Java does
_host_address = st.ip_addresses().map(str)
_SPECIAL = {
    "store_path_root_dir": _stripped_text,
    "store_path_commit_log": st.none() | _stripped_text.filter(_has_path),
    "mapped_file_size_commit_log": st.integers(64, 2**40),
    "mapped_file_size_consume_queue": st.integers(1, _INT_MAX - 20),
    "delete_when": st.lists(
        st.integers(0, 23).flatmap(lambda h: st.sampled_from([str(h), f"{h:02d}"])), min_size=1
    ).map(";".join),
    "disk_max_used_space_ratio": st.integers(-1000, 1000),
    "disk_space_clean_forcibly_ratio": st.floats(0, 1, exclude_min=True) | st.integers(2, 100),
    "disk_space_warning_level_ratio": st.floats(0, 1, exclude_min=True) | st.integers(2, 100),
    "message_delay_level": st.lists(
        st.builds("{}{}".format, st.integers(0, 10**6), st.sampled_from("smhd")), min_size=1
    ).map(" ".join),
    "store_host": st.tuples(_host_address, st.integers(0, 65535)),
    "ha_listen_port": st.none() | st.integers(0, 65535),
    "ha_listen_address": st.sampled_from(["0.0.0.0", "127.0.0.1", "::", "localhost"]),
    "ha_master_address": st.none()
    | st.builds(lambda a, p: (f"[{a}]" if ":" in a else a) + f":{p}", _host_address, st.integers(1, 65535)),
    "access_message_in_memory_max_ratio": st.integers(0, 100),
    "flush_commit_log_min_gap": st.integers(0, 60_000),
    "shared_writers_queue_slots": st.integers(0, 1 << 22),
    "index_build_nice": st.integers(0, 19),
    "archive_uri": st.sampled_from(["", "file:///tmp/archive", "s3://bucket/a prefix/x", "gs://b"]),
    "archive_options": st.dictionaries(st.text(min_size=1), st.integers() | st.text() | st.booleans(), max_size=3),
    "archive_local_retention_hours": st.integers(0, _INT_MAX),
    "archive_local_retention_bytes": st.integers(0, 2**62),
    "archive_cache_bytes": st.integers(1 << 20, 2**50),
    "archive_interval_ms": st.integers(10, 3_600_000),
    "mapped_file_size_timer_log": st.integers(68, _INT_MAX),
    "timer_flush_interval_ms": st.integers(10, 3_600_000),
}


def _strategy(name, default):
    if name in _SPECIAL:
        return _SPECIAL[name]
    if isinstance(default, bool):
        return st.booleans()
    if isinstance(default, int):
        return st.integers(0 if name.endswith("least_pages") else 1, _INT_MAX)
    if isinstance(default, FlushDiskType | BrokerRole):
        enum_type = type(default)
        return st.sampled_from(list(enum_type)) | st.sampled_from([m.name.lower() for m in enum_type])
    raise AssertionError(f"no strategy for {name}")


_configs = st.fixed_dictionaries(
    {name: _strategy(name, default) for name, default in API_DEFAULTS + EXTRA_DEFAULTS}
).map(lambda kwargs: StoreConfig(**kwargs))


@settings(max_examples=300, deadline=None)
@given(_configs, st.booleans())
def test_round_trip_random(config, write_all):
    text = config.to_properties(all=write_all)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every key written is read back as a known key
        assert StoreConfig.from_properties(text) == config
