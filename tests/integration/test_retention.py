"""Retention through the broker (issue 12): old CommitLog files go, a pull below the queue's new
minimum is answered PULL_OFFSET_MOVED with nextBeginOffset = min (as Java 4.9.7's
PullMessageProcessor answers OFFSET_TOO_SMALL), GET_MIN_OFFSET follows, consumers carry on from
the min, and a restart keeps it all."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from ferromq.cli import main as cli_main
from ferromq.client.admin import Admin
from ferromq.client.message import MessageQueue
from ferromq.client.pull_consumer import PullConsumer
from ferromq.errors import BrokerError
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.store import MessageStore

from .brokerkit import Client, properties, pull_ext, running, send_ext

RETENTION = {
    "mapped_file_size_commitlog": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 50,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
}


def run(coro: Any) -> None:
    asyncio.run(coro)


def commitlog_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "store" / "commitlog").iterdir())


def age(paths: list[Path], hours: int) -> None:
    old = time.time() - hours * 3600
    for p in paths:
        os.utime(p, (old, old))


async def min_offset(c: Client, topic: str, queue_id: int) -> int:
    r = await c.call(RC.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id})
    assert r.code == R.SUCCESS
    return int(r.ext["offset"])


def test_old_files_go_and_pulls_move_to_the_new_minimum(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, **RETENTION) as (ns, broker):
            c = await Client().connect(broker.port)
            r = await c.call(
                RC.UPDATE_AND_CREATE_TOPIC,
                {"topic": "RT", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
            )
            assert r.code == R.SUCCESS
            for i in range(300):
                props = properties(TAGS="A", KEYS=f"k{i}")
                r = await c.call(RC.SEND_MESSAGE, send_ext("RT", 0, props), bytes([65 + i % 26]) * 1000)
                assert r.code == R.SUCCESS
            broker.store.flush()
            files = commitlog_files(tmp_path)
            assert len(files) >= 5
            age(files[:3], 100)
            assert await min_offset(c, "RT", 0) == 0

            # Not the deleteWhen hour and the disk is fine: a round deletes nothing.
            quiet = {"hour": 12, "physic_used_ratio": 0.1, "logics_used_ratio": 0.1}
            report = await asyncio.to_thread(broker.store.clean_expired_files, **quiet)
            assert (report.commitlog_files_deleted, report.manual) == (0, False)

            # DELETE_EXPIRED_COMMITLOG (AdminBrokerProcessor.deleteExpiredCommitLog): the next rounds
            # delete expired files whatever the hour.
            r = await c.call(RC.DELETE_EXPIRED_COMMITLOG)
            assert r.code == R.SUCCESS
            report = await asyncio.to_thread(broker.store.clean_expired_files, **quiet)
            assert report.manual and not report.time_up and not report.space_full
            assert report.commitlog_files_deleted == 3
            assert report.consume_queue_files_deleted >= 1
            assert report.min_physical_offset == 3 * 64 * 1024 == broker.store.min_physical_offset
            assert commitlog_files(tmp_path)[0] == files[3]
            stats = broker.store.retention_stats
            assert stats.commitlog_files_deleted == 3 and stats.rounds == 2

            new_min = await min_offset(c, "RT", 0)
            assert new_min > 0 and new_min == broker.store.min_offset("RT", 0)

            # A pull below the minimum: PULL_OFFSET_MOVED, nextBeginOffset = min.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "RT", 0, 5))
            assert r.code == R.PULL_OFFSET_MOVED and r.remark == "OFFSET_TOO_SMALL"
            assert (int(r.ext["nextBeginOffset"]), int(r.ext["minOffset"])) == (new_min, new_min)
            assert r.body == b""
            # ... recorded as an OffsetMovedEvent, as Java's broker does.
            events = broker.store.get_messages("OFFSET_MOVED_EVENT", 0, 0)
            assert len(events) == 1 and events[0].tags == "G" and events[0].keys == ["G"]
            # A negative offset is too small as well (Java 4.9.7 answers the same).
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "RT", 0, -1))
            assert r.code == R.PULL_OFFSET_MOVED and int(r.ext["nextBeginOffset"]) == new_min
            assert json.loads(events[0].body) == {
                "consumerGroup": "G",
                "messageQueue": {"brokerName": "broker-a", "queueId": 0, "topic": "RT"},
                "offsetNew": new_min,
                "offsetRequest": 5,
            }
            # The consumer carries on from there.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "RT", 0, int(r.ext["nextBeginOffset"])))
            assert r.code == R.SUCCESS
            msgs = decode_messages(r.body)
            assert msgs[0].queue_offset == new_min
            assert msgs[0].physical_offset >= 3 * 64 * 1024

            # A client consumer whose committed offset was deleted moves to the minimum by itself.
            broker.offsets.commit("G-ret", "RT", 0, 5)
            addr = f"127.0.0.1:{ns.port}"
            async with PullConsumer("G-ret", addr, auto_commit=False) as consumer:
                mq = MessageQueue("RT", "broker-a", 0)
                consumer.assign([mq])
                got: list[Any] = []
                deadline = time.monotonic() + 10
                while len(got) < 300 - new_min and time.monotonic() < deadline:
                    got += await consumer.poll(1.0)
                assert [m.queue_offset for m in got] == list(range(new_min, 300))

            # CLEAN_EXPIRED_CONSUMEQUEUE: RT still has messages, so it stays.
            r = await c.call(RC.CLEAN_EXPIRED_CONSUMEQUEUE)
            assert r.code == R.SUCCESS
            assert await min_offset(c, "RT", 0) == new_min
            await c.close()

        # A restart (recovery from a CommitLog that no longer starts at 0) keeps the minimum.
        async with running(tmp_path, **RETENTION) as (_, broker):
            c = await Client().connect(broker.port)
            assert broker.store.min_physical_offset == 3 * 64 * 1024
            assert await min_offset(c, "RT", 0) == new_min
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "RT", 0, 0))
            assert r.code == R.PULL_OFFSET_MOVED and int(r.ext["nextBeginOffset"]) == new_min
            r = await c.call(RC.SEND_MESSAGE, send_ext("RT", 0, properties(TAGS="A")), b"after")
            assert r.code == R.SUCCESS and r.ext["queueOffset"] == "300"
            await c.close()

    run(main())


def test_a_read_only_view_sees_the_deletion_after_refresh(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(
        root, mapped_file_size_commitlog=64 * 1024, mapped_file_size_consume_queue=1000
    ) as store:
        for i in range(300):
            store.put("V", 0, bytes([65 + i % 26]) * 1000, tags="A", keys=f"k{i}")
        store.flush()
        view = MessageStore.open_read_only(root, mapped_file_size_consume_queue=1000)
        try:
            assert view.get("V", 0, 0).status == "FOUND"
            age(sorted((root / "commitlog").iterdir())[:2], 100)
            report = store.clean_expired_files(hour=4, physic_used_ratio=0.1, logics_used_ratio=0.1)
            assert report.time_up and report.commitlog_files_deleted == 2
            new_min = store.min_offset("V", 0)
            view.refresh()
            assert view.min_physical_offset == store.min_physical_offset
            r = view.get("V", 0, 0)
            assert (r.status, r.next_begin_offset) == ("OFFSET_TOO_SMALL", new_min)
            assert view.read(0) is None
            assert view.queues() == [("V", 0, new_min, 300)]
            assert [m.queue_offset for m in view.get_messages("V", 0, new_min, 2)] == [new_min, new_min + 1]
        finally:
            view.close()


def test_admin_requests_through_the_client_and_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def main() -> None:
        async with running(tmp_path, **RETENTION) as (ns, broker):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr) as admin:
                told = await admin.delete_expired_commitlog(cluster="DefaultCluster")
                assert told == [broker.config.broker_addr]
                assert await admin.clean_expired_consume_queue(broker_addr=broker.config.broker_addr) == told
                with pytest.raises(BrokerError, match="no cluster 'Nope'"):
                    await admin.delete_expired_commitlog(cluster="Nope")
            # The admin request made the next round a manual one.
            report = await asyncio.to_thread(
                broker.store.clean_expired_files, hour=12, physic_used_ratio=0.1, logics_used_ratio=0.1
            )
            assert report.manual
            code = await asyncio.to_thread(cli_main, ["admin", "-n", addr, "delete-expired-commitlog"])
            assert code == 0
            code = await asyncio.to_thread(
                cli_main, ["admin", "-n", addr, "clean-expired-cq", "-b", broker.config.broker_addr]
            )
            assert code == 0

    run(main())
    out = capsys.readouterr().out
    assert "expired CommitLog files will be deleted by the next retention rounds of 127.0.0.1:" in out
    assert "consume queues with nothing left dropped on 127.0.0.1:" in out


def test_a_slave_without_offset_check_keeps_the_offset(tmp_path: Path) -> None:
    """PullMessageProcessor on a slave with offsetCheckInSlave=false: no correction, the pull is to
    be retried (PULL_RETRY_IMMEDIATELY) with the offset it asked for; with the check, as a master."""

    async def main() -> None:
        for check, code, next_begin in ((False, R.PULL_RETRY_IMMEDIATELY, 7), (True, R.PULL_OFFSET_MOVED, 2)):
            root = tmp_path / f"check-{check}"
            async with running(
                root, broker_role="SLAVE", broker_id=1, offset_check_in_slave=check, **RETENTION
            ) as (_, broker):
                broker.store.put("S", 0, b"x", tags="A")
                broker.store.put("S", 0, b"y", tags="A")
                c = await Client().connect(broker.port)
                await c.call(
                    RC.UPDATE_AND_CREATE_TOPIC, {"topic": "S", "readQueueNums": 1, "writeQueueNums": 1}
                )
                r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "S", 0, 1))
                assert r.code == R.SUCCESS
                r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "S", 0, 7))  # past the end: OVERFLOW_BADLY
                assert r.remark == "OFFSET_OVERFLOW_BADLY"
                assert r.code == code
                assert int(r.ext["nextBeginOffset"]) == next_begin
                await c.close()

    run(main())
