"""Broker registry and topic routes (RocketMQ's `RouteInfoManager`). Pure bookkeeping: the
server feeds it registrations and asks it for routes; time is passed in."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

BROKER_EXPIRE_SECONDS = 120.0
MASTER_ID = 0
PERM_WRITE = 2


@dataclass
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Quoted keys: standard JSON, which Java and the C++ client both read.
        return {
            "brokerAddrs": {str(k): v for k, v in sorted(self.addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


@dataclass
class LiveBroker:
    last_update: float
    ha_server_addr: str
    connection_key: object | None
    master_epoch: int = 0
    """The controller epoch a controller-mode master registered with (ferromq's own field): a
    master of a later epoch takes the broker id over from this address at once."""


class RouteInfoManager:
    def __init__(self) -> None:
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, LiveBroker] = {}

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_configs: dict[str, dict[str, Any]],
        now: float,
        connection_key: object | None = None,
        master_epoch: int = 0,
    ) -> str | None:
        """Records a (re-)registration. Returns the master's address for a slave."""
        self.clusters.setdefault(cluster, set()).add(broker_name)
        data = self.brokers.setdefault(broker_name, BrokerData(cluster, broker_name))
        data.cluster = cluster
        # One address per broker id; an address that moved ids loses its old id.
        for bid, addr in list(data.addrs.items()):
            if addr == broker_addr and bid != broker_id:
                del data.addrs[bid]
        first = broker_addr not in self.live
        data.addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID:
            self._update_queues(broker_name, topic_configs)
        self.live[broker_addr] = LiveBroker(now, ha_server_addr, connection_key, master_epoch)
        if first:
            logger.info("broker %s (%s, id %d) registered", broker_name, broker_addr, broker_id)
        if broker_id != MASTER_ID:
            return data.addrs.get(MASTER_ID)
        return None

    def live_addr(self, broker_name: str, broker_id: int) -> str | None:
        """The address `broker_name`/`broker_id` is registered from, while it is live."""
        data = self.brokers.get(broker_name)
        addr = data.addrs.get(broker_id) if data is not None else None
        return addr if addr is not None and addr in self.live else None

    def _update_queues(self, broker_name: str, topic_configs: dict[str, dict[str, Any]]) -> None:
        for topic, cfg in topic_configs.items():
            self.topic_queues.setdefault(topic, {})[broker_name] = QueueData(
                broker_name=broker_name,
                read_queue_nums=int(cfg.get("readQueueNums", 16)),
                write_queue_nums=int(cfg.get("writeQueueNums", 16)),
                perm=int(cfg.get("perm", 6)),
                topic_sys_flag=int(cfg.get("topicSysFlag", 0)),
            )
        # Topics the master no longer has.
        for topic in [t for t, q in self.topic_queues.items() if broker_name in q and t not in topic_configs]:
            self._drop_topic_of(topic, broker_name)

    def _drop_topic_of(self, topic: str, broker_name: str) -> None:
        queues = self.topic_queues.get(topic)
        if queues is not None:
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queues[topic]

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(broker_addr, None)
        data = self.brokers.get(broker_name)
        if data is not None:
            if data.addrs.get(broker_id) == broker_addr:
                del data.addrs[broker_id]
            if not data.addrs:
                del self.brokers[broker_name]
                names = self.clusters.get(cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self.clusters[cluster]
                for topic in [t for t, q in self.topic_queues.items() if broker_name in q]:
                    self._drop_topic_of(topic, broker_name)
        logger.info("broker %s (%s) unregistered", broker_name, broker_addr)

    def _remove_addr(self, broker_addr: str) -> None:
        for name, data in list(self.brokers.items()):
            for bid, addr in list(data.addrs.items()):
                if addr == broker_addr:
                    self.unregister_broker(
                        cluster=data.cluster, broker_addr=addr, broker_name=name, broker_id=bid
                    )

    def expire(self, now: float, max_age: float = BROKER_EXPIRE_SECONDS) -> list[str]:
        """Drops brokers silent for longer than `max_age` seconds; returns their addresses."""
        dead = [addr for addr, live in self.live.items() if now - live.last_update > max_age]
        for addr in dead:
            logger.warning("broker %s expired (no registration for %.0f s)", addr, max_age)
            self._remove_addr(addr)
        return dead

    def connection_closed(self, connection_key: object) -> None:
        for addr in [a for a, live in self.live.items() if live.connection_key is connection_key]:
            self._remove_addr(addr)

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData of a topic, or None when no live broker serves it."""
        queues = self.topic_queues.get(topic)
        if not queues:
            return None
        queue_datas, broker_datas = [], []
        for name, q in sorted(queues.items()):
            data = self.brokers.get(name)
            if data is None or not data.addrs:
                continue
            queue_datas.append(q.to_json())
            broker_datas.append(data.to_json())
        if not broker_datas:
            return None
        return {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {name: d.to_json() for name, d in sorted(self.brokers.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.clusters.items())},
        }

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """Turns the write permission of every topic on `broker_name` off or on (mqadmin
        wipeWritePerm / addWritePerm); the number of topics. The broker's next registration sets
        its own permissions again, as in RocketMQ."""
        count = 0
        for queues in self.topic_queues.values():
            q = queues.get(broker_name)
            if q is not None:
                q.perm = q.perm | PERM_WRITE if writable else q.perm & ~PERM_WRITE
                count += 1
        return count

    def system_topics(self) -> tuple[list[str], str | None]:
        """GET_SYSTEM_TOPIC_LIST_FROM_NS: the cluster and broker names (each is a topic), and one
        broker address to ask for the rest."""
        names: list[str] = []
        for cluster, brokers in sorted(self.clusters.items()):
            names += [cluster, *sorted(brokers)]
        addr = next((a for d in self.brokers.values() for _, a in sorted(d.addrs.items())), None)
        return names, addr

    def delete_topic(self, topic: str) -> None:
        self.topic_queues.pop(topic, None)

    def topics(self) -> list[str]:
        return sorted(self.topic_queues)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self.clusters.get(cluster, set())
        return sorted(t for t, q in self.topic_queues.items() if names & q.keys())
