"""4.x clients sign unchanged against ACL 2.0, side by side with Apache RocketMQ 5.3.3: both brokers
with the same ACL 2.0 keys and the same users and ACLs (made with signed AUTH_* requests), then the
official Java 4.9.7 client (AclClientRPCHook) and the official C++ client 0.4.4 (session credentials)
produce and consume as a user allowed to, and produce to a topic it is denied: the same outcomes on
both brokers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, have_java, start_rocketmq

from ferromq.acl.signing import Credentials
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.testing import BrokerProcess
from ferromq.testing.process import remoting_request
from tests.interop.acl2_kit import ACL2_CONF, SUPER, provision
from tests.interop.conftest import stop_ferromq
from tests.interop.side_by_side import BROKER_CONF, Endpoint, build_jar, events, run_cpp, run_java

pytestmark = [
    pytest.mark.skipif(
        not have_java(), reason="needs `java` and `mvn` (Apache RocketMQ 5.3.3, the Java client)"
    ),
    pytest.mark.timeout(900),
]

WRITER = ("writer1", "writerSecret1")
READER = ("reader1", "readerSecret1")
TOPIC, DENIED = "Acl2ClientTopic", "Acl2DeniedTopic"
GROUPS = ("Acl2JavaGroup", "Acl2CppGroup")
ACLS = {
    WRITER[0]: [(f"Topic:{TOPIC}", ["Pub"], "Allow"), (f"Topic:{DENIED}", ["Pub"], "Deny")],
    READER[0]: [(f"Topic:{TOPIC}", ["Sub"], "Allow"), *((f"Group:{g}", ["Sub"], "Allow") for g in GROUPS)],
}


def provisioned(ep: Endpoint) -> None:
    """The same users and ACLs on either broker, over the wire."""
    users = {(name, password): ACLS[name] for name, password in (WRITER, READER)}
    provision(ep.broker_addr, users, [TOPIC, DENIED])


@contextmanager
def broker(kind: str, workdir: Path, conf: dict[str, str] | None = None) -> Iterator[Endpoint]:
    conf = conf or {**BROKER_CONF, **ACL2_CONF}
    workdir.mkdir(parents=True, exist_ok=True)
    if kind == "ferromq":
        server = BrokerProcess(workdir, conf).start()
        try:
            yield Endpoint(kind, server.namesrv, server.broker_addr, workdir)
        finally:
            stop_ferromq(server)
    else:
        mq = start_rocketmq(workdir / "rocketmq", conf, version=ROCKETMQ_5_VERSION)
        try:
            yield Endpoint(kind, mq.namesrv, mq.broker_addr, workdir)
        finally:
            mq.stop(kill=True)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Endpoint]]:
    build_jar()
    with ExitStack() as stack:
        eps = {
            k: stack.enter_context(broker(k, tmp_path_factory.mktemp(f"acl2c-{k}")))
            for k in ("ferromq", "rocketmq")
        }
        for ep in eps.values():
            provisioned(ep)
        yield eps


def test_java_4x_client_signs_against_acl2(brokers: dict[str, Endpoint]) -> None:
    results = {}
    for kind, ep in brokers.items():
        common = {"topic": TOPIC, "timeout": 60}
        sent = run_java(
            ep, "AclProbe", "produce", ak=WRITER[0], sk=WRITER[1], group="Acl2JavaPG", count=3, **common
        )
        denied = run_java(
            ep,
            "AclProbe",
            "produce",
            ak=WRITER[0],
            sk=WRITER[1],
            group="Acl2JavaPG",
            count=1,
            **{**common, "topic": DENIED},
        )
        got = run_java(
            ep, "AclProbe", "consume", ak=READER[0], sk=READER[1], group=GROUPS[0], expect=3, **common
        )
        results[kind] = {
            "sent": [(e["event"], e.get("status")) for e in sent],
            "denied": [
                (e["event"], e.get("code"), (e.get("remark") or "").replace("127.0.0.1", "<ip>"))
                for e in denied
            ],
            "received": events(got, "received")[0]["bodies"],
        }
    print(json.dumps(results, indent=1))
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1)
    assert results["ferromq"]["sent"] == [("sent", "SEND_OK")] * 3
    assert results["ferromq"]["received"] == ["acl-0", "acl-1", "acl-2"]
    assert results["ferromq"]["denied"][0][:2] == ("refused", 16)


def test_cpp_client_signs_against_acl2(brokers: dict[str, Endpoint]) -> None:
    results = {}
    for kind, ep in brokers.items():
        keys = {"access_key": WRITER[0], "secret_key": WRITER[1]}
        sent = run_cpp(ep, "produce", topic=TOPIC, group="Acl2CppPG", count=3, prefix="c", **keys)
        denied = run_cpp(ep, "produce", topic=DENIED, group="Acl2CppPG", count=1, keep_going=True, **keys)
        got = run_cpp(
            ep,
            "push",
            topic=TOPIC,
            group=GROUPS[1],
            expect=3,
            expect_prefix="c",
            access_key=READER[0],
            secret_key=READER[1],
        )
        results[kind] = {
            "sent": sorted(s["status"] for s in sent["sent"]),
            "denied": (len(denied["sent"]), len(denied["errors"])),
            "received": len(got["received"]),
        }
    print(json.dumps(results, indent=1))
    assert results["ferromq"] == results["rocketmq"], json.dumps(results, indent=1)
    # At least its own three (the Java test may have sent to the same topic before).
    assert results["ferromq"]["denied"] == (0, 1) and results["ferromq"]["received"] >= 3


PLAIN_ACL = """accounts:
  - accessKey: plainWriter
    secretKey: plainWriterSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=PUB
      - topicB=PUB|SUB
      - topicC=DENY
    groupPerms:
      - groupA=SUB
  - accessKey: plainAdmin
    secretKey: plainAdminSecret
    admin: true
"""


def listed(addr: str, code: int) -> Any:
    """A list answer's JSON (AUTH_LIST_USER / AUTH_LIST_ACL), read with the Super user."""
    cmd = RemotingCommand(code=code, ext={})
    Credentials(*SUPER).apply(cmd.ext, cmd.body)
    reply = remoting_request(addr, cmd)
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return orjson.loads(reply.body)


def test_migrate_auth_from_v1_makes_the_same_users_and_acls(tmp_path: Path) -> None:
    """migrateAuthFromV1Enabled imports plain_acl.yml's accounts at start, on both alike."""
    answers = {}
    for kind in ("ferromq", "rocketmq"):
        home = tmp_path / kind / "rocketmq"
        (home / "conf").mkdir(parents=True)
        (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
        conf = {**BROKER_CONF, **ACL2_CONF, "migrateAuthFromV1Enabled": "true", "rocketmqHome": str(home)}
        with broker(kind, tmp_path / kind, conf) as ep:
            answers[kind] = (
                listed(ep.broker_addr, RC.AUTH_LIST_USER),
                listed(ep.broker_addr, RC.AUTH_LIST_ACL),
            )
    print(json.dumps(answers, indent=1))
    assert answers["ferromq"] == answers["rocketmq"]
    users = {u["username"]: u["userType"] for u in answers["ferromq"][0]}
    assert users == {"plainAdmin": "Super", "plainWriter": "Normal", "rocketmq": "Super"}
