"""Signed requests of the RocketMQ 5.x clients, checked against the broker's plain ACL (the same
accounts, white addresses and permissions as remoting requests), or ACL 2.0 (`check_grpc`).

A 5.x client signs every call with gRPC metadata: `x-mq-date-time` (its clock, `YYYYMMDDTHHMMSSZ`)
and `authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
Signature=<hex of HMAC-SHA1(secretKey, the date-time)>`. A refusal is UNAUTHORIZED with the
message Apache RocketMQ's proxy gives."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping

from ferromq.acl.errors import AclError
from ferromq.acl.permission import PUB, SUB
from ferromq.acl.plain import Account, PlainAcl, check_perm
from ferromq.auth import contexts
from ferromq.auth.contexts import Needed
from ferromq.auth.errors import AuthenticationError, AuthorizationError
from ferromq.auth.evaluator import Auth, authorization_fields
from ferromq.auth.model import Action, Resource
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.status import Code, ProxyError

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"


def _refused(message: str) -> ProxyError:
    return ProxyError(Code.UNAUTHORIZED, message)


def _fields(header: str) -> dict[str, str]:
    try:
        return authorization_fields(header)
    except ValueError as e:
        raise _refused(str(e)) from None


def authenticate(acl: PlainAcl, metadata: Mapping[str, str], host: str) -> Account | None:
    """The account that signed the call, or None when the peer needs no signature (a globally
    white address, or one of the named account's white addresses)."""
    if acl.globally_white(host):
        return None
    header = metadata.get(AUTHORIZATION)
    if not header:
        raise _refused("username cannot be null.")
    date = metadata.get(DATE_TIME)
    if date is None:
        raise _refused("datetime is null.")
    fields = _fields(header)
    access_key = fields.get("Credential", "").split("/", 1)[0]
    if not access_key:
        raise _refused("username cannot be null.")
    account = acl.snapshot.accounts.get(access_key)
    if account is None:
        raise _refused(f"User:{access_key} is not found.")
    if account.white(host):
        return None
    expected = hmac.new(account.secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
    if not hmac.compare_digest(expected, fields.get("Signature", "").lower()):
        raise _refused("check signature failed.")
    return account


def authorize(account: Account | None, resources: Mapping[str, int]) -> None:
    """What the call touches (topics, and groups as their retry topics) against what the account
    may do."""
    if account is None:
        return
    try:
        check_perm(0, resources, account)
    except AclError as e:
        raise _refused(str(e)) from None


# -- ACL 2.0 --------------------------------------------------------------------------------------

# The client types whose heartbeats name a group Java checks (Sub).
CONSUMER_TYPES = frozenset(
    (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER, pb.LITE_PUSH_CONSUMER, pb.LITE_SIMPLE_CONSUMER)
)


def needs_of(resources: Mapping[str, int]) -> Needed:
    """The plain ACL's way of naming what a call touches (topics, groups as their retry topics,
    PUB / SUB bits) as ACL 2.0's resources and actions."""
    out: Needed = []
    for name, bits in resources.items():
        actions = tuple(a for bit, a in ((PUB, Action.PUB), (SUB, Action.SUB)) if bits & bit)
        out.append((Resource.of_topic_or_group(name), actions))
    return out


def check_grpc(
    auth: Auth, metadata: Mapping[str, str], host: str, rpc: str, needed: Callable[[], Needed]
) -> None:
    """ACL 2.0's checks of one call (`rpc`: its request's full name, for the whitelists; `needed`:
    what it touches, read after the caller is authenticated, as Java's pipelines do): refused
    UNAUTHORIZED with Java's text, as 5.3.3's proxy answers both kinds of refusal."""
    try:
        user = auth.grpc_user(metadata, rpc)
        auth.authorize(user, needed(), host or None, rpc)
    except (AuthenticationError, AuthorizationError) as e:
        raise _refused(str(e)) from None


def settings_needs(settings: pb.Settings) -> Needed:
    """What a client's Settings name (Java checks them on the Telemetry stream): Pub on each topic
    it publishes to, Sub on its group and each topic it subscribes to."""
    if not settings.HasField("publishing") and not settings.HasField("subscription"):
        return []
    out: Needed = []
    for topic in settings.publishing.topics:
        out += contexts.grpc_pub(topic.name)
    if settings.HasField("subscription"):
        out += contexts.grpc_sub(settings.subscription.group.name, None)
        for entry in settings.subscription.subscriptions:
            out += contexts.grpc_sub(None, entry.topic.name)
    return out
