"""Signed requests of the RocketMQ 5.x clients, checked against the broker's plain ACL (the same
accounts, white addresses and permissions as remoting requests).

A 5.x client signs every call with gRPC metadata: `x-mq-date-time` (its clock, `YYYYMMDDTHHMMSSZ`)
and `authorization: MQv2-HMAC-SHA1 Credential=<accessKey>, SignedHeaders=x-mq-date-time,
Signature=<hex of HMAC-SHA1(secretKey, the date-time)>`. A refusal is UNAUTHORIZED with the
message Apache RocketMQ's proxy gives."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from ferromq.acl.errors import AclError
from ferromq.acl.plain import Account, PlainAcl, check_perm
from ferromq.proxy.status import Code, ProxyError

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"


def _refused(message: str) -> ProxyError:
    return ProxyError(Code.UNAUTHORIZED, message)


def _fields(header: str) -> dict[str, str]:
    """`Credential=ak, SignedHeaders=..., Signature=...` of an authorization header."""
    _, _, rest = header.partition(" ")
    if not rest:
        raise _refused("authentication header is incorrect.")
    out = {}
    for item in rest.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise _refused("authentication keyValues length is incorrect, actual length=1.")
        out[key] = value
    return out


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
