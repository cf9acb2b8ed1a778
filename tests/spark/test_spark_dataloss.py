"""`failOnDataLoss`: offsets a read planned that retention really removed (old CommitLog files
deleted by a retention round, consume queue files following), batch and streaming, from the store
files and through a broker."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from ferromq.broker.broker import Broker
from ferromq.client.admin import Admin
from ferromq.errors import DataLossError
from ferromq.namesrv.server import NameServer
from ferromq.spark import FerroMQDataSource
from ferromq.store import MessageStore
from tests.integration.brokerkit import running

pytestmark = [pytest.mark.timeout(300)]

WAIT = 90.0
TOPIC = "Gone"
# Small files: 64 KiB of CommitLog (~60 records of 1 KiB), 50 consume queue units per file.
SMALL = {"mapped_file_size_commitlog": 64 * 1024, "mapped_file_size_consume_queue": 20 * 50}
STORE = {**SMALL, "delete_commitlog_files_interval_ms": 0, "delete_consume_queue_files_interval_ms": 0}
BROKER = {**SMALL, "delete_commit_log_files_interval": 0, "delete_consume_queue_files_interval": 0}
# A retention round at the deleteWhen hour on an idle disk: files older than 72 h go.
ROUND = {"hour": 4, "physic_used_ratio": 0.1, "logics_used_ratio": 0.1}


def body(queue_id: int, offset: int) -> bytes:
    return f"{queue_id}/{offset}|".encode() * 100


def put(store: MessageStore, queue_id: int, n: int) -> None:
    for _ in range(n):
        offset = store.max_offset(TOPIC, queue_id)
        assert store.put(TOPIC, queue_id, body(queue_id, offset), tags="T").queue_offset == offset


def expire_oldest(store: MessageStore, root: Path, files: int) -> None:
    """Ages the oldest CommitLog files past fileReservedTime and runs a real retention round."""
    store.flush()
    old = time.time() - 100 * 3600
    for p in sorted((root / "commitlog").iterdir())[:files]:
        os.utime(p, (old, old))
    report = store.clean_expired_files(**ROUND)
    assert report.commitlog_files_deleted == files, report


def read(spark: SparkSession, **options: Any) -> DataFrame:
    reader = spark.read.format("ferromq").option("topic", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v if isinstance(v, str) else json.dumps(v))
    return reader.load()


def offsets(df: DataFrame) -> list[tuple[int, int]]:
    rows = df.select("queue_id", "queue_offset", "body").collect()
    for r in rows:
        assert bytes(r.body) == body(r.queue_id, r.queue_offset)
    return sorted((r.queue_id, r.queue_offset) for r in rows)


@pytest.fixture(scope="module")
def expired(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, MessageStore, int]]:
    """A store whose queue 0 lost its first offsets to retention; queue 1 is written afterwards,
    so it keeps everything. Yields (root, the writer, queue 0's new minimum)."""
    root = tmp_path_factory.mktemp("dataloss") / "store"
    with MessageStore(root, **STORE) as store:
        put(store, 0, 300)
        expire_oldest(store, root, 2)
        put(store, 1, 20)
        store.flush()
        new_min = store.min_offset(TOPIC, 0)
        assert 0 < new_min < 300
        yield root, store, new_min


def test_batch_from_an_offset_that_is_gone_fails_naming_topic_queue_and_offsets(
    spark: SparkSession, expired: tuple[Path, MessageStore, int]
) -> None:
    root, _, new_min = expired
    df = read(spark, path=str(root), startingOffsets={TOPIC: {"0": 5}})
    with pytest.raises(
        Exception, match=rf"(?s)DataLossError.*offsets \[5, {new_min}\) of {TOPIC}/0 are gone"
    ):
        df.collect()


def test_batch_without_fail_on_data_loss_reads_what_is_left(
    spark: SparkSession, expired: tuple[Path, MessageStore, int]
) -> None:
    root, _, new_min = expired
    df = read(spark, path=str(root), startingOffsets={TOPIC: {"0": 5}}, failOnDataLoss="false")
    assert offsets(df) == [(0, o) for o in range(new_min, 300)] + [(1, o) for o in range(20)]
    # "earliest" asks for what there is: no loss.
    assert len(offsets(read(spark, path=str(root)))) == 300 - new_min + 20


def test_bad_fail_on_data_loss_value_is_refused_by_name(
    spark: SparkSession, expired: tuple[Path, MessageStore, int]
) -> None:
    with pytest.raises(Exception, match="option failOnDataLoss must be true or false"):
        read(spark, path=str(expired[0]), failOnDataLoss="maybe").collect()


def test_files_removed_between_planning_and_reading(tmp_path: Path) -> None:
    """A task that finds its planned offsets gone (retention ran after the driver planned)."""
    root = tmp_path / "store"
    with MessageStore(root, **STORE) as store:
        put(store, 0, 300)
        store.flush()
        options = {"path": str(root), "topic": TOPIC}
        source = FerroMQDataSource(options)
        strict = source.reader(source.schema())
        partitions = strict.partitions()
        assert [[(r.start, r.end) for r in p.ranges] for p in partitions] == [[(0, 300)]]  # type: ignore[attr-defined]
        expire_oldest(store, root, 2)
        new_min = store.min_offset(TOPIC, 0)
        with pytest.raises(DataLossError, match=rf"offsets \[0, {new_min}\) of {TOPIC}/0 are gone"):
            list(strict.read(partitions[0]))
        lenient = FerroMQDataSource({**options, "failOnDataLoss": "false"})
        batches = list(lenient.reader(lenient.schema()).read(partitions[0]))
        got = [o for b in batches for o in b.column("queue_offset").to_pylist()]
        assert got == list(range(new_min, 300))


def test_stream_restarted_after_retention_fails_or_skips_the_gap(spark: SparkSession, tmp_path: Path) -> None:
    root, checkpoint = tmp_path / "store", tmp_path / "checkpoint"
    got: list[tuple[int, int]] = []

    def sink(df: DataFrame, batch_id: int) -> None:
        got.extend(offsets(df))

    def run(**options: str) -> Any:
        query = (
            spark.readStream.format("ferromq")
            .option("path", str(root))
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .options(**options)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(WAIT), "the availableNow query did not finish"
        except StreamingQueryException as e:
            return e
        return query.exception()

    with MessageStore(root, **STORE) as store:
        put(store, 0, 30)
        assert run() is None
        assert got == [(0, o) for o in range(30)]
        put(store, 0, 270)  # the checkpoint says 30; then retention removes past it
        expire_oldest(store, root, 2)
        new_min = store.min_offset(TOPIC, 0)
        assert new_min > 30
        error = run()
        assert error is not None
        assert f"offsets [30, {new_min}) of {TOPIC}/0 are gone" in str(error)
        assert "failOnDataLoss" in str(error)
        assert got == [(0, o) for o in range(30)]
        assert run(failOnDataLoss="false") is None
        assert got == [(0, o) for o in range(30)] + [(0, o) for o in range(new_min, 300)]


class ThreadedBroker:
    """A name server and a broker on an event loop in a thread, so that the test (and Spark) can
    call the broker's store directly while tasks pull from it over a socket."""

    def __init__(self, tmp_path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._cm: AbstractAsyncContextManager[tuple[NameServer, Broker]] = running(tmp_path, **BROKER)
        self.ns, self.broker = self.call(self._cm.__aenter__())
        self.namesrv = f"127.0.0.1:{self.ns.port}"

    def call(self, coro: Any) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout=60)

    def close(self) -> None:
        try:
            self.call(self._cm.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self.loop.close()


def test_remote_mode_through_a_broker_whose_files_retention_removed(
    spark: SparkSession, tmp_path: Path
) -> None:
    cluster = ThreadedBroker(tmp_path)
    try:

        async def create() -> None:
            async with Admin(cluster.namesrv) as admin:
                await admin.create_topic(TOPIC, queue_nums=1)
                for _ in range(100):  # the route appears once the broker re-registered
                    if TOPIC in await admin.list_topics():
                        return
                    await asyncio.sleep(0.05)

        cluster.call(create())
        store: MessageStore = cluster.broker.store
        put(store, 0, 300)
        partitions_source = FerroMQDataSource({"namesrv": cluster.namesrv, "topic": TOPIC})
        reader = partitions_source.reader(partitions_source.schema())
        planned = reader.partitions()
        expire_oldest(store, tmp_path / "store", 2)
        new_min = store.min_offset(TOPIC, 0)

        # Planned before the deletion, read after: the broker answers PULL_OFFSET_MOVED.
        with pytest.raises(DataLossError, match=rf"offsets \[0, {new_min}\) of {TOPIC}/0 are gone"):
            list(reader.read(planned[0]))

        where = {"namesrv": cluster.namesrv, "startingOffsets": {TOPIC: {"0": 0}}}
        with pytest.raises(Exception, match=rf"(?s)DataLossError.*offsets \[0, {new_min}\) of {TOPIC}/0"):
            read(spark, **where).collect()
        assert offsets(read(spark, failOnDataLoss="false", **where)) == [(0, o) for o in range(new_min, 300)]
    finally:
        cluster.close()
