"""The Spark source reads a store written by Apache RocketMQ 4.9.7 itself (cleanly stopped, and
SIGKILLed in SYNC_FLUSH mode right after the last acknowledged send)."""

from __future__ import annotations

from pathlib import Path

import pytest
from apache_rocketmq import ROCKETMQ_VERSION, have_java
from pyspark.sql import SparkSession

from tests.interop import crosscompat_data as cc

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not have_java(), reason="needs java and mvn to run Apache RocketMQ"),
    pytest.mark.timeout(600),
]


@pytest.mark.parametrize("kill", [False, True], ids=["clean-stop", "kill-9"])
def test_spark_reads_a_store_apache_rocketmq_wrote(spark: SparkSession, tmp_path: Path, kill: bool) -> None:
    store, ds = cc.java_written_store(tmp_path / "java", kill=kill)
    df = (
        spark.read.format("ferromq")
        .option("path", str(store))
        .option("topicPattern", "CC_.*")
        .option("maxRecordsPerPartition", "500")
        .load()
    )
    rows = {(r.topic, r.queue_id, r.queue_offset): r for r in df.collect()}
    expected = ds.by_position()
    delivered = {m.msg_id: m for m in ds.delayed_delivered}
    # Every message at its offset; delivered delayed messages after them in their real queues.
    assert set(expected) <= set(rows), f"Apache RocketMQ {ROCKETMQ_VERSION} store: rows missing"
    extra = {k: r for k, r in rows.items() if k not in expected}
    assert sorted(r.uniq_key for r in extra.values()) == sorted(delivered)
    for key, sent in expected.items():
        row = rows[key]
        assert row.body == sent.body, key
        assert row.uniq_key == sent.msg_id and row.msg_id == sent.offset_msg_id
        assert row.tags == sent.tags
        assert (row.keys or "").split(" ") == list(sent.keys) if sent.keys else row.keys is None
        assert row.properties.items() >= dict(sent.user_props).items()
        assert bool(row.sys_flag & cc.COMPRESSED_FLAG) == sent.compressed
    for row in extra.values():
        assert row.body == delivered[row.uniq_key].body
        assert row.properties["REAL_TOPIC"] == row.topic
    # Still-pending delayed messages live in the schedule topic, read only when named.
    scheduled = (
        spark.read.format("ferromq")
        .option("path", str(store))
        .option("topic", cc.SCHEDULE_TOPIC)
        .load()
        .collect()
    )
    assert sorted(
        r.uniq_key for r in scheduled if r.uniq_key in {m.msg_id for m in ds.delayed_pending}
    ) == sorted(m.msg_id for m in ds.delayed_pending)
