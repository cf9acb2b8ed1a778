"""Streaming reads with `spark.readStream.format("ferromq")`, and remote mode through a broker."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer
from ferromq.spark.local import LocalSource
from ferromq.store import MessageStore
from tests.spark.conftest import TOPIC, Produced

pytestmark = [pytest.mark.timeout(300)]

WAIT = 90.0


def stream(spark: SparkSession, **options: Any) -> DataFrame:
    reader = spark.readStream.format("ferromq")
    for k, v in options.items():
        reader = reader.option(k, v if isinstance(v, str) else json.dumps(v))
    return reader.load()


def finish(query: StreamingQuery) -> None:
    assert query.awaitTermination(WAIT), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()


def to_parquet_once(
    spark: SparkSession, root: Path, out: Path, checkpoint: Path, **options: Any
) -> StreamingQuery:
    df = stream(spark, path=str(root), **options).select("topic", "queue_id", "queue_offset", "body")
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    return query


def test_available_now_restarts_from_the_checkpoint_without_skipping_or_repeating(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, out, checkpoint = tmp_path / "store", tmp_path / "out", tmp_path / "checkpoint"
    written: set[tuple[str, int, int, bytes]] = set()
    with MessageStore(root, mapped_file_size_commitlog=64 * 1024) as store:

        def put(topic: str, queue_id: int, n: int) -> None:
            for _ in range(n):
                offset = store.max_offset(topic, queue_id)
                body = f"{topic}/{queue_id}/{offset}".encode() * 30
                r = store.put(topic, queue_id, body)
                assert r.queue_offset == offset
                written.add((topic, queue_id, offset, body))

        for q in range(3):
            put("StreamA", q, 40)
        to_parquet_once(spark, root, out, checkpoint, topicPattern="Stream.*", startingOffsets="earliest")
        assert spark.read.parquet(str(out)).count() == 120

        for q in range(3):
            put("StreamA", q, 15)
        put("StreamA", 7, 5)  # a queue that did not exist: read from its start
        put("StreamB", 0, 9)  # a topic that did not exist, matching the pattern
        to_parquet_once(spark, root, out, checkpoint, topicPattern="Stream.*", startingOffsets="earliest")
        to_parquet_once(spark, root, out, checkpoint, topicPattern="Stream.*", startingOffsets="earliest")

    rows = spark.read.parquet(str(out)).collect()
    got = [(r.topic, r.queue_id, r.queue_offset, bytes(r.body)) for r in rows]
    assert len(got) == len(set(got)), "rows were repeated"
    assert set(got) == written


def test_available_now_reads_what_was_there_at_its_start_in_capped_batches_and_stops(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    topic = "AvailNow"
    with MessageStore(root, mapped_file_size_commitlog=64 * 1024) as store:

        def put(queue_id: int, n: int) -> set[tuple[int, int]]:
            out = set()
            for _ in range(n):
                offset = store.max_offset(topic, queue_id)
                assert store.put(topic, queue_id, f"{queue_id}/{offset}".encode() * 20).queue_offset == offset
                out.add((queue_id, offset))
            return out

        before = put(0, 40) | put(1, 40) | put(2, 40)
        batches: list[list[tuple[int, int]]] = []
        late: set[tuple[int, int]] = set()

        def sink(df: DataFrame, batch_id: int) -> None:
            batches.append([(r.queue_id, r.queue_offset) for r in df.collect()])
            if not late:  # written after the run fixed its target: left for the next run
                late.update(put(0, 10) | put(2, 10) | put(5, 10))

        def run() -> StreamingQuery:
            query = (
                stream(
                    spark, path=str(root), topic=topic, startingOffsets="earliest", maxRecordsPerTrigger="25"
                )
                .select("queue_id", "queue_offset")
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            finish(query)
            return query

        query = run()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        got = [row for batch in batches for row in batch]
        assert late, "the first micro-batch did not run"
        assert len(got) == len(set(got)) and set(got) == before, "not every row exactly once"
        assert sizes == [len(b) for b in batches if b]
        assert sum(sizes) == len(before) and max(sizes) <= 25 and len(sizes) >= len(before) // 25

        batches.clear()
        run()  # the next run reads what came in during the first one, once
        got = [row for batch in batches for row in batch]
        assert len(got) == len(set(got)) and set(got) == late


def test_available_now_caps_micro_batches_in_remote_mode(
    spark: SparkSession, produced: Produced, tmp_path: Path
) -> None:
    df = stream(
        spark,
        namesrv=produced.server.namesrv,
        topic=TOPIC,
        startingOffsets="earliest",
        maxRecordsPerTrigger="250",
    )
    query = (
        df.select("queue_id", "queue_offset")
        .writeStream.format("memory")
        .queryName("avail_remote")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == len(produced.sent)
    assert len(sizes) >= len(produced.sent) / 250 and max(sizes) <= 250
    rows = spark.sql("select * from avail_remote").collect()
    got = [(r.queue_id, r.queue_offset) for r in rows]
    assert len(got) == len(set(got)) and set(got) == set(produced.sent)


def test_a_new_stream_without_starting_offsets_starts_at_latest(
    spark: SparkSession, produced: Produced, tmp_path: Path
) -> None:
    # Like Spark's Kafka source: a new streaming query reads only what arrives after it starts.
    query = (
        stream(spark, path=str(produced.store), topic=TOPIC)
        .select("queue_id", "queue_offset")
        .writeStream.format("memory")
        .queryName("from_latest")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    assert spark.sql("select * from from_latest").count() == 0
    assert all(p["numInputRows"] == 0 for p in query.recentProgress)
    source = LocalSource(str(produced.store))
    try:
        latest = {str(b.queue_id): b.max_offset for b in source.queues() if b.topic == TOPIC}
    finally:
        source.close()
    ends = [_offsets(p["sources"][0]["endOffset"]) for p in query.recentProgress]
    assert ends and all(end == {TOPIC: latest} for end in ends)


def _offsets(reported: Any) -> Any:
    return json.loads(reported) if isinstance(reported, str) else reported


def test_max_records_per_trigger_caps_each_micro_batch(
    spark: SparkSession, produced: Produced, tmp_path: Path
) -> None:
    df = stream(
        spark, path=str(produced.store), topic=TOPIC, startingOffsets="earliest", maxRecordsPerTrigger="250"
    )
    query = (
        df.select("queue_id", "queue_offset")
        .writeStream.format("memory")
        .queryName("capped")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        assert _wait_rows(spark, "capped", len(produced.sent)) == len(produced.sent)
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == len(produced.sent)
    assert len(sizes) >= len(produced.sent) / 250 and max(sizes) <= 250
    got = {(r.queue_id, r.queue_offset) for r in spark.sql("select * from capped").collect()}
    assert got == set(produced.sent)


def _wait_rows(spark: SparkSession, table: str, n: int) -> int:
    deadline = time.monotonic() + WAIT
    count = 0
    while time.monotonic() < deadline:
        count = spark.sql(f"select count(*) as n from {table}").collect()[0].n
        if count >= n:
            break
        time.sleep(0.5)
    return int(count)


@pytest.mark.parametrize("mode", ["path", "namesrv"])
def test_processing_time_trigger_sees_new_messages_of_a_live_broker(
    spark: SparkSession, produced: Produced, tmp_path: Path, mode: str
) -> None:
    topic = f"SparkLive_{mode}"
    where = {"path": str(produced.store)} if mode == "path" else {"namesrv": produced.server.namesrv}
    table = f"live_{mode}"
    with BlockingProducer(f"spark_live_{mode}", produced.server.namesrv) as producer:
        producer.send(Message(topic, b"before the query"))  # creates the topic; skipped by "latest"
        query = (
            stream(spark, topic=topic, **where)
            .select("queue_id", "queue_offset", "body")
            .writeStream.format("memory")
            .queryName(table)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + WAIT
            while not query.recentProgress and time.monotonic() < deadline:
                time.sleep(0.2)  # the first micro-batch fixes the starting offsets
            sent = set()
            for i in range(20):
                sent.add(f"live-{i}".encode())
                producer.send(Message(topic, f"live-{i}".encode()))
            assert _wait_rows(spark, table, 20) == 20
            for i in range(20, 35):
                sent.add(f"live-{i}".encode())
                producer.send(Message(topic, f"live-{i}".encode()))
            assert _wait_rows(spark, table, 35) == 35
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
    rows = spark.sql(f"select * from {table}").collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(sent)


def test_remote_mode_reads_what_local_mode_reads(spark: SparkSession, produced: Produced) -> None:
    def load(**where: str) -> dict[tuple[int, int], Any]:
        reader = spark.read.format("ferromq").option("topic", TOPIC).option("maxRecordsPerPartition", "100")
        for k, v in where.items():
            reader = reader.option(k, v)
        return {(r.queue_id, r.queue_offset): r for r in reader.load().collect()}

    local = load(path=str(produced.store))
    remote = load(namesrv=produced.server.namesrv)
    assert set(remote) == set(local) == set(produced.sent)
    for key, row in local.items():
        assert remote[key].asDict() == row.asDict()
    tagged = load(namesrv=produced.server.namesrv, tags="TagC")
    assert set(tagged) == {k for k, s in produced.sent.items() if s.tags == "TagC"}
    ranged = load(namesrv=produced.server.namesrv, startingOffsets=json.dumps({TOPIC: {"1": 10}}))
    assert set(ranged) == {(q, o) for (q, o) in produced.sent if q != 1 or o >= 10}
