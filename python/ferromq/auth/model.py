"""ACL 2.0's users, resources and access rules, as RocketMQ 5.3.3 models them (`auth/` module:
`User`, `Resource`, `PolicyEntry`, `Policy`, `Acl`), and their JSON as the admin requests carry it
(`UserInfo`, `AclInfo`).

A user has a password (its secret key), a type (Super users may do anything) and a status (a
disabled user cannot sign in). An ACL holds, for one subject (`User:<name>`), policies of entries:
a resource (`Topic:T`, `Group:G`, `Cluster:C`, `Namespace:N`; a name ending in `*` is a prefix, `*`
alone any name; `*` alone any resource), actions, optional source addresses (IPs or CIDR blocks)
and a decision (Allow or Deny).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from ferromq.auth.errors import AuthorizationError
from ferromq.protocol.constants import DLQ_PREFIX, RETRY_PREFIX


class _Named(Enum):
    """An enum whose values are Java's names, read without regard to case (Java's `getByName`)."""

    @classmethod
    def by_name(cls, name: str | None) -> Any:
        if name is None:
            return None
        wanted = name.strip().lower()
        for member in cls:
            if member.value.lower() == wanted:
                return member
        return None


class Action(_Named):
    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


class ResourceType(_Named):
    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(_Named):
    ANY = "ANY"
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class UserType(_Named):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(_Named):
    ENABLE = "enable"
    DISABLE = "disable"


class Decision(_Named):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(_Named):
    CUSTOM = "Custom"
    DEFAULT = "Default"


USER_PREFIX = "User:"


@dataclass(frozen=True, slots=True)
class Resource:
    type: ResourceType
    name: str | None
    pattern: ResourcePattern

    @staticmethod
    def topic(name: str) -> Resource:
        return Resource(ResourceType.TOPIC, name, ResourcePattern.LITERAL)

    @staticmethod
    def group(name: str) -> Resource:
        """A group, named by itself or by its retry or dead-letter topic."""
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            if name.startswith(prefix):
                name = name[len(prefix) :]
                break
        return Resource(ResourceType.GROUP, name, ResourcePattern.LITERAL)

    @staticmethod
    def cluster(name: str) -> Resource:
        return Resource(ResourceType.CLUSTER, name, ResourcePattern.LITERAL)

    @staticmethod
    def of_topic_or_group(name: str) -> Resource:
        """A topic, or the group of a retry topic (Java names a group's requests by it)."""
        return Resource.group(name) if name.startswith(RETRY_PREFIX) else Resource.topic(name)

    @staticmethod
    def parse(key: str | None) -> Resource | None:
        """`Type:name`, `Type:prefix*`, `Type:*` or `*`; None for a blank key or an unknown type."""
        if key is None or not key.strip():
            return None
        if key == "*":
            return Resource(ResourceType.ANY, None, ResourcePattern.ANY)
        type_name, _, name = key.partition(":")
        kind = ResourceType.by_name(type_name)
        if kind is None:
            return None
        if name == "*":
            return Resource(kind, None, ResourcePattern.ANY)
        if name.endswith("*"):
            return Resource(kind, name[: name.index("*")], ResourcePattern.PREFIXED)
        return Resource(kind, name, ResourcePattern.LITERAL)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return "*"
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:*"
        if self.pattern is ResourcePattern.PREFIXED:
            return f"{self.type.value}:{self.name}*"
        return f"{self.type.value}:{self.name}"

    def matches(self, wanted: Resource) -> bool:
        """Whether this rule's resource covers the (literal) resource a request touches."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not wanted.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.PREFIXED:
            return wanted.name is not None and wanted.name.startswith(self.name or "")
        return wanted.name == self.name

    def specificity(self) -> tuple[int, int]:
        """Sort key of a matching rule, most specific first: a named type before `*`; a literal
        name, then the longest prefix, then any name."""
        if self.type is ResourceType.ANY:
            return (3, 0)
        if self.pattern is ResourcePattern.LITERAL:
            return (0, 0)
        if self.pattern is ResourcePattern.PREFIXED:
            return (1, -len(self.name or ""))
        return (2, 0)


@dataclass(frozen=True, slots=True)
class User:
    username: str
    password: str | None = None
    user_type: UserType | None = None
    user_status: UserStatus | None = None

    @property
    def subject(self) -> str:
        return USER_PREFIX + self.username

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER

    @property
    def disabled(self) -> bool:
        return self.user_status is UserStatus.DISABLE

    def as_info(self) -> dict[str, str]:
        """`UserInfo` JSON (fields without a value left out, as fastjson writes it)."""
        out = {"username": self.username}
        if self.password is not None:
            out["password"] = self.password
        if self.user_type is not None:
            out["userType"] = self.user_type.value
        if self.user_status is not None:
            out["userStatus"] = self.user_status.value
        return out

    @staticmethod
    def from_info(info: Mapping[str, Any], username: str | None = None) -> User:
        """A `UserInfo` JSON object; `username` (the request header's) wins over the body's."""
        name = username if username is not None else _text(info.get("username"))
        return User(
            username=name or "",
            password=_text(info.get("password")),
            user_type=UserType.by_name(_text(info.get("userType"))),
            user_status=UserStatus.by_name(_text(info.get("userStatus"))),
        )


def subject_user(subject: str | None) -> str | None:
    """The user name of a `User:<name>` subject; None for any other subject."""
    if subject is None:
        return None
    kind, _, name = subject.partition(":")
    return name if kind.lower() == "user" else None


def check_source_ip(text: str) -> None:
    """An IP address or a CIDR block (Java's `IPAddressUtils.isValidIPOrCidr`)."""
    if not text.strip():
        raise AuthorizationError("The source ip is empty.")
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise AuthorizationError("The source ip is invalid.") from None


def ip_in(source_ip: str | None, blocks: Sequence[str]) -> bool:
    if not source_ip:
        return False
    try:
        address = ipaddress.ip_address(source_ip)
    except ValueError:
        return False
    for block in blocks:
        try:
            if address in ipaddress.ip_network(block, strict=False):
                return True
        except ValueError:
            continue
    return False


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    resource: Resource
    actions: tuple[Action, ...]
    source_ips: tuple[str, ...]
    decision: Decision

    def matches(self, resource: Resource, actions: Iterable[Action], source_ip: str | None) -> bool:
        if not self.actions or not self.resource.matches(resource):
            return False
        wanted = tuple(actions)
        if Action.ANY not in wanted and Action.ALL not in self.actions:
            if not any(a in self.actions for a in wanted):
                return False
        return not self.source_ips or ip_in(source_ip, self.source_ips)

    def as_info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"resource": self.resource.key}
        if self.actions:
            out["actions"] = [a.value for a in self.actions]
        if self.source_ips:
            out["sourceIps"] = list(self.source_ips)
        out["decision"] = self.decision.value
        return out


@dataclass(frozen=True, slots=True)
class Policy:
    policy_type: PolicyType
    entries: tuple[PolicyEntry, ...]

    def updated(self, entries: Iterable[PolicyEntry]) -> Policy:
        """This policy with `entries` put in: an entry of the same resource is replaced in place,
        others are added at the end (Java's `Policy.updateEntry`)."""
        out = list(self.entries)
        for new in entries:
            for i, old in enumerate(out):
                if old.resource == new.resource:
                    out[i] = new
                    break
            else:
                out.append(new)
        return replace(self, entries=tuple(out))

    def without(self, resource: Resource) -> Policy:
        return replace(self, entries=tuple(e for e in self.entries if e.resource != resource))

    def as_info(self) -> dict[str, Any]:
        return {"policyType": self.policy_type.value, "entries": [e.as_info() for e in self.entries]}


@dataclass(frozen=True, slots=True)
class Acl:
    subject: str
    policies: tuple[Policy, ...]

    def policy(self, policy_type: PolicyType) -> Policy | None:
        for p in self.policies:
            if p.policy_type is policy_type:
                return p
        return None

    def updated(self, policies: Iterable[Policy]) -> Acl:
        """This ACL with `policies` merged in, policy by policy type (Java's `Acl.updatePolicy`)."""
        out = list(self.policies)
        for new in policies:
            for i, old in enumerate(out):
                if old.policy_type is new.policy_type:
                    out[i] = old.updated(new.entries)
                    break
            else:
                out.append(new)
        return replace(self, policies=tuple(out))

    def without(self, policy_type: PolicyType, resource: Resource) -> Acl:
        """This ACL without `resource`'s entry in its `policy_type` policy (an emptied policy goes)."""
        out = []
        for p in self.policies:
            if p.policy_type is policy_type:
                p = p.without(resource)
                if not p.entries:
                    continue
            out.append(p)
        return replace(self, policies=tuple(out))

    @property
    def has_source_ips(self) -> bool:
        return any(e.source_ips for p in self.policies for e in p.entries)

    def as_info(self) -> dict[str, Any]:
        return {"subject": self.subject, "policies": [p.as_info() for p in self.policies]}

    @staticmethod
    def from_info(info: Mapping[str, Any], subject: str | None = None) -> Acl:
        """An `AclInfo` JSON object, checked as Java's `AuthorizationMetadataManagerImpl.validate`
        checks an ACL to store (`AuthorizationError` with Java's text). Unknown actions are dropped
        and a missing policy type is Custom, as Java's converter does."""
        policies = info.get("policies")
        if not isinstance(policies, list) or not policies:
            raise AuthorizationError("The body of acl is null")
        name = _text(info.get("subject")) or subject
        if subject_user(name) is None:
            raise AuthorizationError("The subject type is null.")
        assert name is not None
        out = []
        for raw in policies:
            if not isinstance(raw, Mapping):
                raise AuthorizationError("The policy entries is empty.")
            kind = PolicyType.by_name(_text(raw.get("policyType"))) or PolicyType.CUSTOM
            entries = raw.get("entries")
            if not isinstance(entries, list) or not entries:
                raise AuthorizationError("The policy entries is empty.")
            out.append(Policy(kind, tuple(_entry(e) for e in entries)))
        return Acl(USER_PREFIX + (subject_user(name) or ""), tuple(out))


def _entry(raw: Any) -> PolicyEntry:
    if not isinstance(raw, Mapping):
        raise AuthorizationError("The resource is null.")
    resource = Resource.parse(_text(raw.get("resource")))
    if resource is None:
        raise AuthorizationError("The resource is null.")
    actions = tuple(a for a in (Action.by_name(_text(x)) for x in _list(raw.get("actions"))) if a is not None)
    if not actions:
        raise AuthorizationError("The actions is empty.")
    if Action.ANY in actions:
        raise AuthorizationError("The actions can not be Any.")
    ips = tuple(str(x) for x in _list(raw.get("sourceIps")))
    for ip in ips:
        check_source_ip(ip)
    decision = Decision.by_name(_text(raw.get("decision")))
    if decision is None:
        raise AuthorizationError("The decision is null or illegal.")
    return PolicyEntry(resource, actions, ips, decision)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _list(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AuthorizationError(f"expected a list, not {value!r}")
    return value
