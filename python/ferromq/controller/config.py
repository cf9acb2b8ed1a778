"""controller.conf: RocketMQ 5.x's controller keys (Java properties).

listenPort = 9878                       # where brokers and admin tools talk to this node
controllerDLegerGroup = group1          # accepted; one Raft group per peer list
controllerDLegerPeers = n0-127.0.0.1:9877;n1-127.0.0.1:9867;n2-127.0.0.1:9857   # Raft ports
controllerDLegerSelfId = n0
controllerStorePath = /var/ferromq/controller   # the Raft journal and snapshot
enableElectUncleanMaster = false
controllerHeartBeatTimeoutMills = 10000 # a broker silent this long is dead (brokers may send theirs)
scanNotActiveBrokerInterval = 5000
controllerRaftPassword = ...            # ferromq's: encrypts and authenticates the Raft traffic
authenticationEnabled = true            # ferromq's: brokers' requests that change a group's state
innerClientAuthenticationCredentials = {"accessKey":"...","secretKey":"..."}   # must be signed
                                        # with these (the brokers' own key of the same name)

Each node's Raft port listens on its own address in controllerDLegerPeers only. A group whose Raft
addresses are not all loopback ones needs controllerRaftPassword (the same on every node): without
it, whoever reaches a Raft port is a member of the group.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ferromq.auth.setup import inner_credentials
from ferromq.errors import ConfigError
from ferromq.netaddr import is_loopback
from ferromq.properties import parse_properties

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerConfig:
    listen_port: int = 9878
    peers: dict[str, str] = field(default_factory=dict)
    """Raft node id -> host:port (controllerDLegerPeers)."""
    self_id: str = "n0"
    store_path: str = os.path.join(os.path.expanduser("~"), "DledgerController")
    enable_elect_unclean_master: bool = False
    heartbeat_timeout_ms: int = 10_000
    scan_interval_ms: int = 5_000
    group: str = "group1"
    raft_password: str | None = None
    """PySyncObj's `password`: the nodes' messages are encrypted and authenticated with it. Without
    it anyone who reaches a Raft port can speak Raft to the node (not run code: see
    `raft_safety`), so `load_controller_config` requires it unless every Raft address is loopback."""

    authentication_enabled: bool = False
    inner_client_authentication_credentials: str | None = None
    """With authenticationEnabled: the key whose signature a broker's registration, heartbeat and
    SyncStateSet change must carry (its brokers sign with the same innerClientAuthenticationCredentials);
    without it anyone who reaches the port can speak for a broker and hold off an election."""

    @property
    def self_raft_addr(self) -> str:
        return self.peers[self.self_id]

    @property
    def other_raft_addrs(self) -> list[str]:
        return [addr for node, addr in sorted(self.peers.items()) if node != self.self_id]

    @property
    def journal_file(self) -> Path:
        return Path(self.store_path) / f"raft-{self.self_id}.journal"

    @property
    def dump_file(self) -> Path:
        return Path(self.store_path) / f"raft-{self.self_id}.dump"


_KEYS = {
    "listenPort": "listen_port",
    "controllerDLegerPeers": "peers",
    "controllerDLegerSelfId": "self_id",
    "controllerStorePath": "store_path",
    "enableElectUncleanMaster": "enable_elect_unclean_master",
    "controllerHeartBeatTimeoutMills": "heartbeat_timeout_ms",
    "scanNotActiveBrokerInterval": "scan_interval_ms",
    "controllerDLegerGroup": "group",
    "controllerRaftPassword": "raft_password",
    "authenticationEnabled": "authentication_enabled",
    "innerClientAuthenticationCredentials": "inner_client_authentication_credentials",
}
_IGNORED = frozenset({"notifyBrokerRoleChanged", "enableControllerInNamesrv", "controllerType"})
_INTS = {"listen_port", "heartbeat_timeout_ms", "scan_interval_ms"}


def parse_peers(text: str) -> dict[str, str]:
    """`n0-host:port;n1-host:port` -> {"n0": "host:port", ...}; ValueError says what is wrong."""
    peers: dict[str, str] = {}
    for item in (p.strip() for p in text.split(";")):
        if not item:
            continue
        node, sep, addr = item.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not node or not colon or not host or not port.isdigit():
            raise ValueError(f"{item!r} is not id-host:port")
        peers[node] = addr
    if not peers:
        raise ValueError("lists no peer")
    return peers


def exposed_without_password(cfg: ControllerConfig) -> list[str]:
    """The Raft addresses that are not loopback when no controllerRaftPassword is set."""
    if cfg.raft_password:
        return []
    return [addr for addr in cfg.peers.values() if not is_loopback(addr.rpartition(":")[0])]


def load_controller_config(
    path: str | os.PathLike[str] | None, *, in_namesrv: bool = False, **overrides: object
) -> ControllerConfig:
    """Reads controller.conf (or, `in_namesrv`, the controller keys of a namesrv.conf, whose
    other keys are the name server's); every problem is reported at once, with its line."""
    values: dict[str, object] = {}
    problems: list[str] = []
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
        for no, key, raw in parse_properties(text):
            name = _KEYS.get(key)
            if name is None:
                if key not in _IGNORED and not in_namesrv:
                    logger.warning("%s:%d: unknown controller key %r ignored", path, no, key)
                continue
            value = raw.strip()
            try:
                if name == "peers":
                    values[name] = parse_peers(value)
                elif name in _INTS:
                    values[name] = int(value)
                elif name in ("enable_elect_unclean_master", "authentication_enabled"):
                    if value.lower() not in ("true", "false"):
                        raise ValueError(f"must be true or false, not {value!r}")
                    values[name] = value.lower() == "true"
                else:
                    values[name] = os.path.expanduser(value) if name == "store_path" else value
            except ValueError as e:
                problems.append(f"{path}:{no}: {key} {e}")
    values.update({k: v for k, v in overrides.items() if v is not None})
    cfg = ControllerConfig(**values)  # type: ignore[arg-type]
    if not cfg.peers:
        problems.append("controllerDLegerPeers is not set (n0-host:port;n1-host:port;...)")
    elif cfg.self_id not in cfg.peers:
        problems.append(f"controllerDLegerSelfId {cfg.self_id!r} is not one of {', '.join(cfg.peers)}")
    exposed = exposed_without_password(cfg)
    if exposed:
        problems.append(
            f"controllerDLegerPeers has Raft addresses that are not loopback ({', '.join(exposed)}): "
            "set controllerRaftPassword, the same on every node"
        )
    if cfg.authentication_enabled and inner_credentials(cfg.inner_client_authentication_credentials) is None:
        problems.append(
            'authenticationEnabled=true needs innerClientAuthenticationCredentials={"accessKey":"...",'
            '"secretKey":"..."}, the same as the brokers\''
        )
    if not 0 <= cfg.listen_port <= 65535:
        problems.append("listenPort must be a port number (0-65535)")
    if cfg.heartbeat_timeout_ms <= 0 or cfg.scan_interval_ms <= 0:
        problems.append("controllerHeartBeatTimeoutMills and scanNotActiveBrokerInterval must be > 0")
    if problems:
        raise ConfigError("; ".join(problems))
    return cfg
