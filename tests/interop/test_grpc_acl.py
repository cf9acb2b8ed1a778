"""The RocketMQ 5.x clients' signed gRPC requests against the broker's plain ACL (aclEnable=true, the same
accounts as remoting): the official Python 5.x client signs with its access key and secret key; a right
signature with PUB on the topic sends, a wrong secret key is refused with "check signature failed.", an
unknown access key with "User:<ak> is not found.", an account without PUB on the topic by the ACL's
permission check, and an unsigned client is refused too (UNAUTHORIZED in every case)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ferromq.broker.topics import TopicConfig
from ferromq.testing import Broker
from tests.interop.grpc_kit import arun_client5

TOPIC = "AclGrpcTopic"
WRITER = ("grpcWriter", "grpcWriterSecret")
READER = ("grpcReader", "grpcReaderSecret")
ADMIN = ("grpcAdmin", "grpcAdminSecret")
PLAIN_ACL = f"""globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {WRITER[0]}
    secretKey: {WRITER[1]}
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=PUB
  - accessKey: {READER[0]}
    secretKey: {READER[1]}
    defaultTopicPerm: DENY
    topicPerms:
      - {TOPIC}=SUB
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
OK, UNAUTHORIZED = 20000, 40100


async def signed_send(endpoint: str, home: Path, ak: str | None, sk: str | None) -> dict[str, Any]:
    env = {"FERROMQ_TEST_AK": ak, "FERROMQ_TEST_SK": sk} if ak is not None and sk is not None else {}
    return await arun_client5(endpoint, "signed_send", TOPIC, "unused", home, env)


@pytest.mark.timeout(600)
def test_signed_grpc_requests_are_checked_against_the_plain_acl(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    settings = {
        "acl_enable": True,
        "rocketmq_home": str(home),
        "namesrv_acl_enable": True,
        "namesrv_access_key": ADMIN[0],
        "namesrv_secret_key": ADMIN[1],
    }

    async def main() -> None:
        async with Broker(store_dir=tmp_path / "broker", settings=settings) as b:
            b.broker.topics.update(TopicConfig(TOPIC, 4, 4))
            ep = b.grpc_endpoint
            ok = await signed_send(ep, tmp_path / "c1", *WRITER)
            assert ok == {"sent": True}, ok
            for (ak, sk), why in (
                ((WRITER[0], "not the secret"), "check signature failed."),
                (("nobody", "x"), "User:nobody is not found."),
                (READER, f"No default permission for topic:{TOPIC}"),
                ((None, None), "username cannot be null."),
            ):
                refused = await signed_send(ep, tmp_path / f"c-{ak}", ak, sk)
                assert refused["sent"] is False, (ak, refused)
                # The client reports a refused route as a failed fetch: its status is the proof.
                code, text = refused["route"]
                if code == UNAUTHORIZED:
                    assert why in text, (ak, refused)
                else:  # the route may be asked for; the send may not
                    assert code == OK and why in refused["message"] and "40100" in refused["message"], refused

    asyncio.run(asyncio.wait_for(main(), 500))
