"""ACL 2.0 side by side with Apache RocketMQ 5.3.3: the same broker.conf keys on both brokers
(authentication and authorization on, the same initial Super user), then Apache's own mqadmin 5.3.3
(one JVM per side, signing with $ROCKETMQ_HOME/conf/tools.yml) runs createUser, updateUser, getUser,
listUser, deleteUser, createAcl, updateAcl, getAcl, listAcl, deleteAcl against each: the same output,
refusals included; copyUser and copyAcl (5.3.3 ships them unlisted; the shell registers them)
carry users and ACLs from the Java broker to ferromq and back; and a signed remoting request is
allowed or refused alike on both, with the same code and text.

Java 5.3.3 needs the metadata provider keys (without them its admin requests fail and every signed
request is refused); ferromq reads them and needs none. Run with `-s` to see what was compared.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, have_java

from ferromq.acl.signing import Credentials
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.testing.process import remoting_request
from tests.integration.brokerkit import properties, send_ext
from tests.interop.acl2_kit import ACL2_CONF, SUPER
from tests.interop.mqadmin import MqadminShell
from tests.interop.sides import MQADMIN_CONF, both, serve_both

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="5.3.3's mqadmin and broker need `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

CONF = {**MQADMIN_CONF, "autoCreateTopicEnable": "true", **ACL2_CONF}
# MQClientException / MQBrokerException text: "CODE: 16  DESC: <remark>".
_REFUSAL = re.compile(r"CODE: (\d+)\s+DESC: (.*?)(?:\s+BROKER: \S+)?$", re.MULTILINE)


@dataclass
class Side:
    kind: str
    namesrv: str
    broker_addr: str
    shell: MqadminShell

    def admin(self, subcommand: str, *args: str) -> str:
        return self.shell.run(subcommand, *args, "-b", self.broker_addr)


def _shell(home: Path, namesrv: str) -> MqadminShell:
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "tools.yml").write_text(f"accessKey: {SUPER[0]}\nsecretKey: {SUPER[1]}\n")
    return MqadminShell(home, namesrv, version=ROCKETMQ_5_VERSION)


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    with ExitStack() as stack:
        where = serve_both(stack, tmp_path_factory, "acl2", CONF, ROCKETMQ_5_VERSION)
        shells = both(where, lambda w: _shell(w[2], w[0]))
        for shell in shells.values():
            stack.callback(shell.close)
        yield {k: Side(k, w[0], w[1], shells[k]) for k, w in where.items()}


def normalised(side: Side, out: str) -> str:
    """mqadmin's output without what differs by nature (the broker's address)."""
    return "\n".join(line.rstrip() for line in out.replace(side.broker_addr, "<broker>").splitlines()).strip()


def same(sides: dict[str, Side], subcommand: str, *args: str) -> str:
    outs = both(sides, lambda s: normalised(s, s.admin(subcommand, *args)))
    for kind, value in outs.items():
        print(f"--- {subcommand} {' '.join(args)} [{kind}]\n{value}")
    assert outs["ferromq"] == outs["rocketmq"], f"{subcommand} {args}"
    return str(outs["ferromq"])


def refusal(out: str) -> tuple[int, str]:
    m = _REFUSAL.search(out)
    assert m is not None, f"no refusal in mqadmin's output:\n{out}"
    return int(m.group(1)), m.group(2).strip()


def test_user_commands_answer_alike(sides: dict[str, Side]) -> None:
    assert "success" in same(sides, "createUser", "-u", "alice1", "-p", "alicePass1")
    out = same(sides, "getUser", "-u", "alice1")
    assert "alice1" in out and "alicePass1" in out and "Normal" in out and "enable" in out
    assert refusal(same(sides, "createUser", "-u", "alice1", "-p", "x")) == (16, "The user is existed")
    # mqadmin takes one of -p, -t and -s at a time.
    assert "success" in same(sides, "updateUser", "-u", "alice1", "-p", "alicePass2")
    assert "success" in same(sides, "updateUser", "-u", "alice1", "-s", "disable")
    out = same(sides, "getUser", "-u", "alice1")
    assert "alicePass2" in out and "disable" in out
    assert refusal(same(sides, "updateUser", "-u", "nobody1", "-p", "x")) == (16, "The user is not exist")
    out = same(sides, "listUser")
    assert "alice1" in out and "rocketmq" in out
    assert "success" in same(sides, "deleteUser", "-u", "alice1")
    assert "alice1" not in same(sides, "listUser")


def test_acl_commands_answer_alike(sides: dict[str, Side]) -> None:
    same(sides, "createUser", "-u", "bob1", "-p", "bobPass1")
    assert "success" in same(
        sides, "createAcl", "-s", "User:bob1", "-r", "Topic:Orders*,Group:G1", "-a", "Pub,Sub", "-d", "Allow"
    )
    assert "success" in same(
        sides,
        "updateAcl",
        "-s",
        "User:bob1",
        "-r",
        "Topic:OrdersA",
        "-a",
        "Pub",
        "-d",
        "Deny",
        "-i",
        "10.0.0.0/8",
    )
    out = same(sides, "getAcl", "-s", "User:bob1")
    assert "Topic:Orders*" in out and "Topic:OrdersA" in out and "10.0.0.0/8" in out
    same(sides, "listAcl", "-s", "bob1")
    same(sides, "listAcl", "-r", "OrdersA")
    for args in (
        ("-s", "User:bob1", "-r", "Topic:T", "-a", "Pub", "-d", "Allow", "-i", "10.0.0.300"),
        ("-s", "User:nobody1", "-r", "Topic:T", "-a", "Pub", "-d", "Allow"),
    ):
        out = same(sides, "createAcl", *args)
        assert refusal(out)[0] == 16, out
    assert "success" in same(sides, "deleteAcl", "-s", "User:bob1", "-r", "Topic:OrdersA")
    assert "Topic:OrdersA" not in same(sides, "getAcl", "-s", "User:bob1")


def signed(
    side: Side, code: int, ext: dict[str, Any], keys: tuple[str, str] | None
) -> tuple[int, str | None]:
    cmd = RemotingCommand(code=code, ext={k: str(v) for k, v in ext.items()}, body=b"hello")
    if keys is not None:
        Credentials(*keys).apply(cmd.ext, cmd.body)
    reply = remoting_request(side.broker_addr, cmd)
    return reply.code, (reply.remark or "").replace("127.0.0.1", "<ip>") if reply.code else None


def test_signed_sends_are_allowed_and_refused_alike(sides: dict[str, Side]) -> None:
    same(sides, "createUser", "-u", "carol1", "-p", "carolPass1")
    same(sides, "createAcl", "-s", "User:carol1", "-r", "Topic:Shop*", "-a", "Pub", "-d", "Allow")
    same(sides, "createAcl", "-s", "User:carol1", "-r", "Topic:ShopSecret", "-a", "Pub", "-d", "Deny")
    same(sides, "createUser", "-u", "dave1", "-p", "davePass1")
    carol = ("carol1", "carolPass1")
    cases = {
        "allowed by a prefix": ("ShopA", carol),
        "denied over the prefix": ("ShopSecret", carol),
        "no entry": ("Other", carol),
        "no ACL at all": ("ShopA", ("dave1", "davePass1")),
        "wrong secret": ("ShopA", ("carol1", "not-the-secret")),
        "unknown user": ("ShopA", ("nobody1", "x1234567")),
        "unsigned": ("ShopA", None),
        "a Super user": ("Anything", SUPER),
    }
    answers = {}
    for what, (topic, keys) in cases.items():
        ext = send_ext(topic, 0, properties(TAGS="A"))
        outs = both(sides, lambda s: signed(s, RC.SEND_MESSAGE, ext, keys))  # noqa: B023
        print(f"--- {what}: {outs}")
        assert outs["ferromq"] == outs["rocketmq"], what
        answers[what] = outs["ferromq"]
    assert answers["allowed by a prefix"] == (0, None)
    assert answers["denied over the prefix"] == (
        16,
        "User:carol1 has no permission to access Topic:ShopSecret from <ip>, the decision is deny.",
    )
    assert answers["unsigned"] == (16, "username cannot be null.")


def test_copy_users_and_acls_both_ways(sides: dict[str, Side]) -> None:
    java, ours = sides["rocketmq"], sides["ferromq"]
    java.admin("createUser", "-u", "fromJava1", "-p", "fromJavaPass1")
    java.admin("createAcl", "-s", "User:fromJava1", "-r", "Topic:J1", "-a", "Sub", "-d", "Allow")
    ours.admin("createUser", "-u", "fromFerro1", "-p", "fromFerroPass1", "-t", "Super")
    ours.admin("createAcl", "-s", "User:fromFerro1", "-r", "Group:F1", "-a", "Sub", "-d", "Deny")
    for src, dst, user in ((java, ours, "fromJava1"), (ours, java, "fromFerro1")):
        out = src.shell.run("copyUser", "-f", src.broker_addr, "-t", dst.broker_addr, "-u", user)
        assert "success" in out, out
        out = src.shell.run("copyAcl", "-f", src.broker_addr, "-t", dst.broker_addr, "-s", f"User:{user}")
        assert "success" in out, out
    for user in ("fromJava1", "fromFerro1"):
        same(sides, "getUser", "-u", user)
        same(sides, "getAcl", "-s", f"User:{user}")


def test_absent_users_and_acls_answer_alike(sides: dict[str, Side]) -> None:
    """What is not there: an empty get or list, a delete of nothing, the refusals Java gives."""
    same(sides, "getUser", "-u", "nobody2")
    same(sides, "listUser", "-f", "zzz")
    assert "success" in same(sides, "deleteUser", "-u", "nobody2")
    assert refusal(same(sides, "getAcl", "-s", "User:nobody2")) == (16, "The subject is not exist.")
    assert refusal(same(sides, "deleteAcl", "-s", "User:nobody2")) == (16, "The subject is not exist.")
    same(sides, "createUser", "-u", "erin2", "-p", "erinPass2")
    assert refusal(same(sides, "deleteAcl", "-s", "User:erin2")) == (16, "The acl is not exist.")
    same(sides, "getAcl", "-s", "User:erin2")
    same(sides, "listAcl", "-s", "zzz")
    # A Super user made and changed by the Super user; then deleted.
    assert "success" in same(sides, "createUser", "-u", "boss2", "-p", "bossPass2", "-t", "Super")
    assert "Super" in same(sides, "getUser", "-u", "boss2")
    assert "success" in same(sides, "updateUser", "-u", "boss2", "-t", "Normal")
    assert "Normal" in same(sides, "getUser", "-u", "boss2")
    assert "success" in same(sides, "deleteUser", "-u", "boss2")


def test_normal_callers_answer_alike(sides: dict[str, Side]) -> None:
    """Signed as Normal users: refused the admin requests without Cluster rights; with them, still
    kept from making, changing or deleting a Super user; same codes and texts on both brokers."""
    same(sides, "createUser", "-u", "gus2", "-p", "gusPass2")
    same(sides, "createUser", "-u", "hal2", "-p", "halPass2")
    same(
        sides,
        "createAcl",
        "-s",
        "User:hal2",
        "-r",
        "Cluster:DefaultCluster",
        "-a",
        "Update,Get",
        "-d",
        "Allow",
    )
    gus, hal = ("gus2", "gusPass2"), ("hal2", "halPass2")

    def request(side: Side, code: int, ext: dict[str, str], body: bytes, keys: tuple[str, str]) -> Any:
        cmd = RemotingCommand(code=code, ext=dict(ext), body=body)
        Credentials(*keys).apply(cmd.ext, cmd.body)
        reply = remoting_request(side.broker_addr, cmd)
        return reply.code, (reply.remark or "").replace("127.0.0.1", "<ip>"), reply.body or b""

    cases = {
        "list, no Cluster Get": (RC.AUTH_LIST_USER, {}, b"", gus),
        "create, no Cluster Update": (RC.AUTH_CREATE_USER, {"username": "x2"}, b'{"password":"p"}', gus),
        "create a Super user": (
            RC.AUTH_CREATE_USER,
            {"username": "boss3"},
            b'{"password":"bossPass3","userType":"Super"}',
            hal,
        ),
        "promote oneself": (RC.AUTH_UPDATE_USER, {"username": "hal2"}, b'{"userType":"Super"}', hal),
        "change the Super user": (RC.AUTH_UPDATE_USER, {"username": "rocketmq"}, b'{"password":"x1"}', hal),
        "delete the Super user": (RC.AUTH_DELETE_USER, {"username": "rocketmq"}, b"", hal),
        "create a Normal user": (RC.AUTH_CREATE_USER, {"username": "ida2"}, b'{"password":"idaPass2"}', hal),
        # Answers with bodies, byte for byte.
        "get a user": (RC.AUTH_GET_USER, {"username": "ida2"}, b"", hal),
        "list users": (RC.AUTH_LIST_USER, {"filter": "ida"}, b"", hal),
        "get an ACL": (RC.AUTH_GET_ACL, {"subject": "User:hal2"}, b"", hal),
        "list ACLs": (RC.AUTH_LIST_ACL, {"subjectFilter": "hal2"}, b"", hal),
        "get nothing": (RC.AUTH_GET_USER, {"username": "nobody3"}, b"", hal),
    }
    for what, (code, ext, body, keys) in cases.items():
        outs = both(sides, lambda s: request(s, code, ext, body, keys))  # noqa: B023
        print(f"--- {what}: {outs}")
        assert outs["ferromq"] == outs["rocketmq"], what
    same(sides, "getUser", "-u", "ida2")
