"""ACL 2.0's pieces that need no broker: resources, which entry decides, what a request touches,
the users and ACLs files, and the import of a plain_acl.yml account."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import orjson
import pytest

from ferromq.acl.signing import Credentials
from ferromq.auth.contexts import remoting_needs
from ferromq.auth.errors import AuthenticationError, AuthorizationError
from ferromq.auth.evaluator import Auth, AuthSettings
from ferromq.auth.metadata import AuthMetadata, AuthMetadataError
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
    UserType,
)
from ferromq.auth.setup import acl_of_account, problems
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand

ON = AuthSettings(True, True, frozenset(), frozenset(), "DefaultCluster")


@pytest.mark.parametrize(
    ("key", "kind", "name", "pattern"),
    [
        ("*", ResourceType.ANY, None, ResourcePattern.ANY),
        ("Topic:*", ResourceType.TOPIC, None, ResourcePattern.ANY),
        ("Topic:orders-*", ResourceType.TOPIC, "orders-", ResourcePattern.PREFIXED),
        ("group:G1", ResourceType.GROUP, "G1", ResourcePattern.LITERAL),
        ("Cluster:DefaultCluster", ResourceType.CLUSTER, "DefaultCluster", ResourcePattern.LITERAL),
    ],
)
def test_resource_keys(key: str, kind: ResourceType, name: str | None, pattern: ResourcePattern) -> None:
    r = Resource.parse(key)
    assert r == Resource(kind, name, pattern)
    assert Resource.parse(r.key) == r


def test_unknown_or_blank_resources_are_none() -> None:
    assert Resource.parse("Queue:x") is None and Resource.parse(" ") is None
    assert Resource.group("%RETRY%G1") == Resource.group("%DLQ%G1") == Resource.group("G1")


def entry(key: str, decision: Decision, *actions: Action, ips: tuple[str, ...] = ()) -> PolicyEntry:
    resource = Resource.parse(key)
    assert resource is not None
    return PolicyEntry(resource, actions or (Action.PUB,), ips, decision)


def auth_with(*entries: PolicyEntry, defaults: tuple[PolicyEntry, ...] = ()) -> Auth:
    metadata = AuthMetadata(None)
    metadata.create_user(User("u1", "secret1"))
    policies = [Policy(PolicyType.CUSTOM, entries)] if entries else []
    if defaults:
        policies.append(Policy(PolicyType.DEFAULT, defaults))
    metadata.put_acl(Acl("User:u1", tuple(policies)))
    return Auth(ON, metadata)


def decision(auth: Auth, topic: str, action: Action = Action.PUB, ip: str | None = "10.1.2.3") -> str | None:
    return auth.refusal("u1", Resource.topic(topic), (action,), ip)


def test_the_most_specific_entry_decides_and_deny_wins_between_equals() -> None:
    auth = auth_with(
        entry("*", Decision.DENY),
        entry("Topic:*", Decision.ALLOW),
        entry("Topic:ord*", Decision.DENY),
        entry("Topic:orders*", Decision.ALLOW),
        entry("Topic:orders-secret", Decision.DENY),
        entry("Topic:twice", Decision.ALLOW),
        entry("Topic:twice", Decision.DENY, Action.ALL),
    )
    assert decision(auth, "misc") is None  # Topic:* over *
    assert decision(auth, "ordinal") is not None  # Topic:ord* over Topic:*
    assert decision(auth, "orders-1") is None  # the longer prefix wins
    assert decision(auth, "orders-secret") == (
        "User:u1 has no permission to access Topic:orders-secret from 10.1.2.3, the decision is deny."
    )
    assert decision(auth, "twice") is not None  # Deny between equally specific entries


def test_default_policy_only_when_no_custom_entry_matches_and_none_is_a_refusal() -> None:
    auth = auth_with(
        entry("Topic:T1", Decision.ALLOW), defaults=(entry("Topic:*", Decision.DENY, Action.ALL),)
    )
    assert decision(auth, "T1") is None
    assert decision(auth, "T2") is not None
    assert decision(auth, "T1", Action.SUB) == (
        "User:u1 has no permission to access Topic:T1 from 10.1.2.3, the decision is deny."
    )
    bare = auth_with(entry("Topic:T1", Decision.ALLOW))
    assert (
        decision(bare, "T2")
        == "User:u1 has no permission to access Topic:T2 from 10.1.2.3, no matched policies."
    )


def test_source_ips_and_actions() -> None:
    auth = auth_with(
        entry("Topic:T", Decision.ALLOW, Action.PUB, Action.SUB, ips=("10.1.0.0/16", "192.168.1.7"))
    )
    assert decision(auth, "T") is None
    assert decision(auth, "T", ip="192.168.1.7") is None
    assert decision(auth, "T", ip="10.2.0.1") is not None
    assert decision(auth, "T", Action.CREATE) is not None
    all_actions = auth_with(entry("Topic:T", Decision.ALLOW, Action.ALL))
    assert decision(all_actions, "T", Action.DELETE) is None


def test_super_users_and_unknown_users() -> None:
    metadata = AuthMetadata(None)
    metadata.create_user(User("root1", "secret1", UserType.SUPER))
    auth = Auth(ON, metadata)
    assert auth.refusal("root1", Resource.topic("any"), (Action.PUB,), None) is None
    assert auth.refusal("ghost", Resource.topic("any"), (Action.PUB,), None) == "User:ghost not found."


def signed(
    code: int, ext: dict[str, str], keys: tuple[str, str] | None, body: bytes = b""
) -> RemotingCommand:
    cmd = RemotingCommand(code=code, ext=dict(ext), body=body, version=407)
    if keys is not None:
        Credentials(*keys).apply(cmd.ext, cmd.body)
    return cmd


def test_remoting_authentication() -> None:
    auth = auth_with(entry("Topic:T", Decision.ALLOW))
    ext = {"b": "T", "a": "PG"}
    assert auth.remoting_user(signed(RC.SEND_MESSAGE_V2, ext, ("u1", "secret1"), b"x")) == "u1"
    for keys, text in (
        (None, "username cannot be null."),
        (("u1", "wrong"), "check signature failed."),
        (("nobody", "x"), "User:nobody is not found."),
    ):
        with pytest.raises(AuthenticationError, match=text):
            auth.remoting_user(signed(RC.SEND_MESSAGE_V2, ext, keys, b"x"))
    assert auth.audit.denials == {"no_user": 1, "bad_signature": 1, "unknown_user": 1}


def test_what_requests_touch() -> None:
    def needs(code: int, ext: dict[str, str], body: bytes = b"") -> list[tuple[str, list[str]]]:
        cmd = RemotingCommand(code=code, ext=ext, body=body)
        return [(r.key, [a.value for a in actions]) for r, actions in remoting_needs(cmd, "C1")]

    assert needs(RC.SEND_MESSAGE_V2, {"b": "T", "a": "PG"}) == [("Topic:T", ["Pub"])]
    assert needs(RC.SEND_MESSAGE, {"topic": "%RETRY%G1", "group": "G1"}) == [("Group:G1", ["Sub"])]
    assert needs(RC.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}) == [
        ("Topic:T", ["Sub"]),
        ("Group:G", ["Sub"]),
    ]
    assert needs(RC.PULL_MESSAGE, {"topic": "%RETRY%G", "consumerGroup": "G"}) == [("Group:G", ["Sub"])]
    heartbeat = orjson.dumps(
        {
            "consumerDataSet": [
                {"groupName": "G", "subscriptionDataSet": [{"topic": "T"}, {"topic": "%RETRY%G"}]}
            ]
        }
    )
    assert needs(RC.HEART_BEAT, {"x": "1"}, heartbeat) == [("Group:G", ["Sub"]), ("Topic:T", ["Sub"])]
    assert needs(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}) == [("Topic:T", ["Create"])]
    assert needs(RC.AUTH_CREATE_USER, {"username": "x"}) == [("Cluster:C1", ["Update"])]
    assert needs(RC.GET_CONSUME_STATS, {"consumerGroup": "G", "topicList": "A;B"}) == [
        ("Group:G", ["Get"]),
        ("Topic:A", ["Get"]),
        ("Topic:B", ["Get"]),
    ]
    assert needs(RC.GET_BROKER_CONFIG, {"x": "1"}) == []  # no annotated header: the signature only
    # RocketMQ 5.5's lite requests: what the requests they resemble ask (5.5.0 asks a signature only).
    assert needs(RC.POP_LITE_MESSAGE, {"consumerGroup": "G", "topic": "P", "clientId": "c"}) == [
        ("Group:G", ["Sub"]),
        ("Topic:P", ["Sub"]),
    ]
    lite_sync = orjson.dumps({"subscriptionSet": [{"group": "G", "topic": "P", "clientId": "c"}]})
    assert needs(RC.LITE_SUBSCRIPTION_CTL, {}, lite_sync) == [("Group:G", ["Sub"]), ("Topic:P", ["Sub"])]
    assert needs(RC.TRIGGER_LITE_DISPATCH, {"group": "G"}) == [("Group:G", ["Update"])]
    with pytest.raises(AuthorizationError, match="parse authorization context error"):
        needs(RC.LITE_SUBSCRIPTION_CTL, {}, b"[not json")
    with pytest.raises(AuthorizationError, match="parse authorization context error"):
        needs(RC.HEART_BEAT, {"x": "1"}, b"[not json")


def test_users_and_acls_files_survive_a_reload(tmp_path: Path) -> None:
    metadata = AuthMetadata(tmp_path)
    metadata.create_user(User("u1", "secret1"))
    metadata.put_acl(Acl("User:u1", (Policy(PolicyType.CUSTOM, (entry("Topic:T", Decision.ALLOW),)),)))
    again = AuthMetadata(tmp_path)
    again.load()
    assert again.users == metadata.users and again.acls == metadata.acls
    (tmp_path / "auth_acls.json").write_text("{not json")
    with pytest.raises(AuthMetadataError, match="is not valid JSON"):
        AuthMetadata(tmp_path).load()


def test_metadata_texts() -> None:
    m = AuthMetadata(None)
    with pytest.raises(AuthenticationError, match="password can not be blank"):
        m.create_user(User("u1", ""))
    with pytest.raises(AuthorizationError, match="The subject of User:u9 is not exist"):
        m.put_acl(Acl("User:u9", (Policy(PolicyType.CUSTOM, (entry("Topic:T", Decision.ALLOW),)),)))
    with pytest.raises(AuthorizationError, match="The actions can not be Any"):
        Acl.from_info(
            {
                "subject": "User:u1",
                "policies": [{"entries": [{"resource": "Topic:T", "actions": ["Any"], "decision": "Allow"}]}],
            }
        )


def test_a_plain_acl_account_becomes_a_user_and_an_acl_as_java_migrates_it() -> None:
    user, acl = acl_of_account(
        {
            "accessKey": "rocketmq2",
            "secretKey": "12345678",
            "admin": "false",
            "defaultTopicPerm": "DENY",
            "defaultGroupPerm": "SUB",
            "topicPerms": ["topicA=DENY", "topicB=PUB|SUB", "bad"],
            "groupPerms": ["groupA=SUB"],
        }
    )
    assert user == User("rocketmq2", "12345678", UserType.NORMAL)
    assert acl is not None
    assert acl.as_info() == {
        "subject": "User:rocketmq2",
        "policies": [
            {
                "policyType": "Custom",
                "entries": [
                    {"resource": "Topic:topicA", "actions": ["All"], "decision": "Deny"},
                    {"resource": "Topic:topicB", "actions": ["Pub", "Sub"], "decision": "Allow"},
                    {"resource": "Group:groupA", "actions": ["Sub"], "decision": "Allow"},
                ],
            },
            {
                "policyType": "Default",
                "entries": [
                    {"resource": "Topic:*", "actions": ["All"], "decision": "Deny"},
                    {"resource": "Group:*", "actions": ["Sub"], "decision": "Allow"},
                ],
            },
        ],
    }


def test_configuration_problems() -> None:
    assert problems({"authenticationEnabled": True}, plain_acl_enabled=False) == []
    keys = [k for k, _ in problems({"authorizationEnabled": True, "initAuthenticationUser": "x"}, True)]
    assert keys == ["authorizationEnabled", "aclEnable", "initAuthenticationUser"]


def test_grpc_authentication_reads_the_header_as_java() -> None:
    auth = auth_with(entry("Topic:T", Decision.ALLOW))
    date = "20261128T212500Z"
    sig = hmac.new(b"secret1", date.encode(), hashlib.sha1).hexdigest()
    good = f"MQv2-HMAC-SHA1 Credential=u1/cn/RocketMQ, SignedHeaders=x-mq-date-time, Signature={sig}"
    assert auth.grpc_user({"authorization": good, "x-mq-date-time": date}, "") == "u1"
    capitals = good.replace(sig, sig.upper())  # Java's hex decoder takes both cases
    assert auth.grpc_user({"authorization": capitals, "x-mq-date-time": date}, "") == "u1"
    for header, when, text in (
        ("", date, "username cannot be null."),
        (good, None, "datetime is null."),
        ("MQv2-HMAC-SHA1", date, "authentication header is incorrect."),
        (
            "MQv2-HMAC-SHA1 Credential",
            date,
            "authentication keyValues length is incorrect, actual length=1.",
        ),
        ("MQv2-HMAC-SHA1 Credential=u1, Signature=zz", date, "create authentication context error."),
        (good.replace(sig, "00" * 20), date, "check signature failed."),
    ):
        md = {"authorization": header} | ({"x-mq-date-time": when} if when else {})
        with pytest.raises(AuthenticationError) as e:
            auth.grpc_user(md, "")
        assert str(e.value) == text, header
