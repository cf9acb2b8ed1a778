"""Broker configuration, read from a RocketMQ `broker.conf` (Java properties with RocketMQ's keys).

Fields are snake_case; `_KEYS` maps each to its RocketMQ key (and old spellings). Unknown keys are
logged once, with their line, and otherwise ignored, so existing broker.conf files keep working.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ferromq.errors import FerroMQError
from ferromq.store import DEFAULT_MESSAGE_DELAY_LEVEL, FlushDiskType, StoreConfig

logger = logging.getLogger(__name__)


class ConfigError(FerroMQError):
    """broker.conf has problems; the message lists all of them with their lines."""


def _default_broker_name() -> str:
    try:
        return socket.gethostname() or "broker-a"
    except OSError:
        return "broker-a"


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
        )

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port + 1}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]

    def replace(self, **changes: Any) -> BrokerConfig:
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        problems = []
        if not 0 <= self.listen_port < 65536:  # 0: any free port (tests)
            problems.append(f"listenPort {self.listen_port} is not a port")
        if self.broker_id < 0:
            problems.append("brokerId must be >= 0")
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            problems.append(f"brokerRole {self.broker_role!r} is not ASYNC_MASTER, SYNC_MASTER or SLAVE")
        if self.default_topic_queue_nums <= 0:
            problems.append("defaultTopicQueueNums must be > 0")
        if problems:
            raise ConfigError("; ".join(problems))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# RocketMQ key -> field: the camelCase of the field name, except where RocketMQ spells it otherwise;
# the pre-4.5 "maped" spellings are accepted too.
_RENAMED = {"broker_ip1": "brokerIP1", "mapped_file_size_commitlog": "mappedFileSizeCommitLog"}
_KEYS: dict[str, str] = {
    _RENAMED.get(f.name, _camel(f.name)): f.name for f in dataclasses.fields(BrokerConfig)
}
_KEYS["mapedFileSizeCommitLog"] = "mapped_file_size_commitlog"
_KEYS["mapedFileSizeConsumeQueue"] = "mapped_file_size_consume_queue"


def _convert(name: str, raw: str) -> Any:
    ftype = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}[name]
    if name == "flush_disk_type":
        return FlushDiskType(raw.strip().upper())
    if "bool" in str(ftype):
        low = raw.strip().lower()
        if low not in ("true", "false"):
            raise ValueError(f"expected true or false, not {raw!r}")
        return low == "true"
    if "int" in str(ftype):
        return int(raw.strip())
    return raw.strip()


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Java-properties lines as (line number, key, value); comments and blanks skipped."""
    out = []
    pending: tuple[int, str] | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if pending is not None:
            start, acc = pending
            line = acc + line.lstrip()
            no = start
            pending = None
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending = (no, stripped[:-1])
            continue
        for i, ch in enumerate(stripped):
            if ch in "=:":
                key, value = stripped[:i].strip(), stripped[i + 1 :].strip()
                break
        else:
            key, value = stripped, ""
        out.append((no, key, value))
    return out


def load_broker_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> BrokerConfig:
    """Reads broker.conf (if given), then applies overrides (field names). Every problem is reported
    at once; unknown keys are warnings."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    if path is not None:
        text = Path(path).read_text(encoding="utf-8")
        for no, key, raw in parse_properties(text):
            name = _KEYS.get(key)
            if name is None:
                logger.warning("%s:%d: unknown key %r ignored", path, no, key)
                continue
            try:
                values[name] = _convert(name, raw)
            except ValueError as e:
                problems.append(f"{path}:{no}: {key}: {e}")
    if problems:
        raise ConfigError("; ".join(problems))
    values.update({k: v for k, v in overrides.items() if v is not None})
    cfg = BrokerConfig(**values)
    cfg.validate()
    return cfg
