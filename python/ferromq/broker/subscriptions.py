"""Subscription group configs (`config/subscriptionGroup.json`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ferromq.broker.json_files import load_json_file, save_json_file
from ferromq.broker.topics import (
    Attribute,
    BooleanAttribute,
    EnumAttribute,
    LongRangeAttribute,
    StringAttribute,
    alter_attributes,
)
from ferromq.protocol.constants import SYSTEM_GROUP_PREFIX

logger = logging.getLogger(__name__)

# SubscriptionGroupAttributes.ALL of 5.3.3 is empty; 5.4 added `priority.factor` (the share, 0-100, of a
# group's pops on a PRIORITY topic that read the highest priority first), 5.5 the lite groups' (see
# broker/lite_consumers.py): the LITE topic a group consumes, whether a lite topic has one subscriber of
# the group or many, offset resets, a client's quota and event bound, wildcard groups. A group update
# that sets or removes any other attribute is refused ("unsupported key: ...").
PRIORITY_FACTOR = LongRangeAttribute("priority.factor", True, 0, 100, 100)
_JAVA_LONG_MAX = 2**63 - 1
LITE_BIND_TOPIC = StringAttribute("lite.bind.topic", True)
LITE_SUB_MODEL = EnumAttribute("lite.sub.model", True, ("Shared", "Exclusive"), "Shared")
LITE_SUB_RESET_OFFSET_EXCLUSIVE = BooleanAttribute("lite.sub.reset.offset.exclusive", True, False)
LITE_SUB_RESET_OFFSET_UNSUBSCRIBE = BooleanAttribute("lite.sub.reset.offset.unsubscribe", True, False)
LITE_SUB_CLIENT_QUOTA = LongRangeAttribute("lite.sub.client.quota", True, -1, _JAVA_LONG_MAX, 2000)
LITE_SUB_CLIENT_MAX_EVENT_COUNT = LongRangeAttribute(
    "lite.sub.client.max.event.cnt", True, 10, _JAVA_LONG_MAX, 400
)
LITE_SUB_WILDCARD = StringAttribute("lite.sub.wildcard", True)
GROUP_ATTRIBUTES: dict[str, Attribute] = {
    a.name: a
    for a in (
        PRIORITY_FACTOR,
        LITE_BIND_TOPIC,
        LITE_SUB_MODEL,
        LITE_SUB_RESET_OFFSET_EXCLUSIVE,
        LITE_SUB_RESET_OFFSET_UNSUBSCRIBE,
        LITE_SUB_CLIENT_QUOTA,
        LITE_SUB_CLIENT_MAX_EVENT_COUNT,
        LITE_SUB_WILDCARD,
    )
}


def _default_retry_policy() -> dict[str, Any]:
    # GroupRetryPolicy's default as fastjson writes it (its policies are null, so left out).
    return {"type": "CUSTOMIZED"}


def _object_or_none(raw: Any, what: str) -> dict[str, Any] | None:
    if raw is None or isinstance(raw, dict):
        return raw
    raise TypeError(f"{what} must be an object")


def _objects_or_none(raw: Any, what: str) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if isinstance(raw, list) and all(isinstance(x, dict) for x in raw):
        return raw
    raise TypeError(f"{what} must be a list of objects")


def _attributes_of(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TypeError("attributes must be an object")
    return {str(k): str(v) for k, v in raw.items()}


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
    # RocketMQ 5.x's fields, kept and written back as 5.x mqadmin and brokers send and store them.
    consume_message_orderly: bool = False
    """An orderly group (`consumeMessageOrderly`, mqadmin updateSubGroup -o true): 5.x clients consume its
    FIFO topics in order."""
    group_retry_policy: dict[str, Any] | None = field(default_factory=_default_retry_policy)
    """`groupRetryPolicy` as sent ({"type": "CUSTOMIZED" | "EXPONENTIAL", ...}); None: null."""
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    subscription_data_set: list[dict[str, Any]] | None = None
    """`subscriptionDataSet` as sent (topic, expressionType, expression, version); None: null."""
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def priority_factor(self) -> int:
        """The `priority.factor` attribute (SubscriptionGroupConfig.getPriorityFactor): 100 when unset."""
        return int(self.attributes.get(PRIORITY_FACTOR.name, PRIORITY_FACTOR.default))

    @property
    def lite_bind_topic(self) -> str | None:
        """The LITE topic a lite group consumes (`lite.bind.topic`, RocketMQ 5.5)."""
        return self.attributes.get(LITE_BIND_TOPIC.name)

    @property
    def lite_sub_client_quota(self) -> int:
        """How many lite topics one client of the group may subscribe (`lite.sub.client.quota`)."""
        return int(self.attributes.get(LITE_SUB_CLIENT_QUOTA.name, LITE_SUB_CLIENT_QUOTA.default))

    def to_json(self) -> dict[str, Any]:
        # Java's keys in fastjson's (alphabetical) order; nulls left out, as fastjson does.
        out: dict[str, Any] = {
            "attributes": dict(self.attributes),
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "consumeTimeoutMinute": self.consume_timeout_minute,
            "groupName": self.group_name,
        }
        if self.group_retry_policy is not None:
            out["groupRetryPolicy"] = self.group_retry_policy
        out |= {
            "groupSysFlag": self.group_sys_flag,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
        }
        if self.subscription_data_set is not None:
            out["subscriptionDataSet"] = self.subscription_data_set
        out["whichBrokerWhenConsumeSlowly"] = self.which_broker_when_consume_slowly
        return out

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
            consume_message_orderly=bool(d.get("consumeMessageOrderly", False)),
            group_retry_policy=(
                _object_or_none(d["groupRetryPolicy"], "groupRetryPolicy")
                if "groupRetryPolicy" in d
                else _default_retry_policy()
            ),
            group_sys_flag=int(d.get("groupSysFlag", 0)),
            consume_timeout_minute=int(d.get("consumeTimeoutMinute", 15)),
            subscription_data_set=_objects_or_none(d.get("subscriptionDataSet"), "subscriptionDataSet"),
            attributes=_attributes_of(d.get("attributes")),
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
        data = load_json_file(path)
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

    def update_attributes(self, cfg: SubscriptionGroupConfig, changes: Mapping[str, str]) -> None:
        """Creates or replaces the group as `cfg` says, but with the attributes it has (none when new)
        changed by `changes` ({"+key": value}, {"-key": ""}; a request's `cfg.attributes` are such
        changes), as SubscriptionGroupManager.updateSubscriptionGroupConfig does. Raises
        InvalidAttributes, changing nothing, for any change 5.3.3 refuses (it knows no group attribute,
        so any)."""
        with self._lock:
            existing = self.groups.get(cfg.group_name)
            attributes = alter_attributes(
                existing is None,
                GROUP_ATTRIBUTES,
                existing.attributes if existing is not None else {},
                changes,
            )
        self.update(replace(cfg, attributes=attributes))

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
        save_json_file(self._path, data)
