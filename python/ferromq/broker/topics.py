"""Topic configs (`config/topics.json`, RocketMQ's TopicConfigManager)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ferromq import _store
from ferromq.broker.config import BrokerConfig
from ferromq.broker.config_file import load_config_file, save_config_file
from ferromq.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRACE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

logger = logging.getLogger(__name__)

PERM_INHERIT, PERM_WRITE, PERM_READ = 1, 2, 4
# TopicValidator's system topics (GET_SYSTEM_TOPIC_LIST_FROM_BROKER lists those the broker has, with
# its cluster and broker names).
SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY,
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        TRACE_TOPIC,
    }
)
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
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def topic_problem(topic: str) -> str | None:
    """Why a topic name is invalid, or None (RocketMQ's TopicValidator)."""
    if not topic or not topic.strip():
        return "the specified topic is blank"
    if len(topic) > 127:
        return "the specified topic is longer than topic max length 127"
    if not _VALID.match(topic):
        return f"the specified topic[{topic}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
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
        )

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def route(self) -> _store.TopicRoute:
        """What a send to this topic may use (the send rules' view of it)."""
        return _store.TopicRoute(
            self.write_queue_nums, self.read_queue_nums, self.topic_filter_type == "MULTI_TAG"
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
        self._builtin()
        self._load()

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
        data = load_config_file(self._path)
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
        save_config_file(self._path, data)

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
        return self.topics.get(topic)

    def update(self, tc: TopicConfig) -> None:
        with self._lock:
            self.topics[tc.topic_name] = tc
            self._changed()
        self._notify()
        self.persist()

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
        return tc

    def serialize_wrapper(self) -> dict[str, Any]:
        with self._lock:
            return {
                "topicConfigTable": {n: t.to_json() for n, t in self.topics.items()},
                "dataVersion": dict(self.data_version),
            }
