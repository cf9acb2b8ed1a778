"""ACL 2.0's users and ACLs managed over the wire (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010) with
`ferromq admin user ...` / `acl ...` against `ferromq serve`: Java 5.3.3's answers and texts, a
Normal user refused the admin requests, only a Super user making Super users, the rules taking effect
at once for remoting and surviving kill -9 right after their acknowledgement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq.acl.signing import Credentials
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.testing import BrokerProcess
from ferromq.testing.process import remoting_request
from tests.integration.brokerkit import properties, send_ext
from tests.interop.conftest import stop_ferromq

pytestmark = [pytest.mark.timeout(300)]

FERROMQ = Path(sys.executable).with_name("ferromq")
SUPER = ("rocketmq", "12345678")
CONF = (
    "brokerName=broker-a\nauthenticationEnabled=true\nauthorizationEnabled=true\nautoCreateTopicEnable=true\n"
    'initAuthenticationUser={"username":"rocketmq","password":"12345678"}\n'
)


def admin(
    server: BrokerProcess, keys: tuple[str, str] | None, *args: str
) -> subprocess.CompletedProcess[str]:
    signing = ["--access-key", keys[0], "--secret-key", keys[1]] if keys else []
    return subprocess.run(
        [str(FERROMQ), "admin", "-n", server.namesrv, "--timeout", "5", *signing, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def ok(server: BrokerProcess, *args: str, keys: tuple[str, str] = SUPER) -> Any:
    r = admin(server, keys, *args, "--json")
    assert r.returncode == 0, f"ferromq admin {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def refused(server: BrokerProcess, code: int, *args: str, keys: tuple[str, str] | None = SUPER) -> str:
    r = admin(server, keys, *args)
    assert r.returncode == code, f"exit {r.returncode}, wanted {code}\n{r.stdout}\n{r.stderr}"
    return r.stderr.strip()


def call(
    server: BrokerProcess, code: int, ext: dict[str, Any], keys: tuple[str, str] | None, body: bytes = b""
) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext={k: str(v) for k, v in ext.items()}, body=body)
    if keys is not None:
        Credentials(*keys).apply(cmd.ext, cmd.body)
    return remoting_request(server.broker_addr, cmd)


def send(server: BrokerProcess, topic: str, keys: tuple[str, str]) -> RemotingCommand:
    return call(server, RC.SEND_MESSAGE, send_ext(topic, 0, properties(TAGS="A")), keys, b"hello")


@pytest.fixture()
def server(tmp_path: Path) -> Any:
    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    s = BrokerProcess(tmp_path, conf, store=tmp_path / "store").start()
    yield s
    stop_ferromq(s)


def test_users_and_acls_over_the_admin_requests(server: BrokerProcess) -> None:
    ok(server, "user", "create", "alice1", "-p", "alicePass1")
    assert ok(server, "user", "get", "alice1") == {
        "username": "alice1",
        "password": "alicePass1",
        "userType": "Normal",
        "userStatus": "enable",
    }
    assert "The user is existed [NO_PERMISSION]" in refused(server, 1, "user", "create", "alice1", "-p", "x")
    assert [u["username"] for u in ok(server, "user", "list")] == ["alice1", "rocketmq"]
    assert [u["username"] for u in ok(server, "user", "list", "--filter", "ali")] == ["alice1"]
    # No entry: refused with Java's text; an Allow on a prefix: allowed; a Deny on the literal wins.
    alice = ("alice1", "alicePass1")
    r = send(server, "OrdersA", alice)
    assert (r.code, r.remark) == (
        ResponseCode.NO_PERMISSION,
        "User:alice1 has no permission to access Topic:OrdersA from 127.0.0.1, no matched policies.",
    )
    ok(server, "acl", "create", "User:alice1", "-r", "Topic:Orders*", "-a", "Pub")
    assert send(server, "OrdersA", alice).code == ResponseCode.SUCCESS
    ok(server, "acl", "update", "User:alice1", "-r", "Topic:OrdersA", "-a", "Pub", "-d", "Deny")
    assert send(server, "OrdersA", alice).remark == (
        "User:alice1 has no permission to access Topic:OrdersA from 127.0.0.1, the decision is deny."
    )
    assert send(server, "OrdersB", alice).code == ResponseCode.SUCCESS
    acl = ok(server, "acl", "get", "User:alice1")
    assert acl == {
        "subject": "User:alice1",
        "policies": [
            {
                "policyType": "Custom",
                "entries": [
                    {"resource": "Topic:Orders*", "actions": ["Pub"], "decision": "Allow"},
                    {"resource": "Topic:OrdersA", "actions": ["Pub"], "decision": "Deny"},
                ],
            }
        ],
    }
    assert ok(server, "acl", "list", "--resource-filter", "OrdersA")[0]["policies"][0]["entries"] == [
        {"resource": "Topic:OrdersA", "actions": ["Pub"], "decision": "Deny"}
    ]
    ok(server, "acl", "delete", "User:alice1", "-r", "Topic:OrdersA")
    assert send(server, "OrdersA", alice).code == ResponseCode.SUCCESS
    # Checks of an ACL to store, with Java's texts.
    for args, text in (
        (("-r", "Topic:T", "-a", "Pub", "-i", "10.0.0.300"), "The source ip is invalid."),
        (("-r", "Topic:T", "-a", "Any"), "The actions can not be Any."),
        (("-r", "Nothing:T", "-a", "Pub"), "The resource is null."),
    ):
        assert text in refused(server, 1, "acl", "create", "User:alice1", *args)
    assert "The subject of User:nobody1 is not exist." in refused(
        server, 1, "acl", "create", "User:nobody1", "-r", "Topic:T", "-a", "Pub"
    )
    # A Normal user may not manage users (Cluster Update), nor read them (Cluster Get).
    text = refused(server, 1, "user", "create", "bob1", "-p", "bobPass1", keys=alice)
    assert "User:alice1 has no permission to access Cluster:DefaultCluster from 127.0.0.1" in text
    assert "no permission" in refused(server, 1, "user", "list", keys=alice)
    # Only a Super user makes a Super user: alice, allowed Cluster Update now, still may not.
    ok(server, "acl", "create", "User:alice1", "-r", "Cluster:DefaultCluster", "-a", "Update,Get")
    r = call(
        server,
        RC.AUTH_CREATE_USER,
        {"username": "boss1"},
        alice,
        orjson.dumps({"password": "p", "userType": "Super"}),
    )
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The super user can only be create by super user",
    )
    ok(server, "user", "create", "bob1", "-p", "bobPass1", keys=alice)
    # A disabled user cannot sign in; deleting a user deletes its ACL.
    ok(server, "user", "update", "alice1", "-s", "disable")
    assert send(server, "OrdersB", alice).remark == "User:alice1 is disabled."
    ok(server, "user", "delete", "alice1")
    assert "The subject is not exist." in refused(server, 1, "acl", "get", "User:alice1")
    assert send(server, "OrdersB", alice).remark == "User:alice1 is not found."
    r = call(server, RC.AUTH_GET_USER, {"username": ""}, SUPER)
    assert (r.code, r.remark) == (ResponseCode.INVALID_PARAMETER, "The username is blank")


def test_an_acknowledged_change_survives_kill_9(server: BrokerProcess) -> None:
    ok(server, "user", "create", "carol1", "-p", "carolPass1")
    ok(server, "acl", "create", "User:carol1", "-r", "Topic:Durable", "-a", "Pub")
    server.stop(kill=True)
    server.start()
    assert ok(server, "user", "get", "carol1")["password"] == "carolPass1"
    assert send(server, "Durable", ("carol1", "carolPass1")).code == ResponseCode.SUCCESS


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


def test_every_code_over_signed_requests(server: BrokerProcess) -> None:
    """The ten codes as mqadmin sends them: headers, UserInfo / AclInfo bodies, answers and texts."""
    user = {"username": "erin1", "password": "erinPass1", "userType": "Normal"}
    r = call(server, RC.AUTH_CREATE_USER, {"username": "erin1"}, SUPER, _json(user))
    # Java leaves the remark it made the answer with.
    assert (r.code, r.remark) == (ResponseCode.SUCCESS, "not set any response code")
    r = call(server, RC.AUTH_CREATE_USER, {}, SUPER, _json(user))
    assert (r.code, r.remark) == (ResponseCode.INVALID_PARAMETER, "The username is blank")
    r = call(server, RC.AUTH_CREATE_USER, {}, SUPER)
    assert (r.code, r.remark) == (ResponseCode.INVALID_PARAMETER, "The username is blank")
    # No body: the NullPointerException Java 5.3.3 answers with on JDK 17.
    r = call(server, RC.AUTH_UPDATE_USER, {"username": "erin1"}, SUPER)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark.startswith('java.lang.NullPointerException: Cannot invoke "org.apache.rocketmq.remoting')
    assert r.remark.endswith("AdminBrokerProcessor.updateUser(AdminBrokerProcessor.java:3046)")
    r = call(server, RC.AUTH_CREATE_USER, {"username": "nopass1"}, SUPER, _json({"username": "nopass1"}))
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "password can not be blank")
    r = call(server, RC.AUTH_UPDATE_USER, {"username": "erin1"}, SUPER, _json({"password": "erinPass2"}))
    assert r.code == ResponseCode.SUCCESS
    r = call(server, RC.AUTH_UPDATE_USER, {"username": "nobody1"}, SUPER, _json({"password": "x"}))
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The user is not exist")
    r = call(server, RC.AUTH_GET_USER, {"username": "erin1"}, SUPER)
    assert r.code == ResponseCode.SUCCESS
    assert orjson.loads(r.body) == {
        "username": "erin1",
        "password": "erinPass2",
        "userType": "Normal",
        "userStatus": "enable",
    }
    # A user that is not there: success with no body.
    r = call(server, RC.AUTH_GET_USER, {"username": "nobody1"}, SUPER)
    assert (r.code, r.body or b"") == (ResponseCode.SUCCESS, b"")
    r = call(server, RC.AUTH_LIST_USER, {"filter": "eri"}, SUPER)
    assert [u["username"] for u in orjson.loads(r.body)] == ["erin1"]
    r = call(server, RC.AUTH_LIST_USER, {"filter": "zzz"}, SUPER)
    assert (r.code, r.body or b"") == (ResponseCode.SUCCESS, b"")

    entry = {"resource": "Topic:Erin*", "actions": ["Pub", "Sub"], "decision": "Allow"}
    acl = {"subject": "User:erin1", "policies": [{"policyType": "Custom", "entries": [entry]}]}
    r = call(server, RC.AUTH_CREATE_ACL, {"subject": "User:erin1"}, SUPER, _json(acl))
    assert r.code == ResponseCode.SUCCESS, r.remark
    deny = {"resource": "Group:G1", "actions": ["Sub"], "decision": "Deny", "sourceIps": ["10.0.0.0/8"]}
    acl2 = {"subject": "User:erin1", "policies": [{"entries": [deny]}]}
    r = call(server, RC.AUTH_UPDATE_ACL, {"subject": "User:erin1"}, SUPER, _json(acl2))
    assert r.code == ResponseCode.SUCCESS, r.remark
    r = call(server, RC.AUTH_GET_ACL, {"subject": "User:erin1"}, SUPER)
    got = orjson.loads(r.body)
    assert got["subject"] == "User:erin1"
    assert [e["resource"] for e in got["policies"][0]["entries"]] == ["Topic:Erin*", "Group:G1"]
    assert got["policies"][0]["entries"][1]["sourceIps"] == ["10.0.0.0/8"]
    r = call(server, RC.AUTH_LIST_ACL, {"subjectFilter": "erin", "resourceFilter": "G1"}, SUPER)
    assert [a["subject"] for a in orjson.loads(r.body)] == ["User:erin1"]
    # The body missing: Java throws outside its future, its remoting layer gives the exception and frame.
    r = call(server, RC.AUTH_CREATE_ACL, {"subject": "User:erin1"}, SUPER)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark.startswith(
        "org.apache.rocketmq.auth.authorization.exception.AuthorizationException: The body of acl is null, "
    )
    r = call(server, RC.AUTH_DELETE_ACL, {"subject": "User:erin1", "resource": "Group:G1"}, SUPER)
    assert r.code == ResponseCode.SUCCESS
    r = call(server, RC.AUTH_GET_ACL, {"subject": "User:erin1"}, SUPER)
    assert [e["resource"] for e in orjson.loads(r.body)["policies"][0]["entries"]] == ["Topic:Erin*"]
    r = call(server, RC.AUTH_DELETE_ACL, {"subject": "User:nobody1"}, SUPER)
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The subject is not exist.")
    r = call(server, RC.AUTH_DELETE_ACL, {"subject": "User:erin1"}, SUPER)
    assert r.code == ResponseCode.SUCCESS
    r = call(server, RC.AUTH_DELETE_ACL, {"subject": "User:erin1"}, SUPER)
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The acl is not exist.")
    r = call(server, RC.AUTH_DELETE_USER, {"username": "erin1"}, SUPER)
    assert r.code == ResponseCode.SUCCESS
    # Deleting a user that is not there succeeds, as in Java.
    r = call(server, RC.AUTH_DELETE_USER, {"username": "erin1"}, SUPER)
    assert r.code == ResponseCode.SUCCESS


def test_only_a_super_user_touches_super_users(server: BrokerProcess) -> None:
    ok(server, "user", "create", "frank1", "-p", "frankPass1")
    ok(server, "acl", "create", "User:frank1", "-r", "Cluster:DefaultCluster", "-a", "Update,Get")
    frank = ("frank1", "frankPass1")
    # Allowed Cluster Update, a Normal user still may not make, promote, change or delete a Super user.
    r = call(server, RC.AUTH_UPDATE_USER, {"username": "frank1"}, frank, _json({"userType": "Super"}))
    assert (r.code, r.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "The super user can only be update by super user",
    )
    r = call(server, RC.AUTH_UPDATE_USER, {"username": "rocketmq"}, frank, _json({"password": "stolen1"}))
    assert (r.code, r.remark) == (
        ResponseCode.NO_PERMISSION,
        "The super user can only be update by super user",
    )
    r = call(server, RC.AUTH_DELETE_USER, {"username": "rocketmq"}, frank)
    assert (r.code, r.remark) == (
        ResponseCode.NO_PERMISSION,
        "The super user can only be update by super user",
    )
    # A Normal user it may manage; the Super user may make a Super user.
    r = call(server, RC.AUTH_CREATE_USER, {"username": "gina1"}, frank, _json({"password": "ginaPass1"}))
    assert r.code == ResponseCode.SUCCESS
    body = _json({"password": "bossPass1", "userType": "Super"})
    r = call(server, RC.AUTH_CREATE_USER, {"username": "boss1"}, SUPER, body)
    assert r.code == ResponseCode.SUCCESS
    assert ok(server, "user", "get", "boss1")["userType"] == "Super"
    # An unsigned request is refused before it reaches the users.
    r = call(server, RC.AUTH_LIST_USER, {}, None)
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "username cannot be null.")


def test_users_and_acls_survive_a_restart(server: BrokerProcess) -> None:
    ok(server, "user", "create", "hank1", "-p", "hankPass1")
    ok(server, "acl", "create", "User:hank1", "-r", "Topic:Kept", "-a", "Pub")
    assert server.stop() == 0
    server.start()
    assert ok(server, "user", "get", "hank1")["password"] == "hankPass1"
    assert ok(server, "acl", "get", "User:hank1")["policies"][0]["entries"][0]["resource"] == "Topic:Kept"
    assert send(server, "Kept", ("hank1", "hankPass1")).code == ResponseCode.SUCCESS


def test_an_acknowledged_create_survives_kill_9_at_once(server: BrokerProcess) -> None:
    """kill -9 straight after the acknowledgement of the raw request, with no other request between."""
    body = _json({"password": "ivyPass1"})
    assert call(server, RC.AUTH_CREATE_USER, {"username": "ivy1"}, SUPER, body).code == ResponseCode.SUCCESS
    acl = {"policies": [{"entries": [{"resource": "Topic:Ivy", "actions": ["Pub"], "decision": "Allow"}]}]}
    r = call(server, RC.AUTH_CREATE_ACL, {"subject": "User:ivy1"}, SUPER, _json(acl))
    assert r.code == ResponseCode.SUCCESS
    server.stop(kill=True)
    server.start()
    assert send(server, "Ivy", ("ivy1", "ivyPass1")).code == ResponseCode.SUCCESS


@pytest.fixture()
def plain_server(tmp_path: Path) -> Any:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\n")
    s = BrokerProcess(tmp_path, conf, store=tmp_path / "store").start()
    yield s
    stop_ferromq(s)


def test_acl2_off_answers_as_java_without_providers(plain_server: BrokerProcess) -> None:
    system = (ResponseCode.SYSTEM_ERROR, "An system error occurred, please try again later.")
    user = _json({"password": "p1"})
    acl = _json(
        {"policies": [{"entries": [{"resource": "Topic:T", "actions": ["Pub"], "decision": "Allow"}]}]}
    )
    for code, ext, body in (
        (RC.AUTH_CREATE_USER, {"username": "u1"}, user),
        (RC.AUTH_UPDATE_USER, {"username": "u1"}, user),
        (RC.AUTH_DELETE_USER, {"username": "u1"}, b""),
        (RC.AUTH_GET_USER, {"username": "u1"}, b""),
        (RC.AUTH_LIST_USER, {}, b""),
        (RC.AUTH_CREATE_ACL, {"subject": "User:u1"}, acl),
        (RC.AUTH_UPDATE_ACL, {"subject": "User:u1"}, acl),
        (RC.AUTH_DELETE_ACL, {"subject": "User:u1"}, b""),
    ):
        r = call(plain_server, code, ext, None, body)
        assert (r.code, r.remark) == system, code
    r = call(plain_server, RC.AUTH_GET_USER, {"username": ""}, None)
    assert (r.code, r.remark) == (ResponseCode.INVALID_PARAMETER, "The username is blank")
    r = call(plain_server, RC.AUTH_CREATE_USER, {"username": "u1"}, None, _json({}))
    assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "password can not be blank")
    for code, method, line in (
        (RC.AUTH_GET_ACL, "getAuthenticationMetadataProvider", 273),
        (RC.AUTH_LIST_ACL, "getAuthorizationMetadataProvider", 280),
    ):
        r = call(plain_server, code, {"subject": "User:u1"}, None)
        assert (r.code, r.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "java.lang.IllegalStateException: The authenticationMetadataProvider is not configured., "
            f"org.apache.rocketmq.auth.authorization.manager.AuthorizationMetadataManagerImpl.{method}"
            f"(AuthorizationMetadataManagerImpl.java:{line})",
        )
