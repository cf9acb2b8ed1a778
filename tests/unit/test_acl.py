"""The plain ACL's pure parts: signatures (against the official C++ client's recorded traffic),
white address patterns, permission bits, loading plain_acl.yml and Java's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ferromq.acl import permission as perm
from ferromq.acl.addresses import matcher
from ferromq.acl.errors import AclError
from ferromq.acl.guard import needed_resources
from ferromq.acl.plain import Account, PlainAcl, authorize, check_perm
from ferromq.acl.signing import Credentials, Signer, credentials_of, field_text
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.command import RemotingCommand

# Two requests of the official C++ client (rocketmq 0.4.4), as recorded on the wire: it signs even
# without credentials (empty access key, empty secret).
CPP_ROUTE = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "N/YT7X6tJe5UfutmW+uNwTTJ7Fc=",
    "topic": "TopicTest",
}
CPP_SEND = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "Sy9QfazQFv1++WwmW3ZAm6dqcqY=",
    "batch": "0",
    "bornTimestamp": "1795310624382",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "flag": "0",
    "producerGroup": "PID_probe_group",
    "properties": "KEYS\x01KEY1 KEY2\x02TAGS\x01TagA\x02UNIQ_KEY\x010100007F0000E7230000FE80CF710100"
    "\x02WAIT\x01true\x02myprop\x01myval\x02",
    "queueId": "0",
    "reconsumeTimes": "0",
    "sysFlag": "0",
    "topic": "TopicTest",
    "unitMode": "0",
}


@pytest.mark.parametrize(("ext", "body"), [(CPP_ROUTE, b""), (CPP_SEND, b"hello-sync")])
def test_signature_matches_the_cpp_client(ext: dict[str, str], body: bytes) -> None:
    assert Signer("").server_signature(ext, body) == ext["Signature"]


def test_credentials_sign_what_the_broker_checks() -> None:
    ext = {"topic": "T", "queueId": "1", "Signature": "stale"}
    Credentials("RocketMQ", "12345678").apply(ext, b"body")
    assert ext["AccessKey"] == "RocketMQ"
    assert Signer("12345678").server_signature(ext, b"body") == ext["Signature"]
    assert Signer("other-secret").server_signature(ext, b"body") != ext["Signature"]
    # The broker leaves the unique-key query flag out, a client does not (Java 4.9.7 does the same).
    ext2 = {"topic": "T", "_UNIQUE_KEY_QUERY": "true"}
    Credentials("RocketMQ", "12345678").apply(ext2, b"")
    assert Signer("12345678").server_signature(ext2, b"") != ext2["Signature"]


def test_field_text_is_values_in_key_order() -> None:
    assert field_text({"b": "2", "a": "1", "Signature": "x", "C": "3"}) == b"312"


def test_credentials_need_both_keys() -> None:
    assert credentials_of(None, None) is None
    with pytest.raises(ValueError, match="give both or neither"):
        credentials_of("RocketMQ", None)


@pytest.mark.parametrize(
    ("pattern", "host", "expected"),
    [
        ("*", "1.2.3.4", True),
        ("*.*.*.*", "1.2.3.4", True),
        ("", "1.2.3.4", False),
        (None, "1.2.3.4", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("10.10.103.*", "10.10.103.77", True),
        ("10.10.103.*", "10.10.104.77", False),
        ("192.168.*.*", "192.168.9.9", True),
        ("192.168.1-10.*", "192.168.10.200", True),
        ("192.168.1-10.*", "192.168.11.1", False),
        ("192.168.1.{1,2,3}", "192.168.1.2", True),
        ("192.168.1.{1,2,3}", "192.168.1.4", False),
        ("127.0.0.1,10.0.0.1", "10.0.0.1", True),
        ("::1", "0:0:0:0:0:0:0:1", True),
    ],
)
def test_white_address_patterns(pattern: str | None, host: str, expected: bool) -> None:
    assert matcher(pattern)(host) is expected


@pytest.mark.parametrize("pattern", ["not-an-ip", "192.168.1", "10.10.300-400.*", "1.2.3.{a,b}", "::1-2:*"])
def test_bad_white_address_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(AclError):
        matcher(pattern)


def test_permission_bits_as_java() -> None:
    assert perm.parse_perm("PUB|SUB") == perm.parse_perm("SUB|PUB") == perm.PUB | perm.SUB
    assert perm.parse_perm("nonsense") == perm.parse_perm(None) == perm.DENY
    assert perm.check_permission(perm.PUB, perm.PUB | perm.SUB)
    assert not perm.check_permission(perm.PUB, perm.SUB)
    assert not perm.check_permission(perm.SUB, perm.DENY | perm.SUB)
    assert perm.check_permission(perm.ANY, perm.SUB)


PLAIN_ACL = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


@pytest.fixture
def acl(tmp_path: Path) -> PlainAcl:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    plain = PlainAcl.locate(str(tmp_path), "conf/plain_acl.yml")
    plain.load()
    return plain


def _check(acl: PlainAcl, host: str, cmd: RemotingCommand) -> Account | None:
    """The account the request passed as (None: a white address), or AclError."""
    account = acl.authenticate(cmd, lambda a: a.white(host))
    if account is not None:
        authorize(cmd.code, needed_resources(cmd), account)
    return account


def _signed(
    code: int, ext: dict[str, str], key: str = "RocketMQ", secret: str = "12345678"
) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext=dict(ext))
    Credentials(key, secret).apply(cmd.ext, cmd.body)
    return cmd


def _refusal(acl: PlainAcl, host: str, cmd: RemotingCommand) -> str:
    with pytest.raises(AclError) as info:
        _check(acl, host, cmd)
    return str(info.value)


def test_loaded_accounts(acl: PlainAcl) -> None:
    accounts = acl.snapshot.accounts
    assert set(accounts) == {"RocketMQ", "rocketmq2"}
    assert accounts["RocketMQ"].secret_key == "12345678"
    assert accounts["RocketMQ"].perms == {
        "topicA": perm.DENY,
        "topicB": perm.PUB | perm.SUB,
        "topicC": perm.SUB,
        "%RETRY%groupA": perm.DENY,
        "%RETRY%groupB": perm.PUB | perm.SUB,
    }
    assert accounts["rocketmq2"].admin
    assert acl.globally_white("10.10.103.5") and not acl.globally_white("127.0.0.1")


def test_refusals_say_what_java_says(acl: PlainAcl) -> None:
    send = {"a": "PG", "b": "topicB", "c": "TBW102"}
    _check(acl, "127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, send))
    no_key = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext=dict(send))
    assert _refusal(acl, "127.0.0.1", no_key) == (
        "org.apache.rocketmq.acl.common.AclException: No accessKey is configured, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:663)"
    )
    assert "No acl config for nobody12" in _refusal(
        acl, "127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, send, key="nobody12")
    )
    assert "Check signature failed for accessKey=RocketMQ" in _refusal(
        acl, "127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, send, secret="wrong-secret")
    )
    denied = _refusal(acl, "127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, {**send, "b": "topicA"}))
    assert denied.endswith(
        "No default permission for topic:topicA, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:610)"
    )
    assert "No default permission for topic:other" in _refusal(
        acl, "127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, {**send, "b": "other"})
    )
    pull = {"consumerGroup": "groupA", "topic": "topicC"}
    assert "No default permission for group:groupA" in _refusal(
        acl, "127.0.0.1", _signed(RequestCode.PULL_MESSAGE, pull)
    )
    _check(acl, "127.0.0.1", _signed(RequestCode.PULL_MESSAGE, {**pull, "consumerGroup": "anyGroup"}))
    admin = _refusal(acl, "127.0.0.1", _signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}))
    assert "Need admin permission for request code=17, but accessKey=RocketMQ is not" in admin


def test_white_addresses_skip_the_signature(acl: PlainAcl) -> None:
    unsigned = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext={"AccessKey": "rocketmq2"})
    _check(acl, "192.168.1.9", unsigned)  # the account's white address: no signature needed
    assert "Check signature failed" in _refusal(acl, "192.168.2.9", unsigned)
    # An admin account without resource permissions reaches every topic.
    _check(acl, "127.0.0.1", _signed(RequestCode.SEND_MESSAGE_V2, {"b": "any"}, key="rocketmq2"))


def test_trace_topic_needs_only_a_signature(acl: PlainAcl) -> None:
    send = _signed(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "RMQ_SYS_TRACE_TOPIC"})
    account = _check(acl, "127.0.0.1", send)
    assert account is not None and account.access_key == "RocketMQ"
    # The account's own permissions refuse the topic: the trace rule is what lets the send through.
    with pytest.raises(AclError, match="No default permission for topic:RMQ_SYS_TRACE_TOPIC"):
        check_perm(send.code, needed_resources(send), account)
    # It still needs the signature.
    unsigned = _signed(
        RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "RMQ_SYS_TRACE_TOPIC"}, secret="wrong-secret"
    )
    assert "Check signature failed for accessKey=RocketMQ" in _refusal(acl, "127.0.0.1", unsigned)


def test_acl_admin_requests_need_an_admin_account(acl: PlainAcl) -> None:
    """ferromq is stricter than Java here (Java lets any signed account change the ACL)."""
    assert "Need admin permission for request code=50" in _refusal(
        acl, "127.0.0.1", _signed(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "newkey12"})
    )


def test_batch_sends_are_checked_like_single_sends(acl: PlainAcl) -> None:
    """ferromq is stricter than Java here (Java checks no topic for SEND_BATCH_MESSAGE)."""
    assert "No default permission for topic:topicA" in _refusal(
        acl, "127.0.0.1", _signed(RequestCode.SEND_BATCH_MESSAGE, {"a": "PG", "b": "topicA"})
    )


def test_heartbeat_resources() -> None:
    body = json.dumps(
        {"consumerDataSet": [{"groupName": "G", "subscriptionDataSet": [{"topic": "T1"}, {"topic": "T2"}]}]}
    ).encode()
    cmd = RemotingCommand(code=RequestCode.HEART_BEAT, body=body)
    assert needed_resources(cmd) == {"%RETRY%G": perm.SUB, "T1": perm.SUB, "T2": perm.SUB}
    with pytest.raises(AclError):
        needed_resources(RemotingCommand(code=RequestCode.HEART_BEAT, body=b"[1]"))


def test_retry_topic_sends_need_sub_on_the_group() -> None:
    v2 = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext={"a": "G", "b": "%RETRY%G"})
    assert needed_resources(v2) == {"%RETRY%G": perm.SUB}
    # SEND_MESSAGE has no "group" field, so Java checks nothing for it: neither does ferromq.
    v1 = RemotingCommand(code=RequestCode.SEND_MESSAGE, ext={"producerGroup": "G", "topic": "%RETRY%G"})
    assert needed_resources(v1) is None


def test_admin_with_resource_perms_falls_back_to_defaults(tmp_path: Path) -> None:
    acct = PlainAcl(None, tmp_path / "x.yml")
    (tmp_path / "x.yml").write_text(
        "accounts:\n  - accessKey: adminKey1\n    secretKey: 12345678\n    admin: true\n"
        "    topicPerms:\n      - t1=PUB\n"
    )
    acct.load()
    account = acct.snapshot.accounts["adminKey1"]
    check_perm(RequestCode.SEND_MESSAGE_V2, {"t1": perm.PUB}, account)
    with pytest.raises(AclError, match="No default permission for topic:t2"):
        check_perm(RequestCode.SEND_MESSAGE_V2, {"t2": perm.PUB}, account)


def test_unusable_file_is_refused_and_keeps_the_old_acl(acl: PlainAcl) -> None:
    acl.default_file.write_text("accounts:\n  - accessKey: short\n    secretKey: 12345678\n")
    with pytest.raises(AclError, match="cannot be null and length should longer than 6"):
        acl.load()
    assert set(acl.snapshot.accounts) == {"RocketMQ", "rocketmq2"}


def test_files_under_conf_acl_add_up(acl: PlainAcl, tmp_path: Path) -> None:
    extra = tmp_path / "conf" / "acl" / "team.yml"
    extra.parent.mkdir()
    extra.write_text(
        "globalWhiteRemoteAddresses:\n  - 172.16.0.1\naccounts:\n"
        "  - accessKey: teamKey1\n    secretKey: 87654321\n"
        "  - accessKey: RocketMQ\n    secretKey: 11111111\n"
    )
    assert acl.changed()
    acl.load()
    accounts = acl.snapshot.accounts
    assert set(accounts) == {"RocketMQ", "rocketmq2", "teamKey1"}
    assert accounts["RocketMQ"].secret_key == "11111111"  # conf/acl/ files come first
    assert acl.globally_white("172.16.0.1") and acl.globally_white("10.10.103.1")


def test_admin_requests_rewrite_the_file(acl: PlainAcl) -> None:
    acl.update_account(
        {
            "accessKey": "newUser1",
            "secretKey": "newSecret1",
            "topicPerms": ["t1=PUB"],
            "groupPerms": None,
            "admin": False,
            "defaultTopicPerm": "DENY",
        }
    )
    assert acl.snapshot.accounts["newUser1"].perms == {"t1": perm.PUB}
    assert acl.default_version().counter == 1
    config = acl.all_config()
    assert config["globalWhiteAddrs"] == ["10.10.103.*"]
    assert [c["accessKey"] for c in config["plainAccessConfigs"]] == ["RocketMQ", "rocketmq2", "newUser1"]
    assert config["plainAccessConfigs"][2] == {
        "accessKey": "newUser1",
        "admin": False,
        "defaultTopicPerm": "DENY",
        "secretKey": "newSecret1",
        "topicPerms": ["t1=PUB"],
    }
    with pytest.raises(AclError, match="The expected permissions are"):
        acl.update_account({"accessKey": "newUser1", "secretKey": "newSecret1", "topicPerms": ["t1=ALL"]})
    assert acl.delete_account("newUser1")
    assert not acl.delete_account("newUser1")
    assert "newUser1" not in acl.snapshot.accounts
    assert acl.update_global_white(["127.0.0.1"], None)
    assert acl.globally_white("127.0.0.1")
    assert acl.default_version().counter == 3
    assert not acl.update_global_white(["127.0.0.1"], "/etc/passwd")
