"""What the data plane needs to serve signed sends and pulls itself with aclEnable=true
(`crates/broker/src/acl.rs`). Python decides, Rust verifies signatures: the decisions below are
made by the guard's own code (`may_send`, `may_pull`, the address matchers); the plane only
computes the signature, and hands Python every request it cannot serve (which answers it with
Java's refusal or serves it as before).

What the plane gets is valid for one ACL load (its generation): a reload pushes new rules and new
peer decisions, and the plane serves nothing of a connection whose decision is of an older load.
"""

from __future__ import annotations

from collections.abc import Iterable

from ferromq.acl.guard import may_pull, may_send
from ferromq.acl.plain import PlainAcl

# (access key, secret key, topics of the plane the account may send to)
SendRules = list[tuple[str, str, list[str]]]
# (access key, secret key, topics of the plane the account may pull from, groups it may pull as)
PullRules = list[tuple[str, str, list[str], list[str]]]


def send_rules(acl: PlainAcl, topics: Iterable[str]) -> SendRules:
    """Per account: its keys and the topics (of `topics`) a signed send of it may go to."""
    names = list(topics)
    return [
        (a.access_key, a.secret_key, [t for t in names if may_send(a, t)])
        for a in acl.snapshot.accounts.values()
    ]


def pull_rules(acl: PlainAcl, topics: Iterable[str], groups: Iterable[str]) -> PullRules:
    """Per account: its keys, the topics (of `topics`) and the groups (of `groups`) its signed
    pulls may name."""
    topic_names, group_names = list(topics), list(groups)
    return [
        (
            a.access_key,
            a.secret_key,
            [t for t in topic_names if may_pull(a, topic=t)],
            [g for g in group_names if may_pull(a, group=g)],
        )
        for a in acl.snapshot.accounts.values()
    ]


def peer_decision(acl: PlainAcl, host: str) -> tuple[bool, list[str]]:
    """What a peer's address decides: globally white (nothing is checked), else the access keys
    of the accounts whose white addresses hold it (their requests need no signature)."""
    if acl.globally_white(host):
        return True, []
    return False, [a.access_key for a in acl.snapshot.accounts.values() if a.white(host)]
