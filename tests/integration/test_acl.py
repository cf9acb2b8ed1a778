"""The plain ACL on a real broker (127.0.0.1, port 0, plain_acl.yml under a tmp home): the Python
client with credentials, raw frames refused with Java's code and remark, the ACL admin requests
and a reload when the file changes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.acl.errors import AclError
from ferromq.acl.plain import PlainAcl
from ferromq.acl.signing import Credentials
from ferromq.broker import Broker, load_broker_config
from ferromq.client.admin import Admin
from ferromq.client.message import Message
from ferromq.client.producer import Producer
from ferromq.client.pull_consumer import PullConsumer
from ferromq.errors import BrokerError
from ferromq.namesrv import NameServer
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import MASTER_EPOCH
from ferromq.testing import BrokerProcess
from ferromq.testing.waiting import until
from tests.interop.conftest import stop_ferromq

from .brokerkit import SMALL_STORE, Client, pull_ext, register_broker_request, running

PLAIN_ACL = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: producerAK
    secretKey: producerSecret
    defaultTopicPerm: DENY
    topicPerms:
      - AclTopic=PUB
  - accessKey: consumerAK
    secretKey: consumerSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclTopic=SUB
    groupPerms:
      - AclGroup=SUB
  - accessKey: adminAK1
    secretKey: adminSecret
    admin: true
"""
PRODUCER = ("producerAK", "producerSecret")
CONSUMER = ("consumerAK", "consumerSecret")
ADMIN = ("adminAK1", "adminSecret")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))


def home(tmp_path: Path, text: str = PLAIN_ACL) -> Path:
    conf = tmp_path / "home" / "conf"
    conf.mkdir(parents=True)
    (conf / "plain_acl.yml").write_text(text)
    return tmp_path / "home"


async def signed_call(
    client: Client, code: int, ext: dict[str, Any], keys: tuple[str, str] | None, body: bytes = b""
) -> RemotingCommand:
    """A raw request signed with `keys` (None: unsigned)."""
    cmd = RemotingCommand(code=code, ext={k: str(v) for k, v in ext.items()}, body=body)
    if keys is not None:
        Credentials(*keys).apply(cmd.ext, cmd.body)
    return await client.conn.request(cmd, 10.0)


def java_remark(message: str, where: str) -> str:
    method, line = where.split(":")
    return (
        f"org.apache.rocketmq.acl.common.AclException: {message}, "
        f"org.apache.rocketmq.acl.plain.PlainPermissionManager.{method}(PlainPermissionManager.java:{line})"
    )


def test_python_clients_with_credentials(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path)
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (ns, _broker):
            addr = f"127.0.0.1:{ns.port}"
            async with Admin(addr, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
                await admin.create_topic("AclTopic", 2)
            async with Admin(addr, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as weak:
                with pytest.raises(BrokerError, match="Need admin permission for request code=17"):
                    await weak.create_topic("Nope", 2)
            async with Producer("AclPG", addr, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as p:
                r = await p.send(Message("AclTopic", b"allowed"))
                assert r.queue_offset == 0
                with pytest.raises(BrokerError, match="No default permission for topic:Other") as info:
                    await p.send(Message("Other", b"denied"))
                assert info.value.code == ResponseCode.SYSTEM_ERROR
            async with Producer("AclPG2", addr) as anonymous:
                with pytest.raises(BrokerError, match="No accessKey is configured"):
                    await anonymous.send(Message("AclTopic", b"denied"))
            async with PullConsumer(
                "AclGroup", addr, access_key=CONSUMER[0], secret_key=CONSUMER[1], auto_commit=False
            ) as consumer:
                queues = await consumer.fetch_queues("AclTopic")
                consumer.assign(queues)
                got: list[bytes] = []
                deadline = time.monotonic() + 10
                while not got and time.monotonic() < deadline:
                    got += [m.body for m in await consumer.poll(1.0)]
                assert got == [b"allowed"]
                await consumer.commit()

    run(main())


def test_raw_frames_get_javas_codes_and_remarks(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path)
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (_ns, broker):
            c = await Client().connect(broker.port)
            topic = {"topic": "AclTopic", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
            r = await signed_call(c, RC.UPDATE_AND_CREATE_TOPIC, topic, ADMIN)
            assert r.code == ResponseCode.SUCCESS, r.remark
            send = {
                "a": "PG",
                "b": "AclTopic",
                "c": "TBW102",
                "d": 4,
                "e": 0,
                "f": 0,
                "g": 0,
                "h": 0,
                "i": "",
            }
            cases: list[tuple[str, int, dict[str, Any], tuple[str, str] | None, int, str | None]] = [
                ("allowed send", RC.SEND_MESSAGE_V2, send, PRODUCER, 0, None),
                (
                    "no key",
                    RC.SEND_MESSAGE_V2,
                    send,
                    None,
                    1,
                    java_remark("No accessKey is configured", "validate:663"),
                ),
                (
                    "unknown key",
                    RC.SEND_MESSAGE_V2,
                    send,
                    ("strangerKey", "strangerSecret"),
                    1,
                    java_remark("No acl config for strangerKey", "validate:667"),
                ),
                (
                    "bad signature",
                    RC.SEND_MESSAGE_V2,
                    send,
                    (PRODUCER[0], "wrongSecret"),
                    1,
                    java_remark("Check signature failed for accessKey=producerAK", "validate:683"),
                ),
                (
                    "topic denied",
                    RC.SEND_MESSAGE_V2,
                    {**send, "b": "Other"},
                    PRODUCER,
                    1,
                    java_remark("No default permission for topic:Other", "checkPerm:605"),
                ),
                (
                    "pull by the producer",
                    RC.PULL_MESSAGE,
                    pull_ext("AclGroup", "AclTopic", 0, 0),
                    PRODUCER,
                    1,
                    java_remark("No default permission for topic:AclTopic", "checkPerm:610"),
                ),
                (
                    "group denied",
                    RC.PULL_MESSAGE,
                    pull_ext("OtherGroup", "AclTopic", 0, 0),
                    CONSUMER,
                    1,
                    java_remark("No default permission for group:OtherGroup", "checkPerm:605"),
                ),
                ("allowed pull", RC.PULL_MESSAGE, pull_ext("AclGroup", "AclTopic", 0, 0), CONSUMER, 0, None),
                (
                    "admin request",
                    RC.DELETE_TOPIC_IN_BROKER,
                    {"topic": "AclTopic"},
                    CONSUMER,
                    1,
                    java_remark(
                        "Need admin permission for request code=215, but accessKey=consumerAK is not",
                        "checkPerm:580",
                    ),
                ),
                (
                    "ACL admin request (stricter than Java)",
                    RC.GET_BROKER_CLUSTER_ACL_CONFIG,
                    {},
                    CONSUMER,
                    1,
                    java_remark(
                        "Need admin permission for request code=54, but accessKey=consumerAK is not",
                        "checkPerm:580",
                    ),
                ),
            ]
            for what, code, ext, keys, want, remark in cases:
                r = await signed_call(c, code, ext, keys, b"body" if code == RC.SEND_MESSAGE_V2 else b"")
                assert r.code == want, f"{what}: {r.code} {r.remark}"
                if remark is not None:
                    assert r.remark == remark, what
            await c.close()

    run(main())


def test_acl_admin_requests_and_reload(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path)
        acl_file = root / "conf" / "plain_acl.yml"
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (_ns, broker):
            c = await Client().connect(broker.port)
            ping = {"topic": "AclTopic"}  # GET_MAX_OFFSET needs only a good signature
            newbie = ("newbieKey1", "newbieSecret")
            r = await signed_call(c, RC.GET_MAX_OFFSET, {**ping, "queueId": 0}, newbie)
            assert r.code == 1 and "No acl config for newbieKey1" in (r.remark or "")

            update = {
                "accessKey": newbie[0],
                "secretKey": newbie[1],
                "topicPerms": "t1=PUB,t2=SUB",
                "admin": "false",
            }
            r = await signed_call(c, RC.UPDATE_AND_CREATE_ACL_CONFIG, update, ADMIN)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await signed_call(c, RC.GET_MAX_OFFSET, {**ping, "queueId": 0}, newbie)
            assert "No acl config" not in (r.remark or "")
            r = await signed_call(c, RC.UPDATE_AND_CREATE_ACL_CONFIG, {**update, "secretKey": "short"}, ADMIN)
            assert r.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
            assert r.remark == (
                "The accessKey=newbieKey1 and secretKey=short cannot be null and length should longer than 6"
            )

            r = await signed_call(c, RC.GET_BROKER_CLUSTER_ACL_CONFIG, {}, ADMIN)
            body = orjson.loads(r.body)
            assert body["globalWhiteAddrs"] == ["10.10.103.*"]
            newbie_config = [a for a in body["plainAccessConfigs"] if a["accessKey"] == newbie[0]]
            assert newbie_config == [
                {
                    "accessKey": newbie[0],
                    "admin": False,
                    "secretKey": newbie[1],
                    "topicPerms": ["t1=PUB", "t2=SUB"],
                }
            ]
            r = await signed_call(c, RC.GET_BROKER_CLUSTER_ACL_INFO, {}, ADMIN)
            assert r.code == 0
            assert orjson.loads(r.ext["version"])["counter"] == 1
            assert orjson.loads(r.ext["allAclFileVersion"])[str(acl_file)]["counter"] == 1
            assert r.ext["brokerName"] == "broker-a" and r.ext["brokerAddr"] == broker.config.broker_addr

            r = await signed_call(
                c,
                RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                {"globalWhiteAddrs": "127.0.0.1", "aclFileFullPath": str(acl_file)},
                ADMIN,
            )
            assert r.code == 0, r.remark
            r = await signed_call(c, RC.DELETE_TOPIC_IN_BROKER, {"topic": "Whatever"}, None)
            assert r.code == 0, "127.0.0.1 is globally white now"
            r = await signed_call(
                c,
                RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                {"globalWhiteAddrs": "", "aclFileFullPath": str(acl_file)},
                ADMIN,
            )
            assert r.code == 0, r.remark

            r = await signed_call(c, RC.DELETE_ACL_CONFIG, {"accessKey": newbie[0]}, ADMIN)
            assert r.code == 0
            r = await signed_call(c, RC.DELETE_ACL_CONFIG, {"accessKey": newbie[0]}, ADMIN)
            assert r.code == ResponseCode.DELETE_ACL_CONFIG_FAILED
            assert (
                r.remark == "The accesskey[newbieKey1] corresponding to accessConfig has been deleted failed."
            )

            # Hot reload: an account written into the file by hand works within the watch interval.
            acl_file.write_text(
                PLAIN_ACL
                + "  - accessKey: handWritten1\n    secretKey: handSecret1\n    defaultTopicPerm: PUB\n"
            )

            async def reloaded() -> bool:
                r = await signed_call(
                    c, RC.GET_MAX_OFFSET, {**ping, "queueId": 0}, ("handWritten1", "handSecret1")
                )
                return "No acl config" not in (r.remark or "")

            await until(reloaded, "the ACL file to be reloaded", timeout=20.0)
            # A broken file keeps the ACL as it was.
            acl_file.write_text("accounts: [\n")
            assert broker.acl_watcher is not None and not broker.acl_watcher.poll()
            assert not broker.acl_watcher.poll()  # the same broken files: nothing to do (logged once)
            assert await reloaded()
            await c.close()

    run(main())


def test_acl_needs_a_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_HOME", raising=False)

    async def main() -> None:
        config = load_broker_config(
            None, listen_port=0, store_path_root_dir=str(tmp_path / "store"), acl_enable=True, **SMALL_STORE
        )
        broker = Broker(config, "127.0.0.1")
        with pytest.raises(AclError, match="needs the broker's home"):
            await broker.start()

    run(main())


def test_acl_admin_requests_without_acl(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_ns, broker):
            c = await Client().connect(broker.port)
            r = await c.call(
                RC.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "someKey12", "secretKey": "someSecret"}
            )
            assert r.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
            assert "aclEnable=false" in (r.remark or "")
            r = await c.call(RC.GET_BROKER_CLUSTER_ACL_CONFIG)
            assert r.code == ResponseCode.SYSTEM_ERROR and "aclEnable=false" in (r.remark or "")
            await c.close()

    run(main())


NAMESRV_ACL = """
accounts:
  - accessKey: brokerAdmin1
    secretKey: brokerSecret1
    admin: true
  - accessKey: plainUser1
    secretKey: plainSecret1
"""


def test_name_server_takes_writes_only_from_trusted_brokers(tmp_path: Path) -> None:
    """ferromq's own: RocketMQ 4.9.7's name server takes REGISTER_BROKER from anyone."""

    async def main() -> None:
        root = home(tmp_path, NAMESRV_ACL)
        acl = PlainAcl.locate(str(root), "conf/plain_acl.yml")
        acl.load()
        ns = NameServer("127.0.0.1", 0, acl=acl)
        await ns.start()
        try:
            trusted = {"namesrv_access_key": "brokerAdmin1", "namesrv_secret_key": "brokerSecret1"}
            async with running(tmp_path, namesrv=ns, **trusted) as (_ns, broker):
                assert await ns.wait_registered(broker.config.broker_addr, 10.0)
                c = await Client().connect(ns.port)
                fake, body = register_broker_request("broker-a", "127.0.0.1:1")
                r = await signed_call(c, RC.REGISTER_BROKER, fake, None, body)
                assert r.code == ResponseCode.SYSTEM_ERROR and "No accessKey is configured" in (
                    r.remark or ""
                )
                r = await signed_call(c, RC.REGISTER_BROKER, fake, ("plainUser1", "plainSecret1"), body)
                assert r.code == ResponseCode.SYSTEM_ERROR and "needs an admin account" in (r.remark or "")
                r = await signed_call(c, RC.REGISTER_BROKER, fake, ("brokerAdmin1", "wrongSecret"), body)
                assert "Check signature failed" in (r.remark or "")
                # Even a trusted account cannot take a live broker's name over from another address.
                r = await signed_call(c, RC.REGISTER_BROKER, fake, ("brokerAdmin1", "brokerSecret1"), body)
                assert r.code == ResponseCode.NO_PERMISSION
                assert f"registered from {broker.config.broker_addr}" in (r.remark or "")
                for code, ext in (
                    (RC.UNREGISTER_BROKER, {k: fake[k] for k in ("brokerName", "clusterName", "brokerId")}),
                    (
                        RC.PUT_KV_CONFIG,
                        {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:1"},
                    ),
                    (RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "TBW102"}),
                ):
                    r = await signed_call(c, code, {**ext, "brokerAddr": broker.config.broker_addr}, None)
                    assert r.code == ResponseCode.SYSTEM_ERROR, (code, r.remark)
                assert broker.config.broker_addr in ns.routes.live
                # Reads stay open to unsigned clients.
                r = await signed_call(c, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, None)
                assert r.code == ResponseCode.SUCCESS
                await c.close()
            # The broker's signed UNREGISTER_BROKER at stop was taken.
            assert broker.config.broker_addr not in ns.routes.live
        finally:
            await ns.stop()

    run(main())


def test_non_admin_accounts_cannot_read_secrets_or_move_other_groups_offsets(tmp_path: Path) -> None:
    """Stricter than Java 4.9.7 (which allows every one of these to any signed account): the broker's
    configuration, its maintenance requests and other groups' offsets are the operator's."""

    async def main() -> None:
        root = home(tmp_path)
        secret = {"namesrv_access_key": "brokerAK", "namesrv_secret_key": "brokerSecretValue"}
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root), **secret) as (_ns, broker):
            c = await Client().connect(broker.port)
            topic = {"topic": "AclTopic", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
            r = await signed_call(c, RC.UPDATE_AND_CREATE_TOPIC, topic, ADMIN)
            assert r.code == ResponseCode.SUCCESS, r.remark
            offset = {"consumerGroup": "AclGroup", "topic": "AclTopic", "queueId": 0, "commitOffset": 0}
            r = await signed_call(c, RC.UPDATE_CONSUMER_OFFSET, offset, CONSUMER)
            assert r.code == ResponseCode.SUCCESS, r.remark

            def admin_only(code: int) -> str:
                return java_remark(
                    f"Need admin permission for request code={code}, but accessKey=consumerAK is not",
                    "checkPerm:580",
                )

            refused: list[tuple[str, int, dict[str, Any], str]] = [
                ("broker config", RC.GET_BROKER_CONFIG, {}, admin_only(RC.GET_BROKER_CONFIG)),
                (
                    "delete expired CommitLog",
                    RC.DELETE_EXPIRED_COMMITLOG,
                    {},
                    admin_only(RC.DELETE_EXPIRED_COMMITLOG),
                ),
                (
                    "clean expired consume queues",
                    RC.CLEAN_EXPIRED_CONSUMEQUEUE,
                    {},
                    admin_only(RC.CLEAN_EXPIRED_CONSUMEQUEUE),
                ),
                ("clean unused topics", RC.CLEAN_UNUSED_TOPIC, {}, admin_only(RC.CLEAN_UNUSED_TOPIC)),
                (
                    "reset another group's offsets",
                    RC.INVOKE_BROKER_TO_RESET_OFFSET,
                    {"topic": "AclTopic", "group": "OtherGroup", "timestamp": -1, "isForce": "true"},
                    java_remark("No default permission for group:OtherGroup", "checkPerm:605"),
                ),
                (
                    "clone offsets into another group",
                    RC.CLONE_GROUP_OFFSET,
                    {
                        "srcGroup": "AclGroup",
                        "destGroup": "OtherGroup",
                        "topic": "AclTopic",
                        "isOffline": "true",
                    },
                    java_remark("No default permission for group:OtherGroup", "checkPerm:605"),
                ),
            ]
            for what, code, ext, remark in refused:
                r = await signed_call(c, code, ext, CONSUMER)
                assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, remark), what
            assert broker.offsets.query("OtherGroup", "AclTopic", 0) == -1

            # The group's own SUB permission is enough to clone within it; the admin reads the
            # configuration, without its secrets.
            own = {"srcGroup": "AclGroup", "destGroup": "AclGroup", "topic": "AclTopic", "isOffline": "true"}
            r = await signed_call(c, RC.CLONE_GROUP_OFFSET, own, CONSUMER)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await signed_call(c, RC.GET_BROKER_CONFIG, {}, ADMIN)
            assert r.code == ResponseCode.SUCCESS, r.remark
            text = r.body.decode()
            assert "namesrvAccessKey=brokerAK" in text and "brokerName=broker-a" in text
            assert "brokerSecretValue" not in text and "namesrvSecretKey" not in text
            await c.close()

    run(main())


def test_serve_with_acl_guards_its_name_server(tmp_path: Path) -> None:
    """`ferromq serve` with aclEnable=true: its name server takes route changes only signed (its own
    broker signs with an account made up in the process, with none configured), so an unsigned fake
    registration cannot redirect a topic and an unsigned write cannot remove the broker."""
    root = home(tmp_path)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-a\naclEnable=true\nrocketmqHome={root}\n")
    server = BrokerProcess(tmp_path, conf).start()

    async def main() -> None:
        admin_keys = {"access_key": ADMIN[0], "secret_key": ADMIN[1]}
        async with Admin(server.namesrv, **admin_keys) as admin:
            await admin.create_topic("Routed", 2)
        c = await Client().connect(int(server.namesrv.rsplit(":", 1)[1]))
        fake, body = register_broker_request("broker-a", "127.0.0.1:1")
        r = await signed_call(c, RC.REGISTER_BROKER, fake, None, body)
        assert (r.code, r.remark) == (
            ResponseCode.SYSTEM_ERROR,
            java_remark("No accessKey is configured", "validate:663"),
        )
        r = await signed_call(c, RC.REGISTER_BROKER, fake, PRODUCER, body)
        assert r.code == ResponseCode.SYSTEM_ERROR and "needs an admin account" in (r.remark or "")
        for code, ext in (
            (RC.UNREGISTER_BROKER, {k: fake[k] for k in ("brokerName", "clusterName", "brokerId")}),
            (RC.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
            (RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "Routed"}),
        ):
            r = await signed_call(c, code, {**ext, "brokerAddr": server.broker_addr}, None)
            assert r.code == ResponseCode.SYSTEM_ERROR, (code, r.remark)
        r = await signed_call(c, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Routed"}, None)
        assert r.code == ResponseCode.SUCCESS, r.remark
        route = orjson.loads(r.body)
        assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": server.broker_addr}]
        assert all(q["perm"] == 6 for q in route["queueDatas"]), "write permission kept"
        await c.close()

    try:
        run(main())
    finally:
        stop_ferromq(server)


def test_serve_with_acl2_guards_its_name_server(tmp_path: Path) -> None:
    """`ferromq serve` with ACL 2.0 (no plain_acl.yml): its name server takes route changes from its
    own broker alone (an account made up in the process), so it may listen beyond loopback; a
    request signed by anyone else, even ACL 2.0's Super user, cannot redirect or remove a topic."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "brokerName=broker-a\nauthenticationEnabled=true\nauthorizationEnabled=true\n"
        'initAuthenticationUser={"username":"rocketmq","password":"12345678"}\n'
    )
    server = BrokerProcess(tmp_path, conf).start()
    superuser = ("rocketmq", "12345678")

    async def main() -> None:
        async with Admin(server.namesrv, access_key=superuser[0], secret_key=superuser[1]) as admin:
            await admin.create_topic("Routed", 2)
        c = await Client().connect(int(server.namesrv.rsplit(":", 1)[1]))
        fake, body = register_broker_request("broker-a", "127.0.0.1:1")
        for keys in (None, superuser):
            r = await signed_call(c, RC.REGISTER_BROKER, fake, keys, body)
            assert r.code == ResponseCode.SYSTEM_ERROR and "only the broker of this ferromq serve" in (
                r.remark or ""
            )
            r = await signed_call(c, RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "Routed"}, keys)
            assert r.code == ResponseCode.SYSTEM_ERROR, r.remark
        r = await signed_call(c, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Routed"}, None)
        assert r.code == ResponseCode.SUCCESS, r.remark
        route = orjson.loads(r.body)
        assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": server.broker_addr}]
        await c.close()

    try:
        run(main())
    finally:
        stop_ferromq(server)


def test_a_broker_the_name_server_refuses_says_which_keys_to_set(tmp_path: Path) -> None:
    """Issue 41: a broker without namesrvAccessKey that a name server with an ACL refuses kept
    running invisible, with a warning naming no key. It now logs an error naming the keys and keeps
    saying it in its runtime info (namesrvRegistration) until a registration is taken."""

    async def main() -> None:
        root = home(tmp_path, NAMESRV_ACL)
        acl = PlainAcl.locate(str(root), "conf/plain_acl.yml")
        acl.load()
        ns = NameServer("127.0.0.1", 0, acl=acl)
        await ns.start()
        try:
            cfg = load_broker_config(
                None,
                profile="small",
                listen_port=0,
                namesrv_addr=f"127.0.0.1:{ns.port}",
                store_path_root_dir=str(tmp_path / "store"),
            )
            broker = Broker(cfg, "127.0.0.1")
            await broker.start()
            try:
                await until(lambda: bool(broker.registration_refusals), "the refusal", timeout=30)
                c = await Client().connect(broker.port)
                r = await c.call(RC.GET_BROKER_RUNTIME_INFO)
                await c.close()
                text = orjson.loads(r.body)["table"]["namesrvRegistration"]
                assert f"name server 127.0.0.1:{ns.port} refused this broker's registration" in text
                assert "set namesrvAccessKey and namesrvSecretKey in broker.conf" in text
                assert broker.config.broker_addr not in ns.routes.live
            finally:
                await broker.stop()
        finally:
            await ns.stop()

    run(main())


@pytest.mark.parametrize("guarded", [True, False], ids=["acl", "open"])
def test_a_master_of_a_later_controller_epoch_takes_the_broker_id_over_at_once(
    tmp_path: Path, guarded: bool
) -> None:
    """Issue 41: with the name-server ACL, the name servers refused a newly elected master while the
    cut-off old master's registration lived (a 20 s partition cost 48 s without writes). A master
    registers with its controller epoch: a later epoch takes the id over at once, an older one (the
    deposed master coming back) cannot take it back, the same epoch from elsewhere still cannot."""

    async def main() -> None:
        acl = None
        if guarded:
            acl = PlainAcl.locate(str(home(tmp_path, NAMESRV_ACL)), "conf/plain_acl.yml")
            acl.load()
        ns = NameServer("127.0.0.1", 0, acl=acl)
        await ns.start()
        keys = ("brokerAdmin1", "brokerSecret1") if guarded else None
        c = await Client().connect(ns.port)

        async def register(addr: str, epoch: int) -> RemotingCommand:
            ext, body = register_broker_request("broker-e", addr)
            return await signed_call(c, RC.REGISTER_BROKER, {**ext, MASTER_EPOCH: epoch}, keys, body)

        def master() -> str:
            return ns.routes.brokers["broker-e"].addrs[0]

        try:
            assert (await register("127.0.0.1:1001", 1)).code == ResponseCode.SUCCESS
            same = await register("127.0.0.1:1002", 1)
            if guarded:
                assert same.code == ResponseCode.NO_PERMISSION
                assert "cannot take it over" in (same.remark or "")
                assert master() == "127.0.0.1:1001"
            assert (await register("127.0.0.1:1003", 2)).code == ResponseCode.SUCCESS
            assert master() == "127.0.0.1:1003"
            old = await register("127.0.0.1:1001", 1)
            assert (old.code, old.remark) == (
                ResponseCode.NO_PERMISSION,
                "broker broker-e (id 0) is the master of epoch 2 at 127.0.0.1:1003; a registration of "
                "epoch 1 is older",
            )
            assert master() == "127.0.0.1:1003"
        finally:
            await c.close()
            await ns.stop()

    run(main())
