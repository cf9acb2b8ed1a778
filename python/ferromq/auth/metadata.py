"""The users and ACLs of one broker, kept durably under its store root, and the operations of the
admin requests on them with Java 5.3.3's checks and texts (`AuthenticationMetadataManagerImpl`,
`AuthorizationMetadataManagerImpl`).

Java keeps them in two RocksDB stores (`config/users`, `config/acls`). ferromq keeps two JSON files
beside them (`config/auth_users.json`, `config/auth_acls.json`), each replaced whole on every change
(written, synced and renamed, then the directory synced): a change acknowledged survives kill -9,
and a reader never sees half a file. Admins write these; their size is what admins create.

Everything is held in memory as immutable values (a request is checked against one consistent
view); listeners hear of every change (the data plane's rules are derived from it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ferromq.auth.errors import AuthenticationError, AuthorizationError
from ferromq.auth.model import Acl, PolicyType, Resource, User, UserStatus, UserType, subject_user

logger = logging.getLogger(__name__)

USERS_FILE = "auth_users.json"
ACLS_FILE = "auth_acls.json"


class AuthMetadataError(Exception):
    """A users or ACLs file that cannot be used (the start stops: guessing would open the broker)."""


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path, key: str) -> list[Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise AuthMetadataError(f"cannot read {path}: {e.strerror}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise AuthMetadataError(f"{path} is not valid JSON ({e}); restore it from a copy") from None
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise AuthMetadataError(f"{path} must hold a JSON object with a {key!r} list")
    return items


class AuthMetadata:
    """Users by name and ACLs by subject, with the admin operations."""

    def __init__(self, directory: Path | None) -> None:
        """`directory`: where the files live (None: in memory only, as a proxy's copy)."""
        self.directory = directory
        self.users: Mapping[str, User] = {}
        self.acls: Mapping[str, Acl] = {}
        self.generation = 0
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def load(self) -> None:
        if self.directory is None:
            return
        try:
            users = {}
            for info in _read(self.directory / USERS_FILE, "users"):
                user = User.from_info(info)
                users[user.username] = user
            acls = {}
            for info in _read(self.directory / ACLS_FILE, "acls"):
                acl = Acl.from_info(info)
                acls[acl.subject] = acl
        except (AuthorizationError, AttributeError, TypeError) as e:
            raise AuthMetadataError(f"the ACLs under {self.directory} cannot be read: {e}") from None
        self.users, self.acls = users, acls
        self._changed()

    # -- writing -------------------------------------------------------------------------------

    def _changed(self) -> None:
        self.generation += 1
        for callback in self._listeners:
            callback()

    def _write(self, name: str, key: str, items: list[dict[str, Any]]) -> None:
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            _write_durably(self.directory / name, orjson.dumps({key: items}, option=orjson.OPT_INDENT_2))

    def _save_users(self, users: dict[str, User]) -> None:
        self._write(USERS_FILE, "users", [u.as_info() for u in users.values()])
        self.users = users
        self._changed()

    def _save_acls(self, acls: dict[str, Acl]) -> None:
        self._write(ACLS_FILE, "acls", [a.as_info() for a in acls.values()])
        self.acls = acls
        self._changed()

    def replace_all(self, users: Iterable[User], acls: Iterable[Acl]) -> None:
        """Everything at once (a proxy's copy of a broker's users and ACLs)."""
        self.users = {u.username: u for u in users}
        self.acls = {a.subject: a for a in acls}
        self._changed()

    # -- users ---------------------------------------------------------------------------------

    def get_user(self, username: str | None) -> User | None:
        if username is None or not username.strip():
            raise AuthenticationError("username can not be blank")
        return self.users.get(username)

    def is_super(self, username: str) -> bool:
        user = self.get_user(username)
        if user is None:
            raise AuthenticationError(f"User:{username} is not found")
        return user.is_super

    def create_user(self, user: User) -> None:
        if not user.username.strip():
            raise AuthenticationError("username can not be blank")
        if not (user.password or "").strip():
            raise AuthenticationError("password can not be blank")
        if user.username in self.users:
            raise AuthenticationError("The user is existed")
        user = User(
            user.username,
            user.password,
            user.user_type or UserType.NORMAL,
            user.user_status or UserStatus.ENABLE,
        )
        self._save_users({**self.users, user.username: user})

    def update_user(self, user: User) -> None:
        if not user.username.strip():
            raise AuthenticationError("username can not be blank")
        old = self.users.get(user.username)
        if old is None:
            raise AuthenticationError("The user is not exist")
        new = User(
            old.username,
            user.password if (user.password or "").strip() else old.password,
            user.user_type or old.user_type,
            user.user_status or old.user_status,
        )
        self._save_users({**self.users, new.username: new})

    def delete_user(self, username: str) -> None:
        """The user and its ACL (Java deletes both)."""
        if not username.strip():
            raise AuthenticationError("username can not be blank")
        if username in self.users:
            self._save_users({k: v for k, v in self.users.items() if k != username})
        subject = User(username).subject
        if subject in self.acls:
            self._save_acls({k: v for k, v in self.acls.items() if k != subject})

    def list_users(self, name_filter: str | None) -> list[User]:
        users = sorted(self.users.values(), key=lambda u: u.username.encode())
        if name_filter and name_filter.strip():
            users = [u for u in users if name_filter in u.username]
        return users

    def ensure_super_user(self, username: str, password: str) -> bool:
        """Creates `username` as a Super user unless it exists (initAuthenticationUser,
        innerClientAuthenticationCredentials); whether it was created."""
        if username in self.users:
            return False
        self.create_user(User(username, password, UserType.SUPER))
        return True

    # -- ACLs ----------------------------------------------------------------------------------

    def _user_of(self, subject: str) -> User | None:
        name = subject_user(subject)
        return None if name is None else self.users.get(name)

    def put_acl(self, acl: Acl) -> None:
        """Create and update alike: merged into the subject's ACL, or stored as its first."""
        if self._user_of(acl.subject) is None:
            raise AuthorizationError(f"The subject of {acl.subject} is not exist.")
        old = self.acls.get(acl.subject)
        new = acl if old is None else old.updated(acl.policies)
        self._save_acls({**self.acls, new.subject: new})

    def delete_acl(
        self, subject: str | None, policy_type: PolicyType | None, resource: Resource | None
    ) -> None:
        if subject is None or subject_user(subject) is None:
            raise AuthorizationError("The subject is null.")
        if self._user_of(subject) is None:
            raise AuthorizationError("The subject is not exist.")
        old = self.acls.get(subject)
        if old is None:
            raise AuthorizationError("The acl is not exist.")
        new = None if resource is None else old.without(policy_type or PolicyType.CUSTOM, resource)
        if new is None or not new.policies:
            self._save_acls({k: v for k, v in self.acls.items() if k != subject})
        else:
            self._save_acls({**self.acls, subject: new})

    def get_acl(self, subject: str) -> Acl | None:
        if self._user_of(subject) is None:
            raise AuthorizationError("The subject is not exist.")
        return self.acls.get(subject)

    def list_acls(self, subject_filter: str | None, resource_filter: str | None) -> list[Acl]:
        """As Java's `listAcl`: subjects containing `subject_filter`; entries whose resource key
        contains `resource_filter` (unless the subject itself does), emptied policies dropped."""
        out = []
        for subject in sorted(self.acls, key=str.encode):
            if subject_filter and subject_filter.strip() and subject_filter not in subject:
                continue
            acl = self.acls[subject]
            if resource_filter and resource_filter.strip() and resource_filter not in subject:
                kept = []
                for p in acl.policies:
                    entries = tuple(e for e in p.entries if resource_filter in e.resource.key)
                    if entries:
                        kept.append(type(p)(p.policy_type, entries))
                acl = Acl(acl.subject, tuple(kept))
            if acl.policies:
                out.append(acl)
        return out
