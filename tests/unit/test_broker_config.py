"""broker.conf parsing: RocketMQ keys, old spellings, unknown keys, errors with line numbers,
value ranges, profiles, and a store's file sizes against the configuration."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from ferromq.broker.config import (
    KEY_OF,
    PROFILES,
    ConfigError,
    StoreMismatchError,
    load_broker_config,
    parse_properties,
)
from ferromq.broker.config_fields import CONFIG_TABLES, BrokerConfig
from ferromq.broker.store_sizes import check_store_sizes
from ferromq.cli import _broker_config
from ferromq.client.admin_results import parse_properties as admin_parse_properties
from ferromq.store import FlushDiskType

CONF = """\
# a Java broker's file
brokerClusterName = ProdCluster
brokerName=broker-b
brokerId=0
redeleteHangedFileInterval=120000
listenPort: 10921
namesrvAddr=10.0.0.1:9876;10.0.0.2:9876
brokerIP1=192.168.1.5
storePathRootDir=/data/store
flushDiskType=SYNC_FLUSH
brokerRole=ASYNC_MASTER
autoCreateTopicEnable=false
mapedFileSizeCommitLog=134217728
mappedFileSizeConsumeQueue=600000
messageDelayLevel=1s 5s \\
  10s
longPollingEnable=false
transactionTimeOut=3000
"""


def test_reads_rocketmq_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(CONF)
    with caplog.at_level(logging.INFO):
        cfg = load_broker_config(path)
    assert cfg.broker_cluster_name == "ProdCluster"
    assert cfg.broker_name == "broker-b"
    assert cfg.listen_port == 10921
    assert cfg.namesrv_addrs == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert cfg.broker_addr == "192.168.1.5:10921"
    assert cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH
    assert cfg.auto_create_topic_enable is False
    assert cfg.mapped_file_size_commitlog == 134217728
    assert cfg.mapped_file_size_consume_queue == 600000
    assert cfg.message_delay_level == "1s 5s 10s"
    assert cfg.long_polling_enable is False
    assert cfg.transaction_time_out == 3000
    assert "broker.conf:5: redeleteHangedFileInterval is not used by ferromq; ignored" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    store = cfg.store_config()
    assert (store.root, store.store_host) == ("/data/store", "192.168.1.5:10921")


def test_defaults_match_rocketmq() -> None:
    cfg = load_broker_config(None, broker_name="b")
    assert (cfg.listen_port, cfg.default_topic_queue_nums, cfg.broker_cluster_name) == (
        10911,
        8,
        "DefaultCluster",
    )
    assert cfg.flush_disk_type == FlushDiskType.ASYNC_FLUSH
    assert cfg.mapped_file_size_commitlog == 1 << 30
    assert cfg.transaction_check_interval == 60_000 and cfg.transaction_check_max == 15


def test_every_bad_value_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("listenPort=abc\nautoCreateTopicEnable=yes\nflushDiskType=SOMETIMES\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value) == (
        f"{path}:1: listenPort must be an integer, not 'abc'; "
        f"{path}:2: autoCreateTopicEnable must be true or false, not 'yes'; "
        f"{path}:3: flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not 'SOMETIMES'"
    )
    with pytest.raises(ConfigError, match="brokerRole"):
        load_broker_config(None, broker_role="BOSS")


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("maxMessageSize=-1", "conf:1: maxMessageSize must be > 0, not -1"),
        ("maxMessageSize=0", "conf:1: maxMessageSize must be > 0, not 0"),
        ("maxMessageSize=4294967296", "conf:1: maxMessageSize must be <= 2147483647, not 4294967296"),
        ("mappedFileSizeCommitLog=1024", "conf:1: mappedFileSizeCommitLog must be >= 4096, not 1024"),
        ("mapedFileSizeConsumeQueue=10", "conf:1: mappedFileSizeConsumeQueue must be >= 20, not 10"),
        ("maxHashSlotNum=0", "conf:1: maxHashSlotNum must be > 0, not 0"),
        ("maxIndexNum=1", "conf:1: maxIndexNum must be >= 2, not 1"),
        ("syncFlushTimeout=-5", "conf:1: syncFlushTimeout must be > 0, not -5"),
        ("listenPort=70000", "conf:1: listenPort must be a port number (0-65535), not 70000"),
        ("listenPort=-1", "conf:1: listenPort must be a port number (0-65535), not -1"),
        ("brokerId=-1", "conf:1: brokerId must be >= 0, not -1"),
        (
            "brokerPermission=16",
            "conf:1: brokerPermission must be 0-15 (PermName bits: 4 read, 2 write, 1 inherit), not 16",
        ),
        (
            "brokerIP1=broker.example.com",
            "conf:1: brokerIP1 must be an IPv4 address, not 'broker.example.com'",
        ),
        ("brokerName=", "conf:1: brokerName must be set, not ''"),
        (
            "namesrvAddr=localhost",
            "conf:1: namesrvAddr must be host:port, or several separated by ';', not 'localhost'",
        ),
        (
            "namesrvAddr=a:1;b:99999",
            "conf:1: namesrvAddr must be host:port, or several separated by ';', not 'a:1;b:99999'",
        ),
        ("defaultTopicQueueNums=0", "conf:1: defaultTopicQueueNums must be > 0, not 0"),
        (
            "messageDelayLevel=1s 5x 1h",
            "conf:1: messageDelayLevel must be like '1s 5s 10m 2h 1d' (numbers with s, m, h or d), "
            "not '1s 5x 1h'",
        ),
        (
            "messageDelayLevel=",
            "conf:1: messageDelayLevel must be like '1s 5s 10m 2h 1d' (numbers with s, m, h or d), not ''",
        ),
        # All problems at once, in the file's order, each with its line.
        (
            "maxIndexNum=0\nlistenPort=x\n# comment\nmaxMessageSize=-1",
            "conf:1: maxIndexNum must be >= 2, not 0; conf:2: listenPort must be an integer, not 'x'; "
            "conf:4: maxMessageSize must be > 0, not -1",
        ),
    ],
)
def test_values_out_of_range(tmp_path: Path, conf: str, message: str) -> None:
    path = tmp_path / "conf"
    path.write_text(conf + "\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value) == message.replace("conf:", f"{path}:")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_message_size": -1}, "maxMessageSize must be > 0, not -1"),
        ({"listen_port": 65536}, "listenPort must be a port number (0-65535), not 65536"),
        (
            {"flush_disk_type": "SOMETIMES"},
            "flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, not 'SOMETIMES'",
        ),
        (
            {"max_hash_slot_num": -1, "transaction_check_interval": 0},
            "maxHashSlotNum must be > 0, not -1; transactionCheckInterval must be > 0, not 0",
        ),
    ],
)
def test_overrides_are_validated_too(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_broker_config(None, **overrides)
    assert str(e.value) == message


def test_an_override_replaces_a_bad_file_value(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("listenPort=70000\n")
    assert load_broker_config(path, listen_port=0).listen_port == 0


@pytest.mark.parametrize(
    ("key", "warning"),
    [
        (
            "autoCreateTopicEnabled",
            "unknown key 'autoCreateTopicEnabled' ignored; did you mean 'autoCreateTopicEnable'?",
        ),
        ("listenport", "unknown key 'listenport' ignored; did you mean 'listenPort'?"),
        ("brokerNmae", "unknown key 'brokerNmae' ignored; did you mean 'brokerName'?"),
        ("namesrvAddress", "unknown key 'namesrvAddress' ignored; did you mean 'namesrvAddr'?"),
        (
            "mappedFileSizeCommitlog",
            "unknown key 'mappedFileSizeCommitlog' ignored; did you mean 'mappedFileSizeCommitLog'?",
        ),
        ("deleteWhn", "unknown key 'deleteWhn' ignored; did you mean 'deleteWhen'?"),
        ("colour", "unknown key 'colour' ignored"),
    ],
)
def test_unknown_keys_warn_with_the_closest_known_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str, warning: str
) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(f"brokerName=b\n{key}=1\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_broker_config(path)
    assert cfg.broker_name == "b"
    assert [r.getMessage() for r in caplog.records] == [f"{path}:2: {warning}"]


def test_strict_config_lists_every_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("autoCreateTopicEnabled=true\ndeleteWhen=04\ncolour=red\nlistenPort=x\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path, strict=True)
    assert str(e.value) == (
        f"{path}:1: unknown key 'autoCreateTopicEnabled' (did you mean 'autoCreateTopicEnable'?); "
        f"{path}:3: unknown key 'colour'; "
        f"{path}:4: listenPort must be an integer, not 'x'; "
        "unknown keys are errors with --strict-config"
    )
    # RocketMQ's own keys that ferromq does not use are never errors.
    path.write_text("deleteWhen=04\nfileReservedTime=72\nbrokerIP2=127.0.0.1\n")
    assert load_broker_config(path, strict=True).profile == "rocketmq"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "config file {p} does not exist"),
        (lambda p: p.mkdir(), "config file {p} is a directory"),
        (
            lambda p: p.write_bytes(b"brokerName=\xff\n"),
            "config file {p} is not UTF-8 text (invalid start byte)",
        ),
    ],
)
def test_unreadable_config_file(tmp_path: Path, make: Any, message: str) -> None:
    path = tmp_path / "broker.conf"
    make(path)
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value) == message.format(p=path)


SMALL = dict(PROFILES["small"])
ROCKETMQ_SIZES = {
    "mapped_file_size_commitlog": 1 << 30,
    "mapped_file_size_consume_queue": 6_000_000,
    "max_hash_slot_num": 5_000_000,
    "max_index_num": 20_000_000,
    "mapped_file_size_timer_log": 100 * 1024 * 1024,
}


def test_profiles() -> None:
    assert SMALL == {
        "mapped_file_size_commitlog": 64 * 1024 * 1024,
        "mapped_file_size_consume_queue": 600_000,
        "max_hash_slot_num": 500_000,
        "max_index_num": 2_000_000,
        "mapped_file_size_timer_log": 4 * 1024 * 1024,
    }
    rocketmq = load_broker_config(None)
    assert {k: getattr(rocketmq, k) for k in SMALL} == ROCKETMQ_SIZES
    assert rocketmq.profile == "rocketmq"
    small = load_broker_config(None, profile="small", max_index_num=40)
    assert {k: getattr(small, k) for k in SMALL} == {**SMALL, "max_index_num": 40}
    assert (small.profile, small.max_message_size, small.listen_port) == ("small", 4 * 1024 * 1024, 10911)
    with pytest.raises(ConfigError, match="profile must be one of small, rocketmq, not 'tiny'"):
        load_broker_config(None, profile="tiny")


def test_profile_is_under_the_file_and_the_overrides(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("mappedFileSizeCommitLog=1048576\nmaxIndexNum=1000\n")
    cfg = load_broker_config(path, profile="small", max_index_num=2000)
    assert (cfg.mapped_file_size_commitlog, cfg.mapped_file_size_consume_queue) == (1048576, 600_000)
    assert (cfg.max_hash_slot_num, cfg.max_index_num) == (500_000, 2000)


@pytest.mark.parametrize(
    ("command", "argv", "profile"),
    [
        ("serve", [], "small"),
        ("serve", ["-c", "CONF"], "rocketmq"),
        ("serve", ["--profile", "rocketmq"], "rocketmq"),
        ("serve", ["-c", "CONF", "--profile", "small"], "small"),
        ("broker", ["-n", "127.0.0.1:9876"], "rocketmq"),
        ("broker", ["-n", "127.0.0.1:9876", "--profile", "small"], "small"),
    ],
)
def test_profile_selection_on_the_command_line(
    tmp_path: Path, command: str, argv: list[str], profile: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\n")
    args = argparse.Namespace(
        command=command,
        config=None,
        listen_port=None,
        store=str(tmp_path / "store"),
        profile=None,
        strict_config=False,
        namesrv=None,
    )
    it = iter(argv)
    for flag in it:
        value = next(it)
        setattr(args, {"-c": "config", "--profile": "profile", "-n": "namesrv"}[flag], value)
    if args.config == "CONF":
        args.config = str(conf)
    cfg = _broker_config(args)
    assert cfg.profile == profile
    expected = SMALL if profile == "small" else ROCKETMQ_SIZES
    assert {k: getattr(cfg, k) for k in SMALL} == expected


def _store_files(root: Path, sizes: dict[str, int]) -> None:
    """Sparse files where the store keeps its first CommitLog, consume-queue and index files."""
    files = {
        "commitlog": root / "commitlog" / "00000000000000000000",
        "consumequeue": root / "consumequeue" / "T" / "0" / "00000000000000000000",
        "index": root / "index" / "20250101000000000",
    }
    for kind, size in sizes.items():
        files[kind].parent.mkdir(parents=True, exist_ok=True)
        with open(files[kind], "wb") as f:
            os.truncate(f.fileno(), size)


ROCKETMQ_FILES = {"commitlog": 1 << 30, "consumequeue": 6_000_000, "index": 420_000_040}
SMALL_FILES = {"commitlog": 64 << 20, "consumequeue": 600_000, "index": 42_000_040}


@pytest.mark.parametrize(
    ("files", "profile", "message"),
    [
        (
            ROCKETMQ_FILES,
            "small",
            "store {root} has files of other sizes than configured (profile small): "
            "CommitLog files are 1073741824 bytes (mappedFileSizeCommitLog=67108864); "
            "consume-queue files are 6000000 bytes (mappedFileSizeConsumeQueue=600000); "
            "index files are 420000040 bytes (maxHashSlotNum=500000, maxIndexNum=2000000 make 42000040); "
            "use --profile rocketmq, or set mappedFileSizeCommitLog=1073741824, "
            "mappedFileSizeConsumeQueue=6000000, maxHashSlotNum=5000000, maxIndexNum=20000000 in broker.conf",
        ),
        (
            {"commitlog": 64 << 20},
            "rocketmq",
            "store {root} has files of other sizes than configured (profile rocketmq): "
            "CommitLog files are 67108864 bytes (mappedFileSizeCommitLog=1073741824); "
            "use --profile small, or set mappedFileSizeCommitLog=67108864 in broker.conf",
        ),
        (
            {"commitlog": 1 << 20, "consumequeue": 20_000},
            "rocketmq",
            "store {root} has files of other sizes than configured (profile rocketmq): "
            "CommitLog files are 1048576 bytes (mappedFileSizeCommitLog=1073741824); "
            "consume-queue files are 20000 bytes (mappedFileSizeConsumeQueue=6000000); "
            "set mappedFileSizeCommitLog=1048576, mappedFileSizeConsumeQueue=20000 in broker.conf",
        ),
        (
            {"index": 1000},
            "small",
            "store {root} has files of other sizes than configured (profile small): "
            "index files are 1000 bytes (maxHashSlotNum=500000, maxIndexNum=2000000 make 42000040); "
            "set maxHashSlotNum and maxIndexNum as written (40 + 4 x slots + 20 x entries = 1000) "
            "in broker.conf",
        ),
        (SMALL_FILES, "small", None),
        (ROCKETMQ_FILES, "rocketmq", None),
        ({}, "small", None),  # a new store
    ],
)
def test_store_file_sizes_against_the_config(
    tmp_path: Path, files: dict[str, int], profile: str, message: str | None
) -> None:
    root = tmp_path / "store"
    _store_files(root, files)
    cfg = load_broker_config(None, profile=profile, store_path_root_dir=str(root))
    if message is None:
        check_store_sizes(cfg)
        return
    with pytest.raises(StoreMismatchError) as e:
        check_store_sizes(cfg)
    assert str(e.value) == message.format(root=root)


def test_consume_queue_size_is_rounded_to_whole_units(tmp_path: Path) -> None:
    """990 bytes make 1,000-byte files (50 whole 20-byte units): they match 1,000-byte files
    though 990 != 1000, while 1,010 (1,020-byte files) does not."""
    root = tmp_path / "store"
    _store_files(root, {"consumequeue": 1000})

    def refusal(size: int) -> str | None:
        cfg = load_broker_config(None, mapped_file_size_consume_queue=size, store_path_root_dir=str(root))
        try:
            check_store_sizes(cfg)
        except StoreMismatchError as e:
            return str(e)
        return None

    assert refusal(990) is None
    said = refusal(1010)
    assert said is not None and "consume-queue files are 1000 bytes" in said


def test_properties_syntax() -> None:
    assert parse_properties("a=1\n! comment\n  b : 2 \nc\n") == [(1, "a", "1"), (3, "b", "2"), (4, "c", "")]


def test_the_admin_client_reads_config_text_with_the_brokers_reader() -> None:
    # GET_BROKER_CONFIG's body (MixAll.properties2String) is read by the one reader the broker
    # reads broker.conf and UPDATE_BROKER_CONFIG with; the client also undoes Properties.store's
    # escapes, and a repeated key takes its last value, as in Java's Properties.
    body = (
        "a=1\n# c\n\n namesrvAddr = h1:9876;h2:9876 \nstorePathRootDir=/x/\\u00e9\nlong=1,\\\n  2\na=3\nk\n"
    )
    assert admin_parse_properties(body.encode()) == {
        "a": "3",
        "namesrvAddr": "h1:9876;h2:9876",
        "storePathRootDir": "/x/é",
        "long": "1,2",
        "k": "",
    }
    lines = parse_properties(body)
    assert [key for _no, key, _value in lines] == ["a", "namesrvAddr", "storePathRootDir", "long", "a", "k"]
    assert lines[2] == (5, "storePathRootDir", "/x/\\u00e9")  # the broker keeps escapes as written


def test_retention_keys(tmp_path: Path) -> None:
    defaults = load_broker_config(None, broker_name="b")
    assert (defaults.file_reserved_time, defaults.delete_when, defaults.disk_max_used_space_ratio) == (
        72,
        "04",
        75,
    )
    assert defaults.clean_file_forcibly_enable is True
    assert (defaults.clean_resource_interval, defaults.destroy_mapped_file_interval_forcibly) == (
        10_000,
        120_000,
    )
    path = tmp_path / "broker.conf"
    path.write_text(
        "fileReservedTime=48\ndeleteWhen=04;16\ndiskMaxUsedSpaceRatio=80\ndiskSpaceCleanForciblyRatio=90\n"
        "cleanFileForciblyEnable=false\ndeleteCommitLogFilesInterval=0\ndeleteConsumeQueueFilesInterval=5\n"
        "destroyMapedFileIntervalForcibly=1000\ncleanResourceInterval=2000\noffsetCheckInSlave=true\n"
    )
    cfg = load_broker_config(path, strict=True)
    assert cfg.offset_check_in_slave is True
    store = cfg.store_config()
    assert (store.file_reserved_time_hours, store.delete_when) == (48, "04;16")
    assert (store.disk_max_used_space_ratio, store.disk_space_clean_forcibly_ratio) == (80, 90)
    assert store.clean_file_forcibly_enable is False
    assert (store.delete_commitlog_files_interval_ms, store.delete_consume_queue_files_interval_ms) == (0, 5)
    assert (store.destroy_mapped_file_interval_forcibly_ms, store.clean_resource_interval_ms) == (1000, 2000)


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        (
            "deleteWhen=4am",
            "deleteWhen must be hours of the day (0-23) separated by ';', like '04' or '04;16', not '4am'",
        ),
        (
            "deleteWhen=04;24",
            "deleteWhen must be hours of the day (0-23) separated by ';', like '04' or '04;16', not '04;24'",
        ),
        ("diskMaxUsedSpaceRatio=101", "diskMaxUsedSpaceRatio must be a percentage (0-100), not 101"),
        (
            "diskSpaceCleanForciblyRatio=-1",
            "diskSpaceCleanForciblyRatio must be a percentage (0-100), not -1",
        ),
        ("fileReservedTime=-1", "fileReservedTime must be >= 0, not -1"),
        ("cleanResourceInterval=0", "cleanResourceInterval must be > 0, not 0"),
        ("cleanFileForciblyEnable=yes", "cleanFileForciblyEnable must be true or false, not 'yes'"),
    ],
)
def test_retention_values_out_of_range(tmp_path: Path, conf: str, message: str) -> None:
    path = tmp_path / "conf"
    path.write_text(conf + "\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value) == f"{path}:1: {message}"


def test_mapped_file_hot_window(tmp_path: Path) -> None:
    """mappedFileHotWindow (ferromq's own key): the bytes kept mapped behind a file's write
    position, 8 MiB by default; 0 keeps every page mapped (the store is given None)."""
    assert load_broker_config(None, broker_name="b").store_config().mapped_file_hot_window == 8 << 20
    path = tmp_path / "broker.conf"
    for value, expected in (("1048576", 1 << 20), ("0", None)):
        path.write_text(f"mappedFileHotWindow={value}\n")
        assert load_broker_config(path, strict=True).store_config().mapped_file_hot_window == expected
    path.write_text("mappedFileHotWindow=-1\n")
    with pytest.raises(ConfigError) as e:
        load_broker_config(path)
    assert str(e.value) == f"{path}:1: mappedFileHotWindow must be >= 0, not -1"


def test_each_field_is_declared_once_by_one_config_table() -> None:
    # One table per concern: every broker.conf field belongs to exactly one table, which declares
    # its key; BrokerConfig is made of those tables and adds only `profile`.
    seen: dict[str, str] = {}
    for table, _check in CONFIG_TABLES:
        assert issubclass(BrokerConfig, table)
        for f in dataclasses.fields(table):
            assert f.name not in seen, f"{f.name} in {seen.get(f.name)} and {table.__name__}"
            seen[f.name] = table.__name__
    assert set(seen) == set(KEY_OF) == {f.name for f in dataclasses.fields(BrokerConfig)} - {"profile"}
    assert KEY_OF["broker_ip1"] == "brokerIP1" and KEY_OF["tls_server_mode"] == "tls.server.mode"
    assert KEY_OF["table_topic_role"] == "tableTopicRole"
