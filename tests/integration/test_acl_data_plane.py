"""The data plane with aclEnable=true: Python decides, the plane verifies signatures. Signed sends
the ACL allows are stored and answered on the plane's threads (they never reach the Python
dispatcher); every send the plane may not serve (bad signature, unknown or missing key, a topic
without PUB or with DENY) reaches Python, which refuses it with Java's code and remark as before.
Address decisions (white for an account, globally white) and ACL file changes reach the plane.
Signed pulls of a topic and group the account may subscribe to are the plane's too."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson

from ferromq.acl.signing import Credentials
from ferromq.broker import Broker
from ferromq.client.message import Message
from ferromq.client.producer import Producer
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.plane import PlaneServer
from ferromq.testing.waiting import until

from .brokerkit import Client, batch_body, properties, pull_ext, running, send_ext
from .test_acl import ADMIN, CONSUMER, PRODUCER, home, java_remark, signed_call
from .test_data_plane import count_python_requests

SENDS = (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE)
WHITE = ("whiteAK1", "whiteSecret")
PLAIN_ACL = f"""
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: PUB
    topicPerms:
      - DeniedTopic=DENY
      - SubOnly=SUB
  - accessKey: {WHITE[0]}
    secretKey: {WHITE[1]}
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
TOPICS = ("PlaneTopic", "DeniedTopic", "SubOnly")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))


def send_v2(topic: str, queue_id: int = 0) -> dict[str, Any]:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": 0, "h": 0, "i": ""}


def python_sends(seen: Any) -> int:
    return sum(seen[code] for code in SENDS)


async def ready(c: Client, keys: tuple[str, str] | None = ADMIN) -> None:
    """A request Python answers: once its reply is in, Python has taken the connection's open
    (events come in order) and told the plane what its address decides."""
    r = await signed_call(c, RC.GET_MAX_OFFSET, {"topic": "PlaneTopic", "queueId": 0}, keys)
    assert r.code == ResponseCode.SUCCESS, r.remark


async def create_topics(c: Client) -> None:
    for topic in TOPICS:
        ext = {"topic": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        r = await signed_call(c, RC.UPDATE_AND_CREATE_TOPIC, ext, ADMIN)
        assert r.code == ResponseCode.SUCCESS, r.remark


def stored(broker: Broker, topic: str) -> int:
    return sum(broker.store.max_offset(topic, q) for q in range(2))


def test_signed_sends_are_served_by_the_plane_and_the_rest_by_python(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path, PLAIN_ACL)
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (ns, broker):
            assert isinstance(broker.server, PlaneServer)
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            await create_topics(c)
            await ready(c)
            for i in range(18):
                r = await signed_call(
                    c, RC.SEND_MESSAGE_V2, send_v2("PlaneTopic", i % 2), PRODUCER, b"m%d" % i
                )
                assert r.code == ResponseCode.SUCCESS, r.remark
            r = await signed_call(c, RC.SEND_MESSAGE, send_ext("PlaneTopic", 0), PRODUCER, b"v1")
            assert r.code == ResponseCode.SUCCESS, r.remark
            batch = batch_body([(b"b%d" % i, properties(KEYS=f"k{i}")) for i in range(3)])
            r = await signed_call(
                c, RC.SEND_BATCH_MESSAGE, send_ext("PlaneTopic", 1, batch="true"), PRODUCER, batch
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert python_sends(seen) == 0, "signed sends the ACL allows are the plane's"
            assert stored(broker, "PlaneTopic") == 22

            # The Python client with credentials (its first send may beat the open to Python).
            addr = f"127.0.0.1:{ns.port}"
            async with Producer("AclPG", addr, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as p:
                for i in range(20):
                    await p.send(Message("PlaneTopic", b"client %d" % i))
            assert python_sends(seen) <= 1
            assert stored(broker, "PlaneTopic") == 42

            # What the plane may not serve reaches Python, which refuses it as before.
            refusals = [
                ("no key", "PlaneTopic", None, java_remark("No accessKey is configured", "validate:663")),
                (
                    "unknown key",
                    "PlaneTopic",
                    ("strangerKey", "strangerSecret"),
                    java_remark("No acl config for strangerKey", "validate:667"),
                ),
                (
                    "bad signature",
                    "PlaneTopic",
                    (PRODUCER[0], "wrongSecret"),
                    java_remark("Check signature failed for accessKey=producerAK", "validate:683"),
                ),
                (
                    "DENY",
                    "DeniedTopic",
                    PRODUCER,
                    java_remark("No default permission for topic:DeniedTopic", "checkPerm:610"),
                ),
                (
                    "SUB only",
                    "SubOnly",
                    PRODUCER,
                    java_remark("No default permission for topic:SubOnly", "checkPerm:610"),
                ),
            ]
            for what, topic, keys, remark in refusals:
                before = python_sends(seen)
                r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2(topic), keys, b"no")
                assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, remark), what
                assert python_sends(seen) == before + 1, f"{what}: answered by Python"
            # SEND_MESSAGE_V2 with V1 names (the send path reads either): the topic is checked.
            r = await signed_call(c, RC.SEND_MESSAGE_V2, send_ext("DeniedTopic", 0), PRODUCER, b"v1 names")
            assert r.remark == java_remark("No default permission for topic:DeniedTopic", "checkPerm:610")
            # The body changed after signing: the signature no longer matches.
            ext = {k: str(v) for k, v in send_v2("PlaneTopic").items()}
            Credentials(*PRODUCER).apply(ext, b"signed")
            r = await c.conn.request(
                RemotingCommand(code=RC.SEND_MESSAGE_V2, ext=ext, body=b"tampered"), 10.0
            )
            assert r.remark == java_remark("Check signature failed for accessKey=producerAK", "validate:683")
            assert stored(broker, "DeniedTopic") == stored(broker, "SubOnly") == 0
            assert stored(broker, "PlaneTopic") == 42
            await c.close()

    run(main())


def test_white_addresses_are_served_by_the_plane(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path, PLAIN_ACL)
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (_ns, broker):
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            await create_topics(c)
            await ready(c)
            # 127.0.0.1 is in the white account's addresses: its key without a signature will do
            # (nothing else is checked for it, as in Java).
            white = {**send_v2("PlaneTopic"), "AccessKey": WHITE[0]}
            r = await c.call(RC.SEND_MESSAGE_V2, white, b"white")
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert python_sends(seen) == 0
            # Globally white: no key at all, after the ACL reloads (a connection opened before).
            assert broker.acl is not None
            acl_file = root / "conf" / "plain_acl.yml"
            acl_file.write_text(PLAIN_ACL.replace("10.10.103.*", "127.0.0.1"))
            broker.acl.load()
            r = await c.call(RC.SEND_MESSAGE_V2, send_v2("DeniedTopic"), b"anyone")
            assert r.code == ResponseCode.SUCCESS, r.remark
            c2 = await Client().connect(broker.port)
            await ready(c2, None)
            r = await c2.call(RC.SEND_MESSAGE_V2, send_v2("PlaneTopic"), b"anyone")
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert python_sends(seen) == 0
            assert stored(broker, "PlaneTopic") == 2 and stored(broker, "DeniedTopic") == 1
            await c.close()
            await c2.close()

    run(main())


def test_an_acl_file_change_reaches_the_plane(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path, PLAIN_ACL)
        acl_file = root / "conf" / "plain_acl.yml"
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (_ns, broker):
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            await create_topics(c)
            await ready(c)
            r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2("PlaneTopic"), PRODUCER, b"before")
            assert r.code == ResponseCode.SUCCESS and python_sends(seen) == 0
            # The file is changed by hand: PlaneTopic denied, SubOnly now published to.
            acl_file.write_text(
                PLAIN_ACL.replace("SubOnly=SUB", "SubOnly=PUB").replace("DeniedTopic=DENY", "PlaneTopic=DENY")
            )

            async def refused() -> RemotingCommand | None:
                r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2("PlaneTopic"), PRODUCER, b"after")
                return r if r.code != ResponseCode.SUCCESS else None

            r = await until(refused, "the ACL file to be reloaded", interval=0.1)
            assert r.remark == java_remark("No default permission for topic:PlaneTopic", "checkPerm:610")
            before = python_sends(seen)
            r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2("SubOnly"), PRODUCER, b"now allowed")
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert python_sends(seen) == before, "the reloaded rules are the plane's"
            assert stored(broker, "SubOnly") == 1
            await c.close()

    run(main())


PULL_ACL = f"""
accounts:
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms:
      - DeniedTopic=DENY
    groupPerms:
      - DeniedGroup=DENY
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""


def test_signed_pulls_are_served_by_the_plane_and_the_rest_by_python(tmp_path: Path) -> None:
    async def main() -> None:
        root = home(tmp_path, PULL_ACL)
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (_, broker):
            c = await Client().connect(broker.port)
            await create_topics(c)
            await ready(c)
            for topic in ("PlaneTopic", "DeniedTopic"):
                for i in range(5):
                    r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2(topic), ADMIN, b"m%d" % i)
                    assert r.code == ResponseCode.SUCCESS, r.remark
            for group in ("CG", "DeniedGroup"):
                r = await signed_call(
                    c, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, ADMIN, orjson.dumps({"groupName": group})
                )
                assert r.code == ResponseCode.SUCCESS, r.remark
            seen = count_python_requests(broker)
            r = await signed_call(c, RC.PULL_MESSAGE, pull_ext("CG", "PlaneTopic", 0, 0), CONSUMER)
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert len(decode_messages(r.body)) == 5
            # Held on the plane, woken by a send.
            held = asyncio.ensure_future(
                signed_call(c, RC.PULL_MESSAGE, pull_ext("CG", "PlaneTopic", 0, 5, sysFlag=6), CONSUMER)
            )
            await until(lambda: broker.held_pulls, "the pull to be held on the plane")
            assert broker.held_pulls == 1 and broker.hold.held_count == 0
            r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2("PlaneTopic"), ADMIN, b"late")
            assert r.code == ResponseCode.SUCCESS
            r = await asyncio.wait_for(held, 10)
            assert r.code == ResponseCode.SUCCESS and [m.body for m in decode_messages(r.body)] == [b"late"]
            assert seen[RC.PULL_MESSAGE] == 0, "signed pulls the ACL allows are the plane's"
            # What the plane may not serve reaches Python, which refuses it as Java does.
            refusals = [
                (
                    "DeniedTopic",
                    "CG",
                    CONSUMER,
                    "No default permission for topic:DeniedTopic",
                    "checkPerm:610",
                ),
                (
                    "PlaneTopic",
                    "DeniedGroup",
                    CONSUMER,
                    "No default permission for group:DeniedGroup",
                    "checkPerm:610",
                ),
                (
                    "PlaneTopic",
                    "CG",
                    (CONSUMER[0], "wrong"),
                    "Check signature failed for accessKey=" + CONSUMER[0],
                    "validate:683",
                ),
                ("PlaneTopic", "CG", None, "No accessKey is configured", "validate:663"),
            ]
            for n, (topic, group, keys, message, where) in enumerate(refusals, 1):
                r = await signed_call(c, RC.PULL_MESSAGE, pull_ext(group, topic, 0, 0), keys)
                assert r.code == ResponseCode.SYSTEM_ERROR, (topic, group, r.remark)
                assert r.remark == java_remark(message, where)
                assert seen[RC.PULL_MESSAGE] == n
            await c.close()

    run(main())
