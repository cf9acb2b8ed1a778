"""The plain ACL side by side: ferromq and Apache RocketMQ 4.9.7, both with aclEnable=true and the same
plain_acl.yml (Java reads it from $ROCKETMQ_HOME/conf, ferromq from rocketmqHome/conf), driven by the
official Java client with AclClientRPCHook, the official C++ client with session credentials, ferromq's
Python client and raw frames. What each broker answers must be equal: the response codes, and for a
refusal Java's remark (the AclException and the line of PlainPermissionManager that threw it), except
where ferromq is stricter on purpose (asserted as such). Then both reload the file when it changes."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from apache_rocketmq import start_rocketmq

from ferromq.acl.signing import Credentials
from ferromq.client.message import Message
from ferromq.client.producer import Producer
from ferromq.client.pull_consumer import PullConsumer
from ferromq.errors import BrokerError
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.testing import BrokerProcess
from tests.integration.brokerkit import Client, batch_body, properties, pull_ext, register_broker_request
from tests.interop.conftest import stop_ferromq
from tests.interop.side_by_side import BROKER_CONF, KINDS, Endpoint, build_jar, events, run_cpp, run_java

HAVE_JAVA = shutil.which("mvn") is not None and shutil.which("java") is not None

pytestmark = [
    pytest.mark.skipif(
        not HAVE_JAVA, reason="the side-by-side tests need `java` and `mvn` (Apache RocketMQ)"
    ),
    pytest.mark.timeout(900),
]

PRODUCER = ("producerAK", "producerSecret")
CONSUMER = ("consumerAK", "consumerSecret")
ADMIN = ("adminAK1", "adminSecret")
WHITE = ("whiteAK1", "whiteSecret")
TOPICS = ("AclTopic", "JavaAclTopic", "CppAclTopic", "PyAclTopic")
GROUPS = ("AclGroup", "JavaAclGroup", "CppAclGroup", "PyAclGroup")
PLAIN_ACL = f"""globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
{"".join(f"      - {t}=PUB{chr(10)}" for t in TOPICS)}      - DeniedTopic=DENY
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
{"".join(f"      - {t}=SUB{chr(10)}" for t in TOPICS)}    groupPerms:
{"".join(f"      - {g}=SUB{chr(10)}" for g in GROUPS)}  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {WHITE[0]}
    secretKey: {WHITE[1]}
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
"""


@contextmanager
def acl_broker(kind: str, workdir: Path) -> Iterator[Endpoint]:
    """A broker with aclEnable=true and PLAIN_ACL in <home>/conf/plain_acl.yml."""
    home = workdir / "home" if kind == "ferromq" else workdir / "rocketmq"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    conf = {**BROKER_CONF, "aclEnable": "true"}
    if kind == "ferromq":
        # ferromq's name server takes registrations only from an admin account (Java's checks nothing).
        ours = {
            **conf,
            "rocketmqHome": str(home),
            "namesrvAclEnable": "true",
            "namesrvAccessKey": ADMIN[0],
            "namesrvSecretKey": ADMIN[1],
        }
        server = BrokerProcess(workdir, ours).start()
        try:
            yield Endpoint(kind, server.namesrv, server.broker_addr, home)
        finally:
            stop_ferromq(server)
    else:
        mq = start_rocketmq(home, conf)
        try:
            yield Endpoint(kind, mq.namesrv, mq.broker_addr, home)
        finally:
            mq.stop(kill=True)  # a reference broker: nothing reads its store afterwards


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Endpoint]]:
    build_jar()
    with ExitStack() as stack:
        yield {k: stack.enter_context(acl_broker(k, tmp_path_factory.mktemp(f"acl-{k}"))) for k in KINDS}


def acl_file(ep: Endpoint) -> Path:
    return ep.workdir / "conf" / "plain_acl.yml"


async def _signed(
    addr: str, code: int, ext: dict[str, Any], keys: tuple[str, str] | None, body: bytes
) -> Any:
    client = await Client().connect(int(addr.rsplit(":", 1)[1]))
    try:
        cmd = RemotingCommand(code=code, ext={k: str(v) for k, v in ext.items()}, body=body, version=453)
        if keys is not None:
            Credentials(*keys).apply(cmd.ext, cmd.body)
        return await client.conn.request(cmd, 15.0)
    finally:
        await client.close()


def signed(
    ep: Endpoint, code: int, ext: dict[str, Any], keys: tuple[str, str] | None, body: bytes = b""
) -> Any:
    """One raw request on its own connection, signed with `keys` (None: unsigned)."""
    return asyncio.run(_signed(ep.broker_addr, code, ext, keys, body))


def send_v2(topic: str, queue_id: int = 0) -> dict[str, Any]:
    return {
        "a": "RawAclPG",
        "b": topic,
        "c": "TBW102",
        "d": 4,
        "e": queue_id,
        "f": 0,
        "g": int(time.time() * 1000),
        "h": 0,
        "i": properties(WAIT="true"),
        "j": 0,
        "k": "false",
        "m": "false",
    }


# name, code, ext, keys, body; the topic AclTopic exists (created by the admin account first).
RAW_CASES: list[tuple[str, int, dict[str, Any], tuple[str, str] | None, bytes]] = [
    ("allowed send", RC.SEND_MESSAGE_V2, send_v2("AclTopic"), PRODUCER, b"hello"),
    ("no access key", RC.SEND_MESSAGE_V2, send_v2("AclTopic"), None, b"hello"),
    ("unknown access key", RC.SEND_MESSAGE_V2, send_v2("AclTopic"), ("strangerKey", "strangerSecret"), b"x"),
    ("bad signature", RC.SEND_MESSAGE_V2, send_v2("AclTopic"), (PRODUCER[0], "wrongSecret"), b"x"),
    ("topic not listed, default DENY", RC.SEND_MESSAGE_V2, send_v2("OtherTopic"), PRODUCER, b"x"),
    ("topic listed as DENY", RC.SEND_MESSAGE_V2, send_v2("DeniedTopic"), PRODUCER, b"x"),
    ("pull with PUB only", RC.PULL_MESSAGE, pull_ext("AclGroup", "AclTopic", 0, 0), PRODUCER, b""),
    ("pull by a group not listed", RC.PULL_MESSAGE, pull_ext("OtherGroup", "AclTopic", 0, 0), CONSUMER, b""),
    ("allowed pull", RC.PULL_MESSAGE, pull_ext("AclGroup", "AclTopic", 0, 0), CONSUMER, b""),
    (
        "offset update, group denied",
        RC.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "OtherGroup", "topic": "AclTopic", "queueId": 0, "commitOffset": 1},
        CONSUMER,
        b"",
    ),
    ("admin request by a normal account", RC.DELETE_TOPIC_IN_BROKER, {"topic": "AclTopic"}, CONSUMER, b""),
    (
        "topic creation by a normal account",
        RC.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": "Sneaky",
            "readQueueNums": 1,
            "writeQueueNums": 1,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
        },
        PRODUCER,
        b"",
    ),
    (
        "white address: no signature, no permission check",
        RC.SEND_MESSAGE_V2,
        send_v2("AclTopic"),
        (WHITE[0], "notTheSecret"),
        b"x",
    ),
    (
        "request without resources, signed",
        RC.GET_MAX_OFFSET,
        {"topic": "AclTopic", "queueId": 0},
        CONSUMER,
        b"",
    ),
]

# A deliberate difference: name -> (ferromq code, Java code, why).
STRICTER: dict[str, tuple[int, int, str]] = {
    "ACL config read by a normal account": (
        1,
        0,
        "Java 4.9.7 hands every account's secret key to any signed account; ferromq needs an admin account "
        "for the ACL admin requests",
    ),
    "batch send to a denied topic": (
        1,
        0,
        "Java 4.9.7 checks no topic for SEND_BATCH_MESSAGE; ferromq checks it as SEND_MESSAGE_V2",
    ),
}
STRICTER_CASES: list[tuple[str, int, dict[str, Any], tuple[str, str] | None, bytes]] = [
    ("ACL config read by a normal account", RC.GET_BROKER_CLUSTER_ACL_CONFIG, {}, CONSUMER, b""),
    (
        "batch send to a denied topic",
        RC.SEND_BATCH_MESSAGE,
        send_v2("DeniedTopic"),
        PRODUCER,
        batch_body([(b"b0", properties(WAIT="true")), (b"b1", properties(WAIT="true"))]),
    ),
]


def outcomes(
    ep: Endpoint, cases: list[tuple[str, int, dict[str, Any], tuple[str, str] | None, bytes]]
) -> dict[str, Any]:
    out = {}
    for name, code, ext, keys, body in cases:
        r = signed(ep, code, ext, keys, body)
        out[name] = {"code": r.code, "remark": r.remark if r.code == 1 else None}
    return out


def test_raw_frames(brokers: dict[str, Endpoint]) -> None:
    results = {}
    for kind, ep in brokers.items():
        create = {
            "topic": "AclTopic",
            "readQueueNums": 4,
            "writeQueueNums": 4,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
        }
        r = signed(ep, RC.UPDATE_AND_CREATE_TOPIC, create, ADMIN)
        assert r.code == 0, (kind, r.remark)
        results[kind] = outcomes(ep, RAW_CASES)
        for name, (ours, java, _why) in STRICTER.items():
            got = outcomes(ep, [c for c in STRICTER_CASES if c[0] == name])[name]["code"]
            assert got == (ours if kind == "ferromq" else java), f"{kind}: {name}: {got}"
    ferromq, java = results["ferromq"], results["rocketmq"]
    differ = [f"{n}: ferromq {ferromq[n]} / rocketmq {java[n]}" for n in ferromq if ferromq[n] != java[n]]
    assert not differ, "\n".join(differ)
    # The cases do what their names say (on both, as they agree).
    assert ferromq["allowed send"]["code"] == 0 and ferromq["allowed pull"]["code"] == 0
    assert ferromq["white address: no signature, no permission check"]["code"] == 0
    assert ferromq["bad signature"]["remark"] == (
        "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=producerAK, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:683)"
    )


def test_java_client_with_acl_hook(brokers: dict[str, Endpoint]) -> None:
    results = {}
    for kind, ep in brokers.items():
        common = {"topic": "JavaAclTopic", "timeout": 60}
        sent = run_java(
            ep, "AclProbe", "produce", ak=PRODUCER[0], sk=PRODUCER[1], group="JavaAclPG", count=3, **common
        )
        denied = run_java(
            ep,
            "AclProbe",
            "produce",
            ak=PRODUCER[0],
            sk=PRODUCER[1],
            group="JavaAclPG",
            count=1,
            **{**common, "topic": "DeniedTopic"},
        )
        anonymous = run_java(ep, "AclProbe", "produce", group="JavaAclPG", count=1, **common)
        got = run_java(
            ep,
            "AclProbe",
            "consume",
            ak=CONSUMER[0],
            sk=CONSUMER[1],
            group="JavaAclGroup",
            expect=3,
            **common,
        )
        results[kind] = {
            "sent": [(e["event"], e.get("status")) for e in sent],
            "denied": [(e["event"], e.get("code"), e.get("remark")) for e in denied],
            "anonymous": [(e["event"], e.get("code"), e.get("remark")) for e in anonymous],
            "received": events(got, "received")[0]["bodies"],
        }
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1)
    assert results["ferromq"]["sent"] == [("sent", "SEND_OK")] * 3
    assert results["ferromq"]["received"] == ["acl-0", "acl-1", "acl-2"]
    assert results["ferromq"]["denied"][0][:2] == ("refused", 1)


def test_cpp_client_with_session_credentials(brokers: dict[str, Endpoint]) -> None:
    results = {}
    for kind, ep in brokers.items():
        keys = {"access_key": PRODUCER[0], "secret_key": PRODUCER[1]}
        sent = run_cpp(ep, "produce", topic="CppAclTopic", group="CppAclPG", count=3, prefix="c", **keys)
        denied = run_cpp(
            ep, "produce", topic="DeniedTopic", group="CppAclPG", count=1, keep_going=True, **keys
        )
        got = run_cpp(
            ep,
            "push",
            topic="CppAclTopic",
            group="CppAclGroup",
            expect=3,
            expect_prefix="c",
            access_key=CONSUMER[0],
            secret_key=CONSUMER[1],
        )
        results[kind] = {
            "sent": sorted(s["status"] for s in sent["sent"]),
            "denied": (len(denied["sent"]), len(denied["errors"])),
            "received": sorted(r["id"] for r in got["received"]),
        }
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1)
    assert results["ferromq"]["denied"] == (0, 1)
    assert len(results["ferromq"]["received"]) == 3


async def _python_client(ep: Endpoint) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with Producer("PyAclPG", ep.namesrv, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as p:
        out["sent"] = [
            (await p.send(Message("PyAclTopic", f"py-{i}".encode()))).status.name for i in range(3)
        ]
        try:
            await p.send(Message("DeniedTopic", b"no"))
            out["denied"] = "sent"
        except BrokerError as e:
            out["denied"] = (int(e.code), str(e))
    async with PullConsumer(
        "PyAclGroup", ep.namesrv, access_key=CONSUMER[0], secret_key=CONSUMER[1], auto_commit=False
    ) as consumer:
        consumer.assign(await consumer.fetch_queues("PyAclTopic"))
        got: list[str] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.body.decode() for m in await consumer.poll(1.0)]
        out["received"] = sorted(got)
    return out


def test_python_client_with_credentials(brokers: dict[str, Endpoint]) -> None:
    results = {kind: asyncio.run(asyncio.wait_for(_python_client(ep), 120)) for kind, ep in brokers.items()}
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1)
    assert results["ferromq"]["received"] == ["py-0", "py-1", "py-2"]


def test_acl_admin_requests(brokers: dict[str, Endpoint]) -> None:
    results = {}
    for kind, ep in brokers.items():
        newbie = ("newbieKey1", "newbieSecret")
        steps: dict[str, Any] = {}
        update = {
            "accessKey": newbie[0],
            "secretKey": newbie[1],
            "topicPerms": "AclTopic=SUB",
            "defaultTopicPerm": "DENY",
            "admin": "false",
        }
        steps["create account"] = signed(ep, RC.UPDATE_AND_CREATE_ACL_CONFIG, update, ADMIN).code
        steps["new account reads"] = signed(
            ep, RC.GET_MAX_OFFSET, {"topic": "AclTopic", "queueId": 0}, newbie
        ).code
        steps["new account sends"] = signed(ep, RC.SEND_MESSAGE_V2, send_v2("AclTopic"), newbie, b"x").remark
        bad = signed(ep, RC.UPDATE_AND_CREATE_ACL_CONFIG, {**update, "topicPerms": "AclTopic=ALL"}, ADMIN)
        steps["bad permission"] = (bad.code, bad.remark)
        config = signed(ep, RC.GET_BROKER_CLUSTER_ACL_CONFIG, {}, ADMIN)
        body = orjson.loads(config.body)
        steps["config"] = {
            "globalWhiteAddrs": body.get("globalWhiteAddrs"),
            "accounts": {a["accessKey"]: a for a in body["plainAccessConfigs"]},
        }
        info = signed(ep, RC.GET_BROKER_CLUSTER_ACL_INFO, {}, ADMIN)
        steps["info fields"] = (
            info.code,
            sorted(
                k
                for k in info.ext
                if k in ("version", "allAclFileVersion", "brokerName", "brokerAddr", "clusterName")
            ),
        )
        steps["delete"] = signed(ep, RC.DELETE_ACL_CONFIG, {"accessKey": newbie[0]}, ADMIN).code
        again = signed(ep, RC.DELETE_ACL_CONFIG, {"accessKey": newbie[0]}, ADMIN)
        steps["delete again"] = (again.code, again.remark)
        white = {"globalWhiteAddrs": "10.10.103.*,10.10.104.*", "aclFileFullPath": str(acl_file(ep))}
        steps["global white"] = signed(ep, RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, white, ADMIN).code
        results[kind] = steps
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1, default=str)
    assert results["ferromq"]["create account"] == 0 and results["ferromq"]["delete"] == 0


def test_hot_reload(brokers: dict[str, Endpoint]) -> None:
    late = ("lateComer1", "lateSecret1")
    for ep in brokers.values():
        acl_file(ep).write_text(
            PLAIN_ACL + f"  - accessKey: {late[0]}\n    secretKey: {late[1]}\n    defaultTopicPerm: SUB\n"
        )
    for kind, ep in brokers.items():
        deadline = time.monotonic() + 30  # both poll the file every 5 s
        while True:
            r = signed(ep, RC.GET_MAX_OFFSET, {"topic": "AclTopic", "queueId": 0}, late)
            if r.code == 0:
                break
            assert time.monotonic() < deadline, f"{kind} did not reload plain_acl.yml: {r.remark}"
            time.sleep(0.2)


def test_java_admin_tool(brokers: dict[str, Endpoint]) -> None:
    """DefaultMQAdminExt (what mqadmin's ACL commands use) reads and changes the ACL of both brokers."""
    results = {}
    for kind, ep in brokers.items():
        steps = run_java(
            ep,
            "AclProbe",
            "admin",
            ak=ADMIN[0],
            sk=ADMIN[1],
            broker=ep.broker_addr,
            aclFile=str(acl_file(ep)),
        )
        results[kind] = steps
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1)
    names = [e["event"] for e in results["ferromq"]]
    assert names == ["created", "config", "versions", "white", "deleted", "refused"]
    made = [
        a for a in events(results["ferromq"], "config")[0]["accounts"] if a["accessKey"] == "javaMadeKey1"
    ]
    assert made and made[0]["topicPerms"] == ["T1=PUB", "T2=PUB|SUB"]


def test_name_server_hijack(brokers: dict[str, Endpoint]) -> None:
    """A deliberate difference (ferromq's own protection; last in the module, as it hijacks Java's routes):
    an unsigned REGISTER_BROKER that claims broker-a from another address is taken by Java 4.9.7's name
    server and refused by ferromq's."""
    fake, body = register_broker_request("broker-a", "127.0.0.1:1")
    codes = {}
    for kind, ep in brokers.items():
        r = asyncio.run(_signed(ep.namesrv, RC.REGISTER_BROKER, fake, None, body))
        codes[kind] = r.code
        if kind == "ferromq":
            assert "No accessKey is configured" in (r.remark or "")
            signed_fake = asyncio.run(_signed(ep.namesrv, RC.REGISTER_BROKER, fake, ADMIN, body))
            assert signed_fake.code == 16 and "cannot take it over" in (signed_fake.remark or "")
    assert codes == {"ferromq": 1, "rocketmq": 0}
