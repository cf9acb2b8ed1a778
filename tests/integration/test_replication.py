"""Master-slave replication between two in-process brokers on real sockets: the slave's CommitLog
files end up byte-identical to the master's, its queues equal; SYNC_MASTER answers only once the
slave has a message (SLAVE_NOT_AVAILABLE without a slave, FLUSH_SLAVE_TIMEOUT when it does not
report in time); the slave refuses sends, serves pulls, copies topics, offsets and groups from the
master (as soon as it reaches it), configures the topics it replicated before their configuration
came, and learns the master's addresses from the name server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson

from ferromq import _store
from ferromq.broker import Broker
from ferromq.broker.topics import TopicConfig
from ferromq.message import decode_messages
from ferromq.namesrv import NameServer
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.store import MessageStore
from ferromq.testing import free_port
from ferromq.testing.waiting import until, wait_until
from tests.integration.brokerkit import Client, properties, pull_ext, running, send_ext

from ..conftest import SMALL

HA_FAST = {"ha_send_heartbeat_interval": 200, "ha_listen_port": 0}


def sync_test(fn: Callable[[Path], Coroutine[Any, Any, None]]) -> Callable[[Path], None]:
    """Runs an async test body on its own loop, bounded in time."""

    @functools.wraps(fn)
    def run(tmp_path: Path) -> None:
        asyncio.run(asyncio.wait_for(fn(tmp_path), 90))

    return run


@contextlib.asynccontextmanager
async def pair(
    tmp_path: Path, master_role: str = "ASYNC_MASTER", **master_overrides: Any
) -> AsyncIterator[tuple[NameServer, Broker, Broker]]:
    async with running(tmp_path / "m", broker_role=master_role, **HA_FAST, **master_overrides) as (
        ns,
        master,
    ):
        async with running(tmp_path / "s", namesrv=ns, broker_role="SLAVE", broker_id=1, **HA_FAST) as (
            _,
            slave,
        ):
            yield ns, master, slave


def commitlog_files(broker: Broker) -> dict[str, bytes]:
    d = Path(broker.config.store_path_root_dir) / "commitlog"
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if len(p.name) == 20}


async def send(client: Client, topic: str, i: int, wait: bool = True) -> Any:
    props = properties(TAGS="A", KEYS=f"k{i}", WAIT="true" if wait else "false")
    return await client.call(
        RC.SEND_MESSAGE, send_ext(topic, i % 4, props), f"body-{i}".encode() * (i % 50 + 1)
    )


@sync_test
async def test_slave_copies_master_byte_for_byte(tmp_path: Path) -> None:
    async with pair(tmp_path) as (ns, master, slave):
        client = await Client().connect(master.port)
        try:
            for i in range(400):
                r = await send(client, "ReplT", i)
                assert r.code == R.SUCCESS
        finally:
            await client.close()
        end = master.store.max_physical_offset
        await until(lambda: slave.store.max_physical_offset == end, "the slave to catch up")
        await until(
            lambda: master.replication.master is not None and master.replication.master.acked_offset == end,
            "the master to see the report",
        )
        master.store.flush()
        slave.store.flush()
        assert commitlog_files(master) == commitlog_files(slave)
        for q in range(4):
            m = master.store.get("ReplT", q, 0, 1000, 1 << 30)
            s = slave.store.get("ReplT", q, 0, 1000, 1 << 30)
            assert m.message_count == s.message_count == 100
            assert m.body == s.body
        # Index queries answer the same on both.
        assert master.store.query_raw("ReplT", "k7", 10) == slave.store.query_raw("ReplT", "k7", 10)
        # The name server routes the slave under the same broker name with id 1.
        await until(lambda: slave.config.broker_addr in ns.routes.live, "the slave's registration")
        assert ns.routes.brokers["broker-a"].addrs == {
            0: master.config.broker_addr,
            1: slave.config.broker_addr,
        }
        assert slave.replication.master_addr == master.config.broker_addr


@sync_test
async def test_slave_refuses_sends_and_serves_pulls(tmp_path: Path) -> None:
    async with pair(tmp_path) as (_, master, slave):
        mc = await Client().connect(master.port)
        sc = await Client().connect(slave.port)
        try:
            for i in range(8):
                assert (await send(mc, "ReplPull", i)).code == R.SUCCESS
            r = await send(sc, "ReplPull", 0)
            assert r.code == R.SERVICE_NOT_AVAILABLE
            assert r.remark is not None and "put to the slave" in r.remark
            r = await sc.call(RC.CONSUMER_SEND_MSG_BACK, {"group": "G1", "offset": 0, "delayLevel": 0})
            assert (r.code, r.remark) == (R.SYSTEM_ERROR, "SERVICE_NOT_AVAILABLE")
            end = master.store.max_physical_offset
            await until(lambda: slave.store.max_physical_offset == end, "the slave to catch up")
            await until(lambda: slave.topics.get("ReplPull") is not None, "topic sync", timeout=30)
            r = await sc.call(RC.PULL_MESSAGE, pull_ext("G1", "ReplPull", 0, 0))
            assert r.code == R.SUCCESS
            assert r.ext["suggestWhichBrokerId"] == "0"
            # A commit carried by a pull is not stored on a slave (RocketMQ's storeOffsetEnable).
            r = await sc.call(RC.PULL_MESSAGE, pull_ext("G1", "ReplPull", 0, 2, commitOffset=1, sysFlag=5))
            assert slave.offsets.query("G1", "ReplPull", 0) == -1
        finally:
            await mc.close()
            await sc.close()


@sync_test
async def test_slave_synchronises_metadata(tmp_path: Path) -> None:
    async with pair(tmp_path) as (_, master, slave):
        mc = await Client().connect(master.port)
        try:
            assert (await send(mc, "ReplMeta", 0)).code == R.SUCCESS
            r = await mc.call(
                RC.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "GM", "topic": "ReplMeta", "queueId": 0, "commitOffset": 1},
            )
            assert r.code == R.SUCCESS
            r = await mc.call(
                RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                body=orjson.dumps({"groupName": "GM", "retryMaxTimes": 7}),
            )
            assert r.code == R.SUCCESS
            master.schedule.offsets[3] = 42
            # What a Java slave asks the master for.
            r = await mc.call(RC.GET_ALL_DELAY_OFFSET)
            assert r.code == R.SUCCESS and b"3:42" in r.body
        finally:
            await mc.close()
        master.offsets.persist(force=True)
        slave.replication._sync_now.set()
        await until(lambda: slave.offsets.query("GM", "ReplMeta", 0) == 1, "offsets", timeout=30)
        await until(lambda: slave.schedule.offsets.get(3) == 42, "delay offsets", timeout=30)
        await until(lambda: "GM" in slave.groups.groups, "groups", timeout=30)
        assert slave.groups.groups["GM"].retry_max_times == 7
        assert slave.topics.get("ReplMeta") is not None
        assert slave.topics.data_version == master.topics.data_version


@sync_test
async def test_a_slave_builds_its_timer_wheel_and_follows_the_master_without_delivering(
    tmp_path: Path,
) -> None:
    async with pair(tmp_path, timer_precision_ms=100) as (_, master, slave):
        mc = await Client().connect(master.port)
        try:
            soon = properties(TIMER_DELAY_MS="1500", KEYS="soon")
            later = properties(TIMER_DELAY_SEC="3600", KEYS="later")
            for props in (soon, later):
                assert (
                    await mc.call(RC.SEND_MESSAGE, send_ext("ReplTimer", 0, props), b"t")
                ).code == R.SUCCESS
            r = await mc.call(RC.GET_TIMER_CHECK_POINT)
            assert r.code == R.SUCCESS and len(r.body) == 56
        finally:
            await mc.close()
        # The master delivers the first; the slave gets it by replication only, once.
        await until(
            lambda: len(slave.store.get_messages("ReplTimer", 0, 0, 10)) == 1, "delivery replicated", 30
        )
        # The slave's wheel holds both (its own timer files), and its read time follows the master's.
        await until(lambda: slave.store.timer_stats()["enqueued"] == 2, "the slave's wheel", 30)
        slave.replication._sync_now.set()
        master_read = master.store.timer_progress()[0]
        await until(lambda: slave.store.timer_progress()[0] >= master_read, "the master's read time", 30)
        assert slave.store.timer_stats()["delivered"] == 0
        assert [m.keys for m in slave.store.get_messages("ReplTimer", 0, 0, 10)] == [["soon"]]
        assert master.store.timer_stats()["pending"] == 1


@sync_test
async def test_sync_master_waits_for_the_slave(tmp_path: Path) -> None:
    async with pair(tmp_path, master_role="SYNC_MASTER") as (_, master, slave):
        assert master.replication.master is not None
        await until(lambda: master.replication.master.connections == 1, "the slave to connect")  # type: ignore[union-attr]
        client = await Client().connect(master.port)
        try:
            codes = await asyncio.gather(*(send(client, "ReplSync", i) for i in range(200)))
            assert {c.code for c in codes} == {R.SUCCESS}
            # Every acknowledged message is on the slave the moment it is acknowledged.
            acked = master.replication.master.acked_offset  # type: ignore[union-attr]
            assert acked >= master.store.max_physical_offset
            assert slave.store.max_physical_offset >= master.store.max_physical_offset
            # WAIT=false does not wait.
            assert (await send(client, "ReplSync", 999, wait=False)).code == R.SUCCESS
        finally:
            await client.close()


@sync_test
async def test_sync_master_with_sync_flush(tmp_path: Path) -> None:
    """Both waits at once: on disk and on the slave."""
    async with pair(tmp_path, master_role="SYNC_MASTER", flush_disk_type="SYNC_FLUSH") as (_, master, slave):
        ha = master.replication.master
        assert ha is not None
        await until(lambda: ha.connections == 1, "the slave to connect")
        client = await Client().connect(master.port)
        try:
            codes = await asyncio.gather(*(send(client, "ReplSyncFlush", i) for i in range(100)))
            assert {c.code for c in codes} == {R.SUCCESS}
            assert ha.acked_offset >= master.store.max_physical_offset
            assert master.store.flushed_physical_offset >= master.store.max_physical_offset
            assert slave.store.max_physical_offset >= master.store.max_physical_offset
        finally:
            await client.close()


@sync_test
async def test_sync_master_without_slave_answers_slave_not_available(tmp_path: Path) -> None:
    async with running(tmp_path, broker_role="SYNC_MASTER", **HA_FAST) as (_, master):
        client = await Client().connect(master.port)
        try:
            r = await send(client, "ReplNoSlave", 1)
            assert r.code == R.SLAVE_NOT_AVAILABLE
            # The message is stored all the same (Java's sendOK), and the answer says where.
            assert r.ext["queueOffset"] == "0"
            assert master.store.max_offset("ReplNoSlave", 1) == 1
        finally:
            await client.close()


@sync_test
async def test_sync_master_after_the_slave_left(tmp_path: Path) -> None:
    async with running(tmp_path / "m", broker_role="SYNC_MASTER", slave_timeout=300, **HA_FAST) as (
        ns,
        master,
    ):
        async with running(tmp_path / "s", namesrv=ns, broker_role="SLAVE", broker_id=1, **HA_FAST) as (
            _,
            slave,
        ):
            ha = master.replication.master
            assert ha is not None
            await until(lambda: ha.connections == 1, "the slave to connect")
            client = await Client().connect(master.port)
            try:
                assert (await send(client, "ReplTimeout", 1)).code == R.SUCCESS
                # The slave leaves: no slave within haSlaveFallbehindMax any more.
                assert slave.replication.slave is not None
                await asyncio.get_running_loop().run_in_executor(None, slave.replication.slave.close)
                slave.replication.slave = None
                await until(lambda: ha.connections == 0, "the master to drop the slave")
                r = await send(client, "ReplTimeout", 2)
                assert r.code == R.SLAVE_NOT_AVAILABLE
            finally:
                await client.close()


@sync_test
async def test_sync_master_flush_slave_timeout(tmp_path: Path) -> None:
    """A slave that is connected but never reports past its first offset."""
    async with running(tmp_path, broker_role="SYNC_MASTER", slave_timeout=300, **HA_FAST) as (_, master):
        ha = master.replication.master
        assert ha is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", ha.port)
        try:
            writer.write((0).to_bytes(8, "big"))
            await writer.drain()
            await until(lambda: ha.connections == 1, "the fake slave")
            client = await Client().connect(master.port)
            try:
                r = await send(client, "ReplSilent", 1)
                assert r.code == R.FLUSH_SLAVE_TIMEOUT
                assert r.ext["queueOffset"] == "0"
            finally:
                await client.close()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            del reader


@sync_test
async def test_slave_with_haMasterAddress_and_divergence(tmp_path: Path) -> None:
    """haMasterAddress set: no name server needed. A slave store longer than the master's is
    refused by the master and replicates nothing."""
    async with running(tmp_path / "m", **HA_FAST) as (_, master):
        client = await Client().connect(master.port)
        try:
            for i in range(5):
                assert (await send(client, "ReplDiv", i)).code == R.SUCCESS
        finally:
            await client.close()
        ha_addr = f"127.0.0.1:{master.config.ha_port}"
        # A store of another broker, longer than the master's log.
        async with running(tmp_path / "other", **HA_FAST) as (_, other):
            oc = await Client().connect(other.port)
            try:
                for i in range(50):
                    assert (await send(oc, "Other", i)).code == R.SUCCESS
            finally:
                await oc.close()
        other_end = None
        async with running(
            tmp_path / "other",
            namesrv_addr=None,
            broker_role="SLAVE",
            broker_id=1,
            ha_master_address=ha_addr,
            **HA_FAST,
        ) as (_, slave):
            other_end = slave.store.max_physical_offset
            assert slave.replication.slave is not None
            ha = slave.replication.slave
            # The master closes the connection after the report: the client is then between attempts.
            await until(lambda: ha.status()[2] > 0 and not ha.status()[1], "the master's refusal")
            assert slave.store.max_physical_offset == other_end
            assert master.replication.master is not None and master.replication.master.acked_offset == 0


@sync_test
async def test_slave_read_enable_suggests_the_slave_to_a_consumer_far_behind(tmp_path: Path) -> None:
    """slaveReadEnable: a pull reading further behind the CommitLog end than
    accessMessageInMemoryMaxRatio percent of the memory is told to go to whichBrokerWhenConsumeSlowly
    (1); one that is not, to the group's brokerId (0); without slaveReadEnable always the master."""
    cases = [
        ({"slave_read_enable": True, "access_message_in_memory_max_ratio": 0}, "1"),
        ({"slave_read_enable": True, "access_message_in_memory_max_ratio": 100}, "0"),
        ({"access_message_in_memory_max_ratio": 0}, "0"),
    ]
    for i, (overrides, suggested) in enumerate(cases):
        async with running(tmp_path / str(i), **overrides) as (_, master):
            client = await Client().connect(master.port)
            try:
                for n in range(3):
                    assert (await send(client, "ReplSuggest", n * 4)).code == R.SUCCESS
                r = await client.call(RC.PULL_MESSAGE, pull_ext("GS", "ReplSuggest", 0, 0, maxMsgNums=1))
                assert r.code == R.SUCCESS
                assert r.ext["suggestWhichBrokerId"] == suggested, overrides
            finally:
                await client.close()


@sync_test
async def test_slave_configures_replicated_topics_from_its_queues(tmp_path: Path) -> None:
    """Issue 27, item 6: the master creates a topic after the slave's last metadata copy and stops
    before the next one (10 s later): the slave, which has the messages, configures the topic from its
    consume queues and serves it (pulls, consumer offsets, its own topic table). A topic the master
    deleted stays deleted on the slave, although its queues are still there."""
    async with pair(tmp_path, master_role="SYNC_MASTER") as (_, master, slave):
        ha = master.replication.master
        assert ha is not None
        await until(lambda: ha.connections == 1, "the slave to connect")
        mc = await Client().connect(master.port)
        try:
            for i in range(4):
                assert (await send(mc, "ReplGone", i)).code == R.SUCCESS
            slave.replication.sync_soon()
            await until(lambda: slave.topics.get("ReplGone") is not None, "the copy of ReplGone")
            r = await mc.call(RC.DELETE_TOPIC_IN_BROKER, {"topic": "ReplGone"})
            assert r.code == R.SUCCESS
            slave.replication.sync_soon()
            await until(lambda: slave.topics.get("ReplGone") is None, "the deletion of ReplGone")
            # SYNC_MASTER: each acknowledged message is on the slave.
            for i in range(8):
                assert (await send(mc, "ReplNew", i)).code == R.SUCCESS
        finally:
            await mc.close()
        await master.stop()
        await until(lambda: slave.topics.get("ReplNew") is not None, "ReplNew configured", timeout=5)
        assert slave.store.max_offset("ReplGone", 0) == 1, "the deleted topic's queues are still there"
        assert slave.topics.get("ReplGone") is None
        tc = slave.topics.get("ReplNew")
        assert tc is not None and tc.readable and tc.read_queue_nums >= 4
        saved = Path(slave.config.store_path_root_dir) / "config" / "topics.json"
        assert "ReplNew" in orjson.loads(saved.read_bytes())["topicConfigTable"]

        sc = await Client().connect(slave.port)
        try:
            for q in range(4):
                r = await sc.call(RC.PULL_MESSAGE, pull_ext("GNew", "ReplNew", q, 0))
                assert r.code == R.SUCCESS, r.remark
                assert [m.body for m in decode_messages(r.body)] == [
                    f"body-{i}".encode() * (i % 50 + 1) for i in (q, q + 4)
                ]
            r = await sc.call(
                RC.UPDATE_CONSUMER_OFFSET,
                {"consumerGroup": "GNew", "topic": "ReplNew", "queueId": 1, "commitOffset": 2},
            )
            assert r.code == R.SUCCESS
            r = await sc.call(
                RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "GNew", "topic": "ReplNew", "queueId": 1}
            )
            assert (r.code, r.ext["offset"]) == (R.SUCCESS, "2")
            r = await sc.call(RC.PULL_MESSAGE, pull_ext("GGone", "ReplGone", 0, 0))
            assert r.code == R.TOPIC_NOT_EXIST
        finally:
            await sc.close()


@sync_test
async def test_slave_copies_the_masters_metadata_as_soon_as_it_reaches_it(tmp_path: Path) -> None:
    """A slave started before its master (haMasterAddress) copies the master's topics as soon as its
    HA connection is up, not at its next registration (30 s) that names the master's request port."""
    ha_port = free_port()
    async with running(
        tmp_path / "s",
        broker_role="SLAVE",
        broker_id=1,
        ha_master_address=f"127.0.0.1:{ha_port}",
        ha_send_heartbeat_interval=200,
    ) as (ns, slave):
        assert slave.replication.master_addr is None
        async with running(tmp_path / "m", namesrv=ns, ha_listen_port=ha_port) as (_, master):
            # Well before the slave's next registration (30 s) or periodic copy (10 s).
            await until(
                lambda: slave.topics.data_version == master.topics.data_version, "the copy", timeout=8
            )
            assert slave.replication.master_addr == master.config.broker_addr


def test_reads_wait_for_the_replicas_when_confirmed_by_them(tmp_path: Path) -> None:
    """A controller-mode master whose SyncStateSet holds replicas (`confirm_reads_by`): a stored
    message is not visible to readers until a slave acknowledged it, so no consumer reads what a
    failover to that slave would not have; without the bound it is visible at once."""
    with (
        MessageStore(tmp_path / "m", **SMALL) as master_store,
        MessageStore(tmp_path / "s", **SMALL) as slave_store,
    ):
        ha = _store.HaMaster(master_store.raw, "127.0.0.1:0", heartbeat_interval_ms=100)
        try:
            master_store.confirm_reads_by(ha)
            master_store.put("Confirmed", 0, b"only once replicated")
            assert master_store.max_offset("Confirmed", 0) == 0
            got = master_store.pull("Confirmed", 0, 0, 32)
            assert got.message_count == 0
            slave = _store.HaSlave(slave_store.raw, f"127.0.0.1:{ha.port}", heartbeat_interval_ms=100)
            try:
                ha.notify_appended()
                wait_until(
                    lambda: master_store.max_offset("Confirmed", 0) == 1, "the slave's acknowledgement"
                )
                assert master_store.pull("Confirmed", 0, 0, 32).message_count == 1
            finally:
                slave.close()
            master_store.put("Confirmed", 0, b"not yet replicated")
            master_store.confirm_reads_by(None)
            assert master_store.max_offset("Confirmed", 0) == 2
        finally:
            master_store.confirm_reads_by(None)
            ha.close()


INNER = '{"accessKey": "innerBroker", "secretKey": "innerSecret1"}'
ACL2 = {
    "authentication_enabled": True,
    "authorization_enabled": True,
    "init_authentication_user": '{"username": "rocketmq", "password": "12345678"}',
}


@sync_test
async def test_a_slave_of_an_acl2_master_signs_its_copies_with_the_inner_credentials(tmp_path: Path) -> None:
    """With ACL 2.0 on, a master answers only signed requests: its slave copies the topics with
    innerClientAuthenticationCredentials (a Super user both create at start), as Java's slave does;
    without them the master refuses the copy."""
    ha_port = free_port()
    common = {**ACL2, **HA_FAST}
    async with running(
        tmp_path / "m", ha_listen_port=ha_port, **ACL2, inner_client_authentication_credentials=INNER
    ) as (ns, master):
        assert master.auth is not None and master.auth.metadata.users["innerBroker"].is_super
        master.topics.update(TopicConfig("AclReplTopic", 4, 4))
        async with running(
            tmp_path / "s",
            namesrv=ns,
            broker_role="SLAVE",
            broker_id=1,
            ha_master_address=f"127.0.0.1:{ha_port}",
            inner_client_authentication_credentials=INNER,
            **{**common, "ha_listen_port": 0},
        ) as (_, slave):
            await until(lambda: slave.topics.get("AclReplTopic") is not None, "the copy", timeout=30)
        # Without the credentials, the master refuses the slave's requests.
        async with running(
            tmp_path / "s2",
            namesrv=ns,
            broker_role="SLAVE",
            broker_id=2,
            ha_master_address=f"127.0.0.1:{ha_port}",
            **{**common, "ha_listen_port": 0},
        ) as (_, unsigned):
            try:
                await unsigned.replication._ask(master.config.broker_addr, RC.GET_ALL_TOPIC_CONFIG)
            except Exception as e:
                assert "username cannot be null." in str(e)
            else:
                raise AssertionError("an unsigned copy was answered")
            assert unsigned.topics.get("AclReplTopic") is None
