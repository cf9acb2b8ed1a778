"""broker.conf parsing: RocketMQ keys, old spellings, unknown keys, errors with line numbers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ferromq.broker.config import ConfigError, load_broker_config, parse_properties
from ferromq.store import FlushDiskType

CONF = """\
# a Java broker's file
brokerClusterName = ProdCluster
brokerName=broker-b
brokerId=0
deleteWhen=04
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
    with caplog.at_level(logging.WARNING):
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
    assert "broker.conf:5: unknown key 'deleteWhen' ignored" in caplog.text
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
    msg = str(e.value)
    assert "broker.conf:1: listenPort" in msg
    assert "broker.conf:2: autoCreateTopicEnable" in msg
    assert "broker.conf:3: flushDiskType" in msg
    with pytest.raises(ConfigError, match="brokerRole"):
        load_broker_config(None, broker_role="BOSS")


def test_properties_syntax() -> None:
    assert parse_properties("a=1\n! comment\n  b : 2 \nc\n") == [(1, "a", "1"), (3, "b", "2"), (4, "c", "")]
