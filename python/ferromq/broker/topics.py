"""Topic configs (`config/topics.json`, RocketMQ's TopicConfigManager)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ferromq import _store
from ferromq.broker.config import BrokerConfig
from ferromq.broker.json_files import load_json_file, save_json_file
from ferromq.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY,
    OFFSET_MOVED_EVENT_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

logger = logging.getLogger(__name__)

PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4
# TopicValidator's system topics every broker has, and their prefix: the one list, in Rust, that
# the gRPC front refuses to 5.x clients (crates/broker/src/topics.rs). A broker adds its own
# (`TopicConfigManager.reserved`); GET_SYSTEM_TOPIC_LIST_FROM_BROKER lists them all.
SYSTEM_TOPICS = frozenset(_store.SYSTEM_TOPICS)
SYSTEM_TOPIC_PREFIX = _store.SYSTEM_TOPIC_PREFIX
# Topics clients may not send to directly (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
    }
)
TOPIC_MAX_LENGTH = 127
_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")


def topic_problem(topic: str) -> str | None:
    """Why a topic name is invalid, or None: TopicValidator.validateTopic's checks, in its order
    and with its texts, for every topic a remoting request creates or sends to."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    # The whole name: `$` would let a final newline through.
    if not _VALID.fullmatch(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def is_system_topic(topic: str, reserved: frozenset[str] = frozenset()) -> bool:
    """TopicValidator.isSystemTopic: every broker's system topics, their prefix, and `reserved`
    (a broker's own, `TopicConfigManager.reserved`)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX) or topic in reserved


# -- attributes ------------------------------------------------------------------------------------
# RocketMQ 5.x keeps typed settings of a topic (and, in the same form, of a subscription group) as
# string attributes. UPDATE_AND_CREATE_TOPIC carries changes to them as text, `+key=value` to set and
# `-key` to remove, comma-separated (AttributeParser); the broker applies the changes to what the
# topic has (AttributeUtil.alterCurrentAttributes) and refuses, with Java's wording, keys it does not
# know, values outside an attribute's range and changes to attributes fixed at creation.

MESSAGE_TYPE_KEY = "message.type"
# A topic without the attribute is NORMAL (TopicConfig.getTopicMessageType).
DEFAULT_MESSAGE_TYPE = "NORMAL"
# Refused by UPDATE_AND_CREATE_TOPIC unless the broker allows mixed topics (enableMixedMessageType,
# false by default and not a ferromq key).
MIXED_MESSAGE_TYPE = "MIXED"
# RocketMQ 5.4's priority topics: a message's priority picks its queue, pops read the highest first.
PRIORITY_MESSAGE_TYPE = "PRIORITY"
# RocketMQ 5.5's lite topics: a LITE topic's messages go also to the light message queue of their lite
# topic (`%LMQ%$<topic>$<lite topic>`), which expires `lite.topic.expiration` minutes after its last one.
LITE_MESSAGE_TYPE = "LITE"
LITE_EXPIRATION_KEY = "lite.topic.expiration"
LMQ_PREFIX = "%LMQ%"
MIXED_REFUSED = "MIXED message type is not supported."
_LONG_TEXT = re.compile(r"[+-]?[0-9]+")
_JAVA_LONG_MIN, _JAVA_LONG_MAX = -(2**63), 2**63 - 1


class InvalidAttributes(ValueError):
    """An attribute change the broker refuses; `str()` is Java's message."""

    def __init__(self, message: str, site: str = "") -> None:
        super().__init__(message)
        self.site = site
        """Where AttributeUtil throws it (`AttributeUtil.method(AttributeUtil.java:line)`), if there."""

    def java_desc(self) -> str:
        """The remark of a Java broker that lets the exception reach its remoting layer (as the group
        update does): the exception and its first stack frame (UtilAll.exceptionSimpleDesc)."""
        if not self.site:
            return str(self)
        return f"java.lang.RuntimeException: {self}, org.apache.rocketmq.common.attribute.{self.site}"


def _util_error(message: str, method: str, line: int) -> InvalidAttributes:
    return InvalidAttributes(message, f"AttributeUtil.{method}(AttributeUtil.java:{line})")


@dataclass(frozen=True)
class EnumAttribute:
    """An attribute with a fixed set of values (Java's EnumAttribute)."""

    name: str
    changeable: bool
    values: tuple[str, ...]
    """In the order Java's HashSet lists them: refusals name the set in that order."""
    default: str

    def check(self, value: str) -> None:
        if value not in self.values:
            raise InvalidAttributes(f"value is not in set: [{', '.join(self.values)}]")


@dataclass(frozen=True)
class LongRangeAttribute:
    """A Java long within [low, high] (Java's LongRangeAttribute)."""

    name: str
    changeable: bool
    low: int
    high: int
    default: int

    def check(self, value: str) -> None:
        if not _LONG_TEXT.fullmatch(value) or not _JAVA_LONG_MIN <= int(value) <= _JAVA_LONG_MAX:
            # Long.parseLong's NumberFormatException
            raise InvalidAttributes(f'For input string: "{value}"')
        if not self.low <= int(value) <= self.high:
            raise InvalidAttributes(
                f"value is not in range({self.low}, {self.high})",
                "LongRangeAttribute.verify(LongRangeAttribute.java:37)",
            )


@dataclass(frozen=True)
class StringAttribute:
    """Any text (Java's StringAttribute)."""

    name: str
    changeable: bool
    default: str = ""

    def check(self, value: str) -> None:
        pass


@dataclass(frozen=True)
class BooleanAttribute:
    """ "true" or "false", in any case (Java's BooleanAttribute)."""

    name: str
    changeable: bool
    default: bool

    def check(self, value: str) -> None:
        if value.lower() not in ("true", "false"):
            raise InvalidAttributes(
                "boolean attribute format is wrong.", "BooleanAttribute.verify(BooleanAttribute.java:34)"
            )


Attribute = EnumAttribute | LongRangeAttribute | StringAttribute | BooleanAttribute

# TopicAttributes.ALL of 5.3.3.
TOPIC_ATTRIBUTES: dict[str, Attribute] = {
    a.name: a
    for a in (
        EnumAttribute("queue.type", False, ("SimpleCQ", "BatchCQ"), "SimpleCQ"),
        EnumAttribute("cleanup.policy", False, ("DELETE", "COMPACTION"), "DELETE"),
        # TopicMessageType's values of 5.5, UNSPECIFIED and MIXED included, with 5.4's PRIORITY and 5.5's
        # LITE. 5.3.3 named six, in the order [UNSPECIFIED, TRANSACTION, FIFO, MIXED, DELAY, NORMAL].
        EnumAttribute(
            MESSAGE_TYPE_KEY,
            True,
            ("UNSPECIFIED", "MIXED", "TRANSACTION", "PRIORITY", "FIFO", "DELAY", "LITE", "NORMAL"),
            DEFAULT_MESSAGE_TYPE,
        ),
        LongRangeAttribute("reserve.time", True, -1, _JAVA_LONG_MAX, -1),
        # 5.5: minutes after its last message a lite topic of a LITE topic is deleted (-1: never).
        LongRangeAttribute(LITE_EXPIRATION_KEY, True, -1, 30 * 24 * 60, -1),
    )
}
# Values Java accepts that would change how the store keeps the topic, which ferromq does not do (a batch
# consume queue, a compacted topic): refused rather than recorded and ignored, since a Java broker opening
# the store afterwards would expect the files they imply.
UNSUPPORTED_VALUES = {("queue.type", "BatchCQ"), ("cleanup.policy", "COMPACTION")}


def parse_attribute_changes(text: str | None) -> dict[str, str]:
    """The `attributes` field of UPDATE_AND_CREATE_TOPIC (`+k1=v1,-k2`) as {"+k1": "v1", "-k2": ""}, in
    order, by Java's AttributeParser.parseToMap rules; InvalidAttributes with its message otherwise."""
    changes: dict[str, str] = {}
    if not text:
        return changes
    items = text.split(",")
    while items and not items[-1]:  # Java's split drops trailing empty strings
        items.pop()
    for item in items:
        if "=" in item:
            parts = item.split("=")
            while parts and not parts[-1]:
                parts.pop()
            if len(parts) < 2:  # "+k=" or "=": Java reads past the end of the split
                raise InvalidAttributes(f"Index {min(len(parts), 1)} out of bounds for length {len(parts)}")
            key, value = parts[0], parts[1]
            if "+" not in key:
                raise InvalidAttributes(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = item, ""
            if "-" not in key:
                raise InvalidAttributes(f"delete attribute format is wrong: {key}")
        if key in changes:
            raise InvalidAttributes(f"key duplication: {key}")
        changes[key] = value
    return changes


def alter_attributes(
    create: bool,
    known: Mapping[str, Attribute],
    current: Mapping[str, str],
    changes: Mapping[str, str],
) -> dict[str, str]:
    """`current` with `changes` ({"+key": value} sets, {"-key": ""} removes) applied, as
    AttributeUtil.alterCurrentAttributes does: a new topic (`create`) may only set; removing needs the
    key; every key must be one of `known`, with a value it accepts, and changeable unless `create`.
    Raises InvalidAttributes with Java's message; `current` is never modified."""
    init: dict[str, str] = {}
    add: dict[str, str] = {}
    update: dict[str, str] = {}
    delete: dict[str, str] = {}
    seen: set[str] = set()
    for key, value in changes.items():
        real = key[1:]
        if not real:
            raise _util_error("kv string format wrong.", "validate", 98)
        if "+" in real:
            raise _util_error("kv string format wrong.", "validate", 102)
        if "-" in real:
            raise _util_error("kv string format wrong.", "validate", 106)
        if real in seen:
            raise _util_error(f"alter duplication key. key: {real}", "duplicationCheck", 92)
        seen.add(real)
        if create:
            if not key.startswith("+"):
                raise _util_error(
                    f"only add attribute is supported while creating topic. key: {real}",
                    "alterCurrentAttributes",
                    53,
                )
            init[real] = value
        elif key.startswith("+"):
            (update if real in current else add)[real] = value
        elif key.startswith("-"):
            if real not in current:
                raise _util_error(
                    f"attempt to delete a nonexistent key: {real}", "alterCurrentAttributes", 64
                )
            delete[real] = value
        else:
            raise _util_error(f"wrong format key: {real}", "alterCurrentAttributes", 68)
    steps = ((init, True, False), (add, False, False), (update, False, False), (delete, False, True))
    for alter, initial, deleting in steps:
        for real, value in alter.items():
            attribute = known.get(real)
            if attribute is None:
                raise _util_error(f"unsupported key: {real}", "validateAlter", 117)
            if not initial and not attribute.changeable:
                raise _util_error(
                    f"attempt to update an unchangeable attribute. key: {real}", "validateAlter", 120
                )
            if not deleting:
                attribute.check(value)
    final = {**current, **init, **add, **update}
    for real in delete:
        final.pop(real, None)
    return final


def _attributes_of(raw: Any) -> dict[str, str]:
    """A config file's or a request body's `attributes` (an object of strings; null: none)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TypeError(f"attributes must be an object, not {type(raw).__name__}")
    return {str(k): str(v) for k, v in raw.items()}


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)
    """RocketMQ 5.x's topic attributes (`message.type`, ...): written as Java 5.x writes them, `{}` when
    none."""

    @property
    def message_type(self) -> str:
        """The `message.type` attribute: NORMAL when absent (TopicConfig.getTopicMessageType)."""
        return self.attributes.get(MESSAGE_TYPE_KEY, DEFAULT_MESSAGE_TYPE)

    @property
    def lite_topic_expiration(self) -> int:
        """A LITE topic's `lite.topic.expiration` in minutes, -1 (never) otherwise or when unset
        (TopicConfig.getLiteTopicExpiration)."""
        if self.message_type != LITE_MESSAGE_TYPE:
            return -1
        value = self.attributes.get(LITE_EXPIRATION_KEY, "-1")
        return int(value) if _LONG_TEXT.fullmatch(value) else -1

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicConfig:
        return cls(
            topic_name=str(d["topicName"]),
            read_queue_nums=int(d.get("readQueueNums", 16)),
            write_queue_nums=int(d.get("writeQueueNums", 16)),
            perm=int(d.get("perm", 6)),
            topic_filter_type=str(d.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
            order=bool(d.get("order", False)),
            attributes=_attributes_of(d.get("attributes")),
        )

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def route(self) -> _store.TopicRoute:
        """What a send to this topic may use (the send rules' view of it)."""
        return _store.TopicRoute(
            self.write_queue_nums,
            self.read_queue_nums,
            self.topic_filter_type == "MULTI_TAG",
            self.message_type,
        )

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicConfigManager:
    def __init__(self, config: BrokerConfig, path: Path) -> None:
        self._config = config
        self._path = path
        self._lock = threading.Lock()
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = {"counter": 0, "timestamp": int(time.time() * 1000)}
        self.on_change: Callable[[], None] | None = None
        """Called after the table changed (the broker tells its data planes)."""
        self.on_created: Callable[[], None] | None = None
        """Called after the broker made a topic itself (auto-created on a send, a retry or dead letter
        topic): it registers with the name servers at once, as Java's does, so routes find it."""
        self._builtin()
        self._load()

    @property
    def reserved(self) -> frozenset[str]:
        """The system topics this broker adds to every broker's: its cluster and broker names and
        its cluster's reply topic (TopicConfigManager's addSystemTopic calls)."""
        c = self._config
        return frozenset({c.broker_cluster_name, c.broker_name, f"{c.broker_cluster_name}_REPLY_TOPIC"})

    def is_system_topic(self, topic: str) -> bool:
        """Whether `topic` is a system topic on this broker (an admin may not create it)."""
        return is_system_topic(topic, self.reserved)

    def _builtin(self) -> None:
        c = self._config
        builtin = [
            TopicConfig("SELF_TEST_TOPIC", 1, 1),
            TopicConfig("BenchmarkTest", 1024, 1024),
            TopicConfig(c.broker_cluster_name, 16, 16, PERM_INHERIT | (6 if c.cluster_topic_enable else 0)),
            TopicConfig(c.broker_name, 1, 1, PERM_INHERIT | (6 if c.broker_topic_enable else 0)),
            TopicConfig("OFFSET_MOVED_EVENT", 1, 1),
            TopicConfig(SCHEDULE_TOPIC, 18, 18),
            # Request-reply messages (4.9's RMQ_SYS_REPLY): created at start, as Java does.
            TopicConfig(f"{c.broker_cluster_name}_REPLY_TOPIC", 1, 1),
        ]
        if c.auto_create_topic_enable:
            builtin.append(
                TopicConfig(
                    AUTO_CREATE_TOPIC_KEY,
                    c.default_topic_queue_nums,
                    c.default_topic_queue_nums,
                    PERM_INHERIT | PERM_READ | PERM_WRITE,
                )
            )
        for t in builtin:
            self.topics[t.topic_name] = t

    def _load(self) -> None:
        data = load_json_file(self._path)
        if not data:
            return
        for name, raw in (data.get("topicConfigTable") or {}).items():
            try:
                self.topics[str(name)] = TopicConfig.from_json(raw)
            except (KeyError, ValueError, TypeError) as e:
                logger.error("%s: topic %r skipped: %s", self._path, name, e)
        dv = data.get("dataVersion")
        if isinstance(dv, dict):
            self.data_version = {
                "counter": int(dv.get("counter", 0)),
                "timestamp": int(dv.get("timestamp", 0)),
            }

    def persist(self) -> None:
        with self._lock:
            data = {
                "dataVersion": dict(self.data_version),
                "topicConfigTable": {n: t.to_json() for n, t in sorted(self.topics.items())},
            }
        save_json_file(self._path, data)

    def _changed(self) -> None:
        self.data_version = {
            "counter": self.data_version["counter"] + 1,
            "timestamp": int(time.time() * 1000),
        }

    def replace_all(self, topics: dict[str, TopicConfig], data_version: dict[str, int]) -> None:
        """A slave takes its master's table and version as they are (SlaveSynchronize)."""
        with self._lock:
            self.topics = dict(topics)
            self.data_version = dict(data_version)
        self._notify()

    def configure_missing(self, queue_counts: dict[str, int], min_queue_nums: int) -> list[str]:
        """Configures each topic of `queue_counts` (topic -> queues it has in the store) that has no
        configuration, with that many queues (at least `min_queue_nums`); the names configured."""
        with self._lock:
            added = sorted(t for t in queue_counts if t not in self.topics)
            for topic in added:
                n = max(queue_counts[topic], min_queue_nums)
                self.topics[topic] = TopicConfig(topic, read_queue_nums=n, write_queue_nums=n)
            if added:
                self._changed()
        if added:
            self._notify()
            self.persist()
        return added

    def _notify(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def get(self, topic: str) -> TopicConfig | None:
        tc = self.topics.get(topic)
        if tc is None and topic.startswith(LMQ_PREFIX) and self._config.enable_lmq:
            # A light message queue is a topic of one queue nobody created (LmqTopicConfigManager).
            return TopicConfig(topic, 1, 1)
        return tc

    def update(self, tc: TopicConfig) -> None:
        with self._lock:
            self.topics[tc.topic_name] = tc
            self._changed()
        self._notify()
        self.persist()

    def update_attributes(self, tc: TopicConfig, changes: Mapping[str, str]) -> TopicConfig:
        """Creates or replaces the topic as `tc` says, its attributes those it has (none when new) with
        `changes` applied (`alter_attributes`); the stored config. Raises InvalidAttributes, changing
        nothing, when Java would refuse the changes or ferromq cannot honour them."""
        with self._lock:
            existing = self.topics.get(tc.topic_name)
            attributes = alter_attributes(
                existing is None,
                TOPIC_ATTRIBUTES,
                existing.attributes if existing is not None else {},
                changes,
            )
            for key, value in attributes.items():
                if (key, value) in UNSUPPORTED_VALUES and (
                    existing is None or existing.attributes.get(key) != value
                ):
                    raise InvalidAttributes(f"{key}={value} is not supported by ferromq")
            tc = replace(tc, attributes=attributes)
            self.topics[tc.topic_name] = tc
            self._changed()
        self._notify()
        self.persist()
        return tc

    def delete(self, topic: str) -> bool:
        with self._lock:
            found = self.topics.pop(topic, None) is not None
            if found:
                self._changed()
        if found:
            self._notify()
            self.persist()
        return found

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-creates a topic from its template (TBW102) the way a send does; None if not allowed."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        template = self.topics.get(default_topic)
        if template is None or not (template.perm & PERM_INHERIT):
            return None
        if default_topic == AUTO_CREATE_TOPIC_KEY and not self._config.auto_create_topic_enable:
            return None
        n = max(1, min(queue_nums, template.write_queue_nums))
        tc = TopicConfig(topic, n, n, template.perm & ~PERM_INHERIT)
        logger.info("auto-created topic %s with %d queues from %s", topic, n, default_topic)
        self.update(tc)
        self._created()
        return tc

    def create_system_topic(
        self, topic: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE
    ) -> TopicConfig:
        """Retry, DLQ and transaction topics: created on first use."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        tc = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.update(tc)
        self._created()
        return tc

    def _created(self) -> None:
        if self.on_created is not None:
            self.on_created()

    def serialize_wrapper(self) -> dict[str, Any]:
        with self._lock:
            return {
                "topicConfigTable": {n: t.to_json() for n, t in self.topics.items()},
                "dataVersion": dict(self.data_version),
            }
