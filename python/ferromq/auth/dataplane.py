"""What the data plane needs to serve signed sends and pulls itself with ACL 2.0 on: the same
rules as the plain ACL's (`ferromq.acl.dataplane`: per user its secret and the plane's topics and
groups it may use; Rust checks only the signature), decided here by `Auth`.

A user whose rules depend on the caller's address (entries with source IPs), a disabled user and
an unknown one get no rules: their requests go to Python, which decides them per address. No
address is white under ACL 2.0.
"""

from __future__ import annotations

from collections.abc import Iterable

from ferromq.acl.dataplane import PullRules, SendRules
from ferromq.auth.evaluator import Auth
from ferromq.auth.model import Action, Resource, User
from ferromq.protocol.constants import RETRY_PREFIX

_PUB = (Action.PUB,)
_SUB = (Action.SUB,)


def _plane_users(auth: Auth) -> list[User]:
    acls = auth.metadata.acls
    return [
        u
        for u in auth.metadata.users.values()
        if not u.disabled
        and u.password
        and not (u.subject in acls and acls[u.subject].has_source_ips and not u.is_super)
    ]


def _may(auth: Auth, user: User, resource: Resource, actions: tuple[Action, ...]) -> bool:
    return not auth.settings.authorization_enabled or auth.may(user.username, resource, actions)


def send_rules(auth: Auth, topics: Iterable[str]) -> SendRules:
    names = list(topics)
    return [
        (u.username, u.password or "", [t for t in names if _may(auth, u, Resource.topic(t), _PUB)])
        for u in _plane_users(auth)
    ]


def pull_rules(auth: Auth, topics: Iterable[str], groups: Iterable[str]) -> PullRules:
    topic_names, group_names = list(topics), list(groups)
    return [
        (
            u.username,
            u.password or "",
            # A pull of a retry topic is decided by its group alone (as Java's).
            [t for t in topic_names if t.startswith(RETRY_PREFIX) or _may(auth, u, Resource.topic(t), _SUB)],
            [g for g in group_names if _may(auth, u, Resource.group(g), _SUB)],
        )
        for u in _plane_users(auth)
    ]
