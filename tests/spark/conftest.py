"""Spark tests: a real local[2] Spark session (JVM + Python workers) reading real store files.

`spark` is one session for the whole run (starting a JVM costs seconds). `produced` is a
`ferromq serve` process with small segments (so the CommitLog and the consume queues roll over
many times) into which the official-protocol Python client sent single, compressed and batch
messages; it records what each send was acknowledged with, for the tests to compare against.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from ferromq.client import Message
from ferromq.client.blocking import BlockingProducer
from ferromq.spark import FerroMQDataSource
from ferromq.testing import BrokerProcess
from tests.interop.conftest import stop_ferromq

TOPIC = "SparkOrders"
DELAYED_TOPIC = "SparkLater"
COMMITLOG_FILE = 256 * 1024
CQ_FILE = 20 * 64  # 64 units per consume queue file


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs a local Spark session")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # Executors' Python workers must import ferromq from this environment.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ferromq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # A Python worker may take minutes to start on a loaded machine (the default is 15 s).
        .config("spark.python.authenticate.socketTimeout", "300s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(FerroMQDataSource)
    try:
        yield session
    finally:
        session.stop()


@dataclass(frozen=True)
class Sent:
    """One acknowledged message, as the producer sent it."""

    queue_id: int
    queue_offset: int
    body: bytes
    tags: str
    keys: str
    properties: dict[str, str]
    uniq_key: str
    offset_msg_id: str
    compressed: bool = False


@dataclass
class Produced:
    server: BrokerProcess
    sent: dict[tuple[int, int], Sent] = field(default_factory=dict)

    @property
    def store(self) -> Path:
        return self.server.store


def _body(i: int) -> bytes:
    # ~1 KiB, different per message, not compressible enough to matter.
    return (f"order-{i:05d}|".encode() + zlib.crc32(str(i).encode()).to_bytes(4, "big") * 250)[:1000]


@pytest.fixture(scope="session")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Produced]:
    work = tmp_path_factory.mktemp("spark-broker")
    conf = work / "broker.conf"
    conf.write_text(
        f"mapedFileSizeCommitLog={COMMITLOG_FILE}\nmappedFileSizeConsumeQueue={CQ_FILE}\n"
        "defaultTopicQueueNums=4\nflushDiskType=ASYNC_FLUSH\n"
    )
    server = BrokerProcess(work, conf).start()
    out = Produced(server)
    try:
        with BlockingProducer("spark_test_producer", server.namesrv) as producer:
            for i in range(600):
                tags = "TagA" if i % 3 == 0 else ("TagB" if i % 3 == 1 else "TagC")
                props = {"i": str(i), "note": "h\u00e9llo \u2192 \u4e2d\u6587"}
                msg = Message(TOPIC, _body(i), tags=tags, keys=f"key-{i}", properties=props)
                r = producer.send(msg)
                out.sent[(r.message_queue.queue_id, r.queue_offset)] = Sent(
                    r.message_queue.queue_id,
                    r.queue_offset,
                    msg.body,
                    tags,
                    f"key-{i}",
                    props,
                    r.msg_id,
                    r.offset_msg_id,
                )
            for i in range(12):  # compressed by the client (bodies above 4 KiB)
                body = (f"compressible-{i} ".encode()) * 1500
                props = {"kind": "big"}
                r = producer.send(Message(TOPIC, body, tags="TagZ", keys=f"big-{i}", properties=props))
                out.sent[(r.message_queue.queue_id, r.queue_offset)] = Sent(
                    r.message_queue.queue_id,
                    r.queue_offset,
                    body,
                    "TagZ",
                    f"big-{i}",
                    props,
                    r.msg_id,
                    r.offset_msg_id,
                    compressed=True,
                )
            for b in range(6):  # batches: consecutive offsets of one queue
                msgs = [
                    Message(
                        TOPIC,
                        _body(10_000 + b * 25 + j),
                        tags="TagB",
                        keys=f"batch-{b}-{j}",
                        properties={"batch": str(b)},
                    )
                    for j in range(25)
                ]
                r = producer.send_batch(msgs)
                uniq = r.msg_id.split(",")
                ids = r.offset_msg_id.split(",")
                for j, m in enumerate(msgs):
                    key = (r.message_queue.queue_id, r.queue_offset + j)
                    out.sent[key] = Sent(
                        key[0], key[1], m.body, "TagB", f"batch-{b}-{j}", dict(m.properties), uniq[j], ids[j]
                    )
            producer.send(Message(DELAYED_TOPIC, b"later", tags="D", delay_level=18))  # stays scheduled
        yield out
    finally:
        stop_ferromq(server)
