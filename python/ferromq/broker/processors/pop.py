"""RocketMQ 5.x's POP requests over remoting: POP_MESSAGE (with long polling), ACK_MESSAGE,
BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION, POLLING_INFO, and the
two that put a push consumer into POP mode, QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE. The
rules are in `ferromq.broker.pop.service`; this module reads the headers and writes the replies
with Java's codes and remarks."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable
from typing import Any

import orjson

from ferromq.broker.pop.formats import JAVA_LONG_MAX, JAVA_LONG_MIN, ExtraInfo
from ferromq.broker.pop.modes import RequestMode, allocate_averagely, effective_mode
from ferromq.broker.pop.service import (
    MAX_POP_NUMS,
    PopRequest,
    PopResult,
    pop_subscription,
)
from ferromq.broker.processors.context import ContextHandler, PopHandlersContext, bind
from ferromq.broker.sql92 import compile_sql92
from ferromq.errors import BrokerError, SubscriptionParseError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import RETRY_PREFIX
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler, ImmediateHandler


def _json_object(body: bytes | None, what: str) -> dict[str, Any]:
    """A request body that must be a JSON object; BrokerError saying so otherwise."""
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        raise BrokerError(f"the {what} body is not a JSON object", ResponseCode.SYSTEM_ERROR)
    return data


def _text(data: dict[str, Any], name: str, what: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise BrokerError(f"the {what} body has no {name}", ResponseCode.SYSTEM_ERROR)
    return value


def _int(ext: dict[str, str], name: str, default: int | None = None) -> int:
    value = ext.get(name)
    if value is None or value == "":
        if default is None:
            raise BrokerError(f"the custom field <{name}> is null", ResponseCode.SYSTEM_ERROR)
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    # Every number of these headers is a Java long: one past its range is not a number there.
    if number is None or not JAVA_LONG_MIN <= number <= JAVA_LONG_MAX:
        raise BrokerError(
            f"the custom field <{name}> is not a number: {value[:40]!r}", ResponseCode.SYSTEM_ERROR
        )
    return number


def _str(ext: dict[str, str], name: str) -> str:
    value = ext.get(name)
    if not value:
        raise BrokerError(f"the custom field <{name}> is null", ResponseCode.SYSTEM_ERROR)
    return value


def _now() -> int:
    return int(time.time() * 1000)


def _check_topic_and_group(
    ctx: PopHandlersContext, topic: str, group: str, queue_id: int, what: str = "peeking"
) -> None:
    ip = ctx.config.broker_ip1
    if not ctx.config.broker_permission & 4:
        raise BrokerError(f"the broker[{ip}] pop message is forbidden", ResponseCode.NO_PERMISSION)
    tc = ctx.topics.get(topic)
    if tc is None:
        raise BrokerError(f"topic[{topic}] not exist, apply first please!", ResponseCode.TOPIC_NOT_EXIST)
    if not tc.readable:
        raise BrokerError(f"the topic[{topic}] {what} message is forbidden", ResponseCode.NO_PERMISSION)
    if queue_id >= tc.read_queue_nums:
        raise BrokerError(
            f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
            f"[{tc.read_queue_nums}] consumer:[{group}]",
            ResponseCode.INVALID_PARAMETER,
        )
    cfg = ctx.groups.find_or_create(group)
    if cfg is None:
        raise BrokerError(
            f"subscription group [{group}] does not exist", ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        )
    if not cfg.consume_enable:
        raise BrokerError(f"subscription group no permission, {group}", ResponseCode.NO_PERMISSION)


def _pop_request(ctx: PopHandlersContext, cmd: RemotingCommand) -> PopRequest:
    ext = cmd.ext
    ip = ctx.config.broker_ip1
    now = _now()
    born = _int(ext, "bornTime", 0) or now
    poll = _int(ext, "pollTime", 0)
    if now - born - poll > 500:
        raise BrokerError(f"the broker[{ip}] pop message is timeout too much", ResponseCode.POLLING_TIMEOUT)
    if not ctx.config.broker_permission & 4:
        raise BrokerError(f"the broker[{ip}] pop message is forbidden", ResponseCode.NO_PERMISSION)
    max_msgs = _int(ext, "maxMsgNums")
    if max_msgs > MAX_POP_NUMS:
        raise BrokerError(
            f"the broker[{ip}] pop message's num is greater than 32", ResponseCode.INVALID_PARAMETER
        )
    if not ctx.config.timer_wheel_enable:
        raise BrokerError(
            f"the broker[{ip}] pop message is forbidden because timerWheelEnable is false",
            ResponseCode.SYSTEM_ERROR,
        )
    group, topic = _str(ext, "consumerGroup"), _str(ext, "topic")
    queue_id = max(-1, _int(ext, "queueId"))
    _check_topic_and_group(ctx, topic, group, queue_id)
    try:
        sub = pop_subscription(topic, ext.get("exp"), ext.get("expType"))
    except SubscriptionParseError:
        raise BrokerError(
            "parse the consumer's subscription failed", ResponseCode.SUBSCRIPTION_PARSE_FAILED
        ) from None
    sql = None
    if sub.expression_type == "SQL92":
        if not ctx.config.enable_property_filter:
            raise BrokerError(
                "The broker does not support consumer to filter message by SQL92", ResponseCode.SYSTEM_ERROR
            )
        try:
            sql = compile_sql92(sub.sub_string)
        except SubscriptionParseError:
            raise BrokerError(
                "parse the consumer's subscription failed", ResponseCode.SUBSCRIPTION_PARSE_FAILED
            ) from None
    order = ext.get("order", "false").lower() == "true"
    return PopRequest(
        group=group,
        topic=topic,
        queue_id=queue_id,
        max_msgs=max(1, max_msgs),
        invisible_time=_int(ext, "invisibleTime"),
        # Counted from the broker's clock: a client clock ahead does not stretch the wait.
        poll_time=max(0, poll - max(0, now - born)),
        born_time=born,
        init_mode=_int(ext, "initMode", 1),
        subscription=sub,
        order=order,
        attempt_id=ext.get("attemptId") or None,
        sql=sql,
    )


def pop_message(
    ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand | Awaitable[RemotingCommand]:
    """Answered at once when the pop finds messages (or must not wait); else a coroutine that
    waits for one (long polling)."""
    req = _pop_request(ctx, cmd)
    result = ctx.pop.try_pop(req)
    if result.found or req.poll_time <= 0:
        return _pop_reply(cmd, result)
    return _pop_reply_after(cmd, wait_for_pop(ctx, req))


def _pop_reply(cmd: RemotingCommand, result: PopResult) -> RemotingCommand:
    if not result.found:
        return cmd.reply(ResponseCode.POLLING_TIMEOUT, remark="NO_MESSAGE_IN_QUEUE", ext=result.header())
    return cmd.reply(ResponseCode.SUCCESS, remark="FOUND", ext=result.header(), body=result.body)


async def _pop_reply_after(cmd: RemotingCommand, result: Awaitable[PopResult]) -> RemotingCommand:
    return _pop_reply(cmd, await result)


async def wait_for_pop(ctx: PopHandlersContext, req: PopRequest) -> PopResult:
    """A pop that found nothing waits up to its poll time for a message it takes (an orderly one
    also for a queue's turn), whichever protocol brought it; then pops once more."""
    deadline = time.monotonic() + req.poll_time / 1000.0
    codes = req.subscription.codes

    def accepts(tags_code: int) -> bool:
        return codes is None or tags_code in codes

    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0.05:
            break
        unblocks = ctx.pop.unblocks_in(req)  # an orderly pop also waits for a queue's turn
        wait = remaining if unblocks is None else min(remaining, max(0.01, unblocks))
        ctx.pop.polling(req, +1)
        try:
            await ctx.hold.hold_any(ctx.pop.positions(req, skip_blocked=True), wait, accepts)
        finally:
            ctx.pop.polling(req, -1)
        result = ctx.pop.try_pop(req)
        if result.found:
            return result
    return ctx.pop.try_pop(req)


def _receipt(ext: dict[str, str]) -> ExtraInfo:
    try:
        return ExtraInfo.parse(_str(ext, "extraInfo"))
    except ValueError as e:
        raise BrokerError(f"extraInfo is illegal: {e}", ResponseCode.SYSTEM_ERROR) from None


def ack_message(ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext
    receipt = _receipt(ext)
    lite_topic = ext.get("liteTopic", "").strip()
    if lite_topic:  # a lite message's (RocketMQ 5.5): the order state of its lite topic
        ctx.lite_consumers.ack(
            _str(ext, "consumerGroup"),
            _str(ext, "topic"),
            lite_topic,
            _int(ext, "queueId"),
            _int(ext, "offset"),
            receipt.pop_time,
            receipt.revive_qid,
        )
        return cmd.reply(ResponseCode.SUCCESS)
    ctx.pop.ack(
        _str(ext, "consumerGroup"), _str(ext, "topic"), _int(ext, "queueId"), _int(ext, "offset"), receipt
    )
    return cmd.reply(ResponseCode.SUCCESS)


def batch_ack_message(ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    body = _json_object(cmd.body, "batch ack")
    try:
        ctx.pop.batch_ack(body)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise BrokerError(
            "the batch ack body is illegal: each ack needs c, t, r, q, so, pt, it and b",
            ResponseCode.SYSTEM_ERROR,
        ) from None
    return cmd.reply(ResponseCode.SUCCESS)


def change_invisible_time(ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext
    receipt = _receipt(ext)
    lite_topic = ext.get("liteTopic", "").strip()
    if lite_topic:  # a lite message's: its lite topic's order state, the whole topic when suspended
        pop_time, invisible = ctx.lite_consumers.change_invisible(
            _str(ext, "consumerGroup"),
            _str(ext, "topic"),
            lite_topic,
            _int(ext, "offset"),
            receipt.pop_time,
            _int(ext, "invisibleTime"),
            ext.get("suspend", "false").lower() == "true",
        )
        return cmd.reply(
            ResponseCode.SUCCESS,
            ext={
                "popTime": str(pop_time),
                "invisibleTime": str(invisible),
                "reviveQid": str(receipt.revive_qid),
            },
        )
    pop_time, invisible, revive_qid = ctx.pop.change_invisible(
        _str(ext, "consumerGroup"),
        _str(ext, "topic"),
        _int(ext, "queueId"),
        _int(ext, "offset"),
        receipt,
        _int(ext, "invisibleTime"),
    )
    return cmd.reply(
        ResponseCode.SUCCESS,
        ext={"popTime": str(pop_time), "invisibleTime": str(invisible), "reviveQid": str(revive_qid)},
    )


async def peek_message(ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext
    group, topic = _str(ext, "consumerGroup"), _str(ext, "topic")
    queue_id = max(-1, _int(ext, "queueId"))
    _check_topic_and_group(ctx, topic, group, queue_id)
    records, rest = ctx.pop.peek(group, topic, queue_id, max(1, _int(ext, "maxMsgNums")))
    header = {"popTime": "0", "invisibleTime": "0", "reviveQid": "0", "restNum": str(rest)}
    if not records:
        return cmd.reply(ResponseCode.PULL_NOT_FOUND, ext=header)
    return cmd.reply(ResponseCode.SUCCESS, ext=header, body=b"".join(records))


async def notification(ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext
    group, topic = _str(ext, "consumerGroup"), _str(ext, "topic")
    queue_id = max(-1, _int(ext, "queueId"))
    _check_topic_and_group(ctx, topic, group, queue_id)
    now = _now()
    poll = max(0, _int(ext, "pollTime", 0) - max(0, now - (_int(ext, "bornTime", 0) or now)))
    req = PopRequest(group, topic, queue_id, 1, 0, poll, now, 1, pop_subscription(topic, None, None))
    deadline = time.monotonic() + poll / 1000.0
    has = ctx.pop.has_message(req)
    while not has and deadline - time.monotonic() > 0.05:
        await ctx.hold.hold_any(ctx.pop.positions(req), deadline - time.monotonic(), lambda _code: True)
        has = ctx.pop.has_message(req)
    return cmd.reply(ResponseCode.SUCCESS, ext={"hasMsg": "true" if has else "false", "pollingFull": "false"})


async def polling_info(ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    ext = cmd.ext
    group, topic = _str(ext, "consumerGroup"), _str(ext, "topic")
    queue_id = max(-1, _int(ext, "queueId"))
    _check_topic_and_group(ctx, topic, group, queue_id)
    return cmd.reply(
        ResponseCode.SUCCESS, ext={"pollingNum": str(ctx.pop.polling_count(topic, group, queue_id))}
    )


async def set_message_request_mode(
    ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    body = _json_object(cmd.body, "set message request mode")
    try:
        mode = RequestMode.from_json(body)
    except (ValueError, KeyError, TypeError):
        raise BrokerError(
            "the set message request mode body needs topic, consumerGroup and mode PULL or POP",
            ResponseCode.SYSTEM_ERROR,
        ) from None
    if mode.topic.startswith(RETRY_PREFIX):
        return cmd.reply(ResponseCode.NO_PERMISSION, remark="retry topic is not allowed to set mode")
    if ctx.topics.get(mode.topic) is None:
        return cmd.reply(ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{mode.topic}] not exist")
    if ctx.groups.groups.get(mode.group) is None:
        return cmd.reply(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"subscription group [{mode.group}] not exist"
        )
    ctx.request_modes.set(mode)
    return cmd.reply(ResponseCode.SUCCESS)


async def query_assignment(
    ctx: PopHandlersContext, conn: Connection, cmd: RemotingCommand
) -> RemotingCommand:
    body = _json_object(cmd.body, "query assignment")
    what = "query assignment"
    topic, group = _text(body, "topic", what), _text(body, "consumerGroup", what)
    client_id = _text(body, "clientId", what)
    mode = effective_mode(ctx.request_modes, topic, group, ctx.config.default_message_request_mode)
    brokers = await _readable_queues(ctx, topic)
    if not brokers:
        return cmd.reply(ResponseCode.SUCCESS, body=b"{}")
    queues: list[tuple[str, int]]
    if mode.mode == "POP" and mode.pop_share_queue_num <= 0:
        # Every client pops every queue: one assignment of queueId -1 per broker.
        queues = [(name, -1) for name in sorted(brokers)]
    else:
        every = [(name, q) for name in sorted(brokers) for q in range(brokers[name])]
        if str(body.get("messageModel", "CLUSTERING")) == "BROADCASTING":
            queues = every
        else:
            info = ctx.clients.consumers.get(group)
            clients = sorted({*(info.channels if info is not None else ()), client_id})
            queues = allocate_averagely(every, clients, client_id)
    assignments = [
        {"messageQueue": {"brokerName": name, "queueId": q, "topic": topic}, "mode": mode.mode}
        for name, q in queues
    ]
    return cmd.reply(ResponseCode.SUCCESS, body=orjson.dumps({"messageQueueAssignments": assignments}))


async def _readable_queues(ctx: PopHandlersContext, topic: str) -> dict[str, int]:
    """Read queues of the topic on each broker of the name servers' route (this broker's own when
    they do not answer), as Java's TopicRouteInfoManager gives QUERY_ASSIGNMENT."""
    route = await ctx.registration.topic_route(topic)
    out: dict[str, int] = {}
    for qd in (route or {}).get("queueDatas") or []:
        if isinstance(qd, dict) and int(qd.get("perm", 0)) & 4 and int(qd.get("readQueueNums", 0)) > 0:
            out[str(qd.get("brokerName"))] = int(qd["readQueueNums"])
    if not out:
        tc = ctx.topics.get(topic)
        if tc is not None and tc.readable and tc.read_queue_nums > 0:
            out[ctx.config.broker_name] = tc.read_queue_nums
    return out


# The hot ones answer without a task (see `immediate_handlers`).
IMMEDIATE = {
    RequestCode.POP_MESSAGE: pop_message,
    RequestCode.ACK_MESSAGE: ack_message,
    RequestCode.BATCH_ACK_MESSAGE: batch_ack_message,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: change_invisible_time,
}

HANDLERS: dict[int, ContextHandler[PopHandlersContext]] = {
    RequestCode.PEEK_MESSAGE: peek_message,
    RequestCode.NOTIFICATION: notification,
    RequestCode.POLLING_INFO: polling_info,
    RequestCode.QUERY_ASSIGNMENT: query_assignment,
    RequestCode.SET_MESSAGE_REQUEST_MODE: set_message_request_mode,
}


def handlers(ctx: PopHandlersContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)


def immediate_handlers(ctx: PopHandlersContext) -> dict[int, ImmediateHandler]:
    return {code: functools.partial(handler, ctx) for code, handler in IMMEDIATE.items()}
