"""ACL 2.0's two checks, as Java 5.3.3's default providers make them.

Authentication (`DefaultAuthenticationHandler`): the request names a user (remoting: the
`AccessKey` field; gRPC: `Credential=` of the `authorization` header), the user exists and is
enabled, and the signature is the user's password's: remoting signs the other fields in key order
then the body (HmacSHA1, base64, as 4.x clients sign); gRPC signs `x-mq-date-time` (hex). As in
Java, the date-time is not checked against the clock.

Authorization (`UserAuthorizationHandler`, then `AclAuthorizationHandler`): a Super user may do
anything; otherwise, for each resource a request touches, the entries of the user's Custom policy
that match it (resource, one of the actions, source address) are taken, or, when none matches,
those of its Default policy; the most specific entry decides (a literal name before the longest
prefix before any name, a named type before `*`), and between equally specific entries Deny wins.
No matching entry is a refusal too.

Codes in `authenticationWhitelist` / `authorizationWhitelist` (remoting request codes, gRPC request
message names such as `apache.rocketmq.v2.QueryRouteRequest`) skip that check.
"""

from __future__ import annotations

import binascii
import collections
import hmac
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ferromq.acl.signing import ACCESS_KEY, SIGNATURE, Signer
from ferromq.auth.contexts import Needed
from ferromq.auth.errors import AuthenticationError, AuthorizationError
from ferromq.auth.metadata import AuthMetadata
from ferromq.auth.model import Action, Decision, PolicyEntry, PolicyType, Resource, User
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import UNIQUE_KEY_QUERY

logger = logging.getLogger(__name__)
audit = logging.getLogger("ferromq.auth.audit")

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
# Requests of clients up to 4.9.3 (MQVersion ordinal 400) are checked without the unique-key query
# flag, which those clients add after signing.
_V4_9_3 = 400
_AUDIT_LINES_PER_SECOND = 10
_MAX_DECISIONS = 65536


def _split(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """The ACL 2.0 keys of broker.conf or rmq-proxy.json that decide what is checked."""

    authentication_enabled: bool = False
    authorization_enabled: bool = False
    authentication_whitelist: frozenset[str] = frozenset()
    authorization_whitelist: frozenset[str] = frozenset()
    cluster: str = "DefaultCluster"

    @staticmethod
    def of(
        authentication_enabled: bool,
        authorization_enabled: bool,
        authentication_whitelist: str | None,
        authorization_whitelist: str | None,
        cluster: str,
    ) -> AuthSettings:
        return AuthSettings(
            authentication_enabled,
            authorization_enabled,
            _split(authentication_whitelist or ""),
            _split(authorization_whitelist or ""),
            cluster,
        )

    @property
    def enabled(self) -> bool:
        return self.authentication_enabled or self.authorization_enabled


def authorization_fields(header: str) -> dict[str, str]:
    """The `key=value` items of a 5.x client's `authorization` header (`MQv2-HMAC-SHA1
    Credential=<user>/..., SignedHeaders=x-mq-date-time, Signature=<hex>`), read as Java's proxy
    reads it; ValueError with Java's text when it is malformed."""
    parts = header.split(" ", 1)
    if len(parts) != 2:
        raise ValueError("authentication header is incorrect.")
    out = {}
    for item in parts[1].split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise ValueError("authentication keyValues length is incorrect, actual length=1.")
        out[key] = value
    return out


class _Audit:
    """Denials counted per reason and logged, at most a few lines a second (a client retrying
    with a wrong secret must not flood the log)."""

    def __init__(self) -> None:
        self.denials: collections.Counter[str] = collections.Counter()
        self._second = 0
        self._lines = 0
        self._dropped = 0

    def denied(self, reason: str, text: str) -> None:
        self.denials[reason] += 1
        now = int(time.monotonic())
        if now != self._second:
            if self._dropped:
                audit.info("[AUTH] %d more denials not logged in the last second", self._dropped)
            self._second, self._lines, self._dropped = now, 0, 0
        if self._lines < _AUDIT_LINES_PER_SECOND:
            self._lines += 1
            audit.info("[AUTH] denied (%s): %s", reason, text)
        else:
            self._dropped += 1


def _entry_order(entry: PolicyEntry) -> tuple[int, int, int]:
    return (*entry.resource.specificity(), 0 if entry.decision is Decision.DENY else 1)


def deciding_entry(
    user_acl_policies: Mapping[PolicyType, tuple[PolicyEntry, ...]],
    resource: Resource,
    actions: tuple[Action, ...],
    source_ip: str | None,
) -> PolicyEntry | None:
    """The entry that decides: the most specific match of the Custom policy, else of the Default."""
    for kind in (PolicyType.CUSTOM, PolicyType.DEFAULT):
        matched = [e for e in user_acl_policies.get(kind, ()) if e.matches(resource, actions, source_ip)]
        if matched:
            return min(matched, key=_entry_order)
    return None


class Auth:
    """ACL 2.0 over one set of users and ACLs."""

    def __init__(self, settings: AuthSettings, metadata: AuthMetadata) -> None:
        self.settings = settings
        self.metadata = metadata
        self.audit = _Audit()
        self._signers: dict[str, tuple[str, Signer]] = {}
        self._policies: dict[str, Mapping[PolicyType, tuple[PolicyEntry, ...]]] = {}
        self._decisions: dict[tuple[str, Resource, tuple[Action, ...], str | None], str | None] = {}
        metadata.on_change(self._forget)

    def _forget(self) -> None:
        self._signers.clear()
        self._policies.clear()
        self._decisions.clear()

    def _signer(self, user: User) -> Signer:
        password = user.password or ""
        known = self._signers.get(user.username)
        if known is None or known[0] != password:
            known = self._signers[user.username] = (password, Signer(password))
        return known[1]

    # -- authentication ------------------------------------------------------------------------

    def _user(self, username: str | None) -> User:
        if not username:
            raise self._refuse_authentication("no_user", "username cannot be null.")
        user = self.metadata.users.get(username)
        if user is None:
            raise self._refuse_authentication("unknown_user", f"User:{username} is not found.")
        if user.disabled:
            raise self._refuse_authentication("disabled_user", f"User:{username} is disabled.")
        return user

    def _refuse_authentication(self, reason: str, text: str) -> AuthenticationError:
        self.audit.denied(reason, text)
        return AuthenticationError(text)

    def remoting_user(self, cmd: RemotingCommand) -> str | None:
        """The user who signed `cmd` (authentication on and the code not white-listed), or the
        user it names unchecked (authentication off), or None."""
        ext = cmd.ext
        username = ext.get(ACCESS_KEY) if ext else None
        s = self.settings
        if not s.authentication_enabled or str(cmd.code) in s.authentication_whitelist:
            return username
        user = self._user(username)
        skipped = (SIGNATURE, UNIQUE_KEY_QUERY) if cmd.version <= _V4_9_3 else (SIGNATURE,)
        content = "".join(ext[k] for k in sorted(ext) if k not in skipped).encode("utf-8")
        expected = self._signer(user).sign(content, cmd.body)
        given = ext.get(SIGNATURE)
        if given is None or not hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace")):
            raise self._refuse_authentication("bad_signature", "check signature failed.")
        return user.username

    def grpc_user(self, metadata: Mapping[str, str], rpc: str) -> str | None:
        """The user who signed a gRPC call (`rpc`: its request message's full name)."""
        header = metadata.get(AUTHORIZATION) or ""
        username, signature = (None, None)
        if header:
            username, signature = self._grpc_credentials(header, metadata.get(DATE_TIME))
        s = self.settings
        if not s.authentication_enabled or rpc in s.authentication_whitelist:
            return username
        user = self._user(username)
        date = (metadata.get(DATE_TIME) or "").encode("utf-8")
        expected = self._signer(user).sign(date)
        if signature is None or not hmac.compare_digest(expected.encode(), signature.encode()):
            raise self._refuse_authentication("bad_signature", "check signature failed.")
        return user.username

    def _grpc_credentials(self, header: str, date: str | None) -> tuple[str | None, str | None]:
        """(user, base64 signature) of `MQv2-HMAC-SHA1 Credential=..., SignedHeaders=..., Signature=<hex>`."""
        if not date:
            raise self._refuse_authentication("bad_header", "datetime is null.")
        try:
            fields = authorization_fields(header)
        except ValueError as e:
            raise self._refuse_authentication("bad_header", str(e)) from None
        try:
            raw = binascii.unhexlify(fields["Signature"]) if "Signature" in fields else None
        except (binascii.Error, ValueError):
            raise self._refuse_authentication("bad_header", "create authentication context error.") from None
        username = fields.get("Credential", "").split("/")[0]
        signature = None if raw is None else binascii.b2a_base64(raw, newline=False).decode("ascii")
        return username or None, signature

    # -- authorization -------------------------------------------------------------------------

    def _policies_of(self, subject: str) -> Mapping[PolicyType, tuple[PolicyEntry, ...]]:
        known = self._policies.get(subject)
        if known is None:
            acl = self.metadata.acls.get(subject)
            known = {} if acl is None else {p.policy_type: p.entries for p in acl.policies}
            self._policies[subject] = known
        return known

    def refusal(
        self, username: str, resource: Resource, actions: tuple[Action, ...], source_ip: str | None
    ) -> str | None:
        """Why `username` may not take `actions` on `resource` from `source_ip`; None if it may.
        Decisions are remembered until the users or ACLs change (a user with 10,000 entries pays
        the walk through them once per resource)."""
        key = (username, resource, actions, source_ip)
        try:
            return self._decisions[key]
        except KeyError:
            pass
        text = self._decide(username, resource, actions, source_ip)
        if len(self._decisions) >= _MAX_DECISIONS:
            self._decisions.clear()
        self._decisions[key] = text
        return text

    def _decide(
        self, username: str, resource: Resource, actions: tuple[Action, ...], source_ip: str | None
    ) -> str | None:
        user = self.metadata.users.get(username)
        if user is None:
            return f"User:{username} not found."
        if user.is_super:
            return None
        entry = deciding_entry(self._policies_of(user.subject), resource, actions, source_ip)
        if entry is not None and entry.decision is Decision.ALLOW:
            return None
        detail = "no matched policies." if entry is None else "the decision is deny."
        return f"User:{username} has no permission to access {resource.key} from {source_ip}, {detail}"

    def authorize(self, username: str | None, needed: Needed, source_ip: str | None, rpc: str) -> None:
        s = self.settings
        if not s.authorization_enabled or not needed or rpc in s.authorization_whitelist:
            return
        if username is None:
            anonymous = "Authorization failed. Please verify your access rights and try again."
            self.audit.denied("no_user", anonymous)
            raise AuthorizationError(anonymous)
        for resource, actions in needed:
            text = self.refusal(username, resource, actions, source_ip)
            if text is not None:
                self.audit.denied("deny" if "decision is deny" in text else "no_policy", text)
                raise AuthorizationError(text)

    def may(self, username: str, resource: Resource, actions: tuple[Action, ...]) -> bool:
        """Whether the user may, from any address (the data plane's rules: users with address
        conditions are left to Python)."""
        return self.refusal(username, resource, actions, None) is None
