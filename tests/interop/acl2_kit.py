"""What the ACL 2.0 side-by-side tests share: the broker.conf keys both brokers get (Java 5.3.3 also
needs its Local metadata providers named), the initial Super user, and users, ACLs and topics made
over the wire with signed requests (AUTH_CREATE_USER, AUTH_CREATE_ACL, UPDATE_AND_CREATE_TOPIC), the
same on either broker."""

from __future__ import annotations

from typing import Any

import orjson

from ferromq.acl.signing import Credentials
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.testing.process import remoting_request

SUPER = ("rocketmq", "12345678")
PROVIDERS = "org.apache.rocketmq.auth.{0}.provider.Local{1}MetadataProvider"
ACL2_CONF = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "authenticationMetadataProvider": PROVIDERS.format("authentication", "Authentication"),
    "authorizationMetadataProvider": PROVIDERS.format("authorization", "Authorization"),
    "initAuthenticationUser": '{"username":"rocketmq","password":"12345678"}',
}
Entry = tuple[str, list[str], str]  # resource, actions, decision


def signed_admin(broker_addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> None:
    """One request signed by the Super user; it must succeed."""
    cmd = RemotingCommand(code=code, ext=dict(ext), body=body)
    Credentials(*SUPER).apply(cmd.ext, cmd.body)
    reply = remoting_request(broker_addr, cmd)
    assert reply.code == ResponseCode.SUCCESS, (broker_addr, code, reply.remark)


def provision(broker_addr: str, users: dict[tuple[str, str], list[Entry]], topics: list[str]) -> None:
    for (name, password), entries in users.items():
        signed_admin(
            broker_addr,
            RC.AUTH_CREATE_USER,
            {"username": name},
            _json({"username": name, "password": password}),
        )
        if entries:
            policy = {
                "policyType": "Custom",
                "entries": [{"resource": r, "actions": a, "decision": d} for r, a, d in entries],
            }
            signed_admin(
                broker_addr,
                RC.AUTH_CREATE_ACL,
                {"subject": f"User:{name}"},
                _json({"subject": f"User:{name}", "policies": [policy]}),
            )
    for topic in topics:
        ext = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": "4",
            "writeQueueNums": "4",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        signed_admin(broker_addr, RC.UPDATE_AND_CREATE_TOPIC, ext)


def _json(value: Any) -> bytes:
    return orjson.dumps(value)
