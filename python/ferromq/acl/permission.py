"""Permission bits and their text, as RocketMQ 4.9.7's `Permission`."""

from __future__ import annotations

from ferromq.acl.errors import AclError
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.constants import RETRY_PREFIX

DENY = 1
ANY = 2
PUB = 4
SUB = 8

_BY_TEXT = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}


# Requests Java 4.9.7 lets only admin accounts make.
JAVA_ADMIN_CODES = frozenset(
    (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    )
)
# ferromq is stricter: Java lets any signed account rewrite or read the ACL itself (create an
# admin account, read every secret key); here only admin accounts may.
ACL_ADMIN_CODES = frozenset(
    (
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
    )
)
# Also stricter: Java lets any signed account read the broker's configuration (with whatever
# secret broker.conf holds) and run the store's maintenance requests.
BROKER_ADMIN_CODES = frozenset(
    (
        RequestCode.GET_BROKER_CONFIG,
        RequestCode.DELETE_EXPIRED_COMMITLOG,
        RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
        RequestCode.CLEAN_UNUSED_TOPIC,
    )
)
ADMIN_CODES = JAVA_ADMIN_CODES | ACL_ADMIN_CODES | BROKER_ADMIN_CODES


def parse_perm(text: str | None) -> int:
    """PUB, SUB, PUB|SUB (or SUB|PUB), DENY; anything else (or nothing) is DENY, as in Java."""
    if text is None:
        return DENY
    return _BY_TEXT.get(text.strip(), DENY)


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def split_resource(item: str) -> tuple[str, str] | None:
    """`name=PERM` as (name, perm text); None when it is not two non-empty parts (Java's
    StringUtils.split drops empty parts)."""
    parts = [p for p in item.split("=") if p]
    if len(parts) != 2:
        return None
    return parts[0].strip(), parts[1].strip()


def parse_resource_perms(items: list[str] | None, is_topic: bool) -> dict[str, int]:
    """topicPerms / groupPerms as {resource: perm}; groups become their retry topics."""
    out: dict[str, int] = {}
    for item in items or []:
        pair = split_resource(item)
        if pair is None:
            kind = "topic" if is_topic else "group"
            raise AclError(f"Parse resource permission failed for {kind}:{item}")
        name, perm = pair
        out[name if is_topic else retry_topic(name)] = parse_perm(perm)
    return out


def check_resource_perms(items: list[str] | None) -> None:
    """The stricter check of an ACL update request (Java's `checkResourcePerms`)."""
    for item in items or []:
        pair = split_resource(item)
        if pair is None:
            raise AclError(
                f"Parse Resource format error for {item}.\n"
                "The expected resource format is 'Res=Perm'. For example: topicA=SUB"
            )
        if pair[1] != "DENY" and parse_perm(pair[1]) == DENY:
            raise AclError(
                f"Parse resource permission error for {item}.\n"
                "The expected permissions are 'SUB' or 'PUB' or 'SUB|PUB' or 'PUB|SUB'."
            )
