"""Topic routes from the name server, and the queues they give producers and consumers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ferromq.client.message import MessageQueue

PERM_WRITE, PERM_READ = 2, 4
MASTER_ID = 0


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    queue_datas: tuple[QueueData, ...]
    broker_addrs: dict[str, dict[int, str]]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, topic: str, data: dict[str, Any]) -> TopicRoute:
        queues = tuple(
            QueueData(str(q["brokerName"]), int(q["readQueueNums"]), int(q["writeQueueNums"]), int(q["perm"]))
            for q in data.get("queueDatas") or []
        )
        addrs = {
            str(b["brokerName"]): {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()}
            for b in data.get("brokerDatas") or []
        }
        return cls(topic, queues, addrs, data.get("orderTopicConf"))

    def master(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def publish_queues(self) -> list[MessageQueue]:
        """Writable queues of brokers with a master, in a stable order."""
        out = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PERM_WRITE and self.master(q.broker_name):
                out += [MessageQueue(self.topic, q.broker_name, i) for i in range(q.write_queue_nums)]
        return out

    def subscribe_queues(self) -> list[MessageQueue]:
        out = []
        for q in sorted(self.queue_datas, key=lambda q: q.broker_name):
            if q.perm & PERM_READ:
                out += [MessageQueue(self.topic, q.broker_name, i) for i in range(q.read_queue_nums)]
        return out

    def brokers(self) -> set[str]:
        return {addr for addrs in self.broker_addrs.values() for addr in addrs.values()}
