"""Tiered storage when the object store misbehaves (issue 44): a real S3-compatible server
(versitygw) behind a fault-injecting proxy (tools/s3_faults.py) that answers 503 SlowDown, refuses
past a bucket quota, stalls uploads, is slow, or is gone. Nothing acknowledged is lost or doubled:
local files stay until the bucket has them, uploads resume, the broker keeps serving from local
disk, and reads of the bucket's messages wait (they are not skipped) while it cannot be read."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import s3_faults
import s3_server

from ferromq.broker import Broker
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing.process import BrokerProcess
from ferromq.testing.waiting import until, wait_until
from ferromq.tiered.bucket import COMMITLOG, QUEUES, Bucket
from tests.s3kit import s3 as s3  # the fixture: the server, module-wide

from .brokerkit import Client, pop_request, pull_ext, running
from .test_tiered_store import (
    FILE,
    SENT,
    STORE,
    TOPIC,
    all_tiered,
    delete_local,
    local_files,
    only_in_the_bucket,
    pull_all,
    read_back_all,
    send_all,
)

pytestmark = [pytest.mark.timeout(240)]


@pytest.fixture
def proxy(s3: s3_server.S3Server) -> Iterator[s3_faults.FaultProxy]:
    with s3_faults.FaultProxy(s3.endpoint) as p:
        yield p


def keys(s3: s3_server.S3Server, proxy: s3_faults.FaultProxy, bucket: str) -> dict[str, Any]:
    return {
        "tiered_backend_service_provider": "s3",
        "tiered_store_file_path": f"{s3.bucket(bucket)}/ferromq",
        "object_store_endpoint": proxy.endpoint,
        "object_store_access_key": s3.access_key,
        "object_store_secret_key": s3.secret_key,
        "object_store_region": s3.region,
    }


def bucket_of(s3: s3_server.S3Server, bucket: str, broker_name: str) -> Bucket:
    return Bucket(f"s3://{bucket}/ferromq", "DefaultCluster", broker_name, s3.storage_options())


def local_bytes(tmp_path: Path) -> dict[int, bytes]:
    return {
        start: (tmp_path / "store" / "commitlog" / f"{start:020d}").read_bytes()
        for start in local_files(tmp_path)
    }


async def recovers(
    c: Client, broker: Broker, tmp_path: Path, proxy: s3_faults.FaultProxy, fault: str
) -> None:
    """With the fault on, uploads fail and nothing local goes; once it is off, every file is
    uploaded, then deleted locally, and every message is read once."""
    tiered = broker.tiered
    assert tiered is not None
    await send_all(c)
    broker.store.flush()
    await until(lambda: tiered.failures > 0, f"an upload refused ({fault})", timeout=60)
    before = local_files(tmp_path)
    assert await delete_local(c, broker, tmp_path) == 0 or fault == "quota"
    assert set(before) - set(local_files(tmp_path)) <= {s.start for s in tiered.tiered_files()}
    proxy.passthrough()
    await only_in_the_bucket(c, broker, tmp_path)
    await read_back_all(c, "G")


@pytest.mark.parametrize("fault", ["slow_down", "quota"])
def test_uploads_refused_by_the_server_resume(
    tmp_path: Path,
    s3: s3_server.S3Server,
    proxy: s3_faults.FaultProxy,
    fault: str,
) -> None:
    async def main() -> None:
        if fault == "slow_down":
            proxy.slow_down()
        else:
            proxy.quota(2 * FILE)  # about two files, then the bucket is full
        async with running(tmp_path, **STORE, **keys(s3, proxy, f"refused-{fault.replace('_', '')}")) as (
            _,
            broker,
        ):
            c = await Client().connect(broker.port)
            await recovers(c, broker, tmp_path, proxy, fault)
            assert broker.tiered is not None
            last = broker.tiered.last_error
            assert (
                ("SLOW_DOWN" in last or "503" in last)
                if fault == "slow_down"
                else "403" in last or "Quota" in last
            )
            await c.close()

    asyncio.run(main())


def test_an_upload_cut_by_kill_9_is_made_again_whole(
    tmp_path: Path,
    s3: s3_server.S3Server,
    proxy: s3_faults.FaultProxy,
) -> None:
    """The server takes an upload's bytes and never answers; the uploader is killed with SIGKILL
    meanwhile. Its successor uploads the file again: every object equals the local file."""

    async def main() -> None:
        proxy.stall_uploads()
        async with running(tmp_path, **STORE, **keys(s3, proxy, "stalled")) as (_, broker):
            tiered = broker.tiered
            assert tiered is not None
            c = await Client().connect(broker.port)
            await send_all(c)
            broker.store.flush()
            await until(lambda: proxy.stats().stalled_now > 0, "an upload stalled mid-way", timeout=60)
            pid = tiered.uploader_pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await until(lambda: tiered.uploader_starts >= 2, "the uploader started again", timeout=30)
            proxy.passthrough()
            await all_tiered(broker)
            local = local_bytes(tmp_path)
            bucket = bucket_of(s3, "stalled", broker.config.broker_name)
            for start in bucket.starts(COMMITLOG):
                assert bucket.read(COMMITLOG, start) == local[start], start
            assert await delete_local(c, broker, tmp_path) >= 4
            await read_back_all(c, "G")
            await c.close()

    asyncio.run(main())


def test_while_the_bucket_cannot_be_read_nothing_is_skipped(
    tmp_path: Path,
    s3: s3_server.S3Server,
    proxy: s3_faults.FaultProxy,
) -> None:
    """Server gone after the files went to it: sends and local reads go on; a pull of the bucket's
    messages is told to retry at the same offset and a pop takes nothing and keeps the group's
    offset; once the server is back, both read them."""

    async def main() -> None:
        async with running(tmp_path, **STORE, **keys(s3, proxy, "gone")) as (_, broker):
            c = await Client().connect(broker.port)
            await send_all(c)
            await only_in_the_bucket(c, broker, tmp_path)
            local_min = broker.store.min_offset(TOPIC, 0)

            proxy.refuse()
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", TOPIC, 0, 0))
            assert r.code == R.PULL_RETRY_IMMEDIATELY and int(r.ext["nextBeginOffset"]) == 0
            r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, "PopGone"))
            assert not r.body
            assert broker.offsets.query("PopGone", TOPIC, 0) == 0
            # Local messages are served, and sends taken.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", TOPIC, 0, local_min))
            assert r.code == R.SUCCESS and decode_messages(r.body)[0].queue_offset == local_min
            await send_all(c, 5, start=SENT)

            proxy.passthrough()

            async def popped_from_zero() -> list[Any]:
                r = await c.call(RC.POP_MESSAGE, pop_request(TOPIC, "PopGone"))
                return decode_messages(r.body) if r.body else []

            first = await until(popped_from_zero, "pops reading the bucket again", timeout=30, interval=0.5)
            assert first[0].queue_offset == 0
            got = await pull_all(c, "G2")
            assert [m.queue_offset for m in got] == list(range(SENT + 5))
            await c.close()

    asyncio.run(main())


def test_a_broker_killed_mid_upload_loses_nothing(
    tmp_path: Path,
    s3: s3_server.S3Server,
    proxy: s3_faults.FaultProxy,
) -> None:
    """`ferromq serve` (SYNC_FLUSH) killed with SIGKILL while its uploads are slow; started again
    on the same store, it uploads what is left, each object equal to its local file, and every
    message acknowledged is read."""
    conf = {
        "brokerName": "killed-a",
        "mappedFileSizeCommitLog": FILE,
        "flushDiskType": "SYNC_FLUSH",
        "tieredStorageLevel": "NOT_IN_DISK",
        "tieredStoreUploadIntervalMs": 50,
        "tieredBackendServiceProvider": "s3",
        "tieredStoreFilePath": f"{s3.bucket('killed9')}/ferromq",
        "objectStoreEndpoint": proxy.endpoint,
        "objectStoreAccessKey": s3.access_key,
        "objectStoreSecretKey": s3.secret_key,
        "objectStoreRegion": s3.region,
    }
    store = tmp_path / "store"
    proxy.delay(0.5, methods={"PUT", "POST"})
    with BrokerProcess(tmp_path / "one", conf, store=store) as first:
        asyncio.run(_send(first.port))
        wait_until(lambda: proxy.stats().delayed_now > 0, "an upload under way", timeout=60)
        first.stop(kill=True)
    proxy.passthrough()
    with BrokerProcess(tmp_path / "two", conf, store=store) as second:
        end = asyncio.run(_commitlog_end(second.port))
        sealed = [start for start in local_files(tmp_path) if start + FILE <= end]
        assert len(sealed) >= 4
        bucket = bucket_of(s3, "killed9", "killed-a")
        wait_until(
            lambda: set(bucket.starts(QUEUES)) >= set(sealed),
            "every sealed file in the bucket",
            timeout=60,
        )
        local = local_bytes(tmp_path)
        for start in sealed:
            assert bucket.read(COMMITLOG, start) == local[start], start
        asyncio.run(_read_all(second.port))


async def _send(port: int) -> None:
    c = await Client().connect(port)
    await send_all(c)
    await c.close()


async def _commitlog_end(port: int) -> int:
    c = await Client().connect(port)
    table = orjson.loads((await c.call(RC.GET_BROKER_RUNTIME_INFO)).body)["table"]
    await c.close()
    return int(table["commitLogMaxOffset"])


async def _read_all(port: int) -> None:
    c = await Client().connect(port)
    await read_back_all(c, "G")
    await c.close()
