"""The broker's configuration fields: one table per concern, and `BrokerConfig` made of them.

Each table is a frozen dataclass that declares its fields once (snake_case, RocketMQ's defaults,
the broker.conf key where it is not the camelCase of the name, the range of a number, whether
UPDATE_BROKER_CONFIG may change it and whether it is a secret; see `ferromq.settings`) and checks
its own values (`*_problems`). `BrokerConfig` inherits every table, so `cfg.field` reads any of
them, and adds what spans tables: the store's settings, derived values, checks across tables and
`profile`. Values are layered: defaults, then a profile (`PROFILES`), then the file, then
overrides. `config_keys` parses the file over these fields; `ferromq.broker.config` exports both.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ferromq.auth import setup as auth_setup
from ferromq.errors import ConfigError
from ferromq.remoting.tls import TlsConfigError, TlsSettings, read_properties_file
from ferromq.settings import JAVA_INT_MAX, keys_of, range_problems, setting
from ferromq.store import DEFAULT_MESSAGE_DELAY_LEVEL, FlushDiskType, StoreConfig
from ferromq.tables.config import (
    TABLE_TOPIC_CODECS,
    TABLE_TOPIC_ROLES,
    TABLE_TOPICS_REGEX,
    TableTopicConfig,
)
from ferromq.tiered.config import TieredStoreConfig

__all__ = [
    "CONFIG_TABLES",
    "DATA_PLANES",
    "KEY_OF",
    "METRICS_EXPORTER_TYPES",
    "PROFILES",
    "TABLE_TOPICS_REGEX",
    "TABLE_TOPIC_CODECS",
    "TABLE_TOPIC_ROLES",
    "AclConfig",
    "AuthConfig",
    "BrokerConfig",
    "ControllerConfig",
    "IdentityConfig",
    "LogConfig",
    "MetricsConfig",
    "PopConfig",
    "ProxyConfig",
    "PullConfig",
    "ReplicationConfig",
    "RetentionConfig",
    "ServerConfig",
    "StoreFilesConfig",
    "StoreMismatchError",
    "TableTopicConfig",
    "TieredStoreConfig",
    "TimerConfig",
    "TlsConfig",
    "TopicConfig",
    "TransactionConfig",
    "timer_precision",
]


class StoreMismatchError(ConfigError):
    """The store directory holds files of other sizes than the configuration makes (another
    profile, or other mappedFileSize* / index settings); the message says which keys to set."""


# Field overrides applied under the file's values and the overrides, by name. RocketMQ's defaults
# ("rocketmq") make 1 GiB CommitLog files, 6 MB per consume queue and 420 MB index files (sparse:
# they take disk as they fill, but a store of them stays large on a laptop or in a test). "small"
# keeps the format and every other default: 64 MiB CommitLog files,
# 30,000 units per consume-queue file, 42 MB index files. `ferromq serve` without a broker.conf
# uses "small"; anything else uses "rocketmq" (Java-compatible) unless told otherwise.
PROFILES: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "small": MappingProxyType(
            {
                "mapped_file_size_commitlog": 64 * 1024 * 1024,
                "mapped_file_size_consume_queue": 30_000 * 20,
                "max_hash_slot_num": 500_000,
                "max_index_num": 2_000_000,
                "mapped_file_size_timer_log": 4 * 1024 * 1024,
            }
        ),
        "rocketmq": MappingProxyType({}),
    }
)
METRICS_EXPORTER_TYPES = ("DISABLE", "PROM")
DATA_PLANES = ("rust", "python")
_INT = JAVA_INT_MAX  # a Java int in RocketMQ (the other numbers are longs there)
_DELAY_LEVEL = re.compile(r"[0-9]+[smhd]")
_DELETE_WHEN = re.compile(r"(0?[0-9]|1[0-9]|2[0-3])(;(0?[0-9]|1[0-9]|2[0-3]))*")


def _default_broker_name() -> str:
    try:
        return socket.gethostname() or "broker-a"
    except OSError:
        return "broker-a"


def _is_host_port(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) <= 65535)


def _addrs(text: str | None) -> list[str]:
    return [a.strip() for a in (text or "").split(";") if a.strip()]


def timer_precision(ms: int) -> int:
    """timerPrecisionMs as Java's setter takes it: the largest of 100, 200, 500 and 1000 not
    above it (100 for less)."""
    return max([c for c in (100, 200, 500, 1000) if c <= ms] or [100])


def _checker(table: type, values: Any, out: list[tuple[str, str]]) -> Callable[[str, str], None]:
    """`bad(field, must)`: appends "<key> must be <must>, not <value>" for one of `table`'s fields."""
    keys = keys_of(table)

    def bad(name: str, must: str) -> None:
        out.append((name, f"{keys[name]} must be {must}, not {getattr(values, name)!r}"))

    return bad


@dataclass(frozen=True)
class IdentityConfig:
    """Who the broker is, where it listens and which name servers it registers with."""

    broker_cluster_name: str = setting("DefaultCluster")
    broker_name: str = setting(factory=_default_broker_name)
    broker_id: int = setting(0)
    listen_port: int = setting(10911)
    namesrv_addr: str | None = setting(None)
    broker_ip1: str = setting("127.0.0.1", key="brokerIP1")
    broker_permission: int = setting(6, runtime=True)
    region_id: str = setting("DefaultRegion", runtime=True)
    trace_on: bool = setting(True, runtime=True)
    register_name_server_period: int = setting(30_000, least=1, most=_INT)

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return _addrs(self.namesrv_addr)

    def identity_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        bad = _checker(IdentityConfig, self, out)
        if not 0 <= self.listen_port <= 65535:  # 0: any free port (tests)
            bad("listen_port", "a port number (0-65535)")
        if self.broker_id < 0:
            bad("broker_id", ">= 0")
        for name in ("broker_name", "broker_cluster_name"):
            if not str(getattr(self, name)).strip():
                bad(name, "set")
        if not 0 <= self.broker_permission <= 15:
            bad("broker_permission", "0-15 (PermName bits: 4 read, 2 write, 1 inherit)")
        try:
            ipaddress.IPv4Address(self.broker_ip1)
        except ValueError:
            bad("broker_ip1", "an IPv4 address")
        if not all(_is_host_port(a) for a in self.namesrv_addrs):
            bad("namesrv_addr", "host:port, or several separated by ';'")
        return out


@dataclass(frozen=True)
class ServerConfig:
    """The ports' connections. Remoting bounds (0 turns a timeout off): RocketMQ's
    NettyServerConfig idle time, and ferromq's own read timeout, connection cap and buffer bounds.
    ferromq's data plane serves the ports' connections (TLS included) on Rust threads
    (serverIoThreads of them, 0: one per core). "rust": it also answers the plain sends and pulls
    Python lets it; "python": every request goes to the event loop's processors."""

    channel_expired_timeout: int = setting(120_000, least=1)
    server_channel_max_idle_time_seconds: int = setting(120, least=0)
    server_read_timeout_seconds: int = setting(30, least=0)
    server_max_connections: int = setting(10_000, least=1)
    # ferromq's: how many of them one peer address may hold (one host cannot take every slot).
    server_max_connections_per_address: int = setting(1000, least=1)
    server_request_buffer_bytes: int = setting(128 * 1024 * 1024, least=1)
    server_reply_buffer_bytes: int = setting(16 * 1024 * 1024, least=1)
    # ferromq's: unread reply bytes of all connections together (see ServerLimits).
    server_total_reply_buffer_bytes: int = setting(128 * 1024 * 1024, least=1)
    server_max_inflight_requests: int = setting(100_000, least=1)
    data_plane: str = setting("rust")
    server_io_threads: int = setting(0, least=0, most=1024)

    def server_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.data_plane not in DATA_PLANES:
            _checker(ServerConfig, self, out)("data_plane", " or ".join(DATA_PLANES))
        return out


@dataclass(frozen=True)
class LogConfig:
    """ferromq's log files (Java keeps ~/logs/rocketmqlogs by its logback config): broker.log and
    stats.log in logDir (default: logs/ferromqlogs beside the store directory, so ~/store logs
    to ~/logs/ferromqlogs), rolled at logMaxFileSize bytes keeping logMaxFiles (>= 1) old files."""

    log_dir: str | None = setting(None)
    log_max_file_size: int = setting(128 * 1024 * 1024, least=1024)
    log_max_files: int = setting(10, least=1)
    # ferromq's own: how often (seconds) stats.log gets its lines of the last minute, 60 as Java's
    # broker prints them (a test sets a few seconds).
    stats_log_interval_seconds: int = setting(60, least=1)


@dataclass(frozen=True)
class StoreFilesConfig:
    """The store: where it is, its files' sizes, its index, how it flushes, what a pull answer
    carries (RocketMQ's MessageStoreConfig), and how often consumer and delay offsets are saved."""

    store_path_root_dir: str = setting(os.path.join(os.path.expanduser("~"), "store"))
    store_path_commit_log: str | None = setting(None)
    # (setting() declares a field, as dataclasses.field does; ruff knows only field's.)
    flush_disk_type: FlushDiskType = setting(FlushDiskType.ASYNC_FLUSH)  # noqa: RUF009
    sync_flush_timeout: int = setting(5000, least=1)
    mapped_file_size_commitlog: int = setting(
        1024 * 1024 * 1024, key="mappedFileSizeCommitLog", least=4096, most=_INT
    )
    mapped_file_size_consume_queue: int = setting(300_000 * 20, least=20, most=_INT)
    max_message_size: int = setting(4 * 1024 * 1024, least=1, most=_INT)
    message_delay_level: str = setting(DEFAULT_MESSAGE_DELAY_LEVEL)
    message_index_enable: bool = setting(True)
    # Light message queues (RocketMQ's multi-dispatch; 5.5's lite topics are kept in them).
    enable_lmq: bool = setting(False)
    enable_multi_dispatch: bool = setting(False)
    max_hash_slot_num: int = setting(5_000_000, least=1, most=_INT)
    max_index_num: int = setting(20_000_000, least=2, most=_INT)
    # ferromq's own: the bytes of a store file kept mapped behind its write position (flushed pages
    # farther back are unmapped, still in the page cache); 0 keeps every page mapped, as Java does.
    mapped_file_hot_window: int = setting(8 * 1024 * 1024, least=0)
    access_message_in_memory_max_ratio: int = setting(40, least=0, percent=True)
    # What one pull answer carries: fewer, smaller answers for messages read from disk.
    max_transfer_count_on_message_in_memory: int = setting(32, least=1, most=_INT)
    max_transfer_bytes_on_message_in_memory: int = setting(256 * 1024, least=1, most=_INT)
    max_transfer_count_on_message_in_disk: int = setting(8, least=1, most=_INT)
    max_transfer_bytes_on_message_in_disk: int = setting(64 * 1024, least=1, most=_INT)
    flush_consumer_offset_interval: int = setting(5000, least=1, most=_INT)
    flush_delay_offset_interval: int = setting(10_000, least=1, most=_INT)

    def store_files_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        bad = _checker(StoreFilesConfig, self, out)
        if not str(self.store_path_root_dir).strip():
            bad("store_path_root_dir", "set")
        if self.flush_disk_type not in tuple(FlushDiskType):
            bad("flush_disk_type", "ASYNC_FLUSH or SYNC_FLUSH")
        levels = self.message_delay_level.split()
        if not levels or not all(_DELAY_LEVEL.fullmatch(item) for item in levels):
            bad("message_delay_level", "like '1s 5s 10m 2h 1d' (numbers with s, m, h or d)")
        return out


@dataclass(frozen=True)
class RetentionConfig:
    """Retention, as RocketMQ's MessageStoreConfig: CommitLog files last modified more than
    fileReservedTime hours ago go at the deleteWhen hours ("04", "04;16"), or at any hour when the
    disk is above diskMaxUsedSpaceRatio percent; above diskSpaceCleanForciblyRatio (a JVM system
    property in RocketMQ, a key here) they go whatever their age if cleanFileForciblyEnable."""

    file_reserved_time: int = setting(72, least=0, most=_INT)
    delete_when: str = setting("04")
    disk_max_used_space_ratio: int = setting(75, percent=True)
    disk_space_clean_forcibly_ratio: int = setting(85, percent=True)
    # Above diskSpaceWarningLevelRatio percent (a JVM system property in RocketMQ, a key here),
    # writes are refused with SERVICE_NOT_AVAILABLE until space returns.
    disk_space_warning_level_ratio: int = setting(90, percent=True)
    clean_file_forcibly_enable: bool = setting(True)
    delete_commit_log_files_interval: int = setting(100, least=0, most=_INT)
    delete_consume_queue_files_interval: int = setting(100, least=0, most=_INT)
    destroy_mapped_file_interval_forcibly: int = setting(
        120_000, key="destroyMapedFileIntervalForcibly", least=0, most=_INT
    )
    clean_resource_interval: int = setting(10_000, least=1, most=_INT)

    def retention_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if not _DELETE_WHEN.fullmatch(self.delete_when):
            _checker(RetentionConfig, self, out)(
                "delete_when", "hours of the day (0-23) separated by ';', like '04' or '04;16'"
            )
        return out


@dataclass(frozen=True)
class TopicConfig:
    """Topics and subscription groups: what is created on first use, and how many queues."""

    auto_create_topic_enable: bool = setting(True)
    auto_create_subscription_group: bool = setting(True)
    default_topic_queue_nums: int = setting(8, least=1, most=_INT)
    max_topic_queue_nums: int = setting(1024, least=1, runtime=True)
    cluster_topic_enable: bool = setting(True)
    broker_topic_enable: bool = setting(True)
    # RocketMQ 5.5's lite topics (see broker/lite.py): no lite topic is deleted younger than this, nor
    # before the broker ran this long; how often expired ones are looked for.
    min_lite_ttl: int = setting(900_000, key="minLiteTTl", least=0, runtime=True)
    lite_ttl_check_interval: int = setting(120_000, least=1000, runtime=True)
    # Lite consumers (broker/lite_consumers.py): how many (client, lite topic) subscriptions the broker
    # holds at most, and how long a client that has not synced its subscriptions is kept (it syncs every
    # 30 s), checked this often.
    max_lite_subscription_count: int = setting(100_000, least=0, runtime=True)
    lite_subscription_check_timeout_mills: int = setting(180_000, least=1000, runtime=True)
    lite_subscription_check_interval: int = setting(120_000, least=1000, runtime=True)
    # How many lite topics with messages wait for one client at most (a lite group's
    # lite.sub.client.max.event.cnt wins), and when lite topics no client could take are given again.
    max_client_event_count: int = setting(100, least=1, runtime=True)
    lite_event_full_dispatch_delay_time: int = setting(10_000, least=0, runtime=True)


@dataclass(frozen=True)
class PullConfig:
    """Pulls and queries: long polling, filters, and what consumers are told."""

    long_polling_enable: bool = setting(True, runtime=True)
    short_polling_time_mills: int = setting(1000, least=1, runtime=True)
    notify_consumer_ids_changed_enable: bool = setting(True, runtime=True)
    enable_property_filter: bool = setting(False, runtime=True)
    max_query_num: int = setting(64, least=1, most=_INT, runtime=True)


@dataclass(frozen=True)
class TransactionConfig:
    """Transactional messages: how often and how many times a half message's producer is asked."""

    transaction_check_interval: int = setting(60_000, least=1)
    transaction_time_out: int = setting(6000, least=0)
    transaction_check_max: int = setting(15, least=0, most=_INT)
    reject_transaction_message: bool = setting(False, runtime=True)


@dataclass(frozen=True)
class TlsConfig:
    """TLS, with the names and defaults of Java's system properties (TlsSystemConfig; see
    ferromq.remoting.tls): plain and TLS clients on one port unless tls.server.mode says otherwise."""

    tls_server_mode: str = setting("permissive", key="tls.server.mode")
    tls_test_mode_enable: bool = setting(True, key="tls.test.mode.enable")
    tls_server_need_client_auth: str = setting("none", key="tls.server.need.client.auth")
    tls_server_key_path: str | None = setting(None, key="tls.server.keyPath")
    tls_server_key_password: str | None = setting(None, key="tls.server.keyPassword", secret=True)
    tls_server_cert_path: str | None = setting(None, key="tls.server.certPath")
    tls_server_auth_client: bool = setting(False, key="tls.server.authClient")
    tls_server_trust_cert_path: str | None = setting(None, key="tls.server.trustCertPath")
    # The broker's own TLS connections (with tls.enable): its certificate, if a server asks for one,
    # and whether it checks the server's.
    tls_client_key_path: str | None = setting(None, key="tls.client.keyPath")
    tls_client_key_password: str | None = setting(None, key="tls.client.keyPassword", secret=True)
    tls_client_cert_path: str | None = setting(None, key="tls.client.certPath")
    tls_client_auth_server: bool = setting(False, key="tls.client.authServer")
    tls_client_trust_cert_path: str | None = setting(None, key="tls.client.trustCertPath")
    tls_config_file: str = setting("/etc/rocketmq/tls.properties", key="tls.config.file")
    # The broker's own connections (to name servers) over TLS, as Java's -Dtls.enable=true.
    tls_enable: bool = setting(False, key="tls.enable")

    def tls_settings(self) -> TlsSettings:
        """The TLS settings of these keys, with those of the `tls.config.file` over them (as Java
        reads that file over its system properties). Raises `TlsConfigError` for a bad mode."""
        keys = keys_of(TlsConfig)
        props = {
            keys[name]: str(getattr(self, name))
            for name in keys
            if name.startswith(("tls_server_", "tls_client_")) or name == "tls_test_mode_enable"
            if getattr(self, name) is not None
        }
        props.update(read_properties_file(self.tls_config_file))
        return TlsSettings.from_properties(props)

    def tls_problems(self) -> list[tuple[str, str]]:
        try:
            tls_problems = self.tls_settings().problems()
        except TlsConfigError as e:
            tls_problems = [("tls.server.mode", str(e))]
        key_field = {key: name for name, key in keys_of(TlsConfig).items()}
        return [(key_field.get(key, "tls_config_file"), f"{key} {text}") for key, text in tls_problems]


@dataclass(frozen=True)
class AclConfig:
    """Plain ACL as RocketMQ 4.9.7 (ferromq.acl). Java finds plain_acl.yml under the JVM's
    rocketmq.home.dir / the ROCKETMQ_HOME environment variable (not under broker.conf's
    rocketmqHome) at -Drocketmq.acl.plain.file (default conf/plain_acl.yml). ferromq: rocketmqHome
    if set, else ROCKETMQ_HOME; aclPlainFile (a ferromq key) relative to it unless absolute."""

    acl_enable: bool = setting(False)
    rocketmq_home: str | None = setting(None)
    acl_plain_file: str = setting("conf/plain_acl.yml")
    # ferromq's name-server ACL (RocketMQ 4.9.7's name server has none): the name server of
    # `ferromq serve` takes REGISTER_BROKER and other writes only from an admin account of the same
    # ACL files; the broker signs its name-server requests with namesrvAccessKey/namesrvSecretKey.
    namesrv_acl_enable: bool = setting(False)
    namesrv_access_key: str | None = setting(None)
    namesrv_secret_key: str | None = setting(None, secret=True)

    def acl_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if (self.namesrv_access_key is None) != (self.namesrv_secret_key is None):
            _checker(AclConfig, self, out)(
                "namesrv_access_key", "set together with namesrvSecretKey (both or neither)"
            )
        return out


@dataclass(frozen=True)
class AuthConfig:
    """ACL 2.0 as RocketMQ 5.3.3 (ferromq.auth): users and ACLs under the store root's config/,
    managed by the AUTH_* admin requests. Java's default providers are the only ones (the keys
    naming them accept those class names); its caches' keys are read and not needed here (users
    and ACLs are held in memory whole)."""

    authentication_enabled: bool = setting(False)
    authorization_enabled: bool = setting(False)
    authentication_provider: str | None = setting(None)
    authorization_provider: str | None = setting(None)
    authentication_metadata_provider: str | None = setting(None)
    authorization_metadata_provider: str | None = setting(None)
    authentication_strategy: str | None = setting(None)
    authorization_strategy: str | None = setting(None)
    authentication_whitelist: str | None = setting(None)
    authorization_whitelist: str | None = setting(None)
    init_authentication_user: str | None = setting(None)
    inner_client_authentication_credentials: str | None = setting(None)
    migrate_auth_from_v1_enabled: bool = setting(False)

    def auth_values(self) -> dict[str, Any]:
        """The ACL 2.0 keys (RocketMQ's names) and their values."""
        return {key: getattr(self, name) for name, key in keys_of(AuthConfig).items()}


@dataclass(frozen=True)
class ProxyConfig:
    """The RocketMQ 5.x clients' gRPC port (Apache RocketMQ's proxy's grpcServerPort and keys)."""

    grpc_server_port: int | None = setting(None)
    """None: not served (`ferromq serve` serves it on 8081), 0: any free port."""
    default_invisible_time_mills: int = setting(60_000)
    """How long a message a 5.x push consumer receives (auto-renew) is invisible, then renewed
    `renew_ahead_time_millis` before that runs out (checked every `renew_schedule_period_millis`):
    Apache RocketMQ proxy's keys."""
    renew_ahead_time_millis: int = setting(10_000)
    renew_schedule_period_millis: int = setting(5_000)

    def proxy_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.grpc_server_port is not None and not 0 <= self.grpc_server_port <= 65535:
            _checker(ProxyConfig, self, out)("grpc_server_port", "a port number (0-65535)")
        return out


@dataclass(frozen=True)
class ReplicationConfig:
    """Replication (RocketMQ's MessageStoreConfig HA keys) and the broker's role in it.
    haListenPort unset: listenPort + 1, as BrokerStartup sets it; 0: any free port (tests)."""

    broker_role: str = setting("ASYNC_MASTER")
    ha_listen_port: int | None = setting(None)
    ha_master_address: str | None = setting(None)
    ha_send_heartbeat_interval: int = setting(5000, least=1)
    ha_housekeeping_interval: int = setting(20_000, least=1)
    ha_transfer_batch_size: int = setting(32 * 1024, least=1)
    ha_slave_fallbehind_max: int = setting(256 * 1024 * 1024, least=0)
    slave_timeout: int = setting(3000, least=1)
    slave_read_enable: bool = setting(False)
    offset_check_in_slave: bool = setting(False, runtime=True)

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    def replication_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        bad = _checker(ReplicationConfig, self, out)
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            bad("broker_role", "ASYNC_MASTER, SYNC_MASTER or SLAVE")
        if self.ha_listen_port is not None and not 0 <= self.ha_listen_port <= 65535:
            bad("ha_listen_port", "a port number (0-65535)")
        if self.ha_master_address and not _is_host_port(self.ha_master_address):
            bad("ha_master_address", "host:port")
        return out


@dataclass(frozen=True)
class ControllerConfig:
    """Controller mode (RocketMQ 5.x automatic failover, ferromq.broker.controller_link): the
    controllers at controllerAddr ("host:port;host:port") choose the master; brokerRole only
    says whether the master waits for its replicas (SYNC_MASTER) or not."""

    enable_controller_mode: bool = setting(False)
    controller_addr: str | None = setting(None)
    controller_heart_beat_timeout_mills: int = setting(10_000, least=1)
    broker_heartbeat_interval: int = setting(1000, least=1)
    all_ack_in_sync_state_set: bool = setting(False)
    min_in_sync_replicas: int = setting(1, least=1)
    in_sync_replicas: int = setting(1, least=1)
    ha_max_time_slave_not_catchup: int = setting(15_000, least=1)

    @property
    def controller_addrs(self) -> list[str]:
        return _addrs(self.controller_addr)

    def controller_problems(self) -> list[tuple[str, str]]:
        if self.enable_controller_mode and not self.controller_addrs:
            text = "enableControllerMode=true needs controllerAddr (host:port;host:port)"
            return [("controller_addr", text)]
        return []


@dataclass(frozen=True)
class TimerConfig:
    """Timer messages (RocketMQ 5.x): TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS on a send
    (ferromq.broker.timer). timerPrecisionMs becomes 100, 200, 500 or 1000 as Java rounds it. And
    recalling a message before it is delivered."""

    timer_wheel_enable: bool = setting(True)
    timer_precision_ms: int = setting(1000, least=1, most=_INT)
    timer_max_delay_sec: int = setting(3 * 24 * 3600, least=1, most=_INT)
    timer_roll_window_slot: int = setting(2 * 24 * 3600)
    timer_flush_interval_ms: int = setting(1000, least=1, most=_INT)
    timer_congest_num_each_slot: int = setting(2**31 - 1, least=1, most=_INT)
    timer_stop_enqueue: bool = setting(False)
    timer_stop_dequeue: bool = setting(False)
    mapped_file_size_timer_log: int = setting(100 * 1024 * 1024, least=4096, most=_INT)
    recall_message_enable: bool = setting(False)
    """RECALL_MESSAGE (and the 5.x clients' RecallMessage) allowed; off by default, as in RocketMQ 5.x."""
    allow_recall_when_broker_not_writeable: bool = setting(True)


@dataclass(frozen=True)
class PopConfig:
    """POP consumption (RocketMQ 5.x; ferromq.broker.pop): checkpoints and acks in
    rmq_sys_REVIVE_LOG_<cluster>'s reviveQueueNum queues; pop retry topics %RETRY%<group>_<topic>
    (v2: %RETRY%<group>+<topic>); QUERY_ASSIGNMENT's mode for groups setConsumeMode did not set."""

    revive_queue_num: int = setting(8, least=1, most=_INT)
    enable_retry_topic_v2: bool = setting(False)
    default_message_request_mode: str = setting("PULL")

    def pop_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.default_message_request_mode not in ("PULL", "POP"):
            _checker(PopConfig, self, out)("default_message_request_mode", "PULL or POP")
        return out


@dataclass(frozen=True)
class MetricsConfig:
    """Metrics as RocketMQ 5.x exports them: PROM serves Prometheus text at
    http://metricsPromExporterHost:metricsPromExporterPort/metrics (host "": every interface)."""

    metrics_exporter_type: str = setting("DISABLE")
    metrics_prom_exporter_host: str = setting("")
    metrics_prom_exporter_port: int = setting(5557)

    def metrics_problems(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        bad = _checker(MetricsConfig, self, out)
        if self.metrics_exporter_type not in METRICS_EXPORTER_TYPES:
            bad(
                "metrics_exporter_type",
                " or ".join(METRICS_EXPORTER_TYPES) + " (ferromq exports Prometheus only)",
            )
        if not 0 <= self.metrics_prom_exporter_port <= 65535:  # 0: any free port (tests)
            bad("metrics_prom_exporter_port", "a port number (0-65535)")
        return out


# The tables `BrokerConfig` is made of, with each one's own checks. A new concern is a new table
# here (and a base of `BrokerConfig`); its fields then reach broker.conf, GET_BROKER_CONFIG and
# the checks by themselves.
CONFIG_TABLES: tuple[tuple[type, Callable[[Any], list[tuple[str, str]]] | None], ...] = (
    (IdentityConfig, IdentityConfig.identity_problems),
    (ReplicationConfig, ReplicationConfig.replication_problems),
    (ProxyConfig, ProxyConfig.proxy_problems),
    (ControllerConfig, ControllerConfig.controller_problems),
    (StoreFilesConfig, StoreFilesConfig.store_files_problems),
    (RetentionConfig, RetentionConfig.retention_problems),
    (TopicConfig, None),
    (PullConfig, None),
    (TransactionConfig, None),
    (ServerConfig, ServerConfig.server_problems),
    (LogConfig, None),
    (TlsConfig, TlsConfig.tls_problems),
    (MetricsConfig, MetricsConfig.metrics_problems),
    (AclConfig, AclConfig.acl_problems),
    (AuthConfig, None),
    (PopConfig, PopConfig.pop_problems),
    (TimerConfig, None),
    (TableTopicConfig, TableTopicConfig.table_topic_problems),
    (TieredStoreConfig, TieredStoreConfig.tiered_problems),
)


@dataclass(frozen=True)
class BrokerConfig(
    TieredStoreConfig,
    TableTopicConfig,
    MetricsConfig,
    PopConfig,
    TimerConfig,
    ControllerConfig,
    ReplicationConfig,
    ProxyConfig,
    AuthConfig,
    AclConfig,
    RetentionConfig,
    TlsConfig,
    ServerConfig,
    TransactionConfig,
    LogConfig,
    PullConfig,
    TopicConfig,
    StoreFilesConfig,
    IdentityConfig,
):
    """The broker's whole configuration: every table above (fields listed in the order of the
    bases from the last), and what spans them."""

    profile: str = "rocketmq"
    """The entry of `PROFILES` the values were layered on (not a broker.conf key)."""

    def store_config(self) -> StoreConfig:
        return StoreConfig(
            root=self.store_path_root_dir,
            commitlog_dir=self.store_path_commit_log,
            mapped_file_size_commitlog=self.mapped_file_size_commitlog,
            mapped_file_size_consume_queue=self.mapped_file_size_consume_queue,
            flush_disk_type=self.flush_disk_type,
            sync_flush_timeout_ms=self.sync_flush_timeout,
            max_message_size=self.max_message_size,
            message_delay_level=self.message_delay_level,
            message_index_enable=self.message_index_enable,
            enable_lmq=self.enable_lmq,
            enable_multi_dispatch=self.enable_multi_dispatch,
            max_hash_slot_num=self.max_hash_slot_num,
            max_index_num=self.max_index_num,
            store_host=self.broker_addr,
            file_reserved_time_hours=self.file_reserved_time,
            delete_when=self.delete_when,
            disk_max_used_space_ratio=self.disk_max_used_space_ratio,
            disk_space_clean_forcibly_ratio=self.disk_space_clean_forcibly_ratio,
            disk_space_warning_level_ratio=self.disk_space_warning_level_ratio,
            clean_file_forcibly_enable=self.clean_file_forcibly_enable,
            delete_commitlog_files_interval_ms=self.delete_commit_log_files_interval,
            delete_consume_queue_files_interval_ms=self.delete_consume_queue_files_interval,
            destroy_mapped_file_interval_forcibly_ms=self.destroy_mapped_file_interval_forcibly,
            clean_resource_interval_ms=self.clean_resource_interval,
            max_transfer_count_on_message_in_memory=self.max_transfer_count_on_message_in_memory,
            max_transfer_bytes_on_message_in_memory=self.max_transfer_bytes_on_message_in_memory,
            max_transfer_count_on_message_in_disk=self.max_transfer_count_on_message_in_disk,
            max_transfer_bytes_on_message_in_disk=self.max_transfer_bytes_on_message_in_disk,
            access_message_in_memory_max_ratio=self.access_message_in_memory_max_ratio,
            timer_wheel_enable=self.timer_wheel_enable,
            timer_precision_ms=timer_precision(self.timer_precision_ms),
            timer_max_delay_sec=self.timer_max_delay_sec,
            timer_roll_window_slot=self.timer_roll_window_slot,
            timer_congest_num_each_slot=self.timer_congest_num_each_slot,
            mapped_file_size_timer_log=self.mapped_file_size_timer_log,
            mapped_file_hot_window=self.mapped_file_hot_window or None,
        )

    @property
    def log_path(self) -> str:
        """Where the log files go: logDir, else logs/ferromqlogs beside the store directory."""
        if self.log_dir:
            return os.path.expanduser(self.log_dir)
        root = os.path.abspath(os.path.expanduser(self.store_path_root_dir))
        return os.path.join(os.path.dirname(root), "logs", "ferromqlogs")

    @property
    def ha_port(self) -> int:
        return self.listen_port + 1 if self.ha_listen_port is None else self.ha_listen_port

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip1}:{self.ha_port}"

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Raises `ConfigError` listing every value out of range (RocketMQ's keys in the message)."""
        problems = [text for _, text in self.problems()]
        if problems:
            raise ConfigError("; ".join(problems))

    def problems(self) -> list[tuple[str, str]]:
        """Every value out of range, as (field, message naming the RocketMQ key): each table's
        own checks, the ranges its fields declare, then the checks across tables."""
        out: list[tuple[str, str]] = []
        for _table, check in CONFIG_TABLES:
            if check is not None:
                out.extend(check(self))
        out.extend(range_problems(self, dataclasses.fields(self)))
        if self.broker_role == "SLAVE" and self.broker_id <= 0:
            out.append(("broker_id", f"a SLAVE's brokerId must be > 0, not {self.broker_id}"))
        for key, text in auth_setup.problems(self.auth_values(), self.acl_enable):
            out.append((_AUTH_FIELDS.get(key, "acl_enable"), text))
        if self.profile not in PROFILES:
            out.append(("profile", f"profile must be one of {', '.join(PROFILES)}, not {self.profile!r}"))
        return out


# Field -> RocketMQ key, of every table (`profile` is chosen by the caller, not the file).
KEY_OF: dict[str, str] = keys_of(BrokerConfig)
_AUTH_FIELDS = {key: name for name, key in keys_of(AuthConfig).items()}
if set(KEY_OF) != {f.name for table, _ in CONFIG_TABLES for f in dataclasses.fields(table)}:
    raise TypeError("BrokerConfig's bases and CONFIG_TABLES name different config tables")
