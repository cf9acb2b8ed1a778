"""`read_topic` on a table topic whose table is in an S3 bucket (issue 44): the table's rows
read from a real S3-compatible server (versitygw, tools/s3_server.py) plus the log's tail equal
the `ferromq` source's rows; `read_topic_stream` streams the same rows, the table's from the
bucket first. Skipped where the server cannot be built (no Go)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import s3_server
from pyspark.sql import DataFrame, Row, SparkSession

from ferromq.errors import InvalidArgumentError
from ferromq.spark import read_topic, read_topic_stream
from ferromq.spark.options import parse_options
from ferromq.store import MessageStore
from ferromq.tables import committed_offsets, open_table
from ferromq.tables.tiering import PAUSE_ENV
from ferromq.testing import BrokerProcess, wait_until
from tests.integration.test_table_topics_s3 import EAGER, WAIT, conf_keys, fully_tiered, produce
from tests.integration.test_table_topics_s3 import s3 as s3  # the fixture: the server, module-wide
from tests.interop.conftest import stop_ferromq
from tests.spark.test_table_topics import keyed, source

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

TOPIC = "TableOrders"  # tests.spark.test_table_topics.source reads this topic


class Held(NamedTuple):
    broker: BrokerProcess
    root: str
    options: dict[str, str]
    sent: dict[tuple[int, int], bytes]
    committed: dict[int, int]


@contextlib.contextmanager
def held_tail(
    s3: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bucket: str
) -> Iterator[Held]:
    """A broker tiering TOPIC into an s3:// table of `bucket`: 120 messages committed to the table,
    40 more held in the log by a commit paused before it commits; stopped after."""
    root = s3.bucket(bucket) + "/tables"
    options = s3.storage_options()
    pause = tmp_path / "pause-before-commit"
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    conf = {**EAGER, "tableTopics": TOPIC, "tableTopicPath": root, **conf_keys(s3)}
    broker = BrokerProcess(tmp_path / "broker", conf).start()
    monkeypatch.delenv(PAUSE_ENV)
    try:
        sent = produce(broker.namesrv, TOPIC, 0, 120)

        def released() -> bool:
            pause.unlink(missing_ok=True)
            return fully_tiered(broker.store, root, TOPIC, options)

        wait_until(released, "tiered", timeout=WAIT, why=broker.log_tail, interval=0.2)
        sent.update(produce(broker.namesrv, TOPIC, 120, 40))  # held: the log's tail
        wait_until(pause.exists, "the second commit held", timeout=WAIT, why=broker.log_tail)
        table = open_table(root, TOPIC, options)
        assert table is not None
        committed = committed_offsets(table)
        assert sum(committed.values()) == 120, "the first round"
        yield Held(broker, root, options, sent, committed)
    finally:
        pause.unlink(missing_ok=True)
        stop_ferromq(broker)


def test_read_topic_reads_the_table_from_the_bucket_and_the_tail_from_the_log(
    spark: SparkSession, s3: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with held_tail(s3, tmp_path, monkeypatch, "spark") as (broker, root, options, sent, _):
        df = read_topic(spark, TOPIC, path=str(broker.store), table_path=root, storage_options=options)
        got = keyed(df)
        assert got == keyed(source(spark, broker.store))
        body = df.columns.index("body")
        assert {k: row[body] for k, row in got.items()} == sent
        one = keyed(
            read_topic(
                spark, TOPIC, path=str(broker.store), table_path=root, storage_options=options, queues="1"
            )
        )
        assert set(one) == {k for k in sent if k[0] == 1}


def test_read_topic_stream_reads_the_table_from_the_bucket_then_the_logs_tail(
    spark: SparkSession, s3: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`read_topic_stream` over an s3:// table: micro-batches of every message once, each queue's
    table rows (read from the bucket in the tasks) before its log's tail, equal to the `ferromq`
    source's rows; messages sent after the first micro-batches arrive in later ones."""
    with held_tail(s3, tmp_path, monkeypatch, "sparkstream") as (broker, root, options, sent, committed):
        # A store without the topic: the stream holds the table's rows alone, read from the bucket.
        empty = tmp_path / "empty-store"
        MessageStore(empty).close()
        alone = read_topic_stream(spark, TOPIC, path=str(empty), table_path=root, storage_options=options)
        only = alone.writeStream.format("memory").queryName("s3_table_alone")
        query = only.option("checkpointLocation", str(tmp_path / "ckpt-alone")).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        rows = spark.sql("select * from s3_table_alone").collect()
        body = alone.columns.index("body")
        from_bucket = _keyed(rows, alone.columns)
        assert {k: row[body] for k, row in from_bucket.items()} == {
            (q, o): b for (q, o), b in sent.items() if o < committed.get(q, 0)
        }

        batches: list[tuple[int, list[Row]]] = []

        def sink(df: DataFrame, batch_id: int) -> None:
            batches.append((batch_id, df.collect()))

        df = read_topic_stream(
            spark,
            TOPIC,
            path=str(broker.store),
            table_path=root,
            storage_options=options,
            maxRecordsPerTrigger=50,
        )
        writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
        query = writer.start()
        try:
            query.processAllAvailable()
            first = {k: b for b, rows in batches for k in _keyed(rows, df.columns)}
            assert len([b for b, rows in batches if rows]) >= 160 // 50, "capped micro-batches"
            late = produce(broker.namesrv, TOPIC, 160, 30)
            sent.update(late)
            wait_until(
                lambda: sum(len(rows) for _, rows in batches) == len(sent),
                "the late messages streamed",
                timeout=WAIT,
                why=broker.log_tail,
                interval=0.5,
            )
            query.processAllAvailable()
        finally:
            query.stop()
        got = _keyed([r for _, rows in batches for r in rows], df.columns)
        batch_of = {k: b for b, rows in batches for k in _keyed(rows, df.columns)}
        assert got == keyed(source(spark, broker.store))
        assert {k: row[body] for k, row in got.items()} == sent
        assert {k: row for k, row in got.items() if k in from_bucket} == from_bucket
        assert set(first) == set(sent) - set(late)
        assert min(batch_of[k] for k in late) > max(first.values()), "the late ones in later batches"
        for q, c in committed.items():
            stored = [b for (qq, o), b in batch_of.items() if qq == q and o < c]
            tail = [b for (qq, o), b in batch_of.items() if qq == q and o >= c]
            assert stored and tail and max(stored) <= min(tail), (
                f"queue {q}: the table's rows, then the log's"
            )


def test_read_topic_stream_refuses_storage_options_it_cannot_pass_on(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="storage option AWS_SESSION_TOKEN"):
        read_topic_stream(
            spark,
            "TableOrders",
            path=str(tmp_path),
            table_path="s3://b/t",
            storage_options={"AWS_SESSION_TOKEN": "x"},
        )
    stream = {"path": str(tmp_path), "topic": "TableOrders", "tableTopicS3Endpoint": "http://127.0.0.1:1"}
    with pytest.raises(InvalidArgumentError, match=r"tableTopicS3\* options need fromTable"):
        parse_options(stream, streaming=True)
    opts = parse_options({**stream, "tablePath": "s3://b/t", "tableTopicS3SecretKey": "k3y"}, streaming=True)
    assert dict(opts.table_s3_options) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_SECRET_ACCESS_KEY": "k3y",
    }
    assert "k3y" not in repr(opts), "the secret key is not shown"


def _keyed(rows: list[Row], columns: list[str]) -> dict[tuple[int, int], tuple[Any, ...]]:
    """Collected rows by (queue, offset), as `keyed` makes them; fails on a (queue, offset) twice."""
    out: dict[tuple[int, int], tuple[Any, ...]] = {}
    for r in rows:
        d = r.asDict()
        if "properties" in d:
            d["properties"] = tuple(sorted(d["properties"].items()))
        d["body"] = bytes(d["body"])
        out[(r.queue_id, r.queue_offset)] = tuple(d[c] for c in columns)
    assert len(out) == len(rows), "a (queue, offset) was read twice"
    return out
