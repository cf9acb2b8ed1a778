"""The check every request goes through when `aclEnable=true`, before its handler runs (Java: the
broker's server RPC hook around `PlainAccessValidator`).

What a request touches, by code (as `PlainAccessValidator.parse` in 4.9.7): a send needs PUB on its
topic (a send to a retry topic needs SUB on that group instead), a pull SUB on the topic and on
the consumer group, a heartbeat SUB on each consumer group and subscribed topic, a send-back,
unregister, consumer list or offset update SUB on the group (and the topic for an offset update),
a query SUB on the topic. Other requests need only a good signature, except the admin requests.

ferromq is stricter than Java (documented in the README): SEND_BATCH_MESSAGE is checked like
SEND_MESSAGE_V2 (Java checks no topic for it, so a batch reaches a topic the account may not publish
to); the ACL admin requests (codes 50-54), GET_BROKER_CONFIG and the store's maintenance requests
need an admin account; resetting or cloning a group's offsets needs SUB on each group (and topic).

Cheap on the send path: what depends only on the peer's address (is it globally white, is it in
an account's white addresses) is cached by address, and an allowed (account, send or pull, topic,
group) is remembered, until the ACL reloads; each account keeps its HMAC key state; the signature
is the only per-request work left.
"""

from __future__ import annotations

import logging
from typing import Any

from ferromq.acl import permission as perm
from ferromq.acl.errors import AclError
from ferromq.acl.plain import Account, PlainAcl, authorize
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import RETRY_PREFIX
from ferromq.protocol.headers import send_names_v2
from ferromq.remoting.connection import Connection

logger = logging.getLogger(__name__)

# Peers remembered at most (a scan from many addresses must not grow the cache without bound).
_MAX_PEERS = 4096


class _Peer:
    """What the ACL decided about one peer address (valid until the ACL reloads)."""

    __slots__ = ("globally_white", "host", "white")

    def __init__(self, host: str, globally_white: bool) -> None:
        self.host = host
        self.globally_white = globally_white
        self.white: dict[str, bool] = {}

    def white_for(self, account: Account) -> bool:
        known = self.white.get(account.access_key)
        if known is None:
            known = self.white[account.access_key] = account.white(self.host)
        return known


_SENDS = frozenset((RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE))
_POPS = frozenset(
    (
        RequestCode.POP_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.PEEK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        RequestCode.NOTIFICATION,
        RequestCode.POLLING_INFO,
    )
)
_MAX_DECISIONS = 65536


def _send_fields(ext: dict[str, str]) -> tuple[str | None, str | None]:
    """The topic a send is stored into and the group of a retry-topic send. The send path reads
    either naming whatever the code (`SendMessageRequestHeader.from_ext`): so does this, or a
    SEND_MESSAGE_V2 with V1 names would skip the topic's check. (Java reads the group of a V1
    retry-topic send from "group", which SEND_MESSAGE does not have.)"""
    if send_names_v2(ext):
        return ext.get("b"), ext.get("a")
    return ext.get("topic"), ext.get("group")


class AclGuard:
    """Raises `AclError` (Java's refusal) for a request the ACL does not allow."""

    def __init__(self, acl: PlainAcl) -> None:
        self.acl = acl
        self._peers: dict[str, _Peer] = {}
        self._allowed: set[tuple[str, int, str | None, str | None]] = set()
        acl.on_change(self._forget)

    def _forget(self) -> None:
        self._peers.clear()
        self._allowed.clear()

    def __call__(self, conn: Connection, cmd: RemotingCommand) -> None:
        host = conn.peer_host
        peer = self._peers.get(host)
        if peer is None:
            if len(self._peers) >= _MAX_PEERS:
                self._peers.clear()
            peer = self._peers[host] = _Peer(host, self.acl.globally_white(host))
        if peer.globally_white:
            return
        account = self.acl.authenticate(cmd, peer.white_for)
        if account is None:
            return
        # What decides a hot request (a send's or a pull's topic and group): an allowed
        # combination is remembered, so the next request with it needs only its signature checked.
        ext = cmd.ext
        if cmd.code in _SENDS:
            topic, group = _send_fields(ext)
        elif cmd.code == RequestCode.PULL_MESSAGE:
            topic, group = ext.get("topic"), ext.get("consumerGroup")
        else:
            authorize(cmd.code, needed_resources(cmd), account)
            return
        key = (account.access_key, cmd.code, topic, group)
        if key in self._allowed:
            return
        authorize(cmd.code, needed_resources(cmd), account)
        if len(self._allowed) >= _MAX_DECISIONS:
            self._allowed.clear()
        self._allowed.add(key)


def _add(out: dict[str, int], resource: str | None, bits: int) -> None:
    if resource is not None:
        out[resource] = bits


def _retry(group: str | None) -> str | None:
    return None if group is None else perm.retry_topic(group)


def _send(out: dict[str, int], topic: str | None, group: str | None) -> None:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        _add(out, _retry(group), perm.SUB)
    else:
        _add(out, topic, perm.PUB)


def may_send(account: Account, topic: str) -> bool:
    """Whether the account may send to `topic` (not a retry topic), as the guard decides a
    signed SEND_MESSAGE_V2 to it."""
    needed: dict[str, int] = {}
    _send(needed, topic, None)
    try:
        authorize(RequestCode.SEND_MESSAGE_V2, needed or None, account)
    except AclError:
        return False
    return True


def may_pull(account: Account, topic: str | None = None, group: str | None = None) -> bool:
    """Whether the account may pull from `topic`, or as `group`: the guard checks each resource
    of a PULL_MESSAGE on its own, so a pull is allowed when both are."""
    needed: dict[str, int] = {}
    _add(needed, topic, perm.SUB)
    _add(needed, _retry(group), perm.SUB)
    try:
        authorize(RequestCode.PULL_MESSAGE, needed or None, account)
    except AclError:
        return False
    return True


def needed_resources(cmd: RemotingCommand) -> dict[str, int] | None:
    """The topics and groups (as retry topics) a request touches, with the permission it needs."""
    ext = cmd.ext
    code = cmd.code
    out: dict[str, int] = {}
    if code in _SENDS:
        _send(out, *_send_fields(ext))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        _add(out, _retry(ext.get("group")), perm.SUB)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        _add(out, ext.get("topic"), perm.SUB)
        _add(out, _retry(ext.get("consumerGroup")), perm.SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        _add(out, ext.get("topic"), perm.SUB)
    elif code in _POPS:  # 5.x's @RocketMQAction(..., SUB) on the topic and the group
        _add(out, ext.get("topic"), perm.SUB)
        _add(out, _retry(ext.get("consumerGroup")), perm.SUB)
    elif code == RequestCode.RECALL_MESSAGE:  # 5.x's @RocketMQAction(RECALL_MESSAGE, PUB)
        _add(out, ext.get("topic"), perm.PUB)
    elif code == RequestCode.HEART_BEAT:
        _heartbeat(out, cmd.body)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        _add(out, _retry(ext.get("consumerGroup")), perm.SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        _add(out, _retry(ext.get("consumerGroup")), perm.SUB)
        _add(out, ext.get("topic"), perm.SUB)
    # Offset writes Java checks nothing of (stricter here): SUB on every group they read or move.
    elif code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
        _add(out, _retry(ext.get("group")), perm.SUB)
        _add(out, ext.get("topic"), perm.SUB)
    elif code == RequestCode.CLONE_GROUP_OFFSET:
        _add(out, _retry(ext.get("srcGroup")), perm.SUB)
        _add(out, _retry(ext.get("destGroup")), perm.SUB)
        _add(out, ext.get("topic"), perm.SUB)
    return out or None


def _heartbeat(out: dict[str, int], body: bytes) -> None:
    try:
        data: Any = loads_lenient(body)
        for consumer in data.get("consumerDataSet") or []:
            _add(out, _retry(_str(consumer.get("groupName"))), perm.SUB)
            for sub in consumer.get("subscriptionDataSet") or []:
                _add(out, _str(sub.get("topic")), perm.SUB)
    except (ValueError, AttributeError, TypeError):
        raise AclError("the heartbeat body is not a HeartbeatData JSON object") from None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
