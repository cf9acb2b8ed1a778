"""Subscription group configs (`config/subscriptionGroup.json`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferromq.broker.config_file import load_config_file, save_config_file
from ferromq.protocol.constants import SYSTEM_GROUP_PREFIX

logger = logging.getLogger(__name__)


@dataclass
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(
            group_name=str(d["groupName"]),
            consume_enable=bool(d.get("consumeEnable", True)),
            consume_from_min_enable=bool(d.get("consumeFromMinEnable", True)),
            consume_broadcast_enable=bool(d.get("consumeBroadcastEnable", True)),
            retry_queue_nums=int(d.get("retryQueueNums", 1)),
            retry_max_times=int(d.get("retryMaxTimes", 16)),
            broker_id=int(d.get("brokerId", 0)),
            which_broker_when_consume_slowly=int(d.get("whichBrokerWhenConsumeSlowly", 1)),
            notify_consumer_ids_changed_enable=bool(d.get("notifyConsumerIdsChangedEnable", True)),
        )


class SubscriptionGroupManager:
    def __init__(self, path: Path, auto_create: bool) -> None:
        self._path = path
        self._auto_create = auto_create
        self._lock = threading.Lock()
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = {"counter": 0, "timestamp": int(time.time() * 1000)}
        self.on_change: Callable[[], None] | None = None
        """Called after a group is added, changed or removed (the data planes serve pulls by them)."""
        data = load_config_file(path)
        for name, raw in ((data or {}).get("subscriptionGroupTable") or {}).items():
            try:
                self.groups[str(name)] = SubscriptionGroupConfig.from_json(raw)
            except (KeyError, ValueError, TypeError) as e:
                logger.error("%s: group %r skipped: %s", path, name, e)

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        cfg = self.groups.get(group)
        if cfg is None and (self._auto_create or group.startswith(SYSTEM_GROUP_PREFIX)):
            cfg = SubscriptionGroupConfig(group)
            self.update(cfg)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        with self._lock:
            self.groups[cfg.group_name] = cfg
            self.data_version = {
                "counter": self.data_version["counter"] + 1,
                "timestamp": int(time.time() * 1000),
            }
        self.persist()
        self._changed()

    def replace_all(self, groups: dict[str, SubscriptionGroupConfig], data_version: dict[str, int]) -> None:
        """A slave takes its master's groups and version as they are (SlaveSynchronize)."""
        with self._lock:
            self.groups = dict(groups)
            self.data_version = dict(data_version)
        self.persist()
        self._changed()

    def delete(self, group: str) -> None:
        with self._lock:
            self.groups.pop(group, None)
        self.persist()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def persist(self) -> None:
        with self._lock:
            data = {
                "dataVersion": dict(self.data_version),
                "subscriptionGroupTable": {n: g.to_json() for n, g in sorted(self.groups.items())},
            }
        save_config_file(self._path, data)
