"""Tiered storage (issue 44): sealed CommitLog files go to a bucket (a real S3-compatible server,
versitygw, on 127.0.0.1; or a directory, the posix provider) by an uploader process, local
retention deletes only what the bucket has, and pulls, queries by key and by id, the queue's min
offset and earliest time read through to the bucket for what is no longer on disk."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_server

from ferromq import testing
from ferromq.broker import Broker
from ferromq.broker.config import BrokerConfig
from ferromq.client.message import MessageQueue
from ferromq.client.pull_consumer import PullConsumer
from ferromq.errors import ConfigError
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.store import MessageStore
from ferromq.testing.waiting import until
from ferromq.tiered.bucket import COMMITLOG, QUEUES, Bucket
from ferromq.tiered.uploader import Settings, Uploader
from tests.s3kit import s3 as s3  # the fixture: the server, module-wide

from .brokerkit import SMALL_STORE, Client, pop_receipt, pop_request, properties, pull_ext, running, send_ext
from .test_grpc_front import ack as grpc_ack
from .test_grpc_front import receive as grpc_receive
from .test_grpc_front import settle_as_simple_consumer

FILE = 64 * 1024
STORE = {
    "mapped_file_size_commitlog": FILE,
    "mapped_file_size_consume_queue": 20 * 50,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    "tiered_storage_level": "NOT_IN_DISK",
    "tiered_store_upload_interval_ms": 50,
}
# A round of retention on a quiet hour and a roomy disk, after DELETE_EXPIRED_COMMITLOG.
QUIET = {"hour": 12, "physic_used_ratio": 0.1, "logics_used_ratio": 0.1}
TOPIC = "TieredT"
SENT = 300


def s3_keys(s3: s3_server.S3Server, bucket: str) -> dict[str, Any]:
    return {
        "tiered_backend_service_provider": "s3",
        "tiered_store_file_path": f"{s3.bucket(bucket)}/ferromq",
        "object_store_endpoint": s3.endpoint,
        "object_store_access_key": s3.access_key,
        "object_store_secret_key": s3.secret_key,
        "object_store_region": s3.region,
    }


def posix_keys(tmp_path: Path) -> dict[str, Any]:
    return {"tiered_backend_service_provider": "posix", "tiered_store_file_path": str(tmp_path / "bucket")}


def local_files(tmp_path: Path) -> list[int]:
    return sorted(int(p.name) for p in (tmp_path / "store" / "commitlog").iterdir())


def age_all(tmp_path: Path) -> None:
    old = time.time() - 100 * 3600
    for p in (tmp_path / "store" / "commitlog").iterdir():
        os.utime(p, (old, old))


async def send_all(c: Client, n: int = SENT, start: int = 0) -> None:
    r = await c.call(
        RC.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
    )
    assert r.code == R.SUCCESS
    for i in range(start, start + n):
        props = properties(TAGS="A" if i % 2 == 0 else "B", KEYS=f"key-{i}")
        r = await c.call(RC.SEND_MESSAGE, send_ext(TOPIC, 0, props), f"m{i:04d}".encode() * 250)
        assert r.code == R.SUCCESS


def sealed(broker: Broker) -> list[int]:
    """The local CommitLog files the writer has moved past."""
    end = broker.store.max_physical_offset // FILE * FILE
    return list(range(broker.store.min_physical_offset // FILE * FILE, end, FILE))


async def all_tiered(broker: Broker) -> None:
    """Waits until the bucket holds every sealed file."""
    assert broker.tiered is not None
    tiered = broker.tiered
    broker.store.flush()
    await until(
        lambda: {s.start for s in tiered.tiered_files()} >= set(sealed(broker)),
        "the sealed CommitLog files in the bucket",
        timeout=60,
        why=lambda: f"tiered {[s.start for s in tiered.tiered_files()]}, errors: {tiered.last_error}",
    )


async def delete_local(c: Client, broker: Broker, tmp_path: Path) -> int:
    """Makes retention delete what it may (every file old enough); returns the files deleted."""
    age_all(tmp_path)
    r = await c.call(RC.DELETE_EXPIRED_COMMITLOG)
    assert r.code == R.SUCCESS
    deleted = 0
    while True:  # at most 10 files a round
        report = await asyncio.to_thread(broker.store.clean_expired_files, **QUIET)
        deleted += report.commitlog_files_deleted
        if report.commitlog_files_deleted < 10:
            return deleted


async def only_in_the_bucket(c: Client, broker: Broker, tmp_path: Path) -> None:
    """Waits until the bucket holds every sealed file, then has retention delete them locally (4
    files at least)."""
    await all_tiered(broker)
    assert await delete_local(c, broker, tmp_path) >= 4


async def read_back_all(c: Client, group: str, sent: int = SENT) -> None:
    """Every message of the queue, pull after pull from offset 0, once each and in order."""
    got = await pull_all(c, group)
    assert [m.queue_offset for m in got] == list(range(sent))


async def pull_all(c: Client, group: str, sub: str = "*") -> list[Any]:
    """Every message of the queue from offset 0, pull after pull, as a consumer reads them."""
    got: list[Any] = []
    offset = 0
    for _ in range(200):
        r = await c.call(RC.PULL_MESSAGE, pull_ext(group, TOPIC, 0, offset, subscription=sub))
        if r.code == R.SUCCESS:
            got += decode_messages(r.body)
        elif r.code != R.PULL_RETRY_IMMEDIATELY:
            assert r.code == R.PULL_NOT_FOUND, (r.code, r.remark)
            return got
        offset = int(r.ext["nextBeginOffset"])
    raise AssertionError("the queue never ended")


async def read_through(tmp_path: Path, keys: dict[str, Any]) -> tuple[str, str]:
    """Returns the broker's cluster and name (its part of the bucket)."""
    async with running(tmp_path, **STORE, **keys) as (ns, broker):
        c = await Client().connect(broker.port)
        await send_all(c)
        await all_tiered(broker)
        deleted = await delete_local(c, broker, tmp_path)
        assert deleted == len(sealed(broker)) or deleted >= 4
        local_min = broker.store.min_offset(TOPIC, 0)
        assert broker.store.min_physical_offset >= 4 * FILE and local_min > 0

        # The queue still starts at 0 (RocketMQ's TieredMessageStore counts the bucket's messages).
        r = await c.call(RC.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": 0})
        assert int(r.ext["offset"]) == 0
        r = await c.call(RC.GET_EARLIEST_MSG_STORETIME, {"topic": TOPIC, "queueId": 0})
        first_time = int(r.ext["timestamp"])
        assert 0 < first_time <= int(time.time() * 1000)

        # Pulls read the bucket below the local min and the disk above it: all of them, in order.
        got = await pull_all(c, "G-all")
        assert [m.queue_offset for m in got] == list(range(SENT))
        assert [m.body for m in got] == [f"m{i:04d}".encode() * 250 for i in range(SENT)]
        assert got[0].store_timestamp == first_time
        # A TAG subscription is filtered there too.
        tagged = await pull_all(c, "G-tag", "B")
        assert [m.queue_offset for m in tagged] == list(range(1, SENT, 2))

        # A query by key and a message by id find messages only the bucket has.
        r = await c.call(
            RC.QUERY_MESSAGE,
            {"topic": TOPIC, "key": "key-3", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62},
        )
        assert r.code == R.SUCCESS
        assert [m.keys for m in decode_messages(r.body)] == [["key-3"]]
        r = await c.call(RC.VIEW_MESSAGE_BY_ID, {"offset": got[1].physical_offset})
        assert r.code == R.SUCCESS and decode_messages(r.body)[0].queue_offset == 1

        # A consumer that starts from the first offset reads them all, from the bucket first.
        async with PullConsumer("G-client", f"127.0.0.1:{ns.port}", auto_commit=False) as consumer:
            mq = MessageQueue(TOPIC, broker.config.broker_name, 0)
            consumer.assign([mq])
            await consumer.seek_to_begin(mq)  # GET_MIN_OFFSET: 0, in the bucket
            polled: list[Any] = []
            deadline = time.monotonic() + 30
            while len(polled) < SENT and time.monotonic() < deadline:
                polled += await consumer.poll(1.0)
            assert [m.queue_offset for m in polled] == list(range(SENT))
        await c.close()
        return broker.config.broker_cluster_name, broker.config.broker_name


def test_posix_bucket_reads_through(tmp_path: Path) -> None:
    asyncio.run(read_through(tmp_path, posix_keys(tmp_path)))


def test_the_metrics_show_the_bucket(tmp_path: Path) -> None:
    from .test_metrics import http_get, samples, value

    metrics = {
        "metrics_exporter_type": "PROM",
        "metrics_prom_exporter_host": "127.0.0.1",
        "metrics_prom_exporter_port": 0,
    }

    async def main() -> None:
        async with running(tmp_path, **STORE, **posix_keys(tmp_path), **metrics) as (_, broker):
            c = await Client().connect(broker.port)
            await send_all(c)
            await all_tiered(broker)
            files = len(sealed(broker))
            assert await delete_local(c, broker, tmp_path) >= 4
            assert len(await pull_all(c, "G")) == SENT
            assert broker.metrics is not None
            _, body = await http_get(broker.metrics.port, "/metrics")
            found = samples(body.decode())
            assert value(found, "ferromq_tiered_files") == files
            assert (
                0.9 * files * FILE < value(found, "ferromq_tiered_bytes") <= files * FILE
            )  # records, not filler
            assert value(found, "ferromq_tiered_uploads_total") == files
            assert value(found, "ferromq_tiered_upload_failures_total") == 0
            assert value(found, "ferromq_tiered_uploader_starts_total") == 1
            assert value(found, "ferromq_tiered_read_cache_reads_total", result="miss") >= files
            assert value(found, "ferromq_tiered_pending_bytes") == 0
            await c.close()

    asyncio.run(main())


def test_s3_bucket_reads_through(tmp_path: Path, s3: s3_server.S3Server) -> None:
    keys = s3_keys(s3, "readthrough")
    cluster, name = asyncio.run(read_through(tmp_path, keys))
    # The bucket holds each file byte for byte.
    options = {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_REGION": s3.region,
    }
    bucket = Bucket(keys["tiered_store_file_path"], cluster, name, options)
    starts = bucket.starts(COMMITLOG)
    assert starts[:4] == [0, FILE, 2 * FILE, 3 * FILE]
    assert all(bucket.size(COMMITLOG, s) == FILE for s in starts)
    assert bucket.path(COMMITLOG, FILE).endswith(f"ferromq/{cluster}/{name}/commitlog/00000000000000065536")


def test_retention_keeps_what_the_bucket_lacks(tmp_path: Path, s3: s3_server.S3Server) -> None:
    """With the server away, nothing local goes however full the disk; once it is back, the
    files are uploaded and only then deleted, and every message is still read."""

    async def main() -> None:
        async with running(tmp_path, **STORE, **s3_keys(s3, "away")) as (_, broker):
            assert broker.tiered is not None
            c = await Client().connect(broker.port)
            s3.stop()
            try:
                await send_all(c)
                broker.store.flush()
                await until(lambda: broker.tiered.failures > 0, "an upload failing", timeout=60)
                age_all(tmp_path)
                before = local_files(tmp_path)
                # A disk nearly full deletes files whatever their age: not these.
                full = {"hour": 12, "physic_used_ratio": 0.99, "logics_used_ratio": 0.1}
                report = await asyncio.to_thread(broker.store.clean_expired_files, **full)
                assert report.clean_at_once and report.commitlog_files_deleted == 0
                assert local_files(tmp_path) == before
            finally:
                s3.start()
            await only_in_the_bucket(c, broker, tmp_path)
            await read_back_all(c, "G")
            await c.close()

    asyncio.run(main())


def test_an_uploader_killed_mid_upload_starts_again(tmp_path: Path, s3: s3_server.S3Server) -> None:
    async def main() -> None:
        async with running(tmp_path, **STORE, **s3_keys(s3, "killed")) as (_, broker):
            tiered = broker.tiered
            assert tiered is not None
            c = await Client().connect(broker.port)
            await send_all(c, 60)
            pid = await until(lambda: tiered.uploader_pid, "the uploader running")
            os.kill(pid, signal.SIGKILL)
            await until(lambda: tiered.uploader_starts >= 2, "the uploader started again", timeout=30)
            await send_all(c, SENT - 60, start=60)
            await only_in_the_bucket(c, broker, tmp_path)
            await read_back_all(c, "G")
            await c.close()

    asyncio.run(main())


def test_a_restarted_broker_knows_its_bucket(tmp_path: Path) -> None:
    keys = posix_keys(tmp_path)

    async def first() -> None:
        async with running(tmp_path, **STORE, **keys) as (_, broker):
            c = await Client().connect(broker.port)
            await send_all(c)
            await only_in_the_bucket(c, broker, tmp_path)
            await c.close()

    async def again() -> None:
        async with running(tmp_path, **STORE, **keys) as (_, broker):
            assert broker.tiered is not None
            tiered = broker.tiered
            c = await Client().connect(broker.port)
            await until(lambda: tiered.min_offset(TOPIC, 0) == 0, "the bucket's files known again")
            await read_back_all(c, "G")
            await c.close()

    asyncio.run(first())
    asyncio.run(again())


async def pop_all(c: Client, broker: Broker, group: str, invisible: int = 60_000) -> list[Any]:
    """POP_MESSAGE (served by the data plane) until nothing is left, each message acked."""
    got: list[Any] = []
    for _ in range(100):
        r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, group, invisibleTime=invisible))
        messages = decode_messages(r.body) if r.body else []
        if not messages:
            return got
        got += messages
        for m in messages:
            receipt = pop_receipt(r.ext, m, broker.config.broker_name)
            fields = {"consumerGroup": group, "topic": TOPIC, "queueId": 0, "offset": m.queue_offset}
            a = await c.call(RC.ACK_MESSAGE, {**fields, "extraInfo": receipt})
            assert a.code == R.SUCCESS, a.remark
    raise AssertionError("the pops never ended")


def test_pops_and_5x_receives_read_through(tmp_path: Path) -> None:
    """A POP consumer from the first offset, and a 5.x SimpleConsumer behind local retention, get
    every message (the bucket's first) and ack them; an unacked one popped from the bucket is
    revived from the bucket and delivered again."""

    async def main() -> None:
        settings = {**SMALL_STORE, **STORE, **posix_keys(tmp_path), "timer_precision_ms": 100}
        async with testing.Broker(settings=settings, store_dir=tmp_path) as tb:
            broker = tb.broker
            c = await Client().connect(broker.port)
            await send_all(c)
            await only_in_the_bucket(c, broker, tmp_path)
            assert broker.store.min_offset(TOPIC, 0) > 0

            popped = await pop_all(c, broker, "PopCold")  # initMode 0: from the first message
            assert [m.queue_offset for m in popped] == list(range(SENT))

            # A 5.x SimpleConsumer whose group stopped at offset 0 before retention.
            group, client = "Recv5Cold", "recv5-cold"
            broker.offsets.commit(group, TOPIC, 0, 0)
            await asyncio.to_thread(settle_as_simple_consumer, tb.grpc_endpoint, client, TOPIC, group)
            received: list[pb.Message] = []
            for _ in range(100):
                stream = await asyncio.to_thread(grpc_receive, tb.grpc_endpoint, client, TOPIC, group, 32)
                messages = [r.message for r in stream if r.HasField("message")]
                if not messages:
                    break
                received += messages
                acked = await asyncio.to_thread(grpc_ack, tb.grpc_endpoint, client, TOPIC, group, messages)
                assert [e.status.code for e in acked.entries] == [pb.OK] * len(messages)
            offsets = [m.system_properties.queue_offset for m in received]
            assert offsets == list(range(SENT))
            assert received[7].body == b"m0007" * 250

            # Popped from the bucket and never acked: revived (read from the bucket) and popped again.
            r = await c.call(
                RC.POP_MESSAGE, pop_request(TOPIC, "PopRevive", maxMsgNums=3, invisibleTime=1000)
            )
            first = [m.queue_offset for m in decode_messages(r.body)]
            assert first == [0, 1, 2]
            # The read cache emptied: the revive (on the event loop) does not wait for the bucket;
            # it puts the checkpoint again while the records are fetched, and revives them next.
            tiered = broker.tiered
            assert tiered is not None
            for f in tiered.tiered_files():
                tiered.cache.forget(f.start)
            with pytest.raises(OSError, match="not cached"):
                tiered.record_if_cached(TOPIC, 0, 0)

            def cached() -> bytes | None:
                try:
                    return tiered.record_if_cached(TOPIC, 0, 0)
                except OSError:
                    return None

            record = await until(cached, "the record fetched into the cache meanwhile")
            assert decode_messages(record)[0].queue_offset == 0
            for f in tiered.tiered_files():
                tiered.cache.forget(f.start)
            again: list[Any] = []

            async def redelivered() -> bool:
                r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, "PopRevive", invisibleTime=60_000))
                again.extend(decode_messages(r.body) if r.body else [])
                return sum(m.reconsume_times > 0 for m in again) >= 3

            await until(redelivered, "the unacked messages revived from the bucket", timeout=60, interval=0.5)
            revived = sorted(m.body for m in again if m.reconsume_times > 0)
            assert revived == [f"m{i:04d}".encode() * 250 for i in range(3)]
            await c.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"tiered_storage_level": "FORCE"}, "tieredStorageLevel must be DISABLE or NOT_IN_DISK"),
        ({"tiered_storage_level": "NOT_IN_DISK"}, "set tieredStoreFilePath=s3://bucket/prefix"),
        (
            {"tiered_storage_level": "NOT_IN_DISK", "tiered_backend_service_provider": "posix"},
            "set tieredStoreFilePath to a directory",
        ),
        ({"tiered_backend_service_provider": "hdfs"}, "tieredBackendServiceProvider must be s3 or posix"),
    ],
)
def test_a_tiered_store_that_cannot_be_is_refused(keys: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        BrokerConfig(**keys).validate()


def test_files_older_than_the_reserved_time_leave_the_bucket(tmp_path: Path) -> None:
    """The uploader's retention (tieredStoreFileReservedTime): a file whose newest message is older
    goes from the bucket, its queues object first, and is reported; newer ones stay."""
    root = tmp_path / "store"
    with MessageStore(root, mapped_file_size_commitlog=FILE) as store:
        for i in range(SENT):
            store.put(TOPIC, 0, f"m{i:04d}".encode() * 250, tags="A", keys=f"key-{i}")
        store.flush()
        starts = list(range(0, store.max_physical_offset // FILE * FILE, FILE))
    out = io.StringIO()
    settings = Settings(
        uri=str(tmp_path / "bucket"),
        cluster="C",
        broker="b",
        commitlog_dir=str(root / "commitlog"),
        reserved_hours=1,
    )
    uploader = Uploader(settings, out)
    uploader.sealed.update(starts)
    while uploader.work():
        pass
    assert uploader.bucket.starts(QUEUES) == starts == uploader.bucket.starts(COMMITLOG)
    newest = dict(uploader.tiered)  # each file's newest store time
    first = newest[starts[0]]
    uploader.expire(first + 3_600_001)  # an hour after the first file's newest message
    kept = [s for s in starts if newest[s] > first]
    assert uploader.bucket.starts(QUEUES) == uploader.bucket.starts(COMMITLOG) == kept != starts
    uploader.expire(max(newest.values()) + 3_600_001)
    assert uploader.bucket.starts(QUEUES) == uploader.bucket.starts(COMMITLOG) == []
    # Still on local disk and still said to be sealed: an expired file is not uploaded again.
    assert not uploader.work()
    assert uploader.bucket.starts(COMMITLOG) == []
    reports = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [r["expired"] for r in reports if "expired" in r] == starts


def test_a_lite_topics_messages_are_read_from_the_bucket(tmp_path: Path) -> None:
    """A lite topic (RocketMQ 5.5) whose messages local retention deleted: its lite consumer gets
    them from the bucket, in order (the files' queue units name their light message queues too)."""
    from .test_lite_consumers import ack_lite, lite_broker, lmq, pop_until, sync
    from .test_lite_topics import send_lite

    async def main() -> None:
        settings = {**STORE, **posix_keys(tmp_path), "mapped_file_size_consume_queue": 20 * 50}
        async with lite_broker("TieredLite", "TieredLiteG", settings=settings) as (b, c, parent, group):
            broker = b.broker
            for i in range(40):
                assert (await send_lite(c, parent, f"l{i:02d}".encode() * 100, "session"))[0] == R.SUCCESS
            await send_all(c)  # more messages after them: their files fill, go to the bucket, and go
            await all_tiered(broker)
            store = Path(broker.config.store_path_root_dir)
            assert store.name == "store"
            assert await delete_local(c, broker, store.parent) >= 4
            # The lite topic's messages are only in the bucket now.
            assert broker.store.pull(lmq(parent, "session"), 0, 0, 32).status == "OFFSET_TOO_SMALL"
            assert (await sync(c, "PARTIAL_ADD", "c1", group, parent, ["session"])).code == R.SUCCESS
            got: list[bytes] = []
            for _ in range(20):
                for r, m in await pop_until(c, "c1", group, parent, 1):
                    got.append(m.body)
                    assert (await ack_lite(c, group, parent, r, m)).code == R.SUCCESS
                if len(got) >= 40:
                    break
            assert got == [f"l{i:02d}".encode() * 100 for i in range(40)]

    asyncio.run(main())
