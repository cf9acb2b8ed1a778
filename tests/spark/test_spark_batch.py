"""Batch reads with `spark.read.format("ferromq")` over a store a running broker is writing."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from ferromq.store import MessageStore
from tests.spark.conftest import DELAYED_TOPIC, TOPIC, Produced

pytestmark = [pytest.mark.timeout(300)]

COMPRESSED = 0x1


def read(spark: SparkSession, store: Path, **options: Any) -> DataFrame:
    reader = spark.read.format("ferromq").option("path", str(store))
    for k, v in options.items():
        reader = reader.option(k, v if isinstance(v, str) else json.dumps(v))
    return reader.load()


def keyed(df: DataFrame) -> dict[tuple[int, int], Any]:
    rows = df.collect()
    out = {(r.queue_id, r.queue_offset): r for r in rows}
    assert len(out) == len(rows), "a (queue, offset) was returned twice"
    return out


@pytest.fixture(scope="module")
def everything(spark: SparkSession, produced: Produced) -> dict[tuple[int, int], Any]:
    return keyed(read(spark, produced.store, topic=TOPIC))


def test_every_message_with_its_bytes_keys_properties_and_offsets(
    produced: Produced, everything: dict[tuple[int, int], Any]
) -> None:
    assert len(list((produced.store / "commitlog").iterdir())) >= 4, "the data should span several segments"
    assert set(everything) == set(produced.sent)
    for key, sent in produced.sent.items():
        row = everything[key]
        assert row.topic == TOPIC
        assert row.body == sent.body, key
        assert (row.tags, row.keys, row.uniq_key) == (sent.tags, sent.keys, sent.uniq_key)
        assert row.msg_id == sent.offset_msg_id
        assert row.properties.items() >= sent.properties.items()
        assert row.properties["TAGS"] == sent.tags and row.properties["UNIQ_KEY"] == sent.uniq_key
        assert bool(row.sys_flag & COMPRESSED) == sent.compressed
        assert row.reconsume_times == 0 and row.flag == 0
        assert row.store_host.startswith("127.0.0.1:") and row.born_host.startswith("127.0.0.1:")
        assert row.born_timestamp <= row.store_timestamp


def test_commitlog_offsets_point_at_the_records(
    produced: Produced, everything: dict[tuple[int, int], Any]
) -> None:
    with MessageStore.open_read_only(produced.store) as store:
        for key in list(everything)[::37]:
            row = everything[key]
            stored = store.read(row.commitlog_offset)
            assert stored is not None
            assert (stored.queue_id, stored.queue_offset) == key
            assert stored.payload() == row.body


def test_offset_ranges(spark: SparkSession, produced: Produced) -> None:
    start = {TOPIC: {"0": 5, "1": -2}}
    end = {TOPIC: {"0": 20, "2": 3}}
    got = set(keyed(read(spark, produced.store, topic=TOPIC, startingOffsets=start, endingOffsets=end)))
    want = {(q, o) for (q, o) in produced.sent if (q != 0 or 5 <= o < 20) and (q != 2 or o < 3)}
    assert got == want


def test_timestamp_range(
    spark: SparkSession, produced: Produced, everything: dict[tuple[int, int], Any]
) -> None:
    times = sorted({r.store_timestamp for r in everything.values()})
    lo, hi = times[len(times) // 4], times[3 * len(times) // 4]
    to_ms = lambda t: round(t.timestamp() * 1000)  # noqa: E731
    df = read(
        spark, produced.store, topic=TOPIC, startingTimestamp=str(to_ms(lo)), endingTimestamp=str(to_ms(hi))
    )
    want = {k for k, r in everything.items() if lo <= r.store_timestamp < hi}
    assert want and set(keyed(df)) == want


def test_tag_filter(spark: SparkSession, produced: Produced) -> None:
    got = keyed(read(spark, produced.store, topic=TOPIC, tags="TagA || TagZ"))
    assert set(got) == {k for k, s in produced.sent.items() if s.tags in ("TagA", "TagZ")}
    assert {r.tags for r in got.values()} == {"TagA", "TagZ"}


def test_large_queues_split_into_several_tasks(spark: SparkSession, produced: Produced) -> None:
    df = read(spark, produced.store, topic=TOPIC, maxRecordsPerPartition="40")
    per_queue: dict[int, int] = {}
    for q, _ in produced.sent:
        per_queue[q] = per_queue.get(q, 0) + 1
    assert df.rdd.getNumPartitions() == sum(math.ceil(n / 40) for n in per_queue.values())
    assert set(keyed(df)) == set(produced.sent)


def test_internal_topics_only_when_named(spark: SparkSession, produced: Produced) -> None:
    topics = {
        r.topic for r in read(spark, produced.store, topicPattern=".*").select("topic").distinct().collect()
    }
    assert TOPIC in topics
    assert not any(t.startswith("SCHEDULE_TOPIC") or t == "TBW102" for t in topics)
    scheduled = read(spark, produced.store, topic="SCHEDULE_TOPIC_XXXX").collect()
    assert [r.properties["REAL_TOPIC"] for r in scheduled] == [DELAYED_TOPIC]


def test_without_properties_and_queue_selection(spark: SparkSession, produced: Produced) -> None:
    df = read(spark, produced.store, topic=TOPIC, includeProperties="false", queues="1,3")
    assert "properties" not in df.columns
    assert set(keyed(df)) == {k for k in produced.sent if k[0] in (1, 3)}


def test_a_path_that_is_not_a_store_gets_a_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a RocketMQ/ferromq store root"):
        read(spark, tmp_path, topic=TOPIC).collect()
    with pytest.raises(Exception, match="unknown option"):
        read(spark, tmp_path, topic=TOPIC, startingOffset="earliest").collect()
    with pytest.raises(Exception, match="exactly one of path"):
        spark.read.format("ferromq").option("topic", TOPIC).load().collect()


def test_reads_see_a_consistent_prefix_while_a_writer_appends(spark: SparkSession, tmp_path: Path) -> None:
    """A writer in this process appends without pause; every Spark read sees, per queue, offsets
    0..n-1 with exactly the bodies written there (never a torn or foreign record)."""
    root = tmp_path / "live"
    stop = threading.Event()
    with MessageStore(root, mapped_file_size_commitlog=128 * 1024) as store:
        for q in range(2):
            store.put("Live", q, f"Live/{q}/0|".encode() * 20)

        def write() -> None:
            n = 1
            while not stop.is_set() and n < 200_000:
                for q in range(2):
                    store.put("Live", q, f"Live/{q}/{n}|".encode() * 20)
                n += 1

        writer = threading.Thread(target=write)
        writer.start()
        try:
            for _ in range(3):
                rows = read(spark, root, topic="Live").select("queue_id", "queue_offset", "body").collect()
                per_queue: dict[int, list[int]] = {0: [], 1: []}
                for r in rows:
                    assert r.body == f"Live/{r.queue_id}/{r.queue_offset}|".encode() * 20
                    per_queue[r.queue_id].append(r.queue_offset)
                for offsets in per_queue.values():
                    assert sorted(offsets) == list(range(len(offsets)))
        finally:
            stop.set()
            writer.join(timeout=30)
