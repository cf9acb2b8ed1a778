"""`ferromq admin` on topics: topics, create-topic, update-topic, delete-topic, route, topic-status,
topic-groups, stats."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from ferromq.admin.output import UsageError, jsonable, local_time, make_table
from ferromq.admin.targets import master_addrs
from ferromq.client import Admin
from ferromq.client.admin import check_reply, is_system_topic
from ferromq.errors import TopicNotExistError
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import AUTO_CREATE_TOPIC_KEY
from ferromq.protocol.headers import CreateTopicRequestHeader

# Java's perm bits (PermName): 2 write, 4 read, 6 both.
PERM_NAMES = {0: "-", 2: "W", 4: "R", 6: "RW"}


# RocketMQ 5.x topic types (the `message.type` attribute; a 5.x broker refuses MIXED unless
# enableMixedMessageType is set). A topic without the attribute is NORMAL.
MESSAGE_TYPE_KEY = "message.type"


MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "MIXED")


async def _topic_tables(admin: Admin) -> dict[str, dict[str, dict[str, Any]]]:
    """Broker name -> its topicConfigTable as the broker sent it (GET_ALL_TOPIC_CONFIG of each master):
    what Admin.topic_config reads, with the 5.x `attributes` kept."""
    out = {}
    for name, addr in (await master_addrs(admin, None)).items():
        reply = check_reply(
            await admin.instance.invoke(
                addr, RemotingCommand(code=RequestCode.GET_ALL_TOPIC_CONFIG), admin.timeout
            ),
            f"GET_ALL_TOPIC_CONFIG of {name}",
        )
        table = (loads_lenient(reply.body) if reply.body else {}).get("topicConfigTable") or {}
        out[name] = {str(t): c for t, c in table.items() if isinstance(c, dict)}
    return out


def _message_type(config: dict[str, Any]) -> str | None:
    """A topic config's `message.type`: NORMAL without it, None from a broker without attributes (4.x)."""
    attributes = config.get("attributes")
    if not isinstance(attributes, dict):
        return None
    return str(attributes.get(MESSAGE_TYPE_KEY, "NORMAL"))


def _topic_row(topic: str, broker: str, c: dict[str, Any]) -> dict[str, Any]:
    attributes = c.get("attributes")
    return {
        "topic": topic,
        "brokerName": broker,
        "readQueueNums": int(c.get("readQueueNums", 16)),
        "writeQueueNums": int(c.get("writeQueueNums", 16)),
        "perm": int(c.get("perm", 6)),
        "order": bool(c.get("order", False)),
        "messageType": _message_type(c),
        "attributes": attributes if isinstance(attributes, dict) else None,
    }


def _topic_config_table(rows: list[dict[str, Any]], with_topic: bool) -> Table:
    columns = ("topic", "broker") if with_topic else ("broker",)
    t = make_table(*columns, "read", "write", "perm", "order", "message type", right=("read", "write"))
    for r in rows:
        first = (r["topic"], r["brokerName"]) if with_topic else (r["brokerName"],)
        t.add_row(
            *first,
            str(r["readQueueNums"]),
            str(r["writeQueueNums"]),
            PERM_NAMES.get(r["perm"], str(r["perm"])),
            str(r["order"]).lower(),
            r["messageType"] or "-",
        )
    return t


async def _set_attributes(admin: Admin, topic: str, broker_names: list[str], changes: str) -> None:
    """UPDATE_AND_CREATE_TOPIC of the topic as each broker has it, with the 5.x attribute `changes`
    (`+message.type=FIFO`): the broker applies them to what the topic has and keeps the rest."""
    masters = await master_addrs(admin, broker_names)
    tables = await _topic_tables(admin)
    for name, addr in masters.items():
        c = tables.get(name, {}).get(topic)
        if c is None:
            raise TopicNotExistError(f"topic {topic} does not exist on {name}")
        ext = CreateTopicRequestHeader(
            topic=topic,
            default_topic=AUTO_CREATE_TOPIC_KEY,
            read_queue_nums=int(c.get("readQueueNums", 16)),
            write_queue_nums=int(c.get("writeQueueNums", 16)),
            perm=int(c.get("perm", 6)),
            topic_filter_type=str(c.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(c.get("topicSysFlag", 0)),
            order=bool(c.get("order", False)),
            attributes=changes,
        ).to_ext()
        cmd = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, ext=ext)
        check_reply(
            await admin.instance.invoke(addr, cmd, admin.timeout),
            f"UPDATE_AND_CREATE_TOPIC {topic} on {name}",
        )
    admin.instance.routes.pop(topic, None)


async def list_topics(admin: Admin, args: argparse.Namespace) -> None:
    topics = await admin.topics_by_cluster(args.cluster) if args.cluster else await admin.list_topics()
    if not args.long:
        args.out.names(sorted(topics))
        return
    wanted = set(topics)
    tables = await _topic_tables(admin)
    rows = [
        _topic_row(topic, broker, c)
        for broker, table in sorted(tables.items())
        for topic, c in table.items()
        if topic in wanted
    ]
    rows.sort(key=lambda r: (r["topic"], r["brokerName"]))
    args.out.result(rows, _topic_config_table(rows, with_topic=True))


async def create_topic(admin: Admin, args: argparse.Namespace) -> None:
    brokers = await admin.create_topic(
        args.topic, queue_nums=args.queues, perm=args.perm, order=args.order, broker_names=args.broker or None
    )
    if args.message_type is not None:
        await _set_attributes(admin, args.topic, brokers, f"+{MESSAGE_TYPE_KEY}={args.message_type}")
    typed = f" ({args.message_type})" if args.message_type is not None else ""
    args.out.result(
        {
            "topic": args.topic,
            "queues": args.queues,
            "perm": args.perm,
            "order": args.order,
            "messageType": args.message_type,
            "brokers": brokers,
        },
        f"topic {args.topic}{typed}: {args.queues} queues on {', '.join(brokers)}",
    )


async def update_topic(admin: Admin, args: argparse.Namespace) -> None:
    settings = (args.read_queues, args.write_queues, args.perm, args.order)
    if all(v is None for v in settings) and args.message_type is None:
        raise UsageError(
            "nothing to change: give --read-queues, --write-queues, --perm, --order or --message-type"
        )
    if any(v is not None for v in settings):
        brokers = await admin.update_topic(
            args.topic,
            read_queue_nums=args.read_queues,
            write_queue_nums=args.write_queues,
            perm=args.perm,
            order=args.order,
            broker_names=args.broker or None,
        )
    else:
        brokers = args.broker or sorted(await admin.topic_config(args.topic))
        if not brokers:
            raise TopicNotExistError(f"topic {args.topic} exists on no broker")
    if args.message_type is not None:
        await _set_attributes(admin, args.topic, brokers, f"+{MESSAGE_TYPE_KEY}={args.message_type}")
    tables = await _topic_tables(admin)
    rows = [
        _topic_row(args.topic, name, table[args.topic])
        for name, table in sorted(tables.items())
        if args.topic in table
    ]
    args.out.result(
        {"topic": args.topic, "brokers": brokers, "configs": rows},
        f"topic {args.topic} updated",
        _topic_config_table(rows, with_topic=False),
    )


async def delete_topic(admin: Admin, args: argparse.Namespace) -> None:
    await admin.delete_topic(args.topic)
    args.out.result({"deleted": args.topic}, f"topic {args.topic} deleted")


async def route(admin: Admin, args: argparse.Namespace) -> None:
    route = await admin.topic_route(args.topic)
    t = make_table("broker", "read", "write", "perm", "master", right=("read", "write"))
    for q in route.queue_datas:
        t.add_row(
            q.broker_name,
            str(q.read_queue_nums),
            str(q.write_queue_nums),
            PERM_NAMES.get(q.perm, str(q.perm)),
            route.master(q.broker_name) or "-",
        )
    data = {
        "topic": route.topic,
        "queueDatas": route.queue_datas,
        "brokerAddrs": route.broker_addrs,
        "orderTopicConf": route.order_topic_conf,
    }
    args.out.result(data, t)


async def topic_status(admin: Admin, args: argparse.Namespace) -> None:
    stats = await admin.topic_stats(args.topic)
    t = make_table(
        "broker",
        "queue",
        "min offset",
        "max offset",
        "messages",
        "last stored",
        right=("queue", "min offset", "max offset", "messages"),
    )
    for s in stats:
        t.add_row(
            s.queue.broker_name,
            str(s.queue.queue_id),
            str(s.min_offset),
            str(s.max_offset),
            str(s.messages),
            local_time(s.last_update_timestamp),
        )
    data = [{**jsonable(s), "messages": s.messages} for s in stats]
    args.out.result(data, t, f"{sum(s.messages for s in stats)} message(s) in {len(stats)} queue(s)")


async def topic_groups(admin: Admin, args: argparse.Namespace) -> None:
    args.out.names(await admin.topic_consumer_groups(args.topic))


async def stats(admin: Admin, args: argparse.Namespace) -> None:
    if args.topic:
        topics = [args.topic]
    else:
        info = await admin.cluster_info()
        hidden = set(info.clusters) | set(info.brokers)
        topics = [t for t in await admin.list_topics() if args.all or not is_system_topic(t, hidden)]
    rows = [await admin.topic_traffic(t) for t in topics]
    t = make_table(
        "topic",
        "consumer group",
        "lag",
        "in TPS",
        "out TPS",
        "in 24h",
        "out 24h",
        right=("lag", "in TPS", "out TPS", "in 24h", "out 24h"),
    )
    for r in rows:
        if not r.groups:  # no consumer group: the topic's own row
            t.add_row(r.topic, "", "", f"{r.in_tps:.2f}", "", str(r.in_today), "")
        for g in r.groups:
            t.add_row(
                r.topic,
                g.group,
                str(g.lag),
                f"{r.in_tps:.2f}",
                f"{g.out_tps:.2f}",
                str(r.in_today),
                str(g.out_today),
            )
    args.out.result(rows, t)
