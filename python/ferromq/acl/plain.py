"""The plain ACL: accounts and global white addresses read from YAML files, as RocketMQ 4.9.7's
`PlainPermissionManager`.

Files: every `*.yml` / `*.yaml` under `<home>/conf/acl/` (recursively) and the default file
(`<home>/conf/plain_acl.yml` unless configured otherwise; created empty when missing, as Java
does). An access key defined in two files counts in the first one only (files in name order). The
global white addresses of all files add up.

What the files say is held in an immutable `AclSnapshot`; a reload builds a new one and swaps it
in, so a request is always checked against one consistent configuration. A file that cannot be
used (bad YAML, a bad address pattern, a short key) leaves the previous snapshot in place.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ferromq.acl import permission as perm
from ferromq.acl.addresses import Matcher, matcher
from ferromq.acl.errors import AclError, refusal
from ferromq.acl.signing import ACCESS_KEY, SIGNATURE, Signer
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import RETRY_PREFIX, TRACE_TOPIC

logger = logging.getLogger(__name__)

DEFAULT_ACL_FILE = "conf/plain_acl.yml"  # Java: -Drocketmq.acl.plain.file, relative to the home
ACL_DIR = "conf/acl"
KEY_MIN_LENGTH = 6  # keys must be longer than this (AclConstants)

GLOBAL_WHITE = "globalWhiteRemoteAddresses"
ACCOUNTS = "accounts"
DATA_VERSION = "dataVersion"


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    white: Matcher
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: Mapping[str, int] | None
    """Topics and groups' retry topics to their permission; None when the account lists none."""
    signer: Signer


@dataclass(frozen=True, slots=True)
class DataVersion:
    timestamp: int
    counter: int

    def as_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}


@dataclass(frozen=True)
class AclSnapshot:
    global_white: tuple[Matcher, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)
    files: tuple[Path, ...] = ()
    versions: Mapping[Path, DataVersion] = field(default_factory=dict)
    mtimes: Mapping[Path, int] = field(default_factory=dict)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _texts(value: Any) -> list[str] | None:
    if value is None or value == "":
        return None
    if not isinstance(value, list):
        raise AclError(f"expected a list, not {value!r}")
    return [str(v) for v in value]


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "yes", "on")


def check_keys(access_key: str | None, secret_key: str | None) -> None:
    if (
        access_key is None
        or secret_key is None
        or len(access_key) <= KEY_MIN_LENGTH
        or len(secret_key) <= KEY_MIN_LENGTH
    ):
        raise AclError(
            f"The accessKey={access_key} and secretKey={secret_key} cannot be null "
            "and length should longer than 6"
        )


def build_account(raw: Mapping[str, Any]) -> Account:
    access_key, secret_key = _text(raw.get("accessKey")), _text(raw.get("secretKey"))
    check_keys(access_key, secret_key)
    assert access_key is not None and secret_key is not None
    perms = {
        **perm.parse_resource_perms(_texts(raw.get("groupPerms")), is_topic=False),
        **perm.parse_resource_perms(_texts(raw.get("topicPerms")), is_topic=True),
    }
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white=matcher(_text(raw.get("whiteRemoteAddress"))),
        admin=_flag(raw.get("admin")),
        default_topic_perm=perm.parse_perm(_text(raw.get("defaultTopicPerm"))),
        default_group_perm=perm.parse_perm(_text(raw.get("defaultGroupPerm"))),
        perms=perms or None,
        signer=Signer(secret_key),
    )


def read_yaml(path: Path) -> dict[str, Any]:
    """A file's mapping, every scalar as text (as written: `secretKey: 012345678` stays that);
    {} for a missing or empty file. `AclError` for a file that is not a YAML mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise AclError(f"cannot read {path}: {e.strerror}") from None
    try:
        data = yaml.load(text, Loader=yaml.BaseLoader)
    except yaml.YAMLError as e:
        raise AclError(f"{path} is not valid YAML: {e}") from None
    if data is None or data == "":
        return {}
    if not isinstance(data, dict):
        raise AclError(f"{path} must hold a YAML mapping (globalWhiteRemoteAddresses, accounts)")
    return data


def write_yaml(path: Path, data: Mapping[str, Any]) -> None:
    """Replaces the file in one rename, so the watcher never reads half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, path)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return -1


def _version_of(data: Mapping[str, Any]) -> DataVersion:
    raw = data.get(DATA_VERSION)
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        try:
            return DataVersion(int(raw[0].get("timestamp", 0)), int(raw[0].get("counter", 0)))
        except (TypeError, ValueError):
            pass
    return DataVersion(int(time.time() * 1000), 0)


class PlainAcl:
    """The ACL of one broker: loads the files, checks requests, applies the ACL admin requests."""

    def __init__(self, home: Path | None, default_file: Path) -> None:
        self.home = home
        self.default_file = default_file
        self.acl_dir = home / ACL_DIR if home is not None else None
        self.snapshot = AclSnapshot()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    @classmethod
    def locate(cls, home: str | None, acl_file: str) -> PlainAcl:
        """`acl_file` is taken relative to `home` unless absolute (Java:
        `$ROCKETMQ_HOME/` + `rocketmq.acl.plain.file`)."""
        root = Path(home).absolute() if home else None
        path = Path(acl_file)
        if not path.is_absolute():
            if root is None:
                raise AclError(
                    "aclEnable=true needs the broker's home (rocketmqHome in broker.conf, or the "
                    f"ROCKETMQ_HOME environment variable) to find {acl_file}, or an absolute aclPlainFile"
                )
            path = root / path
        return cls(root, path)

    def on_change(self, callback: Callable[[], None]) -> None:
        """`callback` runs after every snapshot swap (caches keyed on the old one are dropped)."""
        self._listeners.append(callback)

    # -- loading -------------------------------------------------------------------------------

    def acl_files(self) -> list[Path]:
        files: list[Path] = []
        if self.acl_dir is not None and self.acl_dir.is_dir():
            files = sorted(
                p for p in self.acl_dir.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file()
            )
        if self.default_file.exists() and self.default_file not in files:
            files.append(self.default_file)
        return files

    def load(self) -> None:
        """Reads every file into a new snapshot; `AclError` (the old snapshot stays) when one
        cannot be used."""
        with self._lock:
            if not self.default_file.exists():
                self.default_file.parent.mkdir(parents=True, exist_ok=True)
                self.default_file.touch()
            files = self.acl_files()
            mtimes = {p: _mtime(p) for p in files}
            white: list[Matcher] = []
            accounts: dict[str, Account] = {}
            versions: dict[Path, DataVersion] = {}
            for path in files:
                data = read_yaml(path)
                if not data:
                    logger.warning("no data in ACL file %s", path)
                    continue
                try:
                    white += [matcher(str(a)) for a in _texts(data.get(GLOBAL_WHITE)) or []]
                    for raw in data.get(ACCOUNTS) or []:
                        if not isinstance(raw, dict):
                            raise AclError(f"an account must be a mapping, not {raw!r}")
                        account = build_account(raw)
                        if account.access_key in accounts:
                            logger.warning(
                                "access key %s is in several ACL files; %s is ignored",
                                account.access_key,
                                path,
                            )
                            continue
                        accounts[account.access_key] = account
                except AclError as e:
                    raise AclError(f"{path}: {e}") from None
                versions[path] = _version_of(data)
            self.snapshot = AclSnapshot(tuple(white), accounts, tuple(files), versions, mtimes)
        logger.info("ACL loaded: %d accounts, %d global white addresses", len(accounts), len(white))
        for callback in self._listeners:
            callback()

    def file_times(self) -> dict[Path, int]:
        """The ACL files now and their modification times."""
        return {p: _mtime(p) for p in self.acl_files()}

    def changed(self) -> bool:
        """Whether a file was added, removed or modified since the last load."""
        return self.file_times() != dict(self.snapshot.mtimes)

    # -- checking ------------------------------------------------------------------------------

    def globally_white(self, host: str) -> bool:
        return any(m(host) for m in self.snapshot.global_white)

    def authenticate(self, cmd: RemotingCommand, white_for: Callable[[Account], bool]) -> Account | None:
        """The first half of Java's `PlainPermissionManager.validate` for a peer that is not
        globally white: the account that signed the request, or None when the peer is in the
        account's white addresses (Java checks nothing more then). Raises Java's refusal.
        `white_for` says whether the peer is in an account's white addresses (the caller caches it)."""
        account = self.account_of(cmd)
        if white_for(account):
            return None
        self.verify(cmd, account)
        return account

    def account_of(self, cmd: RemotingCommand) -> Account:
        """The account the request names (AccessKey); Java's refusal when none or unknown."""
        access_key = cmd.ext.get(ACCESS_KEY)
        if access_key is None:
            raise refusal("No accessKey is configured", "validate:663")
        account = self.snapshot.accounts.get(access_key)
        if account is None:
            raise refusal(f"No acl config for {access_key}", "validate:667")
        return account

    @staticmethod
    def verify(cmd: RemotingCommand, account: Account) -> None:
        """Java's refusal unless the request's Signature is the account's."""
        if account.signer.server_signature(cmd.ext, cmd.body) != cmd.ext.get(SIGNATURE):
            raise refusal(f"Check signature failed for accessKey={account.access_key}", "validate:683")

    # -- the ACL admin requests ----------------------------------------------------------------

    def _file_of(self, access_key: str) -> Path | None:
        for path in self.snapshot.files:
            for raw in read_yaml(path).get(ACCOUNTS) or []:
                if isinstance(raw, dict) and _text(raw.get("accessKey")) == access_key:
                    return path
        return None

    def _write_versioned(self, path: Path, data: dict[str, Any]) -> None:
        old = self.snapshot.versions.get(path) or _version_of(data)
        data[DATA_VERSION] = [{"counter": old.counter + 1, "timestamp": int(time.time() * 1000)}]
        write_yaml(path, data)

    def update_account(self, config: Mapping[str, Any]) -> None:
        """UPDATE_AND_CREATE_ACL_CONFIG: changes the account where its file has it, or adds it to
        the default file; then reloads. `config` holds the request's values (None: not given)."""
        access_key, secret_key = config.get("accessKey"), config.get("secretKey")
        check_keys(access_key, secret_key)
        perm.check_resource_perms(config.get("topicPerms"))
        perm.check_resource_perms(config.get("groupPerms"))
        assert access_key is not None
        build_account(config)  # refuses what the file could not hold
        path = self._file_of(access_key) or self.default_file
        data = read_yaml(path)
        accounts = [a for a in data.get(ACCOUNTS) or [] if isinstance(a, dict)]
        existing = next((a for a in accounts if _text(a.get("accessKey")) == access_key), None)
        entry: dict[str, Any] = existing if existing is not None else {}
        entry["accessKey"] = access_key
        if secret_key:
            entry["secretKey"] = secret_key
        if config.get("whiteRemoteAddress") is not None:
            entry["whiteRemoteAddress"] = config["whiteRemoteAddress"]
        entry["admin"] = bool(config.get("admin"))
        for key in ("defaultTopicPerm", "defaultGroupPerm"):
            if config.get(key):
                entry[key] = config[key]
        for key in ("topicPerms", "groupPerms"):
            if config.get(key) is not None:
                entry[key] = list(config[key])
        if existing is None:
            accounts.append(entry)
        data[ACCOUNTS] = accounts
        self._write_versioned(path, data)
        self.load()

    def delete_account(self, access_key: str) -> bool:
        """DELETE_ACL_CONFIG: False when no file has the key."""
        if not access_key:
            return False
        path = self._file_of(access_key)
        if path is None:
            return False
        data = read_yaml(path)
        accounts = [a for a in data.get(ACCOUNTS) or [] if isinstance(a, dict)]
        data[ACCOUNTS] = [a for a in accounts if _text(a.get("accessKey")) != access_key]
        self._write_versioned(path, data)
        self.load()
        return True

    def update_global_white(self, addresses: list[str], file: str | None) -> bool:
        """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: replaces the list in `file` (the default file when
        none), which must be an existing file under the home. False when it cannot be."""
        path = Path(file) if file else self.default_file
        if not path.is_file():
            logger.error("ACL file %s does not exist or is a directory", path)
            return False
        if self.home is not None and not path.absolute().is_relative_to(self.home):
            logger.error("ACL file %s is not under the broker's home %s", path, self.home)
            return False
        for address in addresses:
            matcher(address)  # refuses a pattern the file could not hold
        data = read_yaml(path)
        data[GLOBAL_WHITE] = list(addresses)
        self._write_versioned(path, data)
        self.load()
        return True

    def all_config(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG's body: every file's global white addresses and accounts
        (the first definition of each access key), as the files say them now."""
        white: list[str] = []
        configs: list[dict[str, Any]] = []
        seen: set[str] = set()
        for path in self.snapshot.files:
            data = read_yaml(path)
            white += _texts(data.get(GLOBAL_WHITE)) or []
            for raw in data.get(ACCOUNTS) or []:
                key = _text(raw.get("accessKey")) if isinstance(raw, dict) else None
                if key is None or key in seen:
                    continue
                seen.add(key)
                entry: dict[str, Any] = {"accessKey": key, "admin": _flag(raw.get("admin"))}
                for name in ("defaultGroupPerm", "defaultTopicPerm", "secretKey", "whiteRemoteAddress"):
                    if raw.get(name) is not None:
                        entry[name] = str(raw[name])
                for name in ("groupPerms", "topicPerms"):
                    values = _texts(raw.get(name))
                    if values is not None:
                        entry[name] = values
                configs.append(dict(sorted(entry.items())))
        return {"globalWhiteAddrs": white, "plainAccessConfigs": configs}

    def default_version(self) -> DataVersion:
        return self.snapshot.versions.get(self.default_file) or DataVersion(0, 0)

    def versions(self) -> dict[str, dict[str, int]]:
        return {str(p): v.as_json() for p, v in self.snapshot.versions.items()}


def check_perm(code: int, needed: Mapping[str, int] | None, account: Account) -> None:
    """Java's `checkPerm`: admin-only requests, then each resource against the account's own
    permission for it or its default for topics or groups."""
    if code in perm.ADMIN_CODES and not account.admin:
        raise refusal(
            f"Need admin permission for request code={code}, but accessKey={account.access_key} is not",
            "checkPerm:580",
        )
    if needed is None:
        return
    owned = account.perms
    if owned is None and account.admin:
        return
    for resource, needed_perm in needed.items():
        is_group = resource.startswith(RETRY_PREFIX)
        mine = owned.get(resource) if owned is not None else None
        if mine is None:
            default = account.default_group_perm if is_group else account.default_topic_perm
            if not perm.check_permission(needed_perm, default):
                raise refusal(f"No default permission for {_printed(resource, is_group)}", "checkPerm:605")
        elif not perm.check_permission(needed_perm, mine):
            raise refusal(f"No default permission for {_printed(resource, is_group)}", "checkPerm:610")


def _printed(resource: str, is_group: bool) -> str:
    return f"group:{resource[len(RETRY_PREFIX) :]}" if is_group else f"topic:{resource}"


def authorize(code: int, resources: Mapping[str, int] | None, account: Account) -> None:
    """The second half of `validate`: what the request touches against what the account may do
    (a send to the trace topic needs only the signature)."""
    if resources is not None and resources.get(TRACE_TOPIC) == perm.PUB:
        return
    check_perm(code, resources, account)
