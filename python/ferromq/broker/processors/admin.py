"""Admin and offset requests: topics (and dropping the queues of topics gone), offsets by time,
orderly locks, groups, stats."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ferromq.broker import lite
from ferromq.broker.pop.formats import retry_topic
from ferromq.broker.processors.bodies import json_object, shaped
from ferromq.broker.processors.context import AdminContext, ContextHandler, bind
from ferromq.broker.subscriptions import SubscriptionGroupConfig
from ferromq.broker.timer import encode_checkpoint
from ferromq.broker.topics import (
    LITE_MESSAGE_TYPE,
    MESSAGE_TYPE_KEY,
    MIXED_MESSAGE_TYPE,
    MIXED_REFUSED,
    InvalidAttributes,
    TopicConfig,
    parse_attribute_changes,
    topic_problem,
)
from ferromq.errors import BrokerError
from ferromq.jsonutil import dumps
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import SCHEDULE_TOPIC, TRANS_OP_HALF_TOPIC
from ferromq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    GetTopicConfigRequestHeader,
    OffsetResponseHeader,
    SearchOffsetRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

logger = logging.getLogger(__name__)


def _mq_json(topic: str, broker_name: str, queue_id: int) -> dict[str, Any]:
    return {"brokerName": broker_name, "queueId": queue_id, "topic": topic}


def offset_table_json(table: dict[str, dict[int, int]]) -> bytes:
    """`ConsumerOffsetManager.encode()` as Java's fastjson writes it:
    `{"offsetTable":{"topic@group":{0:5,1:7}}}` (queue ids are bare integer keys)."""
    groups = []
    for key, queues in list(table.items()):
        inner = ",".join(f"{int(q)}:{int(o)}" for q, o in list(queues.items()))
        groups.append(dumps(key).decode() + ":{" + inner + "}")
    return ('{"offsetTable":{' + ",".join(groups) + "}}").encode()


def refuse_system_topic(ctx: AdminContext, topic: str) -> None:
    """A system topic on this broker may be neither created nor deleted by an admin
    (validateSystemTopicWhenUpdateTopic, on by default): INVALID_PARAMETER with Java's remark."""
    if ctx.topics.is_system_topic(topic):
        raise BrokerError(
            f"The topic[{topic}] is conflict with system topic.", ResponseCode.INVALID_PARAMETER
        )


async def create_topic(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = CreateTopicRequestHeader.of(cmd)
    topic = h.topic
    # Apache RocketMQ 5.x's answers (AdminBrokerProcessor.updateAndCreateTopic, with
    # validateSystemTopicWhenUpdateTopic on, as by default): INVALID_PARAMETER for a name
    # TopicValidator refuses and for a system topic, the broker's own names included.
    problem = topic_problem(topic)
    if problem:
        raise BrokerError(problem, ResponseCode.INVALID_PARAMETER)
    refuse_system_topic(ctx, topic)
    limit = ctx.config.max_topic_queue_nums
    queue_nums = {"readQueueNums": h.read_queue_nums, "writeQueueNums": h.write_queue_nums}
    for key, n in queue_nums.items():
        if not 1 <= n <= limit:
            raise BrokerError(
                f"{key} {n} of topic {topic} is out of range: a topic has 1 to {limit} queues "
                "(maxTopicQueueNums in broker.conf)",
                ResponseCode.SYSTEM_ERROR,
            )
    # RocketMQ 5.x's attribute changes (AdminBrokerProcessor.updateAndCreateTopic): text that does not
    # parse, and changes the topic's attributes refuse, are SYSTEM_ERROR with Java's message; a MIXED
    # message type is INVALID_PARAMETER (enableMixedMessageType is false).
    try:
        changes = parse_attribute_changes(h.attributes)
    except InvalidAttributes as e:
        raise BrokerError(str(e), ResponseCode.SYSTEM_ERROR) from None
    if changes.get("+" + MESSAGE_TYPE_KEY) == MIXED_MESSAGE_TYPE:
        raise BrokerError(MIXED_REFUSED, ResponseCode.INVALID_PARAMETER)
    tc = TopicConfig(
        topic_name=topic,
        read_queue_nums=queue_nums["readQueueNums"],
        write_queue_nums=queue_nums["writeQueueNums"],
        perm=h.perm,
        topic_filter_type=h.topic_filter_type,
        topic_sys_flag=h.topic_sys_flag,
        order=h.order,
    )
    try:
        ctx.topics.update_attributes(tc, changes)
    except InvalidAttributes as e:
        raise BrokerError(str(e), ResponseCode.SYSTEM_ERROR) from None
    ctx.registration_changed()
    return cmd.reply(ResponseCode.SUCCESS)


async def delete_topic(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """AdminBrokerProcessor.deleteTopic (5.3.3 and 5.5.0): a blank name and a system topic are refused;
    the POP retry topics (v1 and v2) of the groups with offsets on the topic go with it
    (clearRetryTopicWhenDeleteTopic), and a LITE topic's lite topics."""
    topic = DeleteTopicRequestHeader.of(cmd).topic
    if not topic.strip():
        raise BrokerError("The specified topic is blank.", ResponseCode.INVALID_PARAMETER)
    refuse_system_topic(ctx, topic)
    doomed = [topic]
    for group in sorted(ctx.offsets.groups_of_topic(topic)):
        for v2 in (True, False):
            retry = retry_topic(topic, group, v2)
            if ctx.topics.get(retry) is not None and retry not in doomed:
                doomed.append(retry)
    tc = ctx.topics.get(topic)
    if tc is not None and tc.message_type == LITE_MESSAGE_TYPE:
        lite.clean_parent(ctx.store, ctx.offsets, topic)
    for name in doomed:
        ctx.topics.delete(name)
        ctx.offsets.remove_topic(name)
        ctx.stats.topic_removed(name)
        # A name no topic may have (5.5.0's mqadmin deleteTopic -t "a;b" sends "a;b" whole) has no
        # queues to drop: the store refuses such a name, Java deletes nothing and answers success.
        if topic_problem(name) is None:
            ctx.store.delete_topic(name)
    ctx.registration_changed()
    return cmd.reply(ResponseCode.SUCCESS)


async def all_topic_config(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(ctx.topics.serialize_wrapper()))


async def topic_config(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """One topic's configuration (5.x's GET_TOPIC_CONFIG, which Apache RocketMQ's proxy in cluster mode
    asks for a topic's message type). No static topics here: no queue mapping in the answer."""
    h = GetTopicConfigRequestHeader.of(cmd)
    tc = ctx.topics.get(h.topic)
    if tc is None:
        return cmd.reply(ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic in this broker. topic: {h.topic}")
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(tc.to_json()))


async def max_offset(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = GetMaxOffsetRequestHeader.of(cmd)
    offset = ctx.store.max_offset(h.topic, h.queue_id)
    return cmd.reply(ResponseCode.SUCCESS, ext=OffsetResponseHeader(offset=offset).to_ext())


async def min_offset(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = GetMinOffsetRequestHeader.of(cmd)
    offset = ctx.store.min_offset(h.topic, h.queue_id)
    if ctx.tiered is not None:  # the bucket's messages count (RocketMQ's TieredMessageStore)
        offset = ctx.tiered.queue_min(h.topic, h.queue_id, offset)
    return cmd.reply(ResponseCode.SUCCESS, ext=OffsetResponseHeader(offset=offset).to_ext())


async def offset_by_time(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = SearchOffsetRequestHeader.of(cmd)
    offset = ctx.store.offset_by_time(h.topic, h.queue_id, h.timestamp)
    return cmd.reply(ResponseCode.SUCCESS, ext=OffsetResponseHeader(offset=offset).to_ext())


async def earliest_time(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = GetEarliestMsgStoretimeRequestHeader.of(cmd)
    ts = None
    if ctx.tiered is not None and ctx.tiered.min_offset(h.topic, h.queue_id) is not None:
        ts = await ctx.tiered.run(ctx.tiered.earliest_store_time, h.topic, h.queue_id)
    if ts is None:
        ts = ctx.store.earliest_store_time(h.topic, h.queue_id)
    reply = GetEarliestMsgStoretimeResponseHeader(timestamp=-1 if ts is None else ts)
    return cmd.reply(ResponseCode.SUCCESS, ext=reply.to_ext())


def _mqs(ctx: AdminContext, body: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [
        (str(mq["topic"]), str(mq.get("brokerName", ctx.config.broker_name)), int(mq["queueId"]))
        for mq in body.get("mqSet") or []
    ]


async def lock_batch(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    body = json_object(cmd, "the LOCK_BATCH_MQ body")
    with shaped("the LOCK_BATCH_MQ body"):
        mqs = _mqs(ctx, body)
    held = ctx.locks.try_lock_batch(
        str(body.get("consumerGroup", "")), mqs, str(body.get("clientId", "")), time.monotonic()
    )
    return cmd.reply(ResponseCode.SUCCESS, body=dumps({"lockOKMQSet": [_mq_json(*mq) for mq in held]}))


async def unlock_batch(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    body = json_object(cmd, "the UNLOCK_BATCH_MQ body")
    with shaped("the UNLOCK_BATCH_MQ body"):
        mqs = _mqs(ctx, body)
    group = str(body.get("consumerGroup", ""))
    waiters = ctx.locks.unlock_batch(group, mqs, str(body.get("clientId", "")))
    # The clients refused these queues would ask again only at their next rebalance (a Java
    # consumer's comes every 20 s): a member that joined waited that long for queues its previous
    # owner gave up a moment after refusing them (issue 27, item 8). They rebalance now instead.
    if waiters:
        ctx.notify_consumers(group, waiters)
    return cmd.reply(ResponseCode.SUCCESS)


async def update_group(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    body = json_object(cmd, "the subscription group config")
    with shaped("the subscription group config"):
        group = SubscriptionGroupConfig.from_json(body)
    limit = ctx.config.max_topic_queue_nums
    if not 0 <= group.retry_queue_nums <= limit:
        raise BrokerError(
            f"retryQueueNums {group.retry_queue_nums} of group {group.group_name} is out of range: "
            f"0 to {limit} (maxTopicQueueNums in broker.conf)",
            ResponseCode.SYSTEM_ERROR,
        )
    # The body's attributes are changes (`{"+key": "value", "-key": ""}`); 5.3.3 knows no group
    # attribute and lets the refusal reach its remoting layer, whose remark names the exception and
    # where it was thrown.
    try:
        ctx.groups.update_attributes(group, group.attributes)
    except InvalidAttributes as e:
        raise BrokerError(e.java_desc(), ResponseCode.SYSTEM_ERROR) from None
    return cmd.reply(ResponseCode.SUCCESS)


async def all_groups(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    table = {n: g.to_json() for n, g in ctx.groups.groups.items()}
    return cmd.reply(
        ResponseCode.SUCCESS,
        body=dumps({"subscriptionGroupTable": table, "dataVersion": ctx.groups.data_version}),
    )


async def group_config(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """GET_SUBSCRIPTIONGROUP_CONFIG: one group's config, as Apache RocketMQ's 5.x proxy in cluster mode
    reads a group (its FIFO flag, retry policy, lite attributes) from a broker of its cluster."""
    g = ctx.groups.groups.get(GetSubscriptionGroupConfigRequestHeader.of(cmd).group)
    if g is None:
        return cmd.reply(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark="No group in this broker")
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(g.to_json()))


async def delete_group(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """AdminBrokerProcessor.deleteSubscriptionGroup: the group goes, and its offsets too when asked
    (`removeOffset` in 4.x, `cleanOffset` in 5.x: mqadmin deleteSubGroup -r true)."""
    h = DeleteSubscriptionGroupRequestHeader.of(cmd)
    ctx.groups.delete(h.group_name)
    if h.remove_offset or h.clean_offset:
        ctx.offsets.remove_group(h.group_name)
    return cmd.reply(ResponseCode.SUCCESS)


async def all_consumer_offsets(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.reply(ResponseCode.SUCCESS, body=offset_table_json(ctx.offsets.table))


async def all_delay_offsets(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.reply(ResponseCode.SUCCESS, body=ctx.schedule.encode())


async def timer_check_point(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    if not ctx.config.timer_wheel_enable:
        return cmd.reply(ResponseCode.SYSTEM_ERROR, remark="The checkpoint is null")
    return cmd.reply(ResponseCode.SUCCESS, body=encode_checkpoint(ctx.store))


# SWITCH_TIMER_ENGINE's extension field and engines (MessageConst.TIMER_ENGINE_*).
TIMER_ENGINE_TYPE = "E_T"
TIMER_ENGINE_ROCKSDB_TIMELINE = "R"
TIMER_ENGINE_FILE_TIME_WHEEL = "F"


async def switch_timer_engine(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """SWITCH_TIMER_ENGINE (RocketMQ 5.5, mqadmin switchTimerEngine -e R|F), as 5.5.0's
    AdminBrokerProcessor answers it. ferromq's timer is the file time wheel and nothing else: "F" (the
    file time wheel) is the engine already running (5.5.0 restarts its wheel and answers success); "R" (the
    RocksDB timeline) is refused with 5.5.0's answer when timerRocksDBEnable was off at start, saying why."""
    if not ctx.config.timer_wheel_enable:
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark="broker timerWheelEnable is false")
    engine = cmd.ext.get(TIMER_ENGINE_TYPE)
    if engine not in (TIMER_ENGINE_ROCKSDB_TIMELINE, TIMER_ENGINE_FILE_TIME_WHEEL):
        return cmd.reply(ResponseCode.INVALID_PARAMETER, remark="param error")
    if engine == TIMER_ENGINE_ROCKSDB_TIMELINE:
        return cmd.reply(
            ResponseCode.INVALID_PARAMETER,
            remark="timerRocksDBEnable must be configured true when broker start "
            "(ferromq has no RocksDB timer engine: its timer is the file time wheel)",
        )
    return cmd.reply(ResponseCode.SUCCESS, remark="switch timer engine success")


async def clean_unused_topic(ctx: AdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """CLEAN_UNUSED_TOPIC (mqadmin cleanUnusedTopic): drops the consume queues of topics the
    broker has no config for (never the schedule or transaction op topics)."""
    cq_root = os.path.join(ctx.config.store_path_root_dir, "consumequeue")
    try:
        on_disk = sorted(os.listdir(cq_root))
    except OSError:
        on_disk = []
    keep = {SCHEDULE_TOPIC, TRANS_OP_HALF_TOPIC}
    for topic in on_disk:
        if ctx.topics.get(topic) is None and topic not in keep:
            logger.warning("cleanUnusedTopic: dropping the consume queues of %s (no topic config)", topic)
            ctx.store.delete_topic(topic)
    return cmd.reply(ResponseCode.SUCCESS)


HANDLERS: dict[int, ContextHandler[AdminContext]] = {
    RequestCode.UPDATE_AND_CREATE_TOPIC: create_topic,
    RequestCode.DELETE_TOPIC_IN_BROKER: delete_topic,
    RequestCode.GET_ALL_TOPIC_CONFIG: all_topic_config,
    RequestCode.GET_TOPIC_CONFIG: topic_config,
    RequestCode.GET_MAX_OFFSET: max_offset,
    RequestCode.GET_MIN_OFFSET: min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: offset_by_time,
    RequestCode.GET_EARLIEST_MSG_STORETIME: earliest_time,
    RequestCode.LOCK_BATCH_MQ: lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: unlock_batch,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: update_group,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: all_groups,
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: group_config,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: delete_group,
    RequestCode.GET_ALL_CONSUMER_OFFSET: all_consumer_offsets,
    RequestCode.GET_ALL_DELAY_OFFSET: all_delay_offsets,
    RequestCode.GET_TIMER_CHECK_POINT: timer_check_point,
    RequestCode.SWITCH_TIMER_ENGINE: switch_timer_engine,
    RequestCode.CLEAN_UNUSED_TOPIC: clean_unused_topic,
}


def handlers(ctx: AdminContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
