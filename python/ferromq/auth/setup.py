"""ACL 2.0 from broker.conf's keys: which checks run, what the keys may say, the users made at
start (`initAuthenticationUser`, `innerClientAuthenticationCredentials`) and the import of a 4.x
`plain_acl.yml` (`migrateAuthFromV1Enabled`, as Java's `AuthMigrator`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ferromq.acl.plain import PlainAcl, read_yaml
from ferromq.acl.signing import Credentials
from ferromq.auth.errors import AuthenticationError, AuthorizationError
from ferromq.auth.evaluator import AuthSettings
from ferromq.auth.metadata import AuthMetadata
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

logger = logging.getLogger(__name__)

_PACKAGE = "org.apache.rocketmq.auth."
# The classes Java's keys may name that ferromq is (its defaults, and the proxy's metadata
# providers, which read a broker's users and ACLs).
KNOWN_CLASSES: Mapping[str, frozenset[str]] = {
    "authenticationProvider": frozenset({_PACKAGE + "authentication.provider.DefaultAuthenticationProvider"}),
    "authorizationProvider": frozenset({_PACKAGE + "authorization.provider.DefaultAuthorizationProvider"}),
    "authenticationMetadataProvider": frozenset(
        {
            _PACKAGE + "authentication.provider.LocalAuthenticationMetadataProvider",
            "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
        }
    ),
    "authorizationMetadataProvider": frozenset(
        {
            _PACKAGE + "authorization.provider.LocalAuthorizationMetadataProvider",
            "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
        }
    ),
    "authenticationStrategy": frozenset(
        {
            _PACKAGE + "authentication.strategy.StatelessAuthenticationStrategy",
            _PACKAGE + "authentication.strategy.StatefulAuthenticationStrategy",
        }
    ),
    "authorizationStrategy": frozenset(
        {
            _PACKAGE + "authorization.strategy.StatelessAuthorizationStrategy",
            _PACKAGE + "authorization.strategy.StatefulAuthorizationStrategy",
        }
    ),
}


def credentials(text: str | None, user_key: str, secret_key: str) -> tuple[str, str] | None:
    """(user, secret) of a JSON object such as `{"username": "u", "password": "p"}`; None for
    none; ValueError for anything else."""
    if text is None or not text.strip():
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ValueError(f'a JSON object {{"{user_key}": ..., "{secret_key}": ...}}') from None
    if not isinstance(data, dict) or not data.get(user_key) or not data.get(secret_key):
        raise ValueError(f'a JSON object {{"{user_key}": ..., "{secret_key}": ...}} with both set')
    return str(data[user_key]), str(data[secret_key])


def problems(values: Mapping[str, Any], plain_acl_enabled: bool) -> list[tuple[str, str]]:
    """What is wrong with the ACL 2.0 keys (camelCase keys to values), as (key, one line)."""
    out: list[tuple[str, str]] = []
    for key, known in KNOWN_CLASSES.items():
        value = values.get(key)
        if value is not None and str(value).strip() and str(value).strip() not in known:
            out.append(
                (key, f"{key} must name {' or '.join(sorted(known))} (ferromq has no other), not {value!r}")
            )
    authn, authz = bool(values.get("authenticationEnabled")), bool(values.get("authorizationEnabled"))
    if authz and not authn:
        out.append(
            (
                "authorizationEnabled",
                "authorizationEnabled=true without authenticationEnabled=true would trust whatever "
                "user a client names: set authenticationEnabled=true too",
            )
        )
    if plain_acl_enabled and (authn or authz):
        out.append(
            (
                "aclEnable",
                "aclEnable=true (the plain ACL of 4.x) and ACL 2.0 (authenticationEnabled/"
                "authorizationEnabled) cannot both guard one broker: keep one (migrateAuthFromV1Enabled"
                "=true imports plain_acl.yml into ACL 2.0)",
            )
        )
    for key, names in (
        ("initAuthenticationUser", ("username", "password")),
        ("innerClientAuthenticationCredentials", ("accessKey", "secretKey")),
    ):
        try:
            credentials(values.get(key), *names)
        except ValueError as e:
            out.append((key, f"{key} must be {e}"))
    return out


def settings_of(values: Mapping[str, Any], cluster: str) -> AuthSettings:
    return AuthSettings.of(
        bool(values.get("authenticationEnabled")),
        bool(values.get("authorizationEnabled")),
        values.get("authenticationWhitelist"),
        values.get("authorizationWhitelist"),
        cluster,
    )


def create_start_users(metadata: AuthMetadata, values: Mapping[str, Any]) -> None:
    """The Super users broker.conf names, unless they exist (Java's `initUser`)."""
    for key, names in (
        ("initAuthenticationUser", ("username", "password")),
        ("innerClientAuthenticationCredentials", ("accessKey", "secretKey")),
    ):
        pair = credentials(values.get(key), *names)
        if pair is not None and metadata.ensure_super_user(*pair):
            logger.info("ACL 2.0: created the Super user %s (%s)", pair[0], key)


# -- migrateAuthFromV1Enabled -------------------------------------------------------------------


def _actions(perm: str) -> tuple[Action, ...]:
    perm = perm.strip()
    if perm == "PUB":
        return (Action.PUB,)
    if perm == "SUB":
        return (Action.SUB,)
    if perm in ("PUB|SUB", "SUB|PUB"):
        return (Action.PUB, Action.SUB)
    return (Action.ALL,)


def _decision(perm: str) -> Decision:
    return Decision.DENY if not perm.strip() or perm.strip() == "DENY" else Decision.ALLOW


def _entries(items: Any, resource_of: Any) -> list[PolicyEntry]:
    out = []
    for item in items if isinstance(items, list) else []:
        parts = [p for p in str(item).split("=") if p]
        if len(parts) != 2:
            continue
        name, perm = parts[0].strip(), parts[1].strip()
        out.append(PolicyEntry(resource_of(name), _actions(perm), (), _decision(perm)))
    return out


def acl_of_account(raw: Mapping[str, Any]) -> tuple[User, Acl | None]:
    """A plain_acl.yml account as Java's `AuthMigrator` turns it into a user and an ACL (admin
    accounts are Super users; white addresses are not carried over, as in Java)."""
    name = str(raw.get("accessKey") or "")
    admin = str(raw.get("admin", "")).strip().lower() == "true"
    user = User(name, str(raw.get("secretKey") or ""), UserType.SUPER if admin else UserType.NORMAL)
    custom = _entries(raw.get("topicPerms"), Resource.topic) + _entries(raw.get("groupPerms"), Resource.group)
    defaults = []
    for key, kind in (("defaultTopicPerm", ResourceType.TOPIC), ("defaultGroupPerm", ResourceType.GROUP)):
        perm = raw.get(key)
        if perm is not None and str(perm).strip():
            resource = Resource(kind, None, ResourcePattern.ANY)
            defaults.append(PolicyEntry(resource, _actions(str(perm)), (), _decision(str(perm))))
    policies = []
    if custom:
        policies.append(Policy(PolicyType.CUSTOM, tuple(custom)))
    if defaults:
        policies.append(Policy(PolicyType.DEFAULT, tuple(defaults)))
    return user, (Acl(user.subject, tuple(policies)) if policies else None)


def migrate_plain_acl(metadata: AuthMetadata, plain: PlainAcl) -> int:
    """Imports the accounts of the plain ACL's files whose user does not exist yet; how many."""
    done = 0
    for path in plain.acl_files():
        accounts = read_yaml(Path(path)).get("accounts") or []
        for raw in accounts if isinstance(accounts, list) else []:
            if not isinstance(raw, dict) or not raw.get("accessKey"):
                continue
            user, acl = acl_of_account(raw)
            if user.username in metadata.users:
                continue
            try:
                metadata.create_user(user)
                if acl is not None:
                    metadata.put_acl(acl)
            except (AuthenticationError, AuthorizationError) as e:
                logger.error("[ACL MIGRATE] AccessKey %s of %s not imported: %s", user.username, path, e)
                continue
            done += 1
    return done


def inner_credentials(text: str | None) -> Credentials | None:
    """The signing keys of innerClientAuthenticationCredentials (`{"accessKey":..,"secretKey":..}`),
    with which a broker signs its own requests to other brokers; None when not set (or not valid:
    the configuration check refuses that at start)."""
    try:
        pair = credentials(text, "accessKey", "secretKey")
    except ValueError:
        return None
    return None if pair is None else Credentials(*pair)
