"""ACL 2.0's admin requests (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010) against brokers with ACL 2.0
off, side by side with Apache RocketMQ 5.3.3: neither broker.conf names authentication, so Java has no
metadata providers; each request, unsigned, gets the same code and remark from both brokers (the
checks made before the provider, then Java's "An system error occurred" or, for getAcl and listAcl,
the IllegalStateException its remoting layer reports)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import orjson
import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, have_java, start_rocketmq

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.testing import BrokerProcess
from ferromq.testing.process import remoting_request
from tests.interop.conftest import stop_ferromq

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="Apache RocketMQ 5.3.3 needs `java` and `mvn` on PATH"),
    pytest.mark.timeout(600),
]

CONF = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerIP1": "127.0.0.1"}
_USER = orjson.dumps({"username": "alice1", "password": "alicePass1"})
_ACL = orjson.dumps(
    {
        "subject": "User:alice1",
        "policies": [{"entries": [{"resource": "Topic:T", "actions": ["Pub"], "decision": "Allow"}]}],
    }
)
# (what, code, header fields, body)
CASES: list[tuple[str, int, dict[str, str], bytes]] = [
    ("create user", RC.AUTH_CREATE_USER, {"username": "alice1"}, _USER),
    ("create user, no username", RC.AUTH_CREATE_USER, {}, _USER),
    ("create user, no password", RC.AUTH_CREATE_USER, {"username": "alice1"}, b'{"username":"alice1"}'),
    ("create user, no body", RC.AUTH_CREATE_USER, {"username": "alice1"}, b""),
    ("create user, no username nor body", RC.AUTH_CREATE_USER, {}, b""),
    ("update user", RC.AUTH_UPDATE_USER, {"username": "alice1"}, _USER),
    ("update user, no body", RC.AUTH_UPDATE_USER, {"username": "alice1"}, b""),
    ("delete user", RC.AUTH_DELETE_USER, {"username": "alice1"}, b""),
    ("get user", RC.AUTH_GET_USER, {"username": "alice1"}, b""),
    ("get user, no username", RC.AUTH_GET_USER, {"username": " "}, b""),
    ("list users", RC.AUTH_LIST_USER, {}, b""),
    ("create acl", RC.AUTH_CREATE_ACL, {"subject": "User:alice1"}, _ACL),
    ("create acl, no body", RC.AUTH_CREATE_ACL, {"subject": "User:alice1"}, b""),
    ("update acl", RC.AUTH_UPDATE_ACL, {"subject": "User:alice1"}, _ACL),
    ("update acl, no body", RC.AUTH_UPDATE_ACL, {"subject": "User:alice1"}, b""),
    ("delete acl", RC.AUTH_DELETE_ACL, {"subject": "User:alice1", "resource": "Topic:T"}, b""),
    ("get acl", RC.AUTH_GET_ACL, {"subject": "User:alice1"}, b""),
    ("list acls", RC.AUTH_LIST_ACL, {}, b""),
]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with ExitStack() as stack:
        work = tmp_path_factory.mktemp("auth-off-ferromq")
        server = BrokerProcess(work, dict(CONF)).start()
        stack.callback(stop_ferromq, server)
        mq = start_rocketmq(
            tmp_path_factory.mktemp("auth-off-rocketmq"), dict(CONF), version=ROCKETMQ_5_VERSION
        )
        stack.callback(mq.stop, kill=True)
        yield {"ferromq": server.broker_addr, "rocketmq": mq.broker_addr}


def answer(addr: str, code: int, ext: dict[str, str], body: bytes) -> tuple[int, Any, bytes]:
    reply = remoting_request(addr, RemotingCommand(code=code, ext=dict(ext), body=body))
    return reply.code, reply.remark, reply.body or b""


@pytest.mark.parametrize("what,code,ext,body", CASES, ids=[c[0] for c in CASES])
def test_answers_alike_with_acl2_off(
    brokers: dict[str, str], what: str, code: int, ext: dict[str, str], body: bytes
) -> None:
    outs = {kind: answer(addr, code, ext, body) for kind, addr in brokers.items()}
    print(f"--- {what}: {outs}")
    assert outs["ferromq"] == outs["rocketmq"], what
