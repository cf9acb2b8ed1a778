"""ACL 2.0 over gRPC, with the official Python 5.x client. The gRPC front (crates/grpc) serves the
signed calls of a 5.x client itself with an ACL on: the
official Python 5.x client, signing as a user ACL 2.0 allows, sends, receives and acks, and the
front answers its sends and receives (Rust checks the MQv2-HMAC-SHA1 signature against the rules
Python pushed); a user whose ACL changes to Deny is refused at once (the rules follow the change),
and calls in doubt (unsigned, another user) are left to Python, which refuses with Java's texts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ferromq import _store
from ferromq.auth.model import (
    Acl,
    Action,
    Decision,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserStatus,
)
from ferromq.broker.topics import TopicConfig
from ferromq.testing import Broker
from tests.interop.grpc_kit import arun_client5

pytestmark = [pytest.mark.timeout(600)]

TOPIC, GROUP = "FrontAuthTopic", "FrontAuthGroup"
USER = ("frontUser", "frontSecret1")
ACL2 = {
    "authentication_enabled": True,
    "authorization_enabled": True,
    "init_authentication_user": '{"username": "rocketmq", "password": "12345678"}',
}


def front(b: Broker) -> _store.GrpcFront:
    grpc_server = b.broker.grpc
    assert grpc_server is not None and grpc_server._front is not None
    return grpc_server._front


def allow(decision: Decision) -> Acl:
    entries = (
        PolicyEntry(Resource.topic(TOPIC), (Action.PUB, Action.SUB), (), decision),
        PolicyEntry(Resource.group(GROUP), (Action.SUB,), (), Decision.ALLOW),
    )
    return Acl(User(USER[0]).subject, (Policy(PolicyType.CUSTOM, entries),))


def test_signed_calls_of_an_allowed_user_are_served_by_the_front(tmp_path: Path) -> None:
    async def main() -> None:
        async with Broker(store_dir=tmp_path / "broker", settings=ACL2) as b:
            auth = b.broker.auth
            assert auth is not None
            b.broker.topics.update(TopicConfig(TOPIC, 4, 4))
            auth.metadata.create_user(User(*USER))
            auth.metadata.put_acl(allow(Decision.ALLOW))
            env = {"FERROMQ_TEST_AK": USER[0], "FERROMQ_TEST_SK": USER[1]}
            sends, receives = front(b).sends_answered, front(b).receives_answered
            result = await arun_client5(b.grpc_endpoint, "roundtrip", TOPIC, GROUP, tmp_path / "c1", env)
            assert result["ids_match"] and len(result["received"]) == 3, result
            assert front(b).sends_answered - sends == 3
            # The group's first pop is Python's (it makes the group's retry topic).
            assert front(b).receives_answered - receives >= 1
            # Denied now: the front no longer serves the user's sends, and Python refuses them.
            auth.metadata.put_acl(allow(Decision.DENY))
            sends = front(b).sends_answered
            refused = await arun_client5(b.grpc_endpoint, "signed_send", TOPIC, GROUP, tmp_path / "c2", env)
            assert front(b).sends_answered == sends
            assert refused["sent"] is False, refused

    asyncio.run(asyncio.wait_for(main(), 500))


OK, UNAUTHORIZED = 20000, 40100
PREFIX = Resource(ResourceType.TOPIC, "FrontAuth", ResourcePattern.PREFIXED)


def test_acl2_refusals_over_grpc_are_javas(tmp_path: Path) -> None:
    """Each refusal is UNAUTHORIZED with 5.3.3's text, first on the client's QueryRoute (Pub or Sub
    on the topic), else on its send: no signature, a wrong secret, an unknown or disabled user, a
    user without an entry, a Deny over a broader Allow; a prefix entry and a Super user pass."""
    users = {
        "writer1": (
            "writerSecret1",
            (PolicyEntry(Resource.topic(TOPIC), (Action.PUB,), (), Decision.ALLOW),),
        ),
        "reader1": (
            "readerSecret1",
            (PolicyEntry(Resource.topic("Other"), (Action.SUB,), (), Decision.ALLOW),),
        ),
        "denied1": (
            "deniedSecret1",
            (
                PolicyEntry(PREFIX, (Action.ALL,), (), Decision.ALLOW),
                PolicyEntry(Resource.topic(TOPIC), (Action.PUB,), (), Decision.DENY),
            ),
        ),
        "prefix1": (
            "prefixSecret1",
            (PolicyEntry(PREFIX, (Action.PUB,), (), Decision.ALLOW),),
        ),
    }

    async def main() -> None:
        async with Broker(store_dir=tmp_path / "broker", settings=ACL2) as b:
            auth = b.broker.auth
            assert auth is not None
            b.broker.topics.update(TopicConfig(TOPIC, 4, 4))
            for name, (secret, entries) in users.items():
                auth.metadata.create_user(User(name, secret))
                auth.metadata.put_acl(Acl(User(name).subject, (Policy(PolicyType.CUSTOM, entries),)))
            auth.metadata.create_user(User("off1", "offSecret1", user_status=UserStatus.DISABLE))

            async def send(ak: str | None, sk: str | None) -> dict[str, Any]:
                env = {"FERROMQ_TEST_AK": ak, "FERROMQ_TEST_SK": sk} if ak and sk else {}
                return await arun_client5(
                    b.grpc_endpoint, "signed_send", TOPIC, GROUP, tmp_path / f"c-{ak}", env
                )

            for keys in (
                ("writer1", "writerSecret1"),
                ("prefix1", "prefixSecret1"),
                ("rocketmq", "12345678"),
            ):
                assert await send(*keys) == {"sent": True}, keys
            for (ak, sk), why in (
                ((None, None), "username cannot be null."),
                (("writer1", "not-the-secret"), "check signature failed."),
                (("nobody1", "x1234567"), "User:nobody1 is not found."),
                (("off1", "offSecret1"), "User:off1 is disabled."),
                (
                    ("reader1", "readerSecret1"),
                    f"User:reader1 has no permission to access Topic:{TOPIC} from ",
                ),
                (("denied1", "deniedSecret1"), "the decision is deny."),
            ):
                refused = await send(ak, sk)
                assert refused["sent"] is False, (ak, refused)
                code, text = refused["route"]
                if code == UNAUTHORIZED:
                    assert why in text, (ak, refused)
                else:  # the route may be asked for (Sub is enough); the send may not
                    assert code == OK and why in refused["message"] and "40100" in refused["message"], refused

    asyncio.run(asyncio.wait_for(main(), 500))
