"""How each group consumes each topic (RocketMQ 5.x's MessageRequestModeManager): PULL (client-side
rebalance) or POP, set by `mqadmin setConsumeMode` (SET_MESSAGE_REQUEST_MODE) and kept in
`config/messageRequestMode.json`; and the assignment QUERY_ASSIGNMENT answers with it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ferromq.broker.json_files import load_json_file, save_json_file
from ferromq.protocol.constants import RETRY_PREFIX

MODES = ("PULL", "POP")
T = TypeVar("T")


@dataclass(frozen=True)
class RequestMode:
    topic: str
    group: str
    mode: str = "PULL"
    pop_share_queue_num: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.group,
            "mode": self.mode,
            "popShareQueueNum": self.pop_share_queue_num,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestMode:
        mode = str(d.get("mode") or "PULL")
        if mode not in MODES:
            raise ValueError(f"message request mode {mode!r} is not PULL or POP")
        return cls(str(d["topic"]), str(d["consumerGroup"]), mode, int(d.get("popShareQueueNum") or 0))


class RequestModeManager:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self.modes: dict[str, dict[str, RequestMode]] = {}
        data = load_json_file(path) or {}
        for topic, groups in (data.get("messageRequestModeMap") or {}).items():
            for group, d in (groups or {}).items():
                self.modes.setdefault(str(topic), {})[str(group)] = RequestMode.from_json(d)

    def set(self, mode: RequestMode) -> None:
        with self._lock:
            self.modes.setdefault(mode.topic, {})[mode.group] = mode
        self.persist()

    def get(self, topic: str, group: str) -> RequestMode | None:
        return self.modes.get(topic, {}).get(group)

    def persist(self) -> None:
        with self._lock:
            table = {t: {g: m.to_json() for g, m in groups.items()} for t, groups in self.modes.items()}
        save_json_file(self._path, {"messageRequestModeMap": table})


def allocate_averagely(queues: list[T], clients: list[str], client_id: str) -> list[T]:
    """RocketMQ's AllocateMessageQueueAveragely: the client's share of the sorted queues."""
    if client_id not in clients or not queues:
        return []
    index, n, m = clients.index(client_id), len(queues), len(clients)
    mod = n % m
    size = (n // m + (1 if index < mod else 0)) if n > m else 1
    start = index * size if index < mod else index * size + mod
    return [queues[(start + i) % n] for i in range(min(size, n - start))] if start < n else []


def effective_mode(manager: RequestModeManager, topic: str, group: str, default: str) -> RequestMode:
    """The mode QUERY_ASSIGNMENT answers: the one set for (topic, group), else the broker's
    default; retry topics are always pulled."""
    if topic.startswith(RETRY_PREFIX):
        return RequestMode(topic, group, "PULL")
    return manager.get(topic, group) or RequestMode(topic, group, default, -1)
