"""Typed results of the admin requests and the parsers of their bodies, as the Java broker
(fastjson) writes them: broker runtime info (KVTable), topic stats, consumer and producer
connections, subscription groups, offset resets and broker stats items."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ferromq.client.message import MessageQueue
from ferromq.jsonutil import loads_lenient, loads_object_keys, object_key
from ferromq.properties import parse_properties as read_properties
from ferromq.protocol.constants import RUNTIME_TABLE_TOPICS_KEY
from ferromq.tables.status import TableTopicStatus, parse_table_topics

# Java's SubscriptionGroupConfig defaults.
DEFAULT_RETRY_QUEUE_NUMS = 1
DEFAULT_RETRY_MAX_TIMES = 16


def _float(value: str | None, index: int = 0) -> float:
    """A number of a runtime-info value; `putTps` and friends hold several (`"1.5 1.2 1.0"`)."""
    if not value:
        return 0.0
    parts = value.split()
    try:
        return float(parts[index]) if index < len(parts) else 0.0
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class BrokerRuntimeInfo:
    """GET_BROKER_RUNTIME_INFO of one broker: Java's KVTable of strings, with typed accessors for
    the values operators look at first (missing keys read as 0 or "")."""

    broker_addr: str
    table: dict[str, str]

    def get(self, key: str, default: str = "") -> str:
        return self.table.get(key, default)

    @property
    def version(self) -> str:
        return self.get("brokerVersionDesc")

    @property
    def put_tps(self) -> float:
        """Messages stored per second over the last 10 s (putTps' first value)."""
        return _float(self.get("putTps"))

    @property
    def get_tps(self) -> float:
        """Messages sent to consumers per second over the last 10 s (getTransferedTps)."""
        return _float(self.get("getTransferedTps"))

    @property
    def put_today(self) -> int:
        """Messages stored since midnight (msgPutTotalTodayNow - msgPutTotalTodayMorning when both
        are there, else msgPutTotalTodayNow)."""
        return int(_float(self.get("msgPutTotalTodayNow")) - _float(self.get("msgPutTotalTodayMorning")))

    @property
    def get_today(self) -> int:
        return int(_float(self.get("msgGetTotalTodayNow")) - _float(self.get("msgGetTotalTodayMorning")))

    @property
    def commitlog_disk_ratio(self) -> float:
        """The used share of the CommitLog's disk, 0..1 (commitLogDiskRatio)."""
        return _float(self.get("commitLogDiskRatio"))

    @property
    def table_topics(self) -> list[TableTopicStatus]:
        """The topics a ferromq broker appends to tables (`ferromqTableTopics`); [] when the broker
        tiers none (or is not ferromq) or the value is malformed."""
        text = self.table.get(RUNTIME_TABLE_TOPICS_KEY)
        return [] if text is None else parse_table_topics(text)


def parse_kv_table(body: bytes) -> dict[str, str]:
    """A KVTable body: `{"table": {key: value}}`, values as strings."""
    data = loads_lenient(body) if body else {}
    table = data.get("table") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in (table or {}).items()}


def _mq(key: str | dict[str, Any]) -> MessageQueue:
    raw = object_key(key) if isinstance(key, str) else key
    return MessageQueue(str(raw.get("topic", "")), str(raw.get("brokerName", "")), int(raw.get("queueId", 0)))


def mq_map(body: bytes, name: str = "offsetTable") -> list[tuple[MessageQueue, Any]]:
    """A `Map<MessageQueue, V>` field of a fastjson body (object keys), or of ferromq's list form
    (`[{"messageQueue": {...}, <value>}]`, value under any other key), as (queue, value) pairs."""
    data = loads_object_keys(body) if body else {}
    table = data.get(name) if isinstance(data, dict) else None
    if isinstance(table, dict):
        return [(_mq(k), v) for k, v in table.items()]
    out = []
    for entry in table or []:
        if isinstance(entry, dict) and isinstance(entry.get("messageQueue"), dict):
            value = next((v for k, v in entry.items() if k != "messageQueue"), None)
            out.append((_mq(entry["messageQueue"]), value))
    return out


@dataclass(frozen=True)
class TopicQueueStats:
    """GET_TOPIC_STATS_INFO: one queue's offsets (mqadmin topicStatus)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int
    """Store time (ms) of the queue's last message; 0 when empty."""

    @property
    def messages(self) -> int:
        """Messages still stored in the queue."""
        return max(0, self.max_offset - self.min_offset)


def parse_topic_stats(body: bytes) -> list[TopicQueueStats]:
    out = []
    for mq, v in mq_map(body):
        v = v if isinstance(v, dict) else {}
        out.append(
            TopicQueueStats(
                mq,
                int(v.get("minOffset", 0)),
                int(v.get("maxOffset", 0)),
                int(v.get("lastUpdateTimestamp", 0)),
            )
        )
    return sorted(out, key=lambda s: s.queue)


@dataclass(frozen=True)
class ClientConnection:
    """A client connected to a broker (Java's Connection)."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(frozen=True)
class SubscriptionInfo:
    """What a consumer group subscribes to on a topic."""

    topic: str
    expression: str
    expression_type: str
    sub_version: int


@dataclass(frozen=True)
class ConsumerConnections:
    """GET_CONSUMER_CONNECTION_LIST: the group's online consumers (mqadmin consumerConnection)."""

    group: str
    connections: list[ClientConnection]
    subscriptions: dict[str, SubscriptionInfo]
    consume_type: str
    message_model: str
    consume_from_where: str


@dataclass(frozen=True)
class ProducerConnections:
    """GET_PRODUCER_CONNECTION_LIST: the group's online producers (mqadmin producerConnection)."""

    group: str
    connections: list[ClientConnection]


def _connections(data: dict[str, Any]) -> list[ClientConnection]:
    out = [
        ClientConnection(
            str(c.get("clientId", "")),
            str(c.get("clientAddr", "")),
            str(c.get("language", "")),
            int(c.get("version", 0)),
        )
        for c in data.get("connectionSet") or []
        if isinstance(c, dict)
    ]
    return sorted(out, key=lambda c: (c.client_id, c.client_addr))


def parse_consumer_connections(group: str, body: bytes) -> ConsumerConnections:
    data = loads_lenient(body) if body else {}
    subs = {}
    for topic, s in (data.get("subscriptionTable") or {}).items():
        subs[str(topic)] = SubscriptionInfo(
            str(topic),
            str(s.get("subString", "*")),
            str(s.get("expressionType") or "TAG"),
            int(s.get("subVersion", 0)),
        )
    return ConsumerConnections(
        group,
        _connections(data),
        dict(sorted(subs.items())),
        str(data.get("consumeType") or ""),
        str(data.get("messageModel") or ""),
        str(data.get("consumeFromWhere") or ""),
    )


def parse_producer_connections(group: str, body: bytes) -> ProducerConnections:
    data = loads_lenient(body) if body else {}
    return ProducerConnections(group, _connections(data))


@dataclass(frozen=True)
class GroupConfig:
    """A subscription group's configuration (Java's SubscriptionGroupConfig)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = DEFAULT_RETRY_QUEUE_NUMS
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "retryQueueNums": self.retry_queue_nums,
            "retryMaxTimes": self.retry_max_times,
            "brokerId": self.broker_id,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupConfig:
        d = cls("")
        return cls(
            group_name=str(data.get("groupName", "")),
            consume_enable=bool(data.get("consumeEnable", d.consume_enable)),
            consume_from_min_enable=bool(data.get("consumeFromMinEnable", d.consume_from_min_enable)),
            consume_broadcast_enable=bool(data.get("consumeBroadcastEnable", d.consume_broadcast_enable)),
            retry_queue_nums=int(data.get("retryQueueNums", d.retry_queue_nums)),
            retry_max_times=int(data.get("retryMaxTimes", d.retry_max_times)),
            broker_id=int(data.get("brokerId", d.broker_id)),
            which_broker_when_consume_slowly=int(
                data.get("whichBrokerWhenConsumeSlowly", d.which_broker_when_consume_slowly)
            ),
            notify_consumer_ids_changed_enable=bool(
                data.get("notifyConsumerIdsChangedEnable", d.notify_consumer_ids_changed_enable)
            ),
        )


def parse_group_table(body: bytes) -> dict[str, GroupConfig]:
    """A GET_ALL_SUBSCRIPTIONGROUP_CONFIG body (SubscriptionGroupWrapper)."""
    data = loads_lenient(body) if body else {}
    table = data.get("subscriptionGroupTable") or {}
    return {str(n): GroupConfig.from_json(g) for n, g in table.items() if isinstance(g, dict)}


@dataclass(frozen=True)
class QueueReset:
    """One queue of an offset reset."""

    queue: MessageQueue
    offset: int
    """The group's offset on the queue from now on."""
    previous: int | None = None
    """The group's offset before (known when the offsets were written directly)."""


@dataclass(frozen=True)
class OffsetResetResult:
    """A consumer group's offsets on a topic, reset to a time (mqadmin resetOffsetByTime)."""

    group: str
    topic: str
    timestamp: int
    """The time reset to (ms); -1 = the queues' ends."""
    clients_notified: bool
    """True: the brokers reset the online consumers (INVOKE_BROKER_TO_RESET_OFFSET). False: no
    consumer of the group was online, so the committed offsets were written directly."""
    queues: list[QueueReset] = field(default_factory=list)


def parse_reset_offsets(body: bytes) -> list[tuple[MessageQueue, int]]:
    """A ResetOffsetBody: queue -> the offset the broker told the consumers to use."""
    return [(mq, int(v)) for mq, v in mq_map(body)]


@dataclass(frozen=True)
class StatsItem:
    """One window of a broker stats item: total, per second, average time (ms)."""

    sum: int
    tps: float
    avgpt: float


@dataclass(frozen=True)
class BrokerStats:
    """VIEW_BROKER_STATS_DATA of one stats item and key (e.g. TOPIC_PUT_NUMS, `Orders`), over the
    last minute, hour and day."""

    name: str
    key: str
    minute: StatsItem
    hour: StatsItem
    day: StatsItem

    @property
    def last_day_sum(self) -> int:
        """The day's total as mqadmin statsAll counts it: the day window, else the hour's, else
        the minute's (a young broker has no day snapshots yet)."""
        for window in (self.day, self.hour, self.minute):
            if window.sum:
                return window.sum
        return 0


def parse_broker_stats(name: str, key: str, body: bytes) -> BrokerStats:
    data = loads_lenient(body) if body else {}

    def item(k: str) -> StatsItem:
        v = data.get(k) or {}
        return StatsItem(int(v.get("sum", 0)), float(v.get("tps", 0.0)), float(v.get("avgpt", 0.0)))

    return BrokerStats(name, key, item("statsMinute"), item("statsHour"), item("statsDay"))


@dataclass(frozen=True)
class QueueRunningInfo:
    """A queue a consumer holds, as it reports it (Java's ProcessQueueInfo)."""

    queue: MessageQueue
    commit_offset: int
    cached_count: int
    cached_min_offset: int
    cached_max_offset: int
    locked: bool
    dropped: bool
    last_pull_timestamp: int
    last_consume_timestamp: int


@dataclass(frozen=True)
class ConsumerRunningInfo:
    """GET_CONSUMER_RUNNING_INFO: what one consumer client reports (mqadmin consumerStatus)."""

    client_id: str
    properties: dict[str, str]
    subscriptions: list[SubscriptionInfo]
    queues: list[QueueRunningInfo]


def parse_running_info(client_id: str, body: bytes) -> ConsumerRunningInfo:
    data = loads_object_keys(body) if body else {}
    subs = [
        SubscriptionInfo(
            str(x.get("topic", "")),
            str(x.get("subString", "*")),
            str(x.get("expressionType") or "TAG"),
            int(x.get("subVersion", 0)),
        )
        for x in data.get("subscriptionSet") or []
        if isinstance(x, dict)
    ]
    queues = []
    for mq, v in mq_map(body, "mqTable"):
        v = v if isinstance(v, dict) else {}
        queues.append(
            QueueRunningInfo(
                mq,
                int(v.get("commitOffset", -1)),
                int(v.get("cachedMsgCount", 0)),
                int(v.get("cachedMsgMinOffset", 0)),
                int(v.get("cachedMsgMaxOffset", 0)),
                bool(v.get("locked", False)),
                bool(v.get("droped", False)),
                int(v.get("lastPullTimestamp", 0)),
                int(v.get("lastConsumeTimestamp", 0)),
            )
        )
    props = {str(k): str(v) for k, v in (data.get("properties") or {}).items()}
    return ConsumerRunningInfo(
        client_id, props, sorted(subs, key=lambda x: x.topic), sorted(queues, key=lambda q: q.queue)
    )


@dataclass(frozen=True)
class GroupTraffic:
    """A consumer group on a topic (a row of mqadmin statsAll)."""

    group: str
    out_tps: float
    """Messages consumed per second over the last minute (GROUP_GET_NUMS)."""
    out_today: int
    """Messages consumed over the last day."""
    lag: int


@dataclass(frozen=True)
class TopicTraffic:
    """A topic's traffic over its brokers (mqadmin statsAll): stored per second over the last
    minute and in the last day (TOPIC_PUT_NUMS), and each consumer group's share."""

    topic: str
    in_tps: float
    in_today: int
    groups: list[GroupTraffic]


def properties_text(props: dict[str, str]) -> bytes:
    """Java's MixAll.properties2String: `key=value` lines."""
    return "".join(f"{k}={v}\n" for k, v in props.items()).encode()


def parse_properties(body: bytes) -> dict[str, str]:
    """Java's MixAll.string2Properties, as GET_BROKER_CONFIG's body is written: the lines read by
    the one Java-properties reader (`ferromq.properties`, the broker's too), then the `\\` escapes
    of Properties.store undone; a repeated key takes its last value."""
    text = body.decode("utf-8", errors="replace")
    return {_unescape(key): _unescape(value) for _no, key, value in read_properties(text)}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
