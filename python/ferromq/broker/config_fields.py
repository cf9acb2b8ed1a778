"""The broker's configuration fields: `BrokerConfig`.

`BrokerConfig` holds the fields (snake_case, with RocketMQ's defaults), the values derived from
them, the checks of their ranges and each field's broker.conf key (`KEY_OF`). Values are layered:
defaults, then a profile (`PROFILES`), then the file, then overrides. `config_keys` parses the
file over these fields; `ferromq.broker.config` exports both.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ferromq.auth import setup as auth_setup
from ferromq.errors import ConfigError
from ferromq.remoting.tls import TlsConfigError, TlsSettings, read_properties_file
from ferromq.store import DEFAULT_MESSAGE_DELAY_LEVEL, FlushDiskType, StoreConfig


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


def _default_broker_name() -> str:
    try:
        return socket.gethostname() or "broker-a"
    except OSError:
        return "broker-a"


_PERCENT_KEYS = (
    "disk_max_used_space_ratio",
    "disk_space_clean_forcibly_ratio",
    "disk_space_warning_level_ratio",
    "access_message_in_memory_max_ratio",
)


def timer_precision(ms: int) -> int:
    """timerPrecisionMs as Java's setter takes it: the largest of 100, 200, 500 and 1000 not
    above it (100 for less)."""
    return max([c for c in (100, 200, 500, 1000) if c <= ms] or [100])


@dataclass(frozen=True)
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = field(default_factory=_default_broker_name)
    broker_id: int = 0
    listen_port: int = 10911
    namesrv_addr: str | None = None
    broker_ip1: str = "127.0.0.1"
    broker_role: str = "ASYNC_MASTER"
    broker_permission: int = 6
    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    store_path_commit_log: str | None = None
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    sync_flush_timeout: int = 5000
    mapped_file_size_commitlog: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_message_size: int = 4 * 1024 * 1024
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    notify_consumer_ids_changed_enable: bool = True
    register_name_server_period: int = 30_000
    flush_consumer_offset_interval: int = 5000
    flush_delay_offset_interval: int = 10_000
    transaction_check_interval: int = 60_000
    transaction_time_out: int = 6000
    transaction_check_max: int = 15
    reject_transaction_message: bool = False
    enable_property_filter: bool = False
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    channel_expired_timeout: int = 120_000
    max_query_num: int = 64
    # ferromq's log files (Java keeps ~/logs/rocketmqlogs by its logback config): broker.log and
    # stats.log in logDir (default: logs/ferromqlogs beside the store directory, so ~/store logs
    # to ~/logs/ferromqlogs), rolled at logMaxFileSize bytes keeping logMaxFiles (>= 1) old files.
    log_dir: str | None = None
    log_max_file_size: int = 128 * 1024 * 1024
    log_max_files: int = 10
    # ferromq's own: how often (seconds) stats.log gets its lines of the last minute, 60 as Java's
    # broker prints them (a test sets a few seconds).
    stats_log_interval_seconds: int = 60
    # Remoting bounds (0 turns a timeout off): RocketMQ's NettyServerConfig idle time, and
    # ferromq's own read timeout, connection cap and buffer bounds.
    server_channel_max_idle_time_seconds: int = 120
    server_read_timeout_seconds: int = 30
    server_max_connections: int = 10_000
    # ferromq's: how many of them one peer address may hold (one host cannot take every slot).
    server_max_connections_per_address: int = 1000
    server_request_buffer_bytes: int = 128 * 1024 * 1024
    server_reply_buffer_bytes: int = 16 * 1024 * 1024
    # ferromq's: unread reply bytes of all connections together (see ServerLimits).
    server_total_reply_buffer_bytes: int = 128 * 1024 * 1024
    server_max_inflight_requests: int = 100_000
    # ferromq's data plane serves the ports' connections (TLS included) on Rust threads
    # (serverIoThreads of them, 0: one per core). "rust": it also answers the plain sends and
    # pulls Python lets it; "python": every request goes to the event loop's processors.
    data_plane: str = "rust"
    server_io_threads: int = 0
    max_topic_queue_nums: int = 1024
    # TLS, with the names and defaults of Java's system properties (TlsSystemConfig; see
    # ferromq.remoting.tls): plain and TLS clients on one port unless tls.server.mode says otherwise.
    tls_server_mode: str = "permissive"
    tls_test_mode_enable: bool = True
    tls_server_need_client_auth: str = "none"
    tls_server_key_path: str | None = None
    tls_server_key_password: str | None = None
    tls_server_cert_path: str | None = None
    tls_server_auth_client: bool = False
    tls_server_trust_cert_path: str | None = None
    # The broker's own TLS connections (with tls.enable): its certificate, if a server asks for one,
    # and whether it checks the server's.
    tls_client_key_path: str | None = None
    tls_client_key_password: str | None = None
    tls_client_cert_path: str | None = None
    tls_client_auth_server: bool = False
    tls_client_trust_cert_path: str | None = None
    tls_config_file: str = "/etc/rocketmq/tls.properties"
    # The broker's own connections (to name servers) over TLS, as Java's -Dtls.enable=true.
    tls_enable: bool = False
    # Retention, as RocketMQ's MessageStoreConfig: CommitLog files last modified more than
    # fileReservedTime hours ago go at the deleteWhen hours ("04", "04;16"), or at any hour when the
    # disk is above diskMaxUsedSpaceRatio percent; above diskSpaceCleanForciblyRatio (a JVM system
    # property in RocketMQ, a key here) they go whatever their age if cleanFileForciblyEnable.
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    # Above diskSpaceWarningLevelRatio percent (a JVM system property in RocketMQ, a key here),
    # writes are refused with SERVICE_NOT_AVAILABLE until space returns.
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 120_000
    clean_resource_interval: int = 10_000
    offset_check_in_slave: bool = False
    # Plain ACL as RocketMQ 4.9.7 (ferromq.acl). Java finds plain_acl.yml under the JVM's
    # rocketmq.home.dir / the ROCKETMQ_HOME environment variable (not under broker.conf's
    # rocketmqHome) at -Drocketmq.acl.plain.file (default conf/plain_acl.yml). ferromq: rocketmqHome
    # if set, else ROCKETMQ_HOME; aclPlainFile (a ferromq key) relative to it unless absolute.
    acl_enable: bool = False
    rocketmq_home: str | None = None
    acl_plain_file: str = "conf/plain_acl.yml"
    # ferromq's name-server ACL (RocketMQ 4.9.7's name server has none): the name server of
    # `ferromq serve` takes REGISTER_BROKER and other writes only from an admin account of the same
    # ACL files; the broker signs its name-server requests with namesrvAccessKey/namesrvSecretKey.
    namesrv_acl_enable: bool = False
    namesrv_access_key: str | None = None
    namesrv_secret_key: str | None = None
    # ACL 2.0 as RocketMQ 5.3.3 (ferromq.auth): users and ACLs under the store root's config/,
    # managed by the AUTH_* admin requests. Java's default providers are the only ones (the keys
    # naming them accept those class names); its caches' keys are read and not needed here (users
    # and ACLs are held in memory whole).
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    authentication_provider: str | None = None
    authorization_provider: str | None = None
    authentication_metadata_provider: str | None = None
    authorization_metadata_provider: str | None = None
    authentication_strategy: str | None = None
    authorization_strategy: str | None = None
    authentication_whitelist: str | None = None
    authorization_whitelist: str | None = None
    init_authentication_user: str | None = None
    inner_client_authentication_credentials: str | None = None
    migrate_auth_from_v1_enabled: bool = False
    # Replication (RocketMQ's MessageStoreConfig HA keys). haListenPort unset: listenPort + 1, as
    # BrokerStartup sets it; 0: any free port (tests).
    ha_listen_port: int | None = None
    grpc_server_port: int | None = None
    default_invisible_time_mills: int = 60_000
    """How long a message a 5.x push consumer receives (auto-renew) is invisible, then renewed
    `renew_ahead_time_millis` before that runs out (checked every `renew_schedule_period_millis`):
    Apache RocketMQ proxy's keys."""
    renew_ahead_time_millis: int = 10_000
    renew_schedule_period_millis: int = 5_000
    """The RocketMQ 5.x clients' gRPC port (Apache RocketMQ's proxy's grpcServerPort); None: not
    served (`ferromq serve` serves it on 8081), 0: any free port."""
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    slave_timeout: int = 3000
    slave_read_enable: bool = False
    # Controller mode (RocketMQ 5.x automatic failover, ferromq.broker.controller_link): the
    # controllers at controllerAddr ("host:port;host:port") choose the master; brokerRole only
    # says whether the master waits for its replicas (SYNC_MASTER) or not.
    enable_controller_mode: bool = False
    controller_addr: str | None = None
    controller_heart_beat_timeout_mills: int = 10_000
    broker_heartbeat_interval: int = 1000
    all_ack_in_sync_state_set: bool = False
    min_in_sync_replicas: int = 1
    in_sync_replicas: int = 1
    ha_max_time_slave_not_catchup: int = 15_000
    access_message_in_memory_max_ratio: int = 40
    # What one pull answer carries: fewer, smaller answers for messages read from disk.
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    max_transfer_count_on_message_in_disk: int = 8
    max_transfer_bytes_on_message_in_disk: int = 64 * 1024
    # Timer messages (RocketMQ 5.x): TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS on a send
    # (ferromq.broker.timer). timerPrecisionMs becomes 100, 200, 500 or 1000 as Java rounds it.
    timer_wheel_enable: bool = True
    timer_precision_ms: int = 1000
    timer_max_delay_sec: int = 3 * 24 * 3600
    recall_message_enable: bool = False
    """RECALL_MESSAGE (and the 5.x clients' RecallMessage) allowed; off by default, as in RocketMQ 5.x."""
    allow_recall_when_broker_not_writeable: bool = True
    timer_roll_window_slot: int = 2 * 24 * 3600
    timer_flush_interval_ms: int = 1000
    timer_congest_num_each_slot: int = 2**31 - 1
    timer_stop_enqueue: bool = False
    timer_stop_dequeue: bool = False
    mapped_file_size_timer_log: int = 100 * 1024 * 1024
    # ferromq's own: the bytes of a store file kept mapped behind its write position (flushed pages
    # farther back are unmapped, still in the page cache); 0 keeps every page mapped, as Java does.
    mapped_file_hot_window: int = 8 * 1024 * 1024
    # POP consumption (RocketMQ 5.x; ferromq.broker.pop): checkpoints and acks in
    # rmq_sys_REVIVE_LOG_<cluster>'s reviveQueueNum queues; pop retry topics %RETRY%<group>_<topic>
    # (v2: %RETRY%<group>+<topic>); QUERY_ASSIGNMENT's mode for groups setConsumeMode did not set.
    revive_queue_num: int = 8
    enable_retry_topic_v2: bool = False
    default_message_request_mode: str = "PULL"
    # Metrics as RocketMQ 5.x exports them: PROM serves Prometheus text at
    # http://metricsPromExporterHost:metricsPromExporterPort/metrics (host "": every interface).
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5557
    # Table topics (ferromq.broker.tiering, a ferromq feature): the topics of tableTopics are
    # appended to one Delta Lake table each under tableTopicPath (a directory or a URI pyarrow and
    # delta-rs both write, default <storePathRootDir>/tables). tableTopics is a comma-separated list
    # of topic names, or `regex:` and a regular expression matched against whole names (internal
    # topics left out); "" tiers nothing. Every tableTopicIntervalSeconds each queue of a topic
    # goes in once it holds a whole file's worth of rows (tableTopicTargetFileBytes, which
    # compaction then never rewrites) or its oldest waiting row is tableTopicMaxDelaySeconds old;
    # tableTopicMinRows > 0 commits instead whenever that many rows wait in all (small files,
    # merged later). One queue reads at most tableTopicMaxCommitBytes of records per commit. Every
    # tableTopicCompactionIntervalSeconds (0: never) small files are merged towards
    # tableTopicTargetFileBytes, days older than tableTopicRetentionDays (0: kept forever) are
    # deleted, and files unused for tableTopicVacuumRetentionHours are removed. A partition (day
    # and queue) to which tableTopicCompactionFiles files smaller than a whole one were added since
    # it was last compacted is compacted at once (0: only on the schedule). tableTopicRole says
    # which broker of a master-slave pair tiers: MASTER (default), or SLAVE: the slave, which holds
    # the same messages, does the work and the master spends no CPU on it. tableTopicCompression is the
    # data files' codec (TABLE_TOPIC_CODECS): CPU spent by the broker against bytes stored.
    table_topics: str = ""
    table_topic_path: str | None = None
    table_topic_interval_seconds: int = 10
    table_topic_min_rows: int = 0
    table_topic_max_delay_seconds: int = 60
    table_topic_max_commit_bytes: int = 1024 * 1024 * 1024
    table_topic_compaction_interval_seconds: int = 3600
    table_topic_target_file_bytes: int = 128 * 1024 * 1024
    table_topic_compaction_files: int = 16
    table_topic_role: str = "MASTER"
    table_topic_compression: str = "snappy"
    table_topic_retention_days: int = 0
    table_topic_vacuum_retention_hours: int = 168
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
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_port(self) -> int:
        return self.listen_port + 1 if self.ha_listen_port is None else self.ha_listen_port

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip1}:{self.ha_port}"

    @property
    def is_slave(self) -> bool:
        return self.broker_role == "SLAVE"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]

    @property
    def table_topic_selection(self) -> tuple[tuple[str, ...], str | None]:
        """tableTopics as (topic names, None) or ((), regular expression)."""
        text = self.table_topics.strip()
        if text.startswith(TABLE_TOPICS_REGEX):
            return (), text[len(TABLE_TOPICS_REGEX) :]
        return tuple(t.strip() for t in text.split(",") if t.strip()), None

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in (self.controller_addr or "").split(";") if a.strip()]

    def auth_values(self) -> dict[str, Any]:
        """The ACL 2.0 keys (RocketMQ's names) and their values."""
        return {key: getattr(self, name) for key, name in _AUTH_FIELDS.items()}

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Raises `ConfigError` listing every value out of range (RocketMQ's keys in the message)."""
        problems = [text for _, text in self.problems()]
        if problems:
            raise ConfigError("; ".join(problems))

    def tls_settings(self) -> TlsSettings:
        """The TLS settings of these keys, with those of the `tls.config.file` over them (as Java
        reads that file over its system properties). Raises `TlsConfigError` for a bad mode."""
        props = {
            KEY_OF[f.name]: str(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name.startswith(("tls_server_", "tls_client_")) or f.name == "tls_test_mode_enable"
            if getattr(self, f.name) is not None
        }
        props.update(read_properties_file(self.tls_config_file))
        return TlsSettings.from_properties(props)

    def problems(self) -> list[tuple[str, str]]:
        """Every value out of range, as (field, message naming the RocketMQ key)."""
        out: list[tuple[str, str]] = []

        def bad(name: str, must: str) -> None:
            out.append((name, f"{KEY_OF.get(name, name)} must be {must}, not {getattr(self, name)!r}"))

        if not 0 <= self.listen_port <= 65535:  # 0: any free port (tests)
            bad("listen_port", "a port number (0-65535)")
        if self.broker_id < 0:
            bad("broker_id", ">= 0")
        for name in ("broker_name", "broker_cluster_name", "store_path_root_dir"):
            if not str(getattr(self, name)).strip():
                bad(name, "set")
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            bad("broker_role", "ASYNC_MASTER, SYNC_MASTER or SLAVE")
        elif self.broker_role == "SLAVE" and self.broker_id <= 0:
            out.append(("broker_id", f"a SLAVE's brokerId must be > 0, not {self.broker_id}"))
        if self.ha_listen_port is not None and not 0 <= self.ha_listen_port <= 65535:
            bad("ha_listen_port", "a port number (0-65535)")
        if self.grpc_server_port is not None and not 0 <= self.grpc_server_port <= 65535:
            bad("grpc_server_port", "a port number (0-65535)")
        if self.ha_master_address and not _is_host_port(self.ha_master_address):
            bad("ha_master_address", "host:port")
        if self.enable_controller_mode and not self.controller_addrs:
            out.append(
                ("controller_addr", "enableControllerMode=true needs controllerAddr (host:port;host:port)")
            )
        if self.flush_disk_type not in tuple(FlushDiskType):
            bad("flush_disk_type", "ASYNC_FLUSH or SYNC_FLUSH")
        if not 0 <= self.broker_permission <= 15:
            bad("broker_permission", "0-15 (PermName bits: 4 read, 2 write, 1 inherit)")
        try:
            ipaddress.IPv4Address(self.broker_ip1)
        except ValueError:
            bad("broker_ip1", "an IPv4 address")
        if not all(_is_host_port(a) for a in self.namesrv_addrs):
            bad("namesrv_addr", "host:port, or several separated by ';'")
        for name, least in _AT_LEAST.items():
            value = getattr(self, name)
            if value < least:
                bad(name, f">= {least}" if least != 1 else "> 0")
            elif value > _MAX_VALUE.get(name, _JAVA_LONG_MAX):
                bad(name, f"<= {_MAX_VALUE.get(name, _JAVA_LONG_MAX)}")
        if not _DELETE_WHEN.fullmatch(self.delete_when):
            bad("delete_when", "hours of the day (0-23) separated by ';', like '04' or '04;16'")
        for name in _PERCENT_KEYS:
            if not 0 <= getattr(self, name) <= 100:
                bad(name, "a percentage (0-100)")
        levels = self.message_delay_level.split()
        if not levels or not all(_DELAY_LEVEL.fullmatch(item) for item in levels):
            bad("message_delay_level", "like '1s 5s 10m 2h 1d' (numbers with s, m, h or d)")
        try:
            tls_problems = self.tls_settings().problems()
        except TlsConfigError as e:
            tls_problems = [("tls.server.mode", str(e))]
        key_field = {key: name for name, key in KEY_OF.items()}
        for key, text in tls_problems:
            out.append((key_field.get(key, "tls_config_file"), f"{key} {text}"))
        if self.metrics_exporter_type not in METRICS_EXPORTER_TYPES:
            bad(
                "metrics_exporter_type",
                " or ".join(METRICS_EXPORTER_TYPES) + " (ferromq exports Prometheus only)",
            )
        if not 0 <= self.metrics_prom_exporter_port <= 65535:  # 0: any free port (tests)
            bad("metrics_prom_exporter_port", "a port number (0-65535)")
        for key, text in auth_setup.problems(self.auth_values(), self.acl_enable):
            out.append((_AUTH_FIELDS.get(key, "acl_enable"), text))
        if (self.namesrv_access_key is None) != (self.namesrv_secret_key is None):
            bad("namesrv_access_key", "set together with namesrvSecretKey (both or neither)")
        if self.default_message_request_mode not in ("PULL", "POP"):
            bad("default_message_request_mode", "PULL or POP")
        if self.data_plane not in DATA_PLANES:
            bad("data_plane", " or ".join(DATA_PLANES))
        names, pattern = self.table_topic_selection
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                bad("table_topics", f"names or regex:PATTERN with a valid regular expression ({e})")
        elif not all(_TOPIC_NAME.fullmatch(n) for n in names):
            bad("table_topics", "comma-separated topic names, or regex:PATTERN")
        if self.table_topic_role not in TABLE_TOPIC_ROLES:
            bad("table_topic_role", " or ".join(TABLE_TOPIC_ROLES))
        if self.table_topic_compression not in TABLE_TOPIC_CODECS:
            bad("table_topic_compression", " or ".join(TABLE_TOPIC_CODECS))
        if self.profile not in PROFILES:
            out.append(("profile", f"profile must be one of {', '.join(PROFILES)}, not {self.profile!r}"))
        return out


METRICS_EXPORTER_TYPES = ("DISABLE", "PROM")
DATA_PLANES = ("rust", "python")
# tableTopicRole: which broker of a master-slave pair tiers its table topics.
TABLE_TOPIC_ROLES = ("MASTER", "SLAVE")
# tableTopicCompression: the codecs of ferromq.tables.writer.CODECS (none costs the broker the least
# CPU and stores the most, zstd the most CPU and stores the least; snappy and lz4 in between).
TABLE_TOPIC_CODECS = ("snappy", "lz4", "zstd", "none")
# tableTopics: this prefix makes the rest a regular expression over topic names.
TABLE_TOPICS_REGEX = "regex:"
_TOPIC_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")  # TopicValidator's characters and length

# The least value of each number field (1: must be > 0); sizes the store needs at least.
_AT_LEAST: dict[str, int] = {
    "mapped_file_size_commitlog": 4096,
    "mapped_file_size_consume_queue": 20,
    "max_message_size": 1,
    "max_hash_slot_num": 1,
    "max_index_num": 2,
    "sync_flush_timeout": 1,
    "default_topic_queue_nums": 1,
    "short_polling_time_mills": 1,
    "register_name_server_period": 1,
    "flush_consumer_offset_interval": 1,
    "flush_delay_offset_interval": 1,
    "transaction_check_interval": 1,
    "transaction_time_out": 0,
    "transaction_check_max": 0,
    "channel_expired_timeout": 1,
    "max_query_num": 1,
    "log_max_file_size": 1024,
    "log_max_files": 1,
    "stats_log_interval_seconds": 1,
    "server_channel_max_idle_time_seconds": 0,
    "server_read_timeout_seconds": 0,
    "server_max_connections": 1,
    "server_max_connections_per_address": 1,
    "server_request_buffer_bytes": 1,
    "server_reply_buffer_bytes": 1,
    "server_total_reply_buffer_bytes": 1,
    "server_max_inflight_requests": 1,
    "server_io_threads": 0,
    "max_topic_queue_nums": 1,
    "file_reserved_time": 0,
    "delete_commit_log_files_interval": 0,
    "delete_consume_queue_files_interval": 0,
    "destroy_mapped_file_interval_forcibly": 0,
    "clean_resource_interval": 1,
    "ha_send_heartbeat_interval": 1,
    "ha_housekeeping_interval": 1,
    "ha_transfer_batch_size": 1,
    "ha_slave_fallbehind_max": 0,
    "slave_timeout": 1,
    "controller_heart_beat_timeout_mills": 1,
    "broker_heartbeat_interval": 1,
    "min_in_sync_replicas": 1,
    "in_sync_replicas": 1,
    "ha_max_time_slave_not_catchup": 1,
    "access_message_in_memory_max_ratio": 0,
    "max_transfer_count_on_message_in_memory": 1,
    "max_transfer_bytes_on_message_in_memory": 1,
    "max_transfer_count_on_message_in_disk": 1,
    "max_transfer_bytes_on_message_in_disk": 1,
    "timer_precision_ms": 1,
    "timer_max_delay_sec": 1,
    "timer_flush_interval_ms": 1,
    "timer_congest_num_each_slot": 1,
    "mapped_file_size_timer_log": 4096,
    "mapped_file_hot_window": 0,
    "revive_queue_num": 1,
    "table_topic_interval_seconds": 1,
    "table_topic_min_rows": 0,
    "table_topic_max_delay_seconds": 0,
    "table_topic_max_commit_bytes": 1024 * 1024,
    "table_topic_compaction_interval_seconds": 0,
    "table_topic_target_file_bytes": 1024 * 1024,
    "table_topic_compaction_files": 0,
    "table_topic_retention_days": 0,
    "table_topic_vacuum_retention_hours": 0,
}
_JAVA_INT_MAX = 2**31 - 1
_JAVA_LONG_MAX = 2**63 - 1
# ACL 2.0's keys (RocketMQ's names) and their fields.
_AUTH_FIELDS: dict[str, str] = {
    "authenticationEnabled": "authentication_enabled",
    "authorizationEnabled": "authorization_enabled",
    "authenticationProvider": "authentication_provider",
    "authorizationProvider": "authorization_provider",
    "authenticationMetadataProvider": "authentication_metadata_provider",
    "authorizationMetadataProvider": "authorization_metadata_provider",
    "authenticationStrategy": "authentication_strategy",
    "authorizationStrategy": "authorization_strategy",
    "authenticationWhitelist": "authentication_whitelist",
    "authorizationWhitelist": "authorization_whitelist",
    "initAuthenticationUser": "init_authentication_user",
    "innerClientAuthenticationCredentials": "inner_client_authentication_credentials",
    "migrateAuthFromV1Enabled": "migrate_auth_from_v1_enabled",
}

# Fields that are a Java int in RocketMQ (the rest are longs there).
_MAX_VALUE: dict[str, int] = {
    name: _JAVA_INT_MAX
    for name in (
        "mapped_file_size_commitlog",
        "mapped_file_size_consume_queue",
        "max_message_size",
        "max_hash_slot_num",
        "max_index_num",
        "default_topic_queue_nums",
        "register_name_server_period",
        "flush_consumer_offset_interval",
        "flush_delay_offset_interval",
        "transaction_check_max",
        "max_query_num",
        "file_reserved_time",
        "delete_commit_log_files_interval",
        "delete_consume_queue_files_interval",
        "destroy_mapped_file_interval_forcibly",
        "clean_resource_interval",
        "max_transfer_count_on_message_in_memory",
        "max_transfer_bytes_on_message_in_memory",
        "max_transfer_count_on_message_in_disk",
        "max_transfer_bytes_on_message_in_disk",
        "timer_precision_ms",
        "timer_max_delay_sec",
        "timer_roll_window_slot",
        "timer_flush_interval_ms",
        "timer_congest_num_each_slot",
        "mapped_file_size_timer_log",
        "revive_queue_num",
    )
}
_MAX_VALUE["server_io_threads"] = 1024
_DELAY_LEVEL = re.compile(r"[0-9]+[smhd]")
_DELETE_WHEN = re.compile(r"(0?[0-9]|1[0-9]|2[0-3])(;(0?[0-9]|1[0-9]|2[0-3]))*")


def _is_host_port(addr: str) -> bool:
    host, sep, port = addr.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) <= 65535)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# Field -> RocketMQ key: the camelCase of the field name, except where RocketMQ spells it otherwise.
# `profile` is chosen by the caller, not the file. Here, not in config_keys, because the checks above
# name the keys in their messages.
_RENAMED = {
    "broker_ip1": "brokerIP1",
    "mapped_file_size_commitlog": "mappedFileSizeCommitLog",
    "destroy_mapped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",
    "tls_server_mode": "tls.server.mode",
    "tls_test_mode_enable": "tls.test.mode.enable",
    "tls_server_need_client_auth": "tls.server.need.client.auth",
    "tls_server_key_path": "tls.server.keyPath",
    "tls_server_key_password": "tls.server.keyPassword",
    "tls_server_cert_path": "tls.server.certPath",
    "tls_server_auth_client": "tls.server.authClient",
    "tls_server_trust_cert_path": "tls.server.trustCertPath",
    "tls_client_key_path": "tls.client.keyPath",
    "tls_client_key_password": "tls.client.keyPassword",
    "tls_client_cert_path": "tls.client.certPath",
    "tls_client_auth_server": "tls.client.authServer",
    "tls_client_trust_cert_path": "tls.client.trustCertPath",
    "tls_config_file": "tls.config.file",
    "tls_enable": "tls.enable",
}
KEY_OF: dict[str, str] = {
    f.name: _RENAMED.get(f.name, _camel(f.name))
    for f in dataclasses.fields(BrokerConfig)
    if f.name != "profile"
}
