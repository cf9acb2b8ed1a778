"""Spark reads messages older than local retention back from the tiered storage bucket (issue 44).

A broker tiers its sealed CommitLog files (64 KiB) to a bucket (a directory, the posix provider;
and once a real S3-compatible server, versitygw, when it can be built), then local retention
deletes them. Local mode with the tiered storage options reads every message again, row for row
as it read them before the deletion (filters too); without them it reads the local ones only;
remote mode reads them all through the broker's pulls; a stream from the earliest offset gets them
all under `Trigger.AvailableNow`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import s3_server
from pyspark.sql import DataFrame, SparkSession

from ferromq.errors import InvalidArgumentError
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.spark.options import parse_options
from tests.integration.brokerkit import Client, properties, running, send_ext
from tests.integration.test_tiered_store import (
    SENT,
    STORE,
    TOPIC,
    all_tiered,
    delete_local,
    posix_keys,
    s3_keys,
    sealed,
    send_all,
)
from tests.integration.test_tiered_store import s3 as s3  # the fixture: the server, module-wide

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

STREAM_WAIT_S = 120
OTHER_TOPIC = "TieredOther"
OTHER = 60


async def send_other(c: Client) -> None:
    """Messages of a second topic, over two queues."""
    r = await c.call(
        RC.UPDATE_AND_CREATE_TOPIC, {"topic": OTHER_TOPIC, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
    )
    assert r.code == R.SUCCESS
    for i in range(OTHER):
        r = await c.call(
            RC.SEND_MESSAGE, send_ext(OTHER_TOPIC, i % 2, properties(TAGS="O")), f"o{i:04d}".encode() * 250
        )
        assert r.code == R.SUCCESS


def read_both(spark: SparkSession, **options: str) -> DataFrame:
    topics = f"{TOPIC},{OTHER_TOPIC}"
    return spark.read.format("ferromq").option("topic", topics).options(**options).load()


def keyed(df: DataFrame) -> dict[tuple[str, int, int], dict[str, Any]]:
    out = {}
    for r in df.collect():
        d = r.asDict(recursive=True)
        out[(d["topic"], d["queue_id"], d["queue_offset"])] = d
    return out


def rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.orderBy("queue_offset").collect()]


def tiered_options(keys: dict[str, Any], cluster: str, broker: str) -> dict[str, str]:
    """The read options of a broker's tiered storage: broker.conf's keys, named as there."""
    names = {
        "tiered_backend_service_provider": "tieredBackendServiceProvider",
        "tiered_store_file_path": "tieredStoreFilePath",
        "object_store_endpoint": "objectStoreEndpoint",
        "object_store_access_key": "objectStoreAccessKey",
        "object_store_secret_key": "objectStoreSecretKey",
        "object_store_region": "objectStoreRegion",
    }
    out = {names[k]: str(v) for k, v in keys.items()}
    return {**out, "brokerClusterName": cluster, "brokerName": broker}


def read(spark: SparkSession, **options: str) -> DataFrame:
    return spark.read.format("ferromq").option("topic", TOPIC).options(**options).load()


def stream_all(spark: SparkSession, tmp_path: Path, name: str, **options: str) -> list[dict[str, Any]]:
    """A stream from the earliest offsets, run once to what there is (Trigger.AvailableNow)."""
    query = (
        spark.readStream.format("ferromq")
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(STREAM_WAIT_S), "the AvailableNow stream did not finish"
        assert query.exception() is None
        return rows(spark.table(name))
    finally:
        query.stop()


async def tiered_reads(spark: SparkSession, tmp_path: Path, keys: dict[str, Any], name: str) -> None:
    async with running(tmp_path, **STORE, **keys) as (ns, broker):
        c = await Client().connect(broker.port)
        try:
            await send_other(c)  # first: in files retention deletes (the other topic keeps a tail)
            await send_all(c)
            await all_tiered(broker)
            store = str(tmp_path / "store")
            before = await asyncio.to_thread(lambda: rows(read(spark, path=store)))
            assert [r["queue_offset"] for r in before] == list(range(SENT))
            both = await asyncio.to_thread(lambda: keyed(read_both(spark, path=store)))
            assert len(both) == SENT + OTHER

            deleted = await delete_local(c, broker, tmp_path)
            assert deleted == len(sealed(broker)) or deleted >= 4
            local_min = broker.store.min_offset(TOPIC, 0)
            assert local_min > 0

            cfg = broker.config
            tiered = tiered_options(keys, cfg.broker_cluster_name, cfg.broker_name)

            def batch_reads() -> None:
                # Without the bucket: only what the local files still hold.
                local = rows(read(spark, path=store))
                assert [r["queue_offset"] for r in local] == list(range(local_min, SENT))
                assert local == before[local_min:]
                # With it: every message, row for row as before the deletion.
                assert rows(read(spark, path=store, **tiered)) == before
                # In small tasks, each with the bucket's files it reads (or part of them).
                assert rows(read(spark, path=store, maxRecordsPerPartition="37", **tiered)) == before
                # Without brokerName: the only broker of the cluster in the bucket.
                no_name = {k: v for k, v in tiered.items() if k != "brokerName"}
                assert rows(read(spark, path=store, **no_name)) == before
                # Filters the local path applies in Rust apply to the bucket's records alike.
                tagged = rows(read(spark, path=store, tags="B", includeProperties="false", **tiered))
                expected = [
                    {k: v for k, v in r.items() if k != "properties"} for r in before if r["tags"] == "B"
                ]
                assert tagged == expected and len(expected) == SENT // 2
                since = before[10]["store_timestamp"]
                timed = rows(
                    read(spark, path=store, startingTimestamp=str(int(since.timestamp() * 1000)), **tiered)
                )
                first = next(i for i, r in enumerate(before) if r["store_timestamp"] >= since)
                assert timed == before[first:]
                ranged = rows(
                    read(spark, path=store, startingOffsets=json.dumps({TOPIC: {"0": 5}}), **tiered).where(
                        "queue_offset < 20"
                    )
                )
                assert ranged == before[5:20]
                # Three queues of two topics, whose records share the bucket's files, in one task.
                assert keyed(read_both(spark, path=store, **tiered)) == both

            await asyncio.to_thread(batch_reads)

            # Remote mode: the broker's pulls read the bucket below the local min.
            namesrv = f"127.0.0.1:{ns.port}"
            remote = await asyncio.to_thread(lambda: rows(read(spark, namesrv=namesrv)))
            assert remote == before

            # A stream from the earliest offsets starts at the bucket's first one.
            streamed = await asyncio.to_thread(
                stream_all, spark, tmp_path, f"tiered_{name}", path=store, **tiered
            )
            assert streamed == before
            # ... and without the bucket at the local min offset.
            streamed = await asyncio.to_thread(stream_all, spark, tmp_path, f"local_{name}", path=store)
            assert streamed == before[local_min:]
        finally:
            await c.close()


def test_posix_bucket(spark: SparkSession, tmp_path: Path) -> None:
    asyncio.run(tiered_reads(spark, tmp_path, posix_keys(tmp_path), "posix"))


def test_s3_bucket(spark: SparkSession, s3: s3_server.S3Server, tmp_path: Path) -> None:
    asyncio.run(tiered_reads(spark, tmp_path, s3_keys(s3, "spark-tiered"), "s3"))


def test_summaries_of_one_file_cut_to_several_queues(tmp_path: Path) -> None:
    """A task's ranges carry one file's summary cut to each of their queues: its reader holds all."""
    from ferromq.spark.tiered import reader_of
    from ferromq.tiered.bucket import Bucket
    from ferromq.tiered.segments import Run, SegmentSummary

    runs = (Run("A", 0, 0, 5, 0), Run("A", 1, 0, 3, 5), Run("B", 0, 7, 2, 8))
    whole = SegmentSummary(0, 1000, 1, 2, runs)
    later = SegmentSummary(1000, 2000, 3, 4, (Run("A", 0, 5, 4, 0),))
    cut = [(dataclasses.replace(whole, runs=(r,)), 60) for r in runs]
    reader = reader_of(
        Bucket(str(tmp_path / "bucket"), "C", "b"), [cut[2], (later, 40), cut[0], cut[1], cut[0]]
    )
    assert [s.start for s in reader.tiered_files()] == [0, 1000]
    assert set(reader.tiered_files()[0].runs) == set(runs)
    assert [reader.min_offset(*q) for q in (("A", 0), ("A", 1), ("B", 0))] == [0, 0, 7]
    assert reader.covers("A", 0, 8) and not reader.covers("A", 1, 3)


def test_tiered_options() -> None:
    base = {"path": "/data/store", "topic": "T"}
    t = parse_options({**base, "tieredStoreFilePath": "/data/bucket"}, streaming=False).tiered
    assert t is not None and (t.provider, t.uri, t.cluster, t.broker) == (
        "posix",
        "/data/bucket",
        "DefaultCluster",
        None,
    )
    t = parse_options(
        {
            **base,
            "tieredStoreFilePath": "s3a://b/p",
            "brokerName": "broker-a",
            "objectStoreSecretKey": "secret",
            "objectStoreEndpoint": "http://127.0.0.1:1",
        },
        streaming=True,
    ).tiered
    assert t is not None and (t.provider, t.uri, t.broker) == ("s3", "s3://b/p", "broker-a")
    assert dict(t.s3_options) == {"AWS_SECRET_ACCESS_KEY": "secret", "AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
    assert "secret" not in repr(t)
    t = parse_options({**base, "objectStoreBucket": "b"}, streaming=False).tiered
    assert t is not None and (t.provider, t.uri) == ("s3", "s3://b")
    assert parse_options(base, streaming=False).tiered is None
    for bad in (
        {**base, "brokerName": "broker-a"},  # no bucket
        {**base, "tieredStoreFilePath": "/x", "tieredBackendServiceProvider": "s3"},
        {**base, "tieredStoreFilePath": "s3://b/p", "tieredBackendServiceProvider": "posix"},
        {**base, "tieredStoreFilePath": "/x", "tieredBackendServiceProvider": "hdfs"},
        {"namesrv": "127.0.0.1:9876", "topic": "T", "tieredStoreFilePath": "/x"},
    ):
        with pytest.raises(InvalidArgumentError):
            parse_options(bad, streaming=False)
