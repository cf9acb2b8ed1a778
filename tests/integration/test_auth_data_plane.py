"""The data plane with ACL 2.0 on: signed sends and pulls a user's ACL allows are served by the plane
(they never reach the Python dispatcher); one the plane may not serve (unsigned, wrong secret, Deny)
reaches Python, which refuses it. After the user's ACL changes (a restart on changed files), the
plane's decision changes."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import orjson

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from ferromq.remoting.plane import PlaneServer

from .brokerkit import Client, pull_ext, running
from .test_acl import signed_call
from .test_data_plane import count_python_requests

SUPER = ("rocketmq2", "12345678")
ALICE = ("alice", "aliceSecret")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))


def send_v2(topic: str) -> dict[str, Any]:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": 0, "h": 0, "i": ""}


def write_auth(tmp_path: Path, decision: str) -> None:
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True, exist_ok=True)
    users = [
        {"username": SUPER[0], "password": SUPER[1], "userType": "Super", "userStatus": "enable"},
        {"username": ALICE[0], "password": ALICE[1], "userType": "Normal", "userStatus": "enable"},
    ]
    entries = [
        {"resource": "Topic:PlaneTopic", "actions": ["Pub", "Sub"], "decision": decision},
        {"resource": "Group:CG", "actions": ["Sub"], "decision": decision},
    ]
    acls = [{"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": entries}]}]
    (config / "auth_users.json").write_bytes(orjson.dumps({"users": users}))
    (config / "auth_acls.json").write_bytes(orjson.dumps({"acls": acls}))


def test_acl2_sends_are_the_planes_and_an_acl_change_reaches_it(tmp_path: Path) -> None:
    settings = {"authentication_enabled": True, "authorization_enabled": True}

    async def main(decision: str) -> None:
        async with running(tmp_path, **settings) as (_ns, broker):
            assert isinstance(broker.server, PlaneServer)
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            ext = {"topic": "PlaneTopic", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
            r = await signed_call(c, RC.UPDATE_AND_CREATE_TOPIC, ext, SUPER)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await signed_call(c, RC.GET_MAX_OFFSET, {"topic": "PlaneTopic", "queueId": 0}, SUPER)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2("PlaneTopic"), ALICE, b"m")
            if decision == "Allow":
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert seen[RC.SEND_MESSAGE_V2] == 0, "an allowed signed send is the plane's"
            else:
                assert (r.code, r.remark) == (
                    ResponseCode.NO_PERMISSION,
                    "User:alice has no permission to access Topic:PlaneTopic from 127.0.0.1, "
                    "the decision is deny.",
                )
                assert seen[RC.SEND_MESSAGE_V2] == 1, "a denied send is answered by Python"
            before = seen[RC.SEND_MESSAGE_V2]
            refusals = [
                (None, "username cannot be null."),
                ((ALICE[0], "wrongSecret"), "check signature failed."),
            ]
            for keys, remark in refusals:
                r = await signed_call(c, RC.SEND_MESSAGE_V2, send_v2("PlaneTopic"), keys, b"no")
                assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, remark)
            assert seen[RC.SEND_MESSAGE_V2] == before + 2, "refusals are Python's"
            group = orjson.dumps({"groupName": "CG"})
            r = await signed_call(c, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, SUPER, group)
            assert r.code == ResponseCode.SUCCESS, r.remark
            r = await signed_call(c, RC.PULL_MESSAGE, pull_ext("CG", "PlaneTopic", 0, 0), ALICE)
            if decision == "Allow":
                assert r.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND), r.remark
                assert seen[RC.PULL_MESSAGE] == 0, "an allowed signed pull is the plane's"
            else:
                assert r.code == ResponseCode.NO_PERMISSION, r.remark
                assert seen[RC.PULL_MESSAGE] == 1, "a denied pull is answered by Python"
            await c.close()

    write_auth(tmp_path, "Allow")
    run(main("Allow"))
    write_auth(tmp_path, "Deny")
    run(main("Deny"))
