"""ACL 2.0 over gRPC side by side with Apache RocketMQ 5.3.3's proxy (local mode, ACL 2.0 in its
broker.conf and rmq-proxy.json) and ferromq (ACL 2.0 in broker.conf guards its gRPC port too): the
same users and ACLs made over the wire on both, then the official Python 5.x client signs a send as
each of them (an allowed user, a user denied by a Deny over a prefix, a user without an entry, a
wrong secret, an unknown user, no credentials, a Super user): sent or refused alike, with the same
status code and text, whether the refusal comes on the client's route query or on its send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import have_java, start_rocketmq_proxy

from ferromq.testing import BrokerProcess
from tests.interop.acl2_kit import ACL2_CONF, SUPER, provision
from tests.interop.conftest import stop_ferromq
from tests.interop.grpc_kit import BROKER_CONF, PROXY_CONF, run_client5

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="Apache RocketMQ 5.3.3's proxy needs `java` and `mvn`"),
    pytest.mark.timeout(900),
]

TOPIC = "Acl2GrpcTopic"
USERS = {
    ("writer1", "writerSecret1"): [(f"Topic:{TOPIC}", ["Pub"], "Allow")],
    ("denied1", "deniedSecret1"): [
        ("Topic:Acl2Grpc*", ["All"], "Allow"),
        (f"Topic:{TOPIC}", ["Pub"], "Deny"),
    ],
    ("bare1", "bareSecret1"): [("Topic:Elsewhere", ["Pub"], "Allow")],
}
CASES = {
    "allowed": ("writer1", "writerSecret1"),
    "denied over a prefix": ("denied1", "deniedSecret1"),
    "no matching entry": ("bare1", "bareSecret1"),
    "wrong secret": ("writer1", "not-the-secret"),
    "unknown user": ("nobody1", "x1234567"),
    "no credentials": None,
    "Super user": SUPER,
}
PROXY_AUTH = {
    "authenticationEnabled": True,
    "authorizationEnabled": True,
    "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
    "authorizationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
}


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    conf = {**BROKER_CONF, **ACL2_CONF}
    with ExitStack() as stack:
        server = BrokerProcess(tmp_path_factory.mktemp("grpc-acl2-ferromq"), conf).start()
        stack.callback(stop_ferromq, server)
        proxy = start_rocketmq_proxy(
            tmp_path_factory.mktemp("grpc-acl2-rocketmq"),
            broker_conf=conf,
            proxy_conf={**PROXY_CONF, **PROXY_AUTH},
        )
        stack.callback(proxy.stop, kill=True)
        for addr in (server.broker_addr, proxy.broker_addr):
            provision(addr, USERS, [TOPIC])
        yield {"ferromq": server.grpc_endpoint, "rocketmq": proxy.grpc_endpoint}


def outcome(result: dict[str, Any]) -> Any:
    """What a signed send came to: sent, or the refusal's status (route or send) without addresses."""
    if result.get("sent"):
        return "sent"
    code, text = result["route"]
    if code != 20000:
        return ("route", code, text.replace("127.0.0.1", "<ip>"))
    return ("send", "40100" in result["message"], result["message"].split("message=")[-1][:160])


def test_signed_grpc_sends_are_allowed_and_refused_alike(endpoints: dict[str, str], tmp_path: Path) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for what, keys in CASES.items():
        env = {"FERROMQ_TEST_AK": keys[0], "FERROMQ_TEST_SK": keys[1]} if keys else {}
        seen[what] = {
            kind: outcome(run_client5(ep, "signed_send", TOPIC, "unused", tmp_path / f"{kind}-{what}", env))
            for kind, ep in endpoints.items()
        }
    print(json.dumps(seen, indent=1))
    for what, both in seen.items():
        assert both["ferromq"] == both["rocketmq"], what
    assert seen["allowed"]["ferromq"] == "sent" and seen["Super user"]["ferromq"] == "sent"
    assert seen["no credentials"]["ferromq"] == ("route", 40100, "username cannot be null.")
