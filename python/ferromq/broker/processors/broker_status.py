"""Admin requests that report the broker's state, as `mqadmin` (rocketmq-tools 4.9.7) sends them:
runtime info, topic and consume stats, connections, who consumes a topic, consume time spans and
queue units, system topics, stats items. Bodies are written as Java's fastjson writes them: fields
sorted by name, maps keyed by MessageQueue objects (`{{"brokerName":..}:{..}}`). The broker's config
requests are in `broker_config`, offset resets and calls to consumers in `consumer_control`."""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Iterable
from typing import Any

from ferromq.broker.clients import ClientChannel, Subscription
from ferromq.broker.processors.context import BrokerStatusContext, ContextHandler, bind
from ferromq.broker.stats import TPS_WINDOWS, earliest_message_time, java_double, tps_columns, tps_over
from ferromq.broker.topics import SYSTEM_TOPICS
from ferromq.errors import BrokerError
from ferromq.jsonutil import dumps_sorted
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import MAX_FRAME_SIZE, RemotingCommand
from ferromq.protocol.constants import RUNTIME_TABLE_TOPICS_KEY
from ferromq.protocol.headers import (
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler
from ferromq.tables.status import TableTopicStatus

logger = logging.getLogger(__name__)

BROKER_VERSION = 407  # MQVersion.Version.V4_9_7.ordinal()
BROKER_VERSION_DESC = "V4_9_7"
# QUERY_CONSUME_QUEUE reads at most this many units and record bytes in one answer.
MAX_QUERY_CQ_UNITS = 1000
MAX_QUERY_CQ_BYTES = 8 * 1024 * 1024
# Java's thread pool capacities, reported as is (ferromq has no such queues: their sizes are 0).
QUEUE_CAPACITIES = {
    "sendThreadPoolQueueCapacity": 10000,
    "pullThreadPoolQueueCapacity": 100000,
    "queryThreadPoolQueueCapacity": 20000,
    "EndTransactionThreadPoolQueueCapacity": 100000,
}


def mq_key(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def mq_keyed_map(entries: Iterable[tuple[dict[str, Any], Any]]) -> bytes:
    """A fastjson map whose keys are MessageQueue objects: `{{"brokerName":"b","queueId":0,
    "topic":"T"}:{...},...}`; not JSON, but what Java's clients and tools parse."""
    return b"{" + b",".join(dumps_sorted(k) + b":" + dumps_sorted(v) for k, v in entries) + b"}"


def human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(n, false): `0 B`, `1.5 KiB`, `43.1 GiB`."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"


def disk_used_ratio(path: str) -> float:
    """UtilAll.getDiskPartitionSpaceUsedPercent: used / total of the partition, -1 if unreadable."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    if usage.total <= 0:
        return -1.0
    return (usage.total - usage.free) / usage.total


def format_runtime(ms: int) -> str:
    seconds = ms // 1000
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


def subscription_json(sub: Subscription) -> dict[str, Any]:
    return {
        "classFilterMode": False,
        "codeSet": sorted(sub.codes or ()),
        "expressionType": sub.expression_type,
        "subString": sub.sub_string,
        "subVersion": sub.sub_version,
        "tagsSet": sorted(sub.tags),
        "topic": sub.topic,
    }


def connection_json(ch: ClientChannel) -> dict[str, Any]:
    return {
        "clientAddr": ch.conn.peer,
        "clientId": ch.client_id,
        "language": ch.language,
        "version": ch.version,
    }


def runtime_table(broker: BrokerStatusContext) -> dict[str, str]:
    """GET_BROKER_RUNTIME_INFO's table: the keys Java 4.9.7 fills, from ferromq's counters. Values
    with no counterpart (thread pool queues: ferromq has none) are what an idle Java broker reports."""
    store, stats, cfg = broker.store, broker.stats, broker.config
    stats.catch_up()
    counters = stats.store
    now = int(time.time() * 1000)
    puts = counters.put_times or 1
    root = cfg.store_path_root_dir
    commitlog = cfg.store_path_commit_log or os.path.join(root, "commitlog")
    ratio = disk_used_ratio(commitlog)
    earliest = earliest_message_time(store)
    table = {
        "bootTimestamp": str(counters.boot_ms),
        "runtime": format_runtime(now - counters.boot_ms),
        "putMessageEntireTimeMax": str(counters.put_entire_time_max_ms),
        "putMessageTimesTotal": str(puts),
        "putMessageFailedTimes": str(counters.put_failed),
        "putMessageSizeTotal": str(counters.put_size),
        "putMessageDistributeTime": counters.distribution_text(),
        "putMessageAverageSize": java_double(counters.put_size / puts),
        "dispatchMaxBuffer": "0",
        "getMessageEntireTimeMax": str(counters.get_entire_time_max_ms),
        "putTps": tps_columns(counters.put_snaps),
        "getFoundTps": tps_columns(counters.found_snaps),
        "getMissTps": tps_columns(counters.miss_snaps),
        # Java sums found and missed per window, an unfilled window counting 0.
        "getTotalTps": " ".join(
            java_double(sum(tps_over(s, w) or 0.0 for s in (counters.found_snaps, counters.miss_snaps)))
            for w in TPS_WINDOWS
        ),
        "getTransferedTps": tps_columns(counters.transferred_snaps),
        "putLatency99": f"{counters.latency_percentile(0.99):.2f}",
        "putLatency999": f"{counters.latency_percentile(0.999):.2f}",
        f"commitLogDiskRatio_{commitlog}": java_double(ratio),
        "commitLogDiskRatio": java_double(ratio),
        "consumeQueueDiskRatio": java_double(disk_used_ratio(os.path.join(root, "consumequeue"))),
        "commitLogMinOffset": str(store.min_physical_offset if store.max_physical_offset else -1),
        "commitLogMaxOffset": str(store.max_physical_offset),
        "brokerVersionDesc": BROKER_VERSION_DESC,
        "brokerVersion": str(BROKER_VERSION),
        "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
        "msgPutTotalTodayMorning": str(stats.put_today_morning),
        "msgPutTotalTodayNow": str(counters.put_times),
        "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
        "msgGetTotalTodayMorning": str(stats.get_today_morning),
        "msgGetTotalTodayNow": str(counters.get_transferred),
        "sendThreadPoolQueueSize": "0",
        "pullThreadPoolQueueSize": "0",
        "queryThreadPoolQueueSize": "0",
        "EndTransactionQueueSize": "0",
        **{k: str(v) for k, v in QUEUE_CAPACITIES.items()},
        # Dispatch (ConsumeQueue and index) happens inside the append: nothing is ever behind.
        "dispatchBehindBytes": "0",
        # The event loop does one put at a time and never holds a lock across an await.
        "pageCacheLockTimeMills": "0",
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "earliestMessageTimeStamp": str(-1 if earliest is None else earliest),
        "startAcceptSendRequestTimeStamp": "0",
        "remainTransientStoreBufferNumbs": str(2**31 - 1),
        # ferromq's own: pulls held by long polling now.
        "pullHeldCount": str(broker.held_pulls),
        "remainHowManyDataToFlush": human_bytes(
            max(0, store.max_physical_offset - store.flushed_physical_offset)
        ),
    }
    try:
        usage = shutil.disk_usage(root)
        table["commitLogDirCapacity"] = (
            f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}."
        )
    except OSError:
        pass
    refusals = broker.registration_refusals
    if refusals:
        # ferromq's own: a broker the name servers refused is invisible to clients.
        table["namesrvRegistration"] = "; ".join(refusals.values())
    tables = table_topics_json(broker)
    if tables is not None:
        table[RUNTIME_TABLE_TOPICS_KEY] = tables
    return table


def table_topics_json(broker: BrokerStatusContext) -> str | None:
    """The table topics' progress as runtime info reports it (ferromq's own key, a JSON list);
    None when the broker does not tier topics, or when reading the progress failed: runtime info
    must answer whatever the tiering's state."""
    tiering = broker.tiering
    if tiering is None:
        return None
    try:
        progress = tiering.progress()
        lags = tiering.lags(progress)
    except Exception:
        logger.exception("runtime info: the table topics' progress could not be read")
        return None
    return dumps_sorted(
        [
            TableTopicStatus(
                topic=p.topic,
                uri=p.uri,
                rows_tiered=p.rows_tiered,
                commits=p.commits,
                failures=p.failures,
                rows_lost=p.rows_lost,
                version=p.version,
                lag=lags.get(p.topic, 0),
                last_commit_ms=p.last_commit_ms,
                last_error=p.last_error,
                tier_cpu_seconds=round(p.tier_cpu_seconds, 6),
                maintain_cpu_seconds=round(p.maintain_cpu_seconds, 6),
            ).to_json()
            for p in progress
        ]
    ).decode()


def group_topic_progress(
    broker: BrokerStatusContext, group: str, topic: str, *, write_queues: bool
) -> tuple[list[tuple[dict[str, Any], dict[str, int]]], float] | None:
    """One topic's part of a group's ConsumeStats (per queue: the broker's max offset, the group's
    offset, the store time of the last consumed message) and the group's pull TPS on it; None when
    the topic is gone, or the group is online and no longer subscribes to it."""
    tc = broker.topics.get(topic)
    if tc is None:
        return None
    info = broker.clients.consumers.get(group)
    if info is not None and info.subscriptions and topic not in info.subscriptions:
        return None
    store = broker.store
    entries = []
    for queue_id in range(tc.write_queue_nums if write_queues else tc.read_queue_nums):
        consumer_offset = max(0, broker.offsets.query(group, topic, queue_id))
        wrapper = {
            "brokerOffset": max(0, store.max_offset(topic, queue_id)),
            "consumerOffset": consumer_offset,
            "lastTimestamp": 0,
        }
        if consumer_offset > 0:
            wrapper["lastTimestamp"] = store.store_time(topic, queue_id, consumer_offset - 1) or 0
        entries.append((mq_key(topic, broker.config.broker_name, queue_id), wrapper))
    broker.stats.catch_up()
    return entries, broker.stats.group_get_tps(group, topic)


def consume_stats_json(entries: list[tuple[dict[str, Any], dict[str, int]]], tps: float) -> bytes:
    return b'{"consumeTps":' + java_double(tps).encode() + b',"offsetTable":' + mq_keyed_map(entries) + b"}"


async def runtime_info(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted({"table": runtime_table(ctx)}))


async def topic_stats(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    topic = GetTopicStatsInfoRequestHeader.of(cmd).topic
    tc = ctx.topics.get(topic)
    if tc is None:
        raise BrokerError(f"topic[{topic}] not exist", ResponseCode.TOPIC_NOT_EXIST)
    store = ctx.store
    entries = []
    for queue_id in range(tc.write_queue_nums):
        low = max(0, store.min_offset(topic, queue_id))
        high = max(0, store.max_offset(topic, queue_id))
        last = store.store_time(topic, queue_id, high - 1) if high > 0 else None
        offsets = {"lastUpdateTimestamp": last or 0, "maxOffset": high, "minOffset": low}
        entries.append((mq_key(topic, ctx.config.broker_name, queue_id), offsets))
    return cmd.reply(ResponseCode.SUCCESS, body=b'{"offsetTable":' + mq_keyed_map(entries) + b"}")


async def all_producers(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """GET_ALL_PRODUCER_INFO (mqadmin producer): every producer group's clients."""
    now_wall, now_mono = int(time.time() * 1000), time.monotonic()
    table = {
        group: [
            {
                "clientId": ch.client_id,
                "language": ch.language,
                "lastUpdateTimestamp": now_wall - int((now_mono - ch.last_update) * 1000),
                "remoteIP": "/" + ch.conn.peer,
                "version": ch.version,
            }
            for ch in channels.values()
        ]
        for group, channels in ctx.clients.producers.items()
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted({"data": table}))


async def consumer_connections(
    ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    group = GetConsumerConnectionListRequestHeader.of(cmd).consumer_group
    info = ctx.clients.consumers.get(group)
    if info is None:
        raise BrokerError(f"the consumer group[{group}] not online", ResponseCode.CONSUMER_NOT_ONLINE)
    body = {
        "connectionSet": [connection_json(ch) for ch in info.channels.values()],
        "consumeFromWhere": info.consume_from_where,
        "consumeType": info.consume_type,
        "messageModel": info.message_model,
        "subscriptionTable": {t: subscription_json(s) for t, s in info.subscriptions.items()},
    }
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted(body))


async def producer_connections(
    ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    group = GetProducerConnectionListRequestHeader.of(cmd).producer_group
    channels = ctx.clients.producers.get(group)
    if not channels:
        raise BrokerError(f"the producer group[{group}] not exist", ResponseCode.SYSTEM_ERROR)
    body = {"connectionSet": [connection_json(ch) for ch in channels.values()]}
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted(body))


async def consume_stats(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """ConsumeStats: per readable queue of the topics the group committed offsets for (or the
    one asked), the broker's max offset, the group's offset and the store time before it."""
    h = GetConsumeStatsRequestHeader.of(cmd)
    group, only = h.consumer_group, h.topic
    topics = [only] if only else sorted(ctx.offsets.offsets_of_group(group))
    # Refused before it is built when the reply cannot fit in a frame (~130 bytes a queue).
    size = 0
    for topic in topics:
        tc = ctx.topics.get(topic)
        size += (
            0
            if tc is None
            else tc.read_queue_nums * (110 + len(topic.encode()) + len(ctx.config.broker_name))
        )
        if size > MAX_FRAME_SIZE:
            raise BrokerError(
                f"the consume stats of group {group} would exceed the frame limit of {MAX_FRAME_SIZE} "
                "bytes; ask for one topic at a time",
                ResponseCode.SYSTEM_ERROR,
            )
    entries: list[tuple[dict[str, Any], dict[str, int]]] = []
    tps = 0.0
    for topic in topics:
        found = group_topic_progress(ctx, group, topic, write_queues=False)
        if found is not None:
            entries += found[0]
            tps += found[1]
    return cmd.reply(ResponseCode.SUCCESS, body=consume_stats_json(entries, tps))


async def broker_consume_stats(
    ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """GET_BROKER_CONSUME_STATS (mqadmin brokerConsumeStats): the consume stats of every
    subscription group, topic by topic (only ordered topics with isOrder)."""
    order_only = GetConsumeStatsInBrokerHeader.of(cmd).is_order
    groups, total_diff = [], 0
    for group in sorted(ctx.groups.groups):
        stats = []
        for topic in sorted(ctx.offsets.offsets_of_group(group)):
            tc = ctx.topics.get(topic)
            if tc is None or (order_only and not tc.order):
                continue
            found = group_topic_progress(ctx, group, topic, write_queues=True)
            if found is None:
                continue
            entries, tps = found
            total_diff += sum(w["brokerOffset"] - w["consumerOffset"] for _, w in entries)
            stats.append(consume_stats_json(entries, tps))
        groups.append(b"{" + dumps_sorted(group) + b":[" + b",".join(stats) + b"]}")
    body = (
        b'{"brokerAddr":'
        + dumps_sorted(ctx.config.broker_addr)
        + b',"consumeStatsList":['
        + b",".join(groups)
        + b'],"totalDiff":'
        + str(total_diff).encode()
        + b"}"
    )
    return cmd.reply(ResponseCode.SUCCESS, body=body)


async def consume_by_who(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    topic = QueryTopicConsumeByWhoRequestHeader.of(cmd).topic
    groups = {g for g, info in ctx.clients.consumers.items() if topic in info.subscriptions}
    groups |= {key.split("@", 1)[1] for key in ctx.offsets.table if key.split("@", 1)[0] == topic}
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted({"groupList": sorted(groups)}))


async def consume_time_span(
    ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    h = QueryConsumeTimeSpanRequestHeader.of(cmd)
    topic, group = h.topic, h.group
    tc = ctx.topics.get(topic)
    if tc is None:
        raise BrokerError(f"topic[{topic}] not exist", ResponseCode.TOPIC_NOT_EXIST)
    store = ctx.store
    spans = []
    now = int(time.time() * 1000)
    for queue_id in range(tc.write_queue_nums):
        min_time = store.earliest_store_time(topic, queue_id) or -1
        high = store.max_offset(topic, queue_id)
        max_time = (store.store_time(topic, queue_id, high - 1) if high > 0 else None) or -1
        committed = ctx.offsets.query(group, topic, queue_id)
        if committed > 0:
            consume_time = store.store_time(topic, queue_id, committed - 1) or -1
        else:
            consume_time = min_time
        delay = 0
        if committed < high:
            next_time = store.store_time(topic, queue_id, max(0, committed))
            delay = now - (next_time or -1)
        spans.append(
            {
                "consumeTimeStamp": consume_time,
                "consumeTimeStampStr": time_str(consume_time),
                "delayTime": delay,
                "maxTimeStamp": max_time,
                "maxTimeStampStr": time_str(max_time),
                "messageQueue": mq_key(topic, ctx.config.broker_name, queue_id),
                "minTimeStamp": min_time,
                "minTimeStampStr": time_str(min_time),
            }
        )
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted({"consumeTimeSpanSet": spans}))


async def query_consume_queue(
    ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    """QUERY_CONSUME_QUEUE (mqadmin queryCq): `count` consume-queue units from `index` (the
    CommitLog offset and size of each message and its tags code), read through the records
    they point at."""
    h = QueryConsumeQueueRequestHeader.of(cmd)
    topic, queue_id, index = h.topic, h.queue_id, h.index
    count = max(0, min(h.count, MAX_QUERY_CQ_UNITS))
    tc = ctx.topics.get(topic)
    if tc is None or not 0 <= queue_id < max(tc.read_queue_nums, tc.write_queue_nums):
        raise BrokerError(f"{queue_id}@{topic} is not exist!", ResponseCode.SYSTEM_ERROR)
    store = ctx.store
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    body: dict[str, Any] = {"maxQueueIndex": high, "minQueueIndex": low}
    group = h.consumer_group
    if group:
        info = ctx.clients.consumers.get(group)
        sub = info.subscriptions.get(topic) if info is not None else None
        if sub is None:
            body["filterData"] = f"{group}@{topic} is not online!"
        else:
            body["subscriptionData"] = subscription_json(sub)
    if not low <= index < high:
        return cmd.reply(ResponseCode.SUCCESS, remark=f"Index {index} of {queue_id}@{topic} is not exist!")
    found = store.get(topic, queue_id, index, count, MAX_QUERY_CQ_BYTES, tag_codes=None)
    units = []
    raw, at = found.body, 0
    for msg in decode_messages(raw):
        size = int.from_bytes(raw[at : at + 4], "big")
        at += size
        units.append(
            {
                "eval": False,
                "physicOffset": msg.physical_offset,
                "physicSize": size,
                "tagsCode": ctx.tags_code_of(msg.properties),
            }
        )
    body["queueData"] = units
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted(body))


async def system_topics(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    # As Java: every topic name reserved for the system, whether created yet or not.
    names = SYSTEM_TOPICS | ctx.topics.reserved
    return cmd.reply(ResponseCode.SUCCESS, body=dumps_sorted({"topicList": sorted(names)}))


async def stats_data(ctx: BrokerStatusContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ViewBrokerStatsDataRequestHeader.of(cmd)
    stats_name, key = h.stats_name, h.stats_key
    ctx.stats.catch_up()
    item = ctx.stats.item(stats_name, key)
    if item is None:
        raise BrokerError(f"The stats <{stats_name}> <{key}> not exist", ResponseCode.SYSTEM_ERROR)
    parts = []
    for field_name, data in (
        ("statsDay", item.in_day()),
        ("statsHour", item.in_hour()),
        ("statsMinute", item.in_minute()),
    ):
        parts.append(
            f'"{field_name}":{{"avgpt":{java_double(data.avgpt)},"sum":{data.sum},'
            f'"tps":{java_double(data.tps)}}}'
        )
    return cmd.reply(ResponseCode.SUCCESS, body=("{" + ",".join(parts) + "}").encode())


HANDLERS: dict[int, ContextHandler[BrokerStatusContext]] = {
    RequestCode.GET_BROKER_RUNTIME_INFO: runtime_info,
    RequestCode.GET_TOPIC_STATS_INFO: topic_stats,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: consumer_connections,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: producer_connections,
    RequestCode.GET_ALL_PRODUCER_INFO: all_producers,
    RequestCode.GET_CONSUME_STATS: consume_stats,
    RequestCode.GET_BROKER_CONSUME_STATS: broker_consume_stats,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: consume_by_who,
    RequestCode.QUERY_CONSUME_TIME_SPAN: consume_time_span,
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: system_topics,
    RequestCode.VIEW_BROKER_STATS_DATA: stats_data,
    RequestCode.QUERY_CONSUME_QUEUE: query_consume_queue,
}


def handlers(ctx: BrokerStatusContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)


def time_str(ms: int) -> str:
    """UtilAll.timeMillisToHumanString2-like `2026-11-23#14:40:44:956` (local time), as
    QueueTimeSpan writes its *Str fields."""
    if ms < 0:
        ms = 0
    t = time.localtime(ms / 1000)
    return time.strftime("%Y-%m-%d#%H:%M:%S", t) + f":{ms % 1000:03d}"
