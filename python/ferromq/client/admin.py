"""Admin: topics (create, update, delete, list, route), cluster info, consumer progress and lag,
message queries (by offsetMsgId, key or client message id) and queue offsets (RocketMQ's
MQAdminExt / MQAdminImpl)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass
from typing import Any

from ferromq.acl.signing import credentials_of
from ferromq.client.admin_results import (
    BrokerRuntimeInfo,
    BrokerStats,
    ConsumerConnections,
    ConsumerRunningInfo,
    GroupConfig,
    GroupTraffic,
    OffsetResetResult,
    ProducerConnections,
    QueueReset,
    TopicQueueStats,
    TopicTraffic,
    mq_map,
    parse_broker_stats,
    parse_consumer_connections,
    parse_group_table,
    parse_kv_table,
    parse_producer_connections,
    parse_properties,
    parse_reset_offsets,
    parse_running_info,
    parse_topic_stats,
    properties_text,
)
from ferromq.client.instance import ClientInstance
from ferromq.client.lifecycle import AsyncLifecycle
from ferromq.client.message import MessageQueue, ReceivedMessage, decode_received
from ferromq.client.offset_store import queue_offset_ext
from ferromq.client.route import TopicRoute
from ferromq.errors import BrokerError, QueryNotFoundError, TopicNotExistError
from ferromq.jsonutil import dumps, loads_lenient, loads_object_keys
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY,
    BENCHMARK_TOPIC,
    DLQ_PREFIX,
    OFFSET_MOVED_EVENT_TOPIC,
    ORDER_TOPIC_CONFIG,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TOOLS_CONSUMER_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from ferromq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    GetKVConfigRequestHeader,
    GetLiteClientInfoRequestHeader,
    GetLiteGroupInfoRequestHeader,
    GetLiteTopicInfoRequestHeader,
    GetParentTopicInfoRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicsByClusterRequestHeader,
    GetTopicStatsInfoRequestHeader,
    PullMessageRequestHeader,
    PutKVConfigRequestHeader,
    QueryMessageRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ResetOffsetRequestHeader,
    TriggerLiteDispatchRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewBrokerStatsDataRequestHeader,
    ViewMessageRequestHeader,
)

logger = logging.getLogger(__name__)

DEFAULT_QUERY_MAX_NUM = 32
# QUERY_MESSAGE reads index files: give it more time than a plain request (Java: timeout * 3).
QUERY_TIMEOUT_FACTOR = 3


@dataclass(frozen=True)
class BrokerInfo:
    """One broker (a master and its slaves) as the name server knows it."""

    cluster: str
    broker_name: str
    addrs: dict[int, str]
    """Broker id (0 = master) -> `ip:port`."""

    @property
    def master_addr(self) -> str | None:
        """The master's address (None when the broker has only slaves now)."""
        return self.addrs.get(0)


@dataclass(frozen=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO, parsed."""

    brokers: dict[str, BrokerInfo]
    """Broker name -> broker."""
    clusters: dict[str, list[str]]
    """Cluster name -> its broker names."""

    def master_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address, for every broker (of `cluster`) that has a master."""
        names = set(self.clusters.get(cluster, [])) if cluster is not None else set(self.brokers)
        out = {}
        for name in sorted(names):
            info = self.brokers.get(name)
            if info is not None and info.master_addr:
                out[name] = info.master_addr
        return out


@dataclass(frozen=True)
class TopicConfigInfo:
    """A topic's configuration on one broker."""

    topic: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


@dataclass(frozen=True)
class QueueProgress:
    """A consumer group's progress on one queue."""

    queue: MessageQueue
    broker_offset: int
    """The queue's max offset (the next offset the broker will write)."""
    consumer_offset: int
    """The group's committed offset (the next offset it will read)."""
    lag: int
    """Messages not consumed yet: broker_offset - consumer_offset (never negative)."""
    last_timestamp: int
    """Store time (ms) of the last consumed message (at consumer_offset - 1); 0 when unknown."""


@dataclass(frozen=True)
class ConsumerProgress:
    """GET_CONSUME_STATS of a group, merged over the brokers."""

    group: str
    queues: list[QueueProgress]
    consume_tps: float

    @property
    def total_lag(self) -> int:
        """The lag summed over the queues."""
        return sum(q.lag for q in self.queues)

    def of(self, queue: MessageQueue) -> QueueProgress | None:
        """The progress on one queue, or None when the broker reports nothing for it."""
        for q in self.queues:
            if q.queue == queue:
                return q
        return None


SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY,
        SCHEDULE_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
    }
)
SYSTEM_TOPIC_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_", "RMQ_SYS_")


def is_system_topic(topic: str, cluster_and_broker_names: set[str] | frozenset[str] = frozenset()) -> bool:
    """RocketMQ's own topics, retry and dead-letter topics, and the cluster and broker names the
    name server lists as topics."""
    return (
        topic in SYSTEM_TOPICS
        or topic in cluster_and_broker_names
        or topic.startswith(SYSTEM_TOPIC_PREFIXES)
        or topic.endswith("_REPLY_TOPIC")  # a cluster's request-reply topic (`<cluster>_REPLY_TOPIC`)
    )


def decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int]:
    """The store host (`ip:port`) and CommitLog offset an offsetMsgId names (32 hex digits for
    an IPv4 store host, 56 for IPv6)."""
    try:
        raw = bytes.fromhex(offset_msg_id)
    except ValueError:
        raise ValueError(f"not an offsetMsgId: {offset_msg_id!r}") from None
    if len(raw) == 16:
        ip_len = 4
    elif len(raw) == 28:
        ip_len = 16
    else:
        raise ValueError(f"not an offsetMsgId (length {len(offset_msg_id)}): {offset_msg_id!r}")
    ip = ipaddress.ip_address(raw[:ip_len])
    port = int.from_bytes(raw[ip_len : ip_len + 4], "big")
    offset = int.from_bytes(raw[ip_len + 4 :], "big")
    return f"{ip}:{port}", offset


def _int_ext(reply: RemotingCommand, key: str) -> int:
    value = reply.ext.get(key)
    if value is None:
        raise BrokerError(f"reply to request code has no {key}", ResponseCode.SYSTEM_ERROR)
    return int(value)


def _code(code: int) -> ResponseCode:
    try:
        return ResponseCode(code)
    except ValueError:
        return ResponseCode.SYSTEM_ERROR


def check_reply(reply: RemotingCommand, what: str) -> RemotingCommand:
    """Returns a successful reply; raises BrokerError (with the reply's code) otherwise."""
    if reply.code != ResponseCode.SUCCESS:
        if reply.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotExistError(reply.remark or f"{what}: topic not exist")
        raise BrokerError(f"{what} failed: {(reply.remark or '').strip() or reply.code}", _code(reply.code))
    return reply


async def queue_master_addr(instance: ClientInstance, mq: MessageQueue) -> str:
    """The master address of a queue's broker (refreshing the topic's route when needed)."""
    addr = instance.master_addr(mq.broker_name)
    if addr is None:
        await instance.route(mq.topic, refresh=True)
        addr = instance.master_addr(mq.broker_name)
    if addr is None:
        raise BrokerError(
            f"no master address for broker {mq.broker_name}", ResponseCode.SERVICE_NOT_AVAILABLE
        )
    return addr


async def queue_offset_request(
    instance: ClientInstance, code: RequestCode, mq: MessageQueue, timestamp: int = 0
) -> int:
    """GET_MAX_OFFSET / GET_MIN_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP on a queue: its `offset`."""
    addr = await queue_master_addr(instance, mq)
    reply = await instance.invoke(addr, RemotingCommand(code=code, ext=queue_offset_ext(code, mq, timestamp)))
    return _int_ext(check_reply(reply, f"{code.name} of {mq}"), "offset")


def parse_consume_stats(body: bytes, group: str) -> tuple[list[QueueProgress], float]:
    """A GET_CONSUME_STATS body: the Java broker's fastjson map with MessageQueue object keys, or
    the list form older ferromq brokers wrote (`offsetTable: [{messageQueue, offsetWrapper}]`)."""
    try:
        data = loads_object_keys(body) if body else {}
    except ValueError:
        data = {}
    tps = float(data.get("consumeTps") or 0.0) if isinstance(data, dict) else 0.0
    out = []
    for mq, w in mq_map(body):
        w = w if isinstance(w, dict) else {}
        broker_offset = int(w.get("brokerOffset", 0))
        consumer_offset = int(w.get("consumerOffset", 0))
        out.append(
            QueueProgress(
                queue=mq,
                broker_offset=broker_offset,
                consumer_offset=consumer_offset,
                lag=max(0, broker_offset - consumer_offset),
                last_timestamp=int(w.get("lastTimestamp") or 0),
            )
        )
    return out, tps


class Admin(AsyncLifecycle):
    """Administration of topics, consumer groups and messages. Use `async with Admin(namesrv)`
    or `await start()` / `await stop()`."""

    def __init__(
        self,
        namesrv: str,
        *,
        instance: ClientInstance | None = None,
        timeout: float = 5.0,  # DefaultMQAdminExt.timeoutMillis
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv, timeout=timeout, credentials=credentials_of(access_key, secret_key)
        )
        self.timeout = timeout

    async def start(self) -> None:
        """Starts the client instance (route refreshes)."""
        await self.instance.start()

    async def stop(self) -> None:
        """Closes the connections (of an instance this admin created)."""
        if self._own_instance:
            await self.instance.stop()

    # -- name server ---------------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        """The brokers and clusters the name server knows."""
        reply = check_reply(
            await self.instance.namesrv_invoke(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)),
            "GET_BROKER_CLUSTER_INFO",
        )
        data = loads_lenient(reply.body) if reply.body else {}
        brokers = {}
        for name, b in (data.get("brokerAddrTable") or {}).items():
            addrs = {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()}
            brokers[str(name)] = BrokerInfo(str(b.get("cluster", "")), str(name), addrs)
        clusters = {
            str(c): sorted(str(n) for n in names) for c, names in (data.get("clusterAddrTable") or {}).items()
        }
        return ClusterInfo(brokers, clusters)

    async def list_topics(self) -> list[str]:
        """Every topic the name server has a route for (system topics included), sorted."""
        reply = check_reply(
            await self.instance.namesrv_invoke(
                RemotingCommand(code=RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            ),
            "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
        )
        data = loads_lenient(reply.body) if reply.body else {}
        return sorted(str(t) for t in data.get("topicList") or [])

    async def topic_route(self, topic: str) -> TopicRoute:
        """The topic's current route; raises TopicNotExistError when the name server has none."""
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            self.instance.routes.pop(topic, None)
            raise TopicNotExistError(f"No topic route info in name server for the topic: {topic}")
        return route

    # -- ACL 2.0: users and ACLs (mqadmin createUser ... listAcl) -------------------------------

    async def _auth_write(
        self,
        code: RequestCode,
        ext: dict[str, str],
        body: dict[str, Any] | None,
        broker_addr: str | None,
        cluster: str | None,
    ) -> list[str]:
        """A user or ACL change on one broker, or on every broker (masters and slaves) of
        `cluster` or of all clusters, as mqadmin's -b / -c; the addresses changed."""
        addrs = [broker_addr] if broker_addr is not None else await self._all_broker_addrs(cluster)
        payload = dumps(body) if body is not None else b""
        for addr in addrs:
            await self._call(addr, code, f"{code.name} on {addr}", ext, payload)
        return addrs

    async def _auth_read(self, code: RequestCode, ext: dict[str, str], broker_addr: str | None) -> Any:
        """A read of one broker's users or ACLs (the first broker the name server lists without
        `broker_addr`); None when the broker answered with no body."""
        addr = broker_addr if broker_addr is not None else (await self._all_broker_addrs(None) or [""])[0]
        if not addr:
            raise BrokerError("no broker to ask", ResponseCode.SERVICE_NOT_AVAILABLE)
        reply = await self._call(addr, code, f"{code.name} on {addr}", ext)
        return loads_lenient(reply.body) if reply.body else None

    async def create_user(
        self,
        username: str,
        password: str,
        user_type: str | None = None,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
    ) -> list[str]:
        """AUTH_CREATE_USER: a user (type Super or Normal, Normal by default)."""
        body = {"username": username, "password": password, "userType": user_type}
        return await self._auth_write(
            RequestCode.AUTH_CREATE_USER, {"username": username}, _present(body), broker_addr, cluster
        )

    async def update_user(
        self,
        username: str,
        password: str | None = None,
        user_type: str | None = None,
        user_status: str | None = None,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
    ) -> list[str]:
        """AUTH_UPDATE_USER: what is given changes (status: enable or disable)."""
        body = {"username": username, "password": password, "userType": user_type, "userStatus": user_status}
        return await self._auth_write(
            RequestCode.AUTH_UPDATE_USER, {"username": username}, _present(body), broker_addr, cluster
        )

    async def delete_user(
        self, username: str, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """AUTH_DELETE_USER: the user and its ACL."""
        return await self._auth_write(
            RequestCode.AUTH_DELETE_USER, {"username": username}, None, broker_addr, cluster
        )

    async def get_user(self, username: str, *, broker_addr: str | None = None) -> dict[str, Any] | None:
        """AUTH_GET_USER: the user's UserInfo (its password included, as Java answers), or None."""
        found = await self._auth_read(RequestCode.AUTH_GET_USER, {"username": username}, broker_addr)
        return found if isinstance(found, dict) else None

    async def list_users(
        self, name_filter: str | None = None, *, broker_addr: str | None = None
    ) -> list[dict[str, Any]]:
        """AUTH_LIST_USER: the users whose name contains `name_filter`."""
        ext = {"filter": name_filter} if name_filter else {}
        found = await self._auth_read(RequestCode.AUTH_LIST_USER, ext, broker_addr)
        return list(found) if isinstance(found, list) else []

    async def put_acl(
        self,
        subject: str,
        resources: list[str],
        actions: list[str],
        decision: str = "Allow",
        source_ips: list[str] | None = None,
        *,
        update: bool = False,
        broker_addr: str | None = None,
        cluster: str | None = None,
    ) -> list[str]:
        """AUTH_CREATE_ACL (AUTH_UPDATE_ACL with `update`): one entry per resource, merged into
        the subject's Custom policy."""
        ips = source_ips or None
        entries = [
            _present({"resource": r, "actions": actions, "sourceIps": ips, "decision": decision})
            for r in resources
        ]
        body = {"subject": subject, "policies": [{"policyType": "Custom", "entries": entries}]}
        code = RequestCode.AUTH_UPDATE_ACL if update else RequestCode.AUTH_CREATE_ACL
        return await self._auth_write(code, {"subject": subject}, body, broker_addr, cluster)

    async def delete_acl(
        self,
        subject: str,
        resource: str | None = None,
        policy_type: str | None = None,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
    ) -> list[str]:
        """AUTH_DELETE_ACL: one resource's entry, or (no resource) the subject's whole ACL."""
        ext = _present({"subject": subject, "resource": resource, "policyType": policy_type})
        return await self._auth_write(RequestCode.AUTH_DELETE_ACL, ext, None, broker_addr, cluster)

    async def get_acl(self, subject: str, *, broker_addr: str | None = None) -> dict[str, Any] | None:
        """AUTH_GET_ACL: the subject's AclInfo, or None."""
        found = await self._auth_read(RequestCode.AUTH_GET_ACL, {"subject": subject}, broker_addr)
        return found if isinstance(found, dict) else None

    async def list_acls(
        self,
        subject_filter: str | None = None,
        resource_filter: str | None = None,
        *,
        broker_addr: str | None = None,
    ) -> list[dict[str, Any]]:
        """AUTH_LIST_ACL: the ACLs whose subject (or entries' resource) contains the filters."""
        ext = _present({"subjectFilter": subject_filter, "resourceFilter": resource_filter})
        found = await self._auth_read(RequestCode.AUTH_LIST_ACL, ext, broker_addr)
        return list(found) if isinstance(found, list) else []

    # -- retention -----------------------------------------------------------------------------

    async def _all_broker_addrs(self, cluster: str | None) -> list[str]:
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.clusters:
            raise BrokerError(f"no cluster {cluster!r}", ResponseCode.SERVICE_NOT_AVAILABLE)
        names = info.clusters[cluster] if cluster is not None else sorted(info.brokers)
        return [addr for n in names if n in info.brokers for _, addr in sorted(info.brokers[n].addrs.items())]

    async def _call(
        self,
        addr: str,
        code: RequestCode,
        what: str,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """One request to `addr`; the reply when it succeeded, else BrokerError with its code."""
        cmd = RemotingCommand(code=code, ext=dict(ext or {}), body=body)
        return check_reply(await self.instance.invoke(addr, cmd, timeout or self.timeout), what)

    async def _broadcast(
        self, code: RequestCode, what: str, broker_addr: str | None, cluster: str | None
    ) -> list[str]:
        addrs = [broker_addr] if broker_addr is not None else await self._all_broker_addrs(cluster)
        for addr in addrs:
            await self._call(addr, code, f"{what} on {addr}")
        return addrs

    async def delete_expired_commitlog(
        self, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """DELETE_EXPIRED_COMMITLOG (mqadmin deleteExpiredCommitLog) to one broker, or to every broker
        (masters and slaves) of `cluster`, or of all clusters: their next retention rounds delete
        expired CommitLog files whatever the hour. Returns the addresses told."""
        return await self._broadcast(
            RequestCode.DELETE_EXPIRED_COMMITLOG, "DELETE_EXPIRED_COMMITLOG", broker_addr, cluster
        )

    async def clean_expired_consume_queue(
        self, *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """CLEAN_EXPIRED_CONSUMEQUEUE (mqadmin cleanExpiredCQ): each broker drops the consume queues
        whose messages are all deleted. Returns the addresses told."""
        return await self._broadcast(
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, "CLEAN_EXPIRED_CONSUMEQUEUE", broker_addr, cluster
        )

    # -- topics --------------------------------------------------------------------------------

    async def _masters(self, broker_names: list[str] | None) -> dict[str, str]:
        masters = (await self.cluster_info()).master_addrs()
        if broker_names is None:
            return masters
        missing = [n for n in broker_names if n not in masters]
        if missing:
            raise BrokerError(
                f"no master for broker(s) {', '.join(missing)}", ResponseCode.SERVICE_NOT_AVAILABLE
            )
        return {n: masters[n] for n in broker_names}

    async def _create_on(self, addr: str, cfg: TopicConfigInfo) -> None:
        ext = CreateTopicRequestHeader(
            topic=cfg.topic,
            default_topic=AUTO_CREATE_TOPIC_KEY,
            read_queue_nums=cfg.read_queue_nums,
            write_queue_nums=cfg.write_queue_nums,
            perm=cfg.perm,
            topic_filter_type=cfg.topic_filter_type,
            topic_sys_flag=cfg.topic_sys_flag,
            order=cfg.order,
        ).to_ext()
        reply = await self.instance.invoke(
            addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext=ext), self.timeout
        )
        check_reply(reply, f"UPDATE_AND_CREATE_TOPIC {cfg.topic} on {cfg.broker_name}")

    async def _set_order_conf(self, topic: str, configs: list[TopicConfigInfo]) -> None:
        """Orderly topics: the name server's ORDER_TOPIC_CONFIG entry (`broker-a:4;broker-b:4`),
        as mqadmin updateTopic -o true writes it."""
        value = ";".join(
            f"{c.broker_name}:{c.write_queue_nums}" for c in sorted(configs, key=lambda c: c.broker_name)
        )
        for addr in self.instance.namesrv_addrs:
            cmd = RemotingCommand(
                code=RequestCode.PUT_KV_CONFIG,
                ext=PutKVConfigRequestHeader(namespace=ORDER_TOPIC_CONFIG, key=topic, value=value).to_ext(),
            )
            check_reply(await self.instance.invoke(addr, cmd, self.timeout), f"PUT_KV_CONFIG {topic}")

    async def _delete_order_conf(self, topic: str) -> None:
        for addr in self.instance.namesrv_addrs:
            cmd = RemotingCommand(
                code=RequestCode.DELETE_KV_CONFIG,
                ext=GetKVConfigRequestHeader(namespace=ORDER_TOPIC_CONFIG, key=topic).to_ext(),
            )
            reply = await self.instance.invoke(addr, cmd, self.timeout)
            if reply.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                check_reply(reply, f"DELETE_KV_CONFIG {topic} at {addr}")

    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 4,
        perm: int = 6,
        order: bool = False,
        broker_names: list[str] | None = None,
    ) -> list[str]:
        """Creates (or overwrites) the topic on the master of every broker (or of `broker_names`)
        with `queue_nums` read and write queues. Returns the broker names. The route appears at
        the name server once the brokers have re-registered (they do so at once)."""
        masters = await self._masters(broker_names)
        if not masters:
            raise BrokerError("no broker master to create the topic on", ResponseCode.SERVICE_NOT_AVAILABLE)
        configs = [
            TopicConfigInfo(topic, name, queue_nums, queue_nums, perm, order=order) for name in masters
        ]
        await asyncio.gather(*(self._create_on(masters[c.broker_name], c) for c in configs))
        if order:
            await self._set_order_conf(topic, configs)
        self.instance.routes.pop(topic, None)
        return list(masters)

    async def topic_config(self, topic: str) -> dict[str, TopicConfigInfo]:
        """Broker name -> the topic's configuration there (GET_ALL_TOPIC_CONFIG of each master)."""
        out = {}
        for name, addr in (await self._masters(None)).items():
            reply = check_reply(
                await self.instance.invoke(addr, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG)),
                f"GET_ALL_TOPIC_CONFIG of {name}",
            )
            table = (loads_lenient(reply.body) or {}).get("topicConfigTable") or {}
            tc = table.get(topic)
            if isinstance(tc, dict):
                out[name] = TopicConfigInfo(
                    topic=topic,
                    broker_name=name,
                    read_queue_nums=int(tc.get("readQueueNums", 16)),
                    write_queue_nums=int(tc.get("writeQueueNums", 16)),
                    perm=int(tc.get("perm", 6)),
                    topic_filter_type=str(tc.get("topicFilterType", "SINGLE_TAG")),
                    topic_sys_flag=int(tc.get("topicSysFlag", 0)),
                    order=bool(tc.get("order", False)),
                )
        return out

    async def update_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
        broker_names: list[str] | None = None,
    ) -> list[str]:
        """Changes the given settings of an existing topic, keeping the others, on every broker
        that has it (or on `broker_names`, creating it there with defaults where it is missing).
        Returns the broker names updated."""
        current = await self.topic_config(topic)
        names = broker_names if broker_names is not None else sorted(current)
        if not names:
            raise TopicNotExistError(f"topic {topic} exists on no broker")
        masters = await self._masters(names)
        configs = []
        for name in names:
            old = current.get(name) or TopicConfigInfo(topic, name, 4, 4, 6)
            configs.append(
                TopicConfigInfo(
                    topic=topic,
                    broker_name=name,
                    read_queue_nums=old.read_queue_nums if read_queue_nums is None else read_queue_nums,
                    write_queue_nums=old.write_queue_nums if write_queue_nums is None else write_queue_nums,
                    perm=old.perm if perm is None else perm,
                    topic_filter_type=old.topic_filter_type,
                    topic_sys_flag=old.topic_sys_flag,
                    order=old.order if order is None else order,
                )
            )
        await asyncio.gather(*(self._create_on(masters[c.broker_name], c) for c in configs))
        if order:
            await self._set_order_conf(topic, configs)
        elif order is not None:
            await self._delete_order_conf(topic)
        self.instance.routes.pop(topic, None)
        return names

    async def delete_topic(self, topic: str) -> None:
        """Deletes the topic on every broker master (DELETE_TOPIC_IN_BROKER), then at every name
        server (DELETE_TOPIC_IN_NAMESRV) together with its ORDER_TOPIC_CONFIG entry.

        A name server that does not support DELETE_TOPIC_IN_NAMESRV (code 3) is logged and
        skipped: it still drops the route when the brokers re-register without the topic."""
        masters = await self._masters(None)
        for name, addr in masters.items():
            reply = await self.instance.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.DELETE_TOPIC_IN_BROKER,
                    ext=DeleteTopicRequestHeader(topic=topic).to_ext(),
                ),
                self.timeout,
            )
            check_reply(reply, f"DELETE_TOPIC_IN_BROKER {topic} on {name}")
        for addr in self.instance.namesrv_addrs:
            reply = await self.instance.invoke(
                addr,
                RemotingCommand(
                    code=RequestCode.DELETE_TOPIC_IN_NAMESRV,
                    ext=DeleteTopicRequestHeader(topic=topic).to_ext(),
                ),
                self.timeout,
            )
            if reply.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                logger.warning(
                    "name server %s does not support DELETE_TOPIC_IN_NAMESRV; the route of %s goes when "
                    "the brokers re-register",
                    addr,
                    topic,
                )
            else:
                check_reply(reply, f"DELETE_TOPIC_IN_NAMESRV {topic} at {addr}")
        await self._delete_order_conf(topic)
        self.instance.routes.pop(topic, None)

    # -- consumer groups -----------------------------------------------------------------------

    async def consumer_progress(self, group: str, topic: str | None = None) -> ConsumerProgress:
        """Per queue: the broker's max offset, the group's committed offset, the lag and the last
        consumed store time, from every broker of `topic` (or every broker when None)."""
        if topic is not None:
            route = await self.topic_route(topic)
            addrs = {name: route.master(name) for name in sorted(route.broker_addrs)}
            masters = {n: a for n, a in addrs.items() if a}
        else:
            masters = await self._masters(None)
        ext = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic).to_ext()
        queues: list[QueueProgress] = []
        tps = 0.0
        for name, addr in masters.items():
            reply = await self.instance.invoke(
                addr, RemotingCommand(code=RequestCode.GET_CONSUME_STATS, ext=dict(ext)), self.timeout
            )
            check_reply(reply, f"GET_CONSUME_STATS of {group} on {name}")
            found, broker_tps = parse_consume_stats(reply.body, group)
            queues += found
            tps += broker_tps
        return ConsumerProgress(group, sorted(queues, key=lambda q: q.queue), tps)

    # -- messages ------------------------------------------------------------------------------

    async def _broker_name_of(self, addr: str) -> str:
        for route in self.instance.routes.values():
            for name, addrs in route.broker_addrs.items():
                if addr in addrs.values():
                    return name
        for info in (await self.cluster_info()).brokers.values():
            if addr in info.addrs.values():
                return info.broker_name
        return ""

    async def query_message_by_offset_msg_id(self, offset_msg_id: str) -> ReceivedMessage:
        """The message an offsetMsgId (the broker's id: store host + CommitLog offset) names,
        read from that store host (VIEW_MESSAGE_BY_ID)."""
        addr, offset = decode_offset_msg_id(offset_msg_id)
        reply = await self.instance.invoke(
            addr,
            RemotingCommand(
                code=RequestCode.VIEW_MESSAGE_BY_ID, ext=ViewMessageRequestHeader(offset=offset).to_ext()
            ),
            self.timeout,
        )
        check_reply(reply, f"VIEW_MESSAGE_BY_ID {offset_msg_id}")
        msgs = decode_received(reply.body, await self._broker_name_of(addr))
        if not msgs:
            raise QueryNotFoundError(f"no message at {offset_msg_id}")
        return msgs[0]

    async def _query(
        self, topic: str, key: str, max_num: int, begin: int, end: int, unique: bool
    ) -> list[ReceivedMessage]:
        route = await self.topic_route(topic)
        ext = QueryMessageRequestHeader(
            topic=topic,
            key=key,
            max_num=max_num,
            begin_timestamp=begin,
            end_timestamp=end,
            unique_key_query=True if unique else None,
        ).to_ext()

        async def one(name: str, addr: str) -> list[ReceivedMessage]:
            reply = await self.instance.invoke(
                addr,
                RemotingCommand(code=RequestCode.QUERY_MESSAGE, ext=dict(ext)),
                self.timeout * QUERY_TIMEOUT_FACTOR,
            )
            if reply.code == ResponseCode.QUERY_NOT_FOUND:
                return []
            check_reply(reply, f"QUERY_MESSAGE {topic} {key!r} on {name}")
            return decode_received(reply.body, name)

        masters = {n: route.master(n) for n in sorted(route.broker_addrs)}
        found = await asyncio.gather(*(one(n, a) for n, a in masters.items() if a))
        return [m for msgs in found for m in msgs]

    async def query_message_by_key(
        self,
        topic: str,
        key: str,
        max_num: int = DEFAULT_QUERY_MAX_NUM,
        begin: int = 0,
        end: int | None = None,
    ) -> list[ReceivedMessage]:
        """Messages of `topic` with `key` among their keys, stored between `begin` and `end`
        (ms; end defaults to now), from every broker of the topic through its index, oldest first.
        Index hash collisions are filtered out; at most `max_num` messages per broker."""
        end = int(time.time() * 1000) if end is None else end
        msgs = await self._query(topic, key, max_num, begin, end, unique=False)
        return sorted(
            (m for m in msgs if key in m.keys), key=lambda m: (m.store_timestamp, m.commitlog_offset)
        )

    async def query_message_by_msg_id(self, topic: str, msg_id: str) -> ReceivedMessage:
        """The message with this client message id (UNIQ_KEY), the id producers report. A message
        stored more than once (a retry) gives its earliest copy. Raises QueryNotFoundError."""
        msgs = await self._query(topic, msg_id, DEFAULT_QUERY_MAX_NUM, 0, 2**63 - 1, unique=True)
        msgs = [m for m in msgs if m.properties.get("UNIQ_KEY") == msg_id]
        if not msgs:
            raise QueryNotFoundError(f"no message of {topic} with msgId {msg_id}")
        return min(msgs, key=lambda m: (m.store_timestamp, m.commitlog_offset))

    # -- offsets -------------------------------------------------------------------------------

    async def min_offset(self, queue: MessageQueue) -> int:
        """The queue's smallest offset still stored."""
        return await queue_offset_request(self.instance, RequestCode.GET_MIN_OFFSET, queue)

    async def max_offset(self, queue: MessageQueue) -> int:
        """The queue's max offset: the offset the next message will get."""
        return await queue_offset_request(self.instance, RequestCode.GET_MAX_OFFSET, queue)

    async def search_offset(self, queue: MessageQueue, timestamp: int) -> int:
        """The offset of the queue's first message stored at or after `timestamp` (ms)."""
        return await queue_offset_request(
            self.instance, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, queue, timestamp=timestamp
        )

    # -- brokers -------------------------------------------------------------------------------

    async def broker_runtime_info(self, broker_addr: str) -> BrokerRuntimeInfo:
        """GET_BROKER_RUNTIME_INFO of one broker (mqadmin brokerStatus)."""
        reply = await self._call(
            broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, f"runtime info of {broker_addr}"
        )
        return BrokerRuntimeInfo(broker_addr, parse_kv_table(reply.body))

    async def broker_config(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's configuration, key -> value (mqadmin getBrokerConfig)."""
        reply = await self._call(broker_addr, RequestCode.GET_BROKER_CONFIG, f"config of {broker_addr}")
        return parse_properties(reply.body)

    async def update_broker_config(
        self, props: dict[str, str], *, broker_addr: str | None = None, cluster: str | None = None
    ) -> list[str]:
        """UPDATE_BROKER_CONFIG with `props` to one broker, or to every master of `cluster` (or of
        all clusters); the broker applies the keys it can change while running and persists them.
        Returns the addresses updated."""
        if not props:
            raise ValueError("no broker config key to update")
        if broker_addr is not None:
            addrs = [broker_addr]
        else:
            info = await self.cluster_info()
            if cluster is not None and cluster not in info.clusters:
                raise BrokerError(f"no cluster {cluster!r}", ResponseCode.SERVICE_NOT_AVAILABLE)
            addrs = list(info.master_addrs(cluster).values())
        body = properties_text(props)
        for addr in addrs:
            await self._call(
                addr, RequestCode.UPDATE_BROKER_CONFIG, f"UPDATE_BROKER_CONFIG on {addr}", body=body
            )
        return addrs

    async def broker_stats(self, broker_addr: str, stats_name: str, stats_key: str) -> BrokerStats:
        """VIEW_BROKER_STATS_DATA: one stats item of a broker (`TOPIC_PUT_NUMS` with a topic,
        `GROUP_GET_NUMS` with `topic@group`, ...) over the last minute, hour and day."""
        reply = await self._call(
            broker_addr,
            RequestCode.VIEW_BROKER_STATS_DATA,
            f"{stats_name} {stats_key} on {broker_addr}",
            ViewBrokerStatsDataRequestHeader(stats_name=stats_name, stats_key=stats_key).to_ext(),
        )
        return parse_broker_stats(stats_name, stats_key, reply.body)

    async def _stats_or_zero(self, addr: str, name: str, key: str) -> BrokerStats | None:
        """A stats item, or None when the broker has none for the key (Java answers an error)."""
        try:
            return await self.broker_stats(addr, name, key)
        except BrokerError as e:
            if e.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                raise
            return None

    async def topic_traffic(self, topic: str) -> TopicTraffic:
        """The topic's in and out rates from the brokers' stats items (mqadmin statsAll): stored
        per second over the last minute and over the last day, and per consumer group the same for
        consumed messages (GROUP_GET_NUMS, `topic@group`) with its lag."""
        masters = await self._route_masters(topic)
        in_tps, in_today = 0.0, 0
        for addr in masters.values():
            put = await self._stats_or_zero(addr, "TOPIC_PUT_NUMS", topic)
            if put is not None:
                in_tps += put.minute.tps
                in_today += put.last_day_sum
        groups = []
        for group in await self.topic_consumer_groups(topic):
            out_tps, out_today = 0.0, 0
            for addr in masters.values():
                got = await self._stats_or_zero(addr, "GROUP_GET_NUMS", f"{topic}@{group}")
                if got is not None:
                    out_tps += got.minute.tps
                    out_today += got.last_day_sum
            lag = (await self.consumer_progress(group, topic)).total_lag
            groups.append(GroupTraffic(group, out_tps, out_today, lag))
        return TopicTraffic(topic, in_tps, in_today, groups)

    # -- topic status --------------------------------------------------------------------------

    async def _route_masters(self, topic: str) -> dict[str, str]:
        route = await self.topic_route(topic)
        masters = {name: route.master(name) for name in sorted(route.broker_addrs)}
        return {n: a for n, a in masters.items() if a}

    async def topic_stats(self, topic: str) -> list[TopicQueueStats]:
        """Every queue of the topic on every broker: min and max offset, last store time
        (GET_TOPIC_STATS_INFO; mqadmin topicStatus)."""
        out: list[TopicQueueStats] = []
        for name, addr in (await self._route_masters(topic)).items():
            reply = await self._call(
                addr,
                RequestCode.GET_TOPIC_STATS_INFO,
                f"stats of {topic} on {name}",
                GetTopicStatsInfoRequestHeader(topic=topic).to_ext(),
            )
            out += parse_topic_stats(reply.body)
        return sorted(out, key=lambda q: q.queue)

    async def topic_consumer_groups(self, topic: str) -> list[str]:
        """The groups consuming the topic, online or with offsets (QUERY_TOPIC_CONSUME_BY_WHO)."""
        groups: set[str] = set()
        for name, addr in (await self._route_masters(topic)).items():
            reply = await self._call(
                addr,
                RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
                f"consumers of {topic} on {name}",
                QueryTopicConsumeByWhoRequestHeader(topic=topic).to_ext(),
            )
            data = loads_lenient(reply.body) if reply.body else {}
            groups.update(str(g) for g in data.get("groupList") or [])
        return sorted(groups)

    async def topics_by_cluster(self, cluster: str) -> list[str]:
        """The topics of one cluster's brokers (GET_TOPICS_BY_CLUSTER at the name server)."""
        reply = check_reply(
            await self.instance.namesrv_invoke(
                RemotingCommand(
                    code=RequestCode.GET_TOPICS_BY_CLUSTER,
                    ext=GetTopicsByClusterRequestHeader(cluster=cluster).to_ext(),
                )
            ),
            f"topics of cluster {cluster}",
        )
        data = loads_lenient(reply.body) if reply.body else {}
        return sorted(str(t) for t in data.get("topicList") or [])

    # -- subscription groups -------------------------------------------------------------------

    # -- lite topics (RocketMQ 5.5; mqadmin getBrokerLiteInfo, getLiteTopicInfo, ...) --------------

    async def _lite_ask(self, addr: str, code: RequestCode, what: str, ext: dict[str, str]) -> dict[str, Any]:
        reply = await self._call(addr, code, what, ext)
        data = loads_lenient(reply.body) if reply.body else {}
        return data if isinstance(data, dict) else {}

    async def broker_lite_info(self, broker_addr: str) -> dict[str, Any]:
        """GET_BROKER_LITE_INFO: a broker's store type, light message queues, lite subscriptions and the
        lite topics and groups it knows (GetBrokerLiteInfoResponseBody's fields)."""
        return await self._lite_ask(
            broker_addr, RequestCode.GET_BROKER_LITE_INFO, f"lite info of {broker_addr}", {}
        )

    async def parent_topic_info(self, topic: str) -> dict[str, dict[str, Any]]:
        """GET_PARENT_TOPIC_INFO of a LITE topic on each master of its route: broker name -> its answer
        (ttl, liteTopicCount, lmqNum, groups)."""
        ext = GetParentTopicInfoRequestHeader(topic=topic).to_ext()
        return {
            name: await self._lite_ask(addr, RequestCode.GET_PARENT_TOPIC_INFO, f"{topic} on {name}", ext)
            for name, addr in (await self._route_masters(topic)).items()
        }

    async def lite_topic_info(self, parent: str, lite_topic: str) -> dict[str, dict[str, Any]]:
        """GET_LITE_TOPIC_INFO on each master of the parent topic: offsets, subscribers, sharding."""
        ext = GetLiteTopicInfoRequestHeader(parent_topic=parent, lite_topic=lite_topic).to_ext()
        return {
            name: await self._lite_ask(addr, RequestCode.GET_LITE_TOPIC_INFO, f"{lite_topic} on {name}", ext)
            for name, addr in (await self._route_masters(parent)).items()
        }

    async def lite_client_info(
        self, parent: str, group: str, client_id: str, max_count: int = 1000
    ) -> dict[str, dict[str, Any]]:
        """GET_LITE_CLIENT_INFO on each master of the parent topic: the client's lite topics
        (liteTopicCount -1: the broker has no subscription of it)."""
        ext = GetLiteClientInfoRequestHeader(
            parent_topic=parent, group=group, client_id=client_id, max_count=max_count
        ).to_ext()
        return {
            name: await self._lite_ask(addr, RequestCode.GET_LITE_CLIENT_INFO, f"{client_id} on {name}", ext)
            for name, addr in (await self._route_masters(parent)).items()
        }

    async def lite_group_info(
        self, parent: str, group: str, lite_topic: str | None = None, top_k: int = 20
    ) -> dict[str, dict[str, Any]]:
        """GET_LITE_GROUP_INFO on each master of the parent topic: the group's lag, of one lite topic or
        the top K lite topics by lag count."""
        ext = GetLiteGroupInfoRequestHeader(group=group, lite_topic=lite_topic, top_k=top_k).to_ext()
        return {
            name: await self._lite_ask(addr, RequestCode.GET_LITE_GROUP_INFO, f"{group} on {name}", ext)
            for name, addr in (await self._route_masters(parent)).items()
        }

    async def trigger_lite_dispatch(
        self, parent: str, group: str, client_id: str | None = None, broker_name: str | None = None
    ) -> list[str]:
        """TRIGGER_LITE_DISPATCH on the parent topic's masters (or one of them): each broker hands the
        group's lite topics with messages to its clients again. The broker names asked."""
        ext = TriggerLiteDispatchRequestHeader(group=group, client_id=client_id).to_ext()
        masters = await self._route_masters(parent)
        if broker_name is not None:
            masters = {n: a for n, a in masters.items() if n == broker_name}
        for name, addr in masters.items():
            await self._call(addr, RequestCode.TRIGGER_LITE_DISPATCH, f"dispatch of {group} on {name}", ext)
        return list(masters)

    async def list_groups(self) -> dict[str, GroupConfig]:
        """Every subscription group of every broker master, by name (system groups included)."""
        out: dict[str, GroupConfig] = {}
        for name, addr in (await self._masters(None)).items():
            reply = await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, f"groups of {name}")
            for group, cfg in parse_group_table(reply.body).items():
                out.setdefault(group, cfg)
        return dict(sorted(out.items()))

    async def create_group(
        self, config: GroupConfig | str, *, broker_names: list[str] | None = None
    ) -> list[str]:
        """Creates or updates a subscription group on every broker master (or `broker_names`);
        a bare name gets Java's defaults (mqadmin updateSubGroup). Returns the broker names."""
        cfg = GroupConfig(config) if isinstance(config, str) else config
        if not cfg.group_name:
            raise ValueError("a subscription group needs a name")
        masters = await self._masters(broker_names)
        body = dumps(cfg.to_json())
        for name, addr in masters.items():
            await self._call(
                addr,
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP {cfg.group_name} on {name}",
                body=body,
            )
        return list(masters)

    async def delete_group(
        self, group: str, *, remove_offsets: bool = True, broker_names: list[str] | None = None
    ) -> list[str]:
        """Deletes the subscription group on every broker master (or `broker_names`), with its
        committed offsets unless told not to, then its %RETRY% and %DLQ% topics where they exist
        (as mqadmin deleteSubGroup does). Returns the broker names."""
        masters = await self._masters(broker_names)
        ext = DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offsets).to_ext()
        for name, addr in masters.items():
            await self._call(
                addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, f"DELETE_SUBSCRIPTIONGROUP {group} on {name}", ext
            )
        existing = set(await self.list_topics())
        for topic in (RETRY_PREFIX + group, DLQ_PREFIX + group):
            if topic in existing:
                await self.delete_topic(topic)
        return list(masters)

    async def _group_brokers(self, group: str) -> dict[str, str]:
        """The masters that know a group's consumers: those routing its retry topic, else all."""
        try:
            return await self._route_masters(RETRY_PREFIX + group)
        except TopicNotExistError:
            return await self._masters(None)

    async def consumer_connections(self, group: str) -> ConsumerConnections:
        """The group's online consumers and their subscriptions (GET_CONSUMER_CONNECTION_LIST;
        mqadmin consumerConnection). Raises BrokerError CONSUMER_NOT_ONLINE when none is."""
        found: ConsumerConnections | None = None
        for name, addr in (await self._group_brokers(group)).items():
            ext = GetConsumerConnectionListRequestHeader(consumer_group=group).to_ext()
            cmd = RemotingCommand(code=RequestCode.GET_CONSUMER_CONNECTION_LIST, ext=ext)
            reply = await self.instance.invoke(addr, cmd, self.timeout)
            if reply.code == ResponseCode.CONSUMER_NOT_ONLINE:
                continue
            check_reply(reply, f"consumer connections of {group} on {name}")
            got = parse_consumer_connections(group, reply.body)
            if found is None:
                found = got
            else:
                conns = sorted(
                    set(found.connections) | set(got.connections), key=lambda c: (c.client_id, c.client_addr)
                )
                found = ConsumerConnections(
                    group,
                    conns,
                    {**got.subscriptions, **found.subscriptions},
                    found.consume_type,
                    found.message_model,
                    found.consume_from_where,
                )
        if found is None:
            raise BrokerError(f"the consumer group {group} is not online", ResponseCode.CONSUMER_NOT_ONLINE)
        return found

    async def consumer_running_info(self, group: str, client_id: str) -> ConsumerRunningInfo:
        """What one consumer of the group reports about itself, asked through a broker
        (GET_CONSUMER_RUNNING_INFO; mqadmin consumerStatus): properties, subscriptions, and its
        queues with committed offset, cached messages, lock, last pull and consume times."""
        last: RemotingCommand | None = None
        for addr in (await self._group_brokers(group)).values():
            ext = GetConsumerRunningInfoRequestHeader(consumer_group=group, client_id=client_id).to_ext()
            cmd = RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext=ext)
            reply = await self.instance.invoke(addr, cmd, self.timeout)
            if reply.code == ResponseCode.SUCCESS:
                return parse_running_info(client_id, reply.body)
            last = reply
        if last is None:
            raise BrokerError(f"no broker for group {group}", ResponseCode.SERVICE_NOT_AVAILABLE)
        check_reply(last, f"running info of {client_id} in {group}")
        raise AssertionError("unreachable")  # check_reply raised

    async def producer_connections(self, group: str, topic: str) -> ProducerConnections:
        """The group's online producers, asked of the brokers of `topic` (GET_PRODUCER_CONNECTION_LIST;
        mqadmin producerConnection)."""
        conns: set[Any] = set()
        for name, addr in (await self._route_masters(topic)).items():
            reply = await self._call(
                addr,
                RequestCode.GET_PRODUCER_CONNECTION_LIST,
                f"producer connections of {group} on {name}",
                GetProducerConnectionListRequestHeader(producer_group=group).to_ext(),
            )
            conns.update(parse_producer_connections(group, reply.body).connections)
        return ProducerConnections(group, sorted(conns, key=lambda c: (c.client_id, c.client_addr)))

    async def reset_offset_by_time(
        self, group: str, topic: str, timestamp: int, *, force: bool = True
    ) -> OffsetResetResult:
        """Moves the group's offsets on `topic` to the first message stored at or after
        `timestamp` (ms; -1: the queues' ends). `force=False` only moves offsets back.

        As mqadmin resetOffsetByTime: the brokers tell the group's online consumers to reset
        (INVOKE_BROKER_TO_RESET_OFFSET); when no consumer is online (CONSUMER_NOT_ONLINE), or
        the broker does not know the request, the committed offsets are written directly, which
        consumers read when they start."""
        masters = await self._route_masters(topic)
        ext = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp, is_force=force).to_ext()
        resets: list[QueueReset] = []
        for name, addr in masters.items():
            cmd = RemotingCommand(code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext=dict(ext))
            reply = await self.instance.invoke(addr, cmd, self.timeout)
            if reply.code in (ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
                return await self._reset_committed(group, topic, timestamp, force, masters)
            check_reply(reply, f"INVOKE_BROKER_TO_RESET_OFFSET {group} {topic} on {name}")
            resets += [QueueReset(mq, offset) for mq, offset in parse_reset_offsets(reply.body)]
        return OffsetResetResult(group, topic, timestamp, True, sorted(resets, key=lambda r: r.queue))

    async def _reset_committed(
        self, group: str, topic: str, timestamp: int, force: bool, masters: dict[str, str]
    ) -> OffsetResetResult:
        """The offline reset (Java's resetOffsetByTimestampOld): per queue, the offset at
        `timestamp` is committed with UPDATE_CONSUMER_OFFSET (when forced or when it is earlier)."""
        route = await self.topic_route(topic)
        progress = {q.queue: q for q in (await self.consumer_progress(group, topic)).queues}
        resets: list[QueueReset] = []
        for name, addr in masters.items():
            queue_nums = max(
                (q.read_queue_nums for q in route.queue_datas if q.broker_name == name), default=0
            )
            for queue_id in range(queue_nums):
                mq = MessageQueue(topic, name, queue_id)
                known = progress.get(mq)
                current = known.consumer_offset if known is not None else await self.min_offset(mq)
                if timestamp == -1:
                    target = await self.max_offset(mq)
                else:
                    target = await self.search_offset(mq, timestamp)
                if force or target <= current:
                    await self._call(
                        addr,
                        RequestCode.UPDATE_CONSUMER_OFFSET,
                        f"UPDATE_CONSUMER_OFFSET {group} {mq}",
                        UpdateConsumerOffsetRequestHeader(
                            consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=target
                        ).to_ext(),
                    )
                else:
                    target = current
                resets.append(QueueReset(mq, target, current))
        return OffsetResetResult(group, topic, timestamp, False, resets)

    # -- messages by position --------------------------------------------------------------------

    async def message_at(self, queue: MessageQueue, offset: int) -> ReceivedMessage:
        """The message at `offset` of a queue (a PULL_MESSAGE of one message as the group
        TOOLS_CONSUMER; mqadmin queryMsgByOffset). Raises QueryNotFoundError when there is none."""
        addr = await queue_master_addr(self.instance, queue)
        ext = PullMessageRequestHeader.read_only(
            TOOLS_CONSUMER_GROUP, queue.topic, queue.queue_id, offset, 1
        ).to_ext()
        reply = await self.instance.invoke(
            addr, RemotingCommand(code=RequestCode.PULL_MESSAGE, ext=ext), self.timeout
        )
        where = f"offset {offset} of {queue.topic} queue {queue.queue_id} on {queue.broker_name}"
        if reply.code in (
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_OFFSET_MOVED,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
        ):
            raise QueryNotFoundError(f"no message at {where}: {reply.remark or _code(reply.code).name}")
        check_reply(reply, f"PULL_MESSAGE at {where}")
        for m in decode_received(reply.body, queue.broker_name):
            if m.queue_offset == offset:
                return m
        raise QueryNotFoundError(f"no message at {where}")


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` without those that are None (fastjson leaves null fields out)."""
    return {k: v for k, v in fields.items() if v is not None}
