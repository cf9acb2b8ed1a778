"""Streams that start from a topic's table and continue from the log (`read_topic_stream`, the
source's `fromTable` option).

The store is written in process, its topic tiered into its table by the broker's own tiering
cycle (`TieringService.run_once`, then `maintain` to compact), and its oldest CommitLog files
deleted by a real retention round: the table holds rows the log no longer has. Messages written
after that are in the log only. The streams are compared, row for row, with the batch
`read_topic` of the same store.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from ferromq import _store
from ferromq.broker.config import load_broker_config
from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer
from ferromq.errors import InvalidArgumentError
from ferromq.spark import read_topic, read_topic_stream
from ferromq.store import MessageStore
from ferromq.tables import committed_offsets, open_table, read_arrow, row_schema
from ferromq.tables.layout import table_root
from ferromq.tables.ranges import read_range
from ferromq.tables.reader import queue_files
from ferromq.tables.tiering import TieringService, TieringSettings
from ferromq.testing import wait_until
from tests.spark.conftest import Produced

pytestmark = [pytest.mark.spark, pytest.mark.timeout(420)]

TOPIC = "StreamedTable"
QUEUES = 3
WAIT = 120.0
TAGS = ("TagA", "TagB", "TagC")
# Small files: 64 KiB of CommitLog (~50 records of 1 KiB), 50 consume queue units per file.
STORE = {
    "mapped_file_size_commitlog": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 50,
    "delete_commitlog_files_interval_ms": 0,
    "delete_consume_queue_files_interval_ms": 0,
}
# A retention round at the deleteWhen hour on an idle disk: files older than 72 h go.
ROUND = {"hour": 4, "physic_used_ratio": 0.1, "logics_used_ratio": 0.1}

Key = tuple[int, int]


def body(topic: str, queue_id: int, offset: int) -> bytes:
    return f"{topic}/{queue_id}/{offset}|".encode() * 40


@dataclass
class History:
    """A store whose topic is tiered, and whose log lost its oldest files since."""

    root: Path
    store: MessageStore
    service: TieringService
    written: dict[Key, bytes] = field(default_factory=dict)

    def put(self, per_queue: int, topic: str = TOPIC) -> None:
        """`per_queue` messages on each queue, interleaved (each CommitLog file holds all queues)."""
        for i in range(per_queue):
            for q in range(QUEUES):
                offset = self.store.max_offset(topic, q)
                r = self.store.put(
                    topic,
                    q,
                    body(topic, q, offset),
                    tags=TAGS[(offset + q) % 3],
                    keys=f"k{q}-{offset}",
                    properties={"i": str(i)},
                )
                assert r.queue_offset == offset
                self.written[(q, offset)] = body(topic, q, offset)
        self.store.flush()

    def expire_oldest(self, files: int) -> None:
        """Ages the oldest CommitLog files past fileReservedTime and runs a real retention round."""
        old = time.time() - 100 * 3600
        for p in sorted((self.root / "commitlog").iterdir())[:files]:
            os.utime(p, (old, old))
        assert self.store.clean_expired_files(**ROUND).commitlog_files_deleted == files
        self.store.clean_expired_consume_queues()

    def committed(self, topic: str = TOPIC) -> dict[int, int]:
        table = open_table(table_root(self.root), topic)
        return {} if table is None else committed_offsets(table)

    def log_min(self, topic: str = TOPIC) -> dict[int, int]:
        return {q: self.store.min_offset(topic, q) for q in range(QUEUES)}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    root = tmp_path_factory.mktemp("table-stream") / "store"
    with MessageStore(root, **STORE) as store:
        cfg = load_broker_config(store_path_root_dir=str(root), table_topics=TOPIC, table_topic_min_rows=1)
        h = History(root, store, TieringService(store.raw, TieringSettings.of(cfg, cfg.store_path_root_dir)))
        # Two commits, then compacted (files delta-rs rewrote), then one more commit.
        h.put(40)
        h.service.run_once()
        h.put(40)
        h.service.run_once()
        h.service.maintain([TOPIC])
        history = DeltaTable(str(Path(table_root(root)) / TOPIC)).history()
        assert "OPTIMIZE" in {c["operation"] for c in history}
        h.put(30)
        h.service.run_once()
        assert h.committed() == {q: 110 for q in range(QUEUES)}
        h.expire_oldest(3)
        assert all(lo > 0 for lo in h.log_min().values()), "the table holds rows the log lost"
        h.put(25)  # after the table's end: the log's only
        yield h


def stream_query(df: DataFrame, checkpoint: Path, name: str) -> StreamingQuery:
    query = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    return query


def finish(query: StreamingQuery) -> None:
    assert query.awaitTermination(WAIT), "the availableNow query did not finish"
    assert query.exception() is None, query.exception()


def keyed(rows: list[Any], columns: list[str]) -> dict[Key, tuple[Any, ...]]:
    """The rows by (queue, offset), each as comparable values; fails on a (queue, offset) twice."""
    out: dict[Key, tuple[Any, ...]] = {}
    for r in rows:
        d = r.asDict()
        if "properties" in d:
            d["properties"] = tuple(sorted(d["properties"].items()))
        d["body"] = bytes(d["body"])
        out[(r.queue_id, r.queue_offset)] = tuple(d[c] for c in columns)
    assert len(out) == len(rows), "a (queue, offset) was read twice"
    return out


def batch_read(spark: SparkSession, h: History, **options: str) -> dict[Key, tuple[Any, ...]]:
    df = read_topic(spark, TOPIC, path=str(h.root), **options)
    return keyed(df.collect(), df.columns)


def test_a_stream_from_the_table_continues_from_the_log_row_for_row(
    spark: SparkSession, history: History, tmp_path: Path
) -> None:
    df = read_topic_stream(spark, TOPIC, path=str(history.root))
    assert df.isStreaming
    stream_query(df, tmp_path / "checkpoint", "from_table")
    got = keyed(spark.sql("select * from from_table").collect(), df.columns)
    assert set(got) == set(history.written)
    assert got == batch_read(spark, history)
    assert {k: row[df.columns.index("body")] for k, row in got.items()} == history.written
    # The log alone no longer has the table's oldest rows.
    lost = {(q, o) for q, o in got if o < history.log_min()[q]}
    assert lost and all(o < 110 for _, o in lost)


def test_capped_micro_batches_cross_from_the_table_to_the_log(
    spark: SparkSession, history: History, tmp_path: Path
) -> None:
    batches: list[list[Key]] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        batches.append([(r.queue_id, r.queue_offset) for r in df.collect()])

    query = (
        read_topic_stream(spark, TOPIC, path=str(history.root), maxRecordsPerTrigger=40, tags="TagA || TagC")
        .select("queue_id", "queue_offset", "tags")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    offsets = [p["numInputRows"] for p in query.recentProgress]
    got = [k for b in batches for k in b]
    assert len(got) == len(set(got)), "a row was read twice"
    assert set(got) == set(batch_read(spark, history, tags="TagA || TagC"))
    # 40 offsets a batch, a third of them TagB: several batches, at most 40 rows each.
    assert len([b for b in batches if b]) >= len(history.written) // 40 and max(offsets) <= 40
    committed = history.committed()
    assert any(
        any(o < committed[q] for q, o in b) and any(o >= committed[q] for q, o in b) for b in batches
    ), "no micro-batch read both the table and the log"


def test_a_restarted_stream_reads_what_came_since_its_checkpoint_once(
    spark: SparkSession, history: History, tmp_path: Path
) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (
            read_topic_stream(spark, TOPIC, path=str(history.root))
            .select("queue_id", "queue_offset", "body")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        finish(query)

    run()
    first = len(history.written)
    # The checkpoint's offsets end in what the table holds next: the rest of the restart reads
    # the table from there, then the log.
    history.put(15)
    history.service.run_once()
    history.put(10)
    assert all(first // QUEUES < c < first // QUEUES + 25 for c in history.committed().values())
    run()
    rows = spark.read.parquet(str(out)).collect()
    got = [(r.queue_id, r.queue_offset) for r in rows]
    assert len(got) == len(set(got)) == len(history.written), "every row once"
    assert {(r.queue_id, r.queue_offset): bytes(r.body) for r in rows} == history.written


def test_starting_timestamp_finds_its_first_offsets_in_the_table(
    spark: SparkSession, history: History, tmp_path: Path
) -> None:
    # Queue 0's offset 40, written after the first commit (later than offset 0), only in the table
    # now: the stream starts in the table, at the first rows stored then.
    assert history.log_min()[0] > 40
    rows = read_arrow(table_root(history.root), TOPIC, predicate="queue_id = 0")
    since = next(
        round(t.timestamp() * 1000)
        for o, t in zip(
            rows.column("queue_offset").to_pylist(), rows.column("store_timestamp").to_pylist(), strict=True
        )
        if o == 40
    )
    df = read_topic_stream(spark, TOPIC, path=str(history.root), startingTimestamp=str(since))
    stream_query(df, tmp_path / "checkpoint", "since_time")
    got = keyed(spark.sql("select * from since_time").collect(), df.columns)
    assert got == batch_read(spark, history, startingTimestamp=str(since))
    assert 0 < min(o for q, o in got if q == 0) <= 40


def test_offsets_neither_the_table_nor_the_log_holds_are_data_loss(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The tiering fell behind retention: it skipped the offsets the log lost before it got to
    them, and the table has a gap there."""
    root = tmp_path / "store"
    topic = "TableGap"
    with MessageStore(root, **STORE) as store:
        cfg = load_broker_config(store_path_root_dir=str(root), table_topics=topic, table_topic_min_rows=1)
        h = History(root, store, TieringService(store.raw, TieringSettings.of(cfg, cfg.store_path_root_dir)))
        h.put(20, topic)
        h.service.run_once()
        h.put(130, topic)
        h.expire_oldest(3)
        lost = h.log_min(topic)
        assert all(20 < lo < 150 for lo in lost.values())
        h.service.run_once()
        assert h.committed(topic) == {q: 150 for q in range(QUEUES)}

        def run(name: str, **options: str) -> StreamingQuery:
            return (
                read_topic_stream(spark, topic, path=str(root), **options)
                .select("queue_id", "queue_offset")
                .writeStream.format("memory")
                .queryName(name)
                .option("checkpointLocation", str(tmp_path / name))
                .trigger(availableNow=True)
                .start()
            )

        with pytest.raises(StreamingQueryException) as failed:
            run("gap_fails").awaitTermination(WAIT)
        gone = re.search(
            rf"DataLossError: .*offsets \[20, (\d+)\) of {topic}/(\d) are gone", str(failed.value)
        )
        assert gone, failed.value
        assert int(gone.group(1)) == lost[int(gone.group(2))]
        assert "neither table version" in str(failed.value)

        finish(run("gap_skipped", failOnDataLoss="false"))
        got = [(r.queue_id, r.queue_offset) for r in spark.sql("select * from gap_skipped").collect()]
        assert len(got) == len(set(got))
        assert set(got) == {(q, o) for q in range(QUEUES) for o in [*range(20), *range(lost[q], 150)]}


def test_a_topic_without_a_table_streams_from_the_log_alone(
    spark: SparkSession, history: History, tmp_path: Path
) -> None:
    df = read_topic_stream(spark, TOPIC, path=str(history.root), table_path=str(tmp_path / "no-tables"))
    stream_query(df.select("queue_id", "queue_offset"), tmp_path / "checkpoint", "log_alone")
    got = {(r.queue_id, r.queue_offset) for r in spark.sql("select * from log_alone").collect()}
    low = history.log_min()
    assert got == {(q, o) for q, o in history.written if o >= low[q]}


def test_through_the_brokers_with_a_table_path(
    spark: SparkSession, produced: Produced, tmp_path: Path
) -> None:
    """Remote mode (`namesrv`): the log's part is pulled from the broker, the table's read from
    `tablePath` (here tiered from a read-only view of the broker's store)."""
    topic = "SparkTableRemote"
    sent: dict[Key, bytes] = {}

    def send(start: int, n: int) -> None:
        for i in range(start, start + n):
            r = producer.send(Message(topic, f"remote-{i}".encode() * 20, tags=TAGS[i % 3]))
            sent[(r.message_queue.queue_id, r.queue_offset)] = f"remote-{i}".encode() * 20

    tables = tmp_path / "tables"
    cfg = load_broker_config(
        store_path_root_dir=str(produced.store),
        table_topic_path=str(tables),
        table_topics=topic,
        table_topic_min_rows=1,
    )
    with BlockingProducer("spark_table_remote", produced.server.namesrv) as producer:
        send(0, 60)
        view = _store.Store(produced.store, read_only=True)
        try:

            def dispatched() -> bool:
                view.refresh()
                return sum(hi for t, _, _, hi in view.queues() if t == topic) == 60

            wait_until(dispatched, "the messages in the consume queues", timeout=WAIT)
            TieringService(view, TieringSettings.of(cfg, cfg.store_path_root_dir)).run_once()
        finally:
            view.close()
        send(60, 30)  # the log's only
    query = (
        spark.readStream.format("ferromq")
        .option("namesrv", produced.server.namesrv)
        .option("topic", topic)
        .option("tablePath", str(tables))
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "25")
        .load()
        .select("queue_id", "queue_offset", "body")
        .writeStream.format("memory")
        .queryName("remote_from_table")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    rows = spark.sql("select * from remote_from_table").collect()
    assert len(rows) == len(sent) == 90
    assert {(r.queue_id, r.queue_offset): bytes(r.body) for r in rows} == sent
    assert sum(committed_offsets(DeltaTable(str(tables / topic))).values()) == 60


def test_a_table_range_reads_in_plain_python_with_tags_and_times(history: History) -> None:
    table = open_table(table_root(history.root), TOPIC)
    assert table is not None
    held = queue_files(table)[1]
    rows = read_arrow(table_root(history.root), TOPIC, predicate="queue_id = 1")
    stamps = sorted(round(t.timestamp() * 1000) for t in rows.column("store_timestamp").to_pylist())
    lo, hi = stamps[10], stamps[60]
    gaps: list[tuple[int, int]] = []
    batches = list(
        read_range(
            held.files,
            1,
            5,
            held.committed + 7,  # past the table's end: missing
            include_properties=False,
            tags=["TagB"],
            store_ms=(lo, hi),
            on_missing=lambda a, b: gaps.append((a, b)),
        )
    )
    assert gaps == [(held.committed, held.committed + 7)]
    got = {
        (b["queue_id"][i].as_py(), b["queue_offset"][i].as_py()) for b in batches for i in range(b.num_rows)
    }
    want = {
        (1, o)
        for o, tag, t in zip(
            rows.column("queue_offset").to_pylist(),
            rows.column("tags").to_pylist(),
            rows.column("store_timestamp").to_pylist(),
            strict=True,
        )
        if 5 <= o and tag == "TagB" and lo <= round(t.timestamp() * 1000) < hi
    }
    assert got and got == want
    assert all(b.schema == row_schema(include_properties=False) for b in batches)


def test_bad_options_are_refused_by_name(spark: SparkSession, history: History) -> None:
    path = str(history.root)
    with pytest.raises(InvalidArgumentError, match="read_topic_stream: unknown option endingtimestamp"):
        read_topic_stream(spark, TOPIC, path=path, endingTimestamp="10")
    with pytest.raises(InvalidArgumentError, match="unknown option topicpattern"):
        read_topic_stream(spark, TOPIC, path=path, topicPattern="x.*")
    with pytest.raises(InvalidArgumentError, match="option maxRecordsPerTrigger must be >= 1"):
        read_topic_stream(spark, TOPIC, path=path, maxRecordsPerTrigger="0")
    with pytest.raises(InvalidArgumentError, match="startingOffsets must be earliest, latest or JSON"):
        read_topic_stream(spark, TOPIC, path=path, startingOffsets="yesterday")
    batch = (
        spark.read.format("ferromq").option("path", path).option("topic", TOPIC).option("fromTable", "true")
    )
    with pytest.raises(Exception, match="fromTable / tablePath apply to streams"):
        batch.load().collect()
