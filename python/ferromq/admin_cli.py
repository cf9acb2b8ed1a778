"""`ferromq admin`: the everyday operator tasks, through the name server with the Python client's
`Admin` (so it works against ferromq and Apache RocketMQ brokers alike). Every command prints a
readable table, or JSON with `--json`.

Exit codes (also in `ferromq admin --help`):
    0  done
    1  a broker or name server refused the request (the error line names RocketMQ's response code)
    2  bad usage: unknown command, a missing or malformed argument
    3  not found: no such topic, message, or no consumer of the group online
    4  unreachable: no name server or broker answered in time
An error is one line on stderr: `ferromq admin COMMAND: what went wrong [CODE] (name server ADDR)`;
with `--json`, stdout also gets `{"error": {"message", "code", "codeName", "exitCode"}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from rich import box
from rich.console import Console
from rich.table import Table

from ferromq.client import Admin
from ferromq.client.admin import check_reply, is_system_topic
from ferromq.client.admin_results import GroupConfig
from ferromq.client.message import MessageQueue, ReceivedMessage
from ferromq.errors import (
    BrokerError,
    ConnectionClosedError,
    FerroMQError,
    QueryNotFoundError,
    RequestTimeoutError,
    TopicNotExistError,
)
from ferromq.jsonutil import dumps, loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import AUTO_CREATE_TOPIC_KEY
from ferromq.protocol.headers import CreateTopicRequestHeader

DEFAULT_NAMESRV = "127.0.0.1:9876"

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4

EXIT_CODES_HELP = """exit codes:
  0  done
  1  a broker or name server refused the request (the error names RocketMQ's response code)
  2  bad usage: unknown command, a missing or malformed argument
  3  not found: no such topic or message, or no consumer of the group online
  4  unreachable: no name server or broker answered in time

An error is one line on stderr: 'ferromq admin COMMAND: reason [CODE] (name server ADDR)'.
With --json, stdout also gets {"error": {"message", "code", "codeName", "exitCode"}}."""

NOT_FOUND_CODES = {
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.QUERY_NOT_FOUND,
    ResponseCode.CONSUMER_NOT_ONLINE,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
}
# Java's perm bits (PermName): 2 write, 4 read, 6 both.
PERM_NAMES = {0: "-", 2: "W", 4: "R", 6: "RW"}
# RocketMQ 5.x topic types (the `message.type` attribute; a 5.x broker refuses MIXED unless
# enableMixedMessageType is set). A topic without the attribute is NORMAL.
MESSAGE_TYPE_KEY = "message.type"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
BODY_PREVIEW = 60

Command = Callable[[Admin, argparse.Namespace], Awaitable[Any]]


class UsageError(ValueError):
    """An argument the command cannot use (exit code 2)."""


# -- output ------------------------------------------------------------------------------------


def _console() -> Console:
    # Piped output keeps whole rows (no wrapping at 80 columns); a terminal uses its width.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def _table(*columns: str, title: str | None = None, right: Sequence[str] = ()) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", overflow="fold")
    return t


def _ms(ts: int) -> str:
    """A store time (ms) as local time; `-` for 0."""
    if ts <= 0:
        return "-"
    return datetime.fromtimestamp(ts / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _body_json(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8"), "bodyEncoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode(), "bodyEncoding": "base64"}


def _jsonable(obj: Any) -> Any:
    """Results as JSON-ready data: dataclasses by field (camelCase keys), bytes as text."""
    if isinstance(obj, ReceivedMessage):
        out = {
            _camel(f.name): _jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name != "body"
        }
        return {**out, **_body_json(obj.body)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {_camel(f.name): _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return _body_json(obj)["body"]
    return obj


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(_jsonable(data), option=orjson.OPT_INDENT_2).decode() + "\n")


class Output:
    """Where a command's result goes: a rich table for people, JSON for scripts."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = _console()

    def result(self, data: Any, *renderables: Any) -> None:
        if self.as_json:
            _print_json(data)
        else:
            for r in renderables:
                self.console.print(r)

    def names(self, names: list[str]) -> None:
        """A plain list: one name a line (easy to pipe), or a JSON array."""
        if self.as_json:
            _print_json(names)
        else:
            sys.stdout.write("".join(f"{n}\n" for n in names))


# -- cluster and brokers -----------------------------------------------------------------------


async def _cluster(admin: Admin, args: argparse.Namespace) -> None:
    info = await admin.cluster_info()
    rows: list[dict[str, Any]] = []
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            for broker_id, addr in sorted(info.brokers[name].addrs.items()):
                try:
                    rt = await admin.broker_runtime_info(addr)
                except (FerroMQError, OSError) as e:
                    rows.append(
                        {
                            "cluster": cluster,
                            "brokerName": name,
                            "brokerId": broker_id,
                            "addr": addr,
                            "error": str(e),
                        }
                    )
                    continue
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "brokerId": broker_id,
                        "addr": addr,
                        "version": rt.version,
                        "putTps": rt.put_tps,
                        "getTps": rt.get_tps,
                        "putToday": rt.put_today,
                        "getToday": rt.get_today,
                        "commitLogDiskRatio": rt.commitlog_disk_ratio,
                    }
                )
    t = _table(
        "cluster",
        "broker",
        "id",
        "address",
        "version",
        "in TPS",
        "out TPS",
        "put today",
        "get today",
        "disk",
        right=("id", "in TPS", "out TPS", "put today", "get today", "disk"),
    )
    for r in rows:
        if "error" in r:
            t.add_row(
                r["cluster"],
                r["brokerName"],
                str(r["brokerId"]),
                r["addr"],
                f"[red]{r['error']}[/red]",
                "",
                "",
                "",
                "",
                "",
            )
        else:
            t.add_row(
                r["cluster"],
                r["brokerName"],
                str(r["brokerId"]),
                r["addr"],
                r["version"],
                f"{r['putTps']:.2f}",
                f"{r['getTps']:.2f}",
                str(r["putToday"]),
                str(r["getToday"]),
                f"{r['commitLogDiskRatio']:.0%}",
            )
    args.out.result(rows, t)


async def _broker_addrs(admin: Admin, broker_addr: str | None) -> list[str]:
    if broker_addr:
        return [broker_addr]
    info = await admin.cluster_info()
    return [a for b in sorted(info.brokers) for _, a in sorted(info.brokers[b].addrs.items())]


async def _broker_status(admin: Admin, args: argparse.Namespace) -> None:
    out = {}
    tables = []
    for addr in await _broker_addrs(admin, args.broker_addr):
        rt = await admin.broker_runtime_info(addr)
        out[addr] = rt.table
        t = _table("key", "value", title=f"broker {addr}")
        for k, v in sorted(rt.table.items()):
            t.add_row(k, v)
        tables.append(t)
    args.out.result(out, *tables)


async def _broker_config(admin: Admin, args: argparse.Namespace) -> None:
    out = {}
    tables = []
    for addr in await _broker_addrs(admin, args.broker_addr):
        cfg = await admin.broker_config(addr)
        out[addr] = cfg
        t = _table("key", "value", title=f"broker {addr}")
        for k, v in sorted(cfg.items()):
            t.add_row(k, v)
        tables.append(t)
    args.out.result(out, *tables)


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"expected KEY=VALUE, got {p!r}")
        out[key.strip()] = value.strip()
    return out


async def _update_broker_config(admin: Admin, args: argparse.Namespace) -> None:
    props = _key_values(args.pairs)
    addrs = await admin.update_broker_config(props, broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result(
        {"updated": addrs, "config": props},
        f"updated {', '.join(f'{k}={v}' for k, v in props.items())} on {', '.join(addrs)}",
    )


# -- topics ------------------------------------------------------------------------------------


async def _masters(admin: Admin, broker_names: list[str] | None) -> dict[str, str]:
    """Broker name -> master address, of every broker or of `broker_names` (each must have one)."""
    masters = (await admin.cluster_info()).master_addrs()
    if broker_names is None:
        return masters
    missing = [n for n in broker_names if n not in masters]
    if missing:
        raise BrokerError(f"no master for broker(s) {', '.join(missing)}", ResponseCode.SERVICE_NOT_AVAILABLE)
    return {n: masters[n] for n in broker_names}


async def _topic_tables(admin: Admin) -> dict[str, dict[str, dict[str, Any]]]:
    """Broker name -> its topicConfigTable as the broker sent it (GET_ALL_TOPIC_CONFIG of each master):
    what Admin.topic_config reads, with the 5.x `attributes` kept."""
    out = {}
    for name, addr in (await _masters(admin, None)).items():
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
    t = _table(*columns, "read", "write", "perm", "order", "message type", right=("read", "write"))
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
    masters = await _masters(admin, broker_names)
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


async def _topics(admin: Admin, args: argparse.Namespace) -> None:
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


async def _create_topic(admin: Admin, args: argparse.Namespace) -> None:
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


async def _update_topic(admin: Admin, args: argparse.Namespace) -> None:
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


async def _delete_topic(admin: Admin, args: argparse.Namespace) -> None:
    await admin.delete_topic(args.topic)
    args.out.result({"deleted": args.topic}, f"topic {args.topic} deleted")


async def _route(admin: Admin, args: argparse.Namespace) -> None:
    route = await admin.topic_route(args.topic)
    t = _table("broker", "read", "write", "perm", "master", right=("read", "write"))
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


async def _topic_status(admin: Admin, args: argparse.Namespace) -> None:
    stats = await admin.topic_stats(args.topic)
    t = _table(
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
            _ms(s.last_update_timestamp),
        )
    data = [{**_jsonable(s), "messages": s.messages} for s in stats]
    args.out.result(data, t, f"{sum(s.messages for s in stats)} message(s) in {len(stats)} queue(s)")


async def _topic_groups(admin: Admin, args: argparse.Namespace) -> None:
    args.out.names(await admin.topic_consumer_groups(args.topic))


async def _stats(admin: Admin, args: argparse.Namespace) -> None:
    if args.topic:
        topics = [args.topic]
    else:
        info = await admin.cluster_info()
        hidden = set(info.clusters) | set(info.brokers)
        topics = [t for t in await admin.list_topics() if args.all or not is_system_topic(t, hidden)]
    rows = [await admin.topic_traffic(t) for t in topics]
    t = _table(
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


# -- groups ------------------------------------------------------------------------------------


async def _group_tables(admin: Admin) -> dict[str, dict[str, Any]]:
    """Group name -> its config as the first master that has it sent it (GET_ALL_SUBSCRIPTIONGROUP_CONFIG):
    what Admin.list_groups reads, with the 5.x fields (consumeMessageOrderly, ...) kept."""
    out: dict[str, dict[str, Any]] = {}
    for name, addr in (await _masters(admin, None)).items():
        cmd = RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        reply = check_reply(await admin.instance.invoke(addr, cmd, admin.timeout), f"groups of {name}")
        table = (loads_lenient(reply.body) if reply.body else {}).get("subscriptionGroupTable") or {}
        for group, cfg in table.items():
            if isinstance(cfg, dict):
                out.setdefault(str(group), cfg)
    return dict(sorted(out.items()))


async def _groups(admin: Admin, args: argparse.Namespace) -> None:
    raw = await _group_tables(admin)
    t = _table(
        "group",
        "consume",
        "broadcast",
        "from min",
        "orderly",
        "retry queues",
        "max retries",
        right=("retry queues", "max retries"),
    )
    rows = []
    for name, data in raw.items():
        g = GroupConfig.from_json(data)
        orderly = bool(data.get("consumeMessageOrderly", False))
        t.add_row(
            name,
            _yes(g.consume_enable),
            _yes(g.consume_broadcast_enable),
            _yes(g.consume_from_min_enable),
            _yes(orderly),
            str(g.retry_queue_nums),
            str(g.retry_max_times),
        )
        rows.append({**_jsonable(g), "consumeMessageOrderly": orderly})
    args.out.result(rows, t)


def _yes(b: bool) -> str:
    return "yes" if b else "no"


async def _create_orderly_group(admin: Admin, cfg: GroupConfig, broker_names: list[str] | None) -> list[str]:
    """Admin.create_group with `consumeMessageOrderly: true` in the body (mqadmin updateSubGroup -o true)."""
    masters = await _masters(admin, broker_names)
    body = dumps({**cfg.to_json(), "consumeMessageOrderly": True})
    for name, addr in masters.items():
        cmd = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        check_reply(
            await admin.instance.invoke(addr, cmd, admin.timeout),
            f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP {cfg.group_name} on {name}",
        )
    return list(masters)


async def _create_group(admin: Admin, args: argparse.Namespace) -> None:
    cfg = GroupConfig(
        args.group,
        consume_enable=not args.disable_consume,
        consume_from_min_enable=not args.no_consume_from_min,
        consume_broadcast_enable=not args.no_broadcast,
        retry_queue_nums=args.retry_queues,
        retry_max_times=args.retry_max_times,
    )
    if args.orderly:
        brokers = await _create_orderly_group(admin, cfg, args.broker or None)
    else:
        brokers = await admin.create_group(cfg, broker_names=args.broker or None)
    args.out.result(
        {"group": {**_jsonable(cfg), "consumeMessageOrderly": args.orderly}, "brokers": brokers},
        f"group {args.group} created or updated on {', '.join(brokers)}",
    )


async def _delete_group(admin: Admin, args: argparse.Namespace) -> None:
    brokers = await admin.delete_group(
        args.group, remove_offsets=not args.keep_offsets, broker_names=args.broker or None
    )
    args.out.result(
        {"deleted": args.group, "brokers": brokers}, f"group {args.group} deleted on {', '.join(brokers)}"
    )


async def _progress(admin: Admin, args: argparse.Namespace) -> None:
    progress = await admin.consumer_progress(args.group, args.topic)
    t = _table(
        "topic",
        "broker",
        "queue",
        "broker offset",
        "consumer offset",
        "lag",
        "last consumed",
        right=("queue", "broker offset", "consumer offset", "lag"),
    )
    for q in progress.queues:
        mq = q.queue
        t.add_row(
            mq.topic,
            mq.broker_name,
            str(mq.queue_id),
            str(q.broker_offset),
            str(q.consumer_offset),
            str(q.lag),
            _ms(q.last_timestamp),
        )
    data = {
        "group": progress.group,
        "consumeTps": progress.consume_tps,
        "totalLag": progress.total_lag,
        "queues": progress.queues,
    }
    args.out.result(data, t, f"total lag {progress.total_lag}, consume TPS {progress.consume_tps:.2f}")


async def _connections(admin: Admin, args: argparse.Namespace) -> None:
    cc = await admin.consumer_connections(args.group)
    t = _table("client id", "address", "language", "version", right=("version",))
    for c in cc.connections:
        t.add_row(c.client_id, c.client_addr, c.language, str(c.version))
    subs = _table("topic", "expression", "type")
    for s in cc.subscriptions.values():
        subs.add_row(s.topic, s.expression, s.expression_type)
    args.out.result(
        cc,
        t,
        subs,
        f"consume type {cc.consume_type or '-'}, message model {cc.message_model or '-'}, "
        f"consume from {cc.consume_from_where or '-'}",
    )


async def _consumer_status(admin: Admin, args: argparse.Namespace) -> None:
    if args.client:
        clients = [args.client]
    else:
        clients = [c.client_id for c in (await admin.consumer_connections(args.group)).connections]
    infos = [await admin.consumer_running_info(args.group, c) for c in clients]
    t = _table(
        "client id",
        "topic",
        "broker",
        "queue",
        "commit offset",
        "cached",
        "locked",
        "last pull",
        "last consume",
        right=("queue", "commit offset", "cached"),
    )
    for info in infos:
        for q in info.queues:
            t.add_row(
                info.client_id,
                q.queue.topic,
                q.queue.broker_name,
                str(q.queue.queue_id),
                str(q.commit_offset),
                str(q.cached_count),
                _yes(q.locked),
                _ms(q.last_pull_timestamp),
                _ms(q.last_consume_timestamp),
            )
    args.out.result(infos, t)


async def _producers(admin: Admin, args: argparse.Namespace) -> None:
    pc = await admin.producer_connections(args.group, args.topic)
    t = _table("client id", "address", "language", "version", right=("version",))
    for c in pc.connections:
        t.add_row(c.client_id, c.client_addr, c.language, str(c.version))
    args.out.result(pc, t)


def parse_time(text: str) -> int:
    """A point in time for reset-offset: `now` (-1: the queues' ends), milliseconds since the
    epoch, an ISO date and time (local time unless it names a zone) or Java's
    `yyyy-MM-dd#HH:mm:ss:SSS`."""
    text = text.strip()
    if text == "now":
        return -1
    if text.lstrip("-").isdigit():
        return int(text)
    for fmt in ("%Y-%m-%d#%H:%M:%S:%f",):
        try:
            return int(datetime.strptime(text, fmt).timestamp() * 1000)
        except ValueError:
            pass
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise UsageError(
            f"not a time: {text!r} (use now, milliseconds, 2024-05-01T12:00:00 or 2024-05-01#12:00:00:000)"
        ) from None


async def _reset_offset(admin: Admin, args: argparse.Namespace) -> None:
    ts = parse_time(args.time)
    r = await admin.reset_offset_by_time(args.group, args.topic, ts, force=not args.no_force)
    t = _table(
        "broker", "queue", "previous offset", "new offset", right=("queue", "previous offset", "new offset")
    )
    for q in r.queues:
        t.add_row(
            q.queue.broker_name,
            str(q.queue.queue_id),
            "-" if q.previous is None else str(q.previous),
            str(q.offset),
        )
    how = (
        "the online consumers were told to reset"
        if r.clients_notified
        else "no consumer online: committed offsets written (consumers read them when they start)"
    )
    args.out.result(
        r, f"group {args.group} on {args.topic} reset to {'the end' if ts == -1 else _ms(ts)}; {how}", t
    )


# -- messages ----------------------------------------------------------------------------------


def _message_table(m: ReceivedMessage, full_body: bool) -> Table:
    t = _table("field", "value")
    body = m.body.decode("utf-8", errors="replace")
    if not full_body and len(body) > BODY_PREVIEW:
        body = body[:BODY_PREVIEW] + f"... ({len(m.body)} bytes; --body for all)"
    for k, v in (
        ("msgId", m.msg_id),
        ("offsetMsgId", m.offset_msg_id),
        ("topic", m.topic),
        ("tags", m.tags or ""),
        ("keys", " ".join(m.keys)),
        ("queue", f"{m.queue.broker_name} {m.queue.queue_id}"),
        ("queue offset", str(m.queue_offset)),
        ("commitlog offset", str(m.commitlog_offset)),
        ("born", f"{_ms(m.born_timestamp)} from {m.born_host}"),
        ("stored", f"{_ms(m.store_timestamp)} on {m.store_host}"),
        ("reconsume times", str(m.reconsume_times)),
        ("properties", " ".join(f"{k}={v}" for k, v in sorted(m.properties.items()))),
        ("body", body),
    ):
        t.add_row(k, v)
    return t


def _show_messages(args: argparse.Namespace, msgs: list[ReceivedMessage]) -> None:
    if args.body_file is not None:
        if len(msgs) != 1:
            raise UsageError(f"--body-file needs exactly one message, found {len(msgs)}")
        Path(args.body_file).write_bytes(msgs[0].body)
    args.out.result(msgs, *(_message_table(m, args.body) for m in msgs), f"{len(msgs)} message(s)")


async def _query_key(admin: Admin, args: argparse.Namespace) -> None:
    msgs = await admin.query_message_by_key(args.topic, args.key, max_num=args.max)
    if not msgs:
        raise QueryNotFoundError(f"no message of {args.topic} with key {args.key!r}")
    _show_messages(args, msgs)


async def _query_id(admin: Admin, args: argparse.Namespace) -> None:
    _show_messages(args, [await admin.query_message_by_msg_id(args.topic, args.msg_id)])


async def _view_message(admin: Admin, args: argparse.Namespace) -> None:
    try:
        msg = await admin.query_message_by_offset_msg_id(args.offset_msg_id)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _show_messages(args, [msg])


async def _query_offset(admin: Admin, args: argparse.Namespace) -> None:
    queue = MessageQueue(args.topic, args.broker_name, args.queue)
    _show_messages(args, [await admin.message_at(queue, args.offset)])


# -- retention ---------------------------------------------------------------------------------


async def _delete_expired_commitlog(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_expired_commitlog(broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result(
        {"told": addrs},
        f"expired CommitLog files will be deleted by the next retention rounds of {', '.join(addrs)}",
    )


async def _clean_expired_cq(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.clean_expired_consume_queue(broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result({"told": addrs}, f"consume queues with nothing left dropped on {', '.join(addrs)}")


# -- table topics ------------------------------------------------------------------------------


def _describe_tables(store: str | None, path: str | None, topic: str | None) -> list[dict[str, Any]]:
    """Each topic table's state, read from its files (and the lag from the store's, read-only)."""
    # deltalake is needed by this command only.
    from ferromq import _store
    from ferromq.tables.layout import is_uri, table_root
    from ferromq.tables.reader import describe, open_table

    root = table_root(store or "", path)
    if topic is not None:
        topics = [topic]
    elif is_uri(root):
        raise UsageError(f"name the --topic: the tables under {root} cannot be listed")
    else:
        topics = sorted(log.parent.name for log in Path(root).glob("*/_delta_log"))
    bounds: dict[str, dict[int, tuple[int, int]]] = {}
    if store is not None:
        view = _store.Store(store, read_only=True)
        try:
            for t, q, lo, hi in view.queues():
                bounds.setdefault(t, {})[q] = (lo, hi)
        finally:
            view.close()
    out = []
    for t in topics:
        table = open_table(root, t)
        if table is None:
            raise TopicNotExistError(f"topic {t} has no table under {root}")
        out.append({"topic": t, **describe(table, bounds.get(t, {}) if store is not None else None)})
    return out


async def _table_topics(admin: Admin, args: argparse.Namespace) -> None:
    if args.store is None and args.path is None:
        await _brokers_table_topics(admin, args)
        return
    if args.broker_addr:
        raise UsageError("-b asks a broker, --store and --path read the files: give one or the other")
    tables = await asyncio.to_thread(_describe_tables, args.store, args.path, args.topic)
    t = _table(
        "topic",
        "version",
        "files",
        "rows",
        "queues",
        "lag",
        "last commit",
        right=("version", "files", "rows", "queues", "lag"),
    )
    for d in tables:
        lag = d.get("lag")
        t.add_row(
            d["topic"],
            str(d["version"]),
            str(d["files"]),
            str(d["rows"]),
            str(len(d["queues"])),
            "-" if lag is None else str(lag),
            _ms(d["lastCommitTimestamp"] or 0),
        )
    args.out.result(tables, t, f"{len(tables)} table topic(s)")


async def _brokers_table_topics(admin: Admin, args: argparse.Namespace) -> None:
    """What the brokers report of their table topics (runtime info), since they started."""
    rows: list[dict[str, Any]] = []
    for addr in await _broker_addrs(admin, args.broker_addr):
        rt = await admin.broker_runtime_info(addr)
        rows += [
            {"brokerAddr": addr, **s.to_json()} for s in rt.table_topics if args.topic in (None, s.topic)
        ]
    right = ("rows tiered", "lag", "commits", "version", "failures", "lost", "cpu s")
    t = _table(
        "broker",
        "topic",
        "rows tiered",
        "lag",
        "commits",
        "version",
        "failures",
        "lost",
        "cpu s",
        "last commit",
        "last error",
        right=right,
    )
    for r in rows:
        t.add_row(
            r["brokerAddr"],
            r["topic"],
            str(r["rowsTiered"]),
            str(r["lag"]),
            str(r["commits"]),
            "-" if r["version"] is None else str(r["version"]),
            str(r["failures"]),
            str(r["rowsLost"]),
            f"{r['tierCpuSeconds'] + r['maintainCpuSeconds']:.1f}",
            _ms(r["lastCommitTimestamp"] or 0),
            r["lastError"] or "",
        )
    args.out.result(rows, t, f"{len(rows)} table topic(s), as the brokers report them")


# -- the parser --------------------------------------------------------------------------------


async def _user_create(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.create_user(
        args.username, args.password, args.type, broker_addr=args.broker_addr, cluster=args.cluster
    )
    args.out.result(
        {"created": args.username, "brokers": addrs}, f"created user {args.username} on {', '.join(addrs)}"
    )


async def _user_update(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.update_user(
        args.username,
        args.password,
        args.type,
        args.status,
        broker_addr=args.broker_addr,
        cluster=args.cluster,
    )
    args.out.result(
        {"updated": args.username, "brokers": addrs}, f"updated user {args.username} on {', '.join(addrs)}"
    )


async def _user_delete(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_user(args.username, broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result(
        {"deleted": args.username, "brokers": addrs}, f"deleted user {args.username} on {', '.join(addrs)}"
    )


def _users_table(users: list[dict[str, Any]]) -> Table:
    t = _table("username", "type", "status")
    for u in users:
        t.add_row(str(u.get("username", "")), str(u.get("userType", "")), str(u.get("userStatus", "")))
    return t


async def _user_get(admin: Admin, args: argparse.Namespace) -> None:
    user = await admin.get_user(args.username, broker_addr=args.broker_addr)
    if user is None:
        raise QueryNotFoundError(f"no user {args.username}")
    args.out.result(user, _users_table([user]))


async def _user_list(admin: Admin, args: argparse.Namespace) -> None:
    users = await admin.list_users(args.filter, broker_addr=args.broker_addr)
    args.out.result(users, _users_table(users))


def _split_list(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


async def _acl_put(admin: Admin, args: argparse.Namespace, update: bool) -> None:
    addrs = await admin.put_acl(
        args.subject,
        _split_list(args.resources),
        _split_list(args.actions),
        args.decision,
        _split_list(args.source_ips),
        update=update,
        broker_addr=args.broker_addr,
        cluster=args.cluster,
    )
    args.out.result(
        {"subject": args.subject, "brokers": addrs}, f"ACL of {args.subject} set on {', '.join(addrs)}"
    )


async def _acl_create(admin: Admin, args: argparse.Namespace) -> None:
    await _acl_put(admin, args, update=False)


async def _acl_update(admin: Admin, args: argparse.Namespace) -> None:
    await _acl_put(admin, args, update=True)


async def _acl_delete(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_acl(
        args.subject, args.resource, args.policy_type, broker_addr=args.broker_addr, cluster=args.cluster
    )
    args.out.result(
        {"subject": args.subject, "brokers": addrs}, f"ACL of {args.subject} deleted on {', '.join(addrs)}"
    )


def _acls_table(acls: list[dict[str, Any]]) -> Table:
    t = _table("subject", "policy", "resource", "actions", "source IPs", "decision")
    for acl in acls:
        for policy in acl.get("policies") or []:
            for e in policy.get("entries") or []:
                t.add_row(
                    str(acl.get("subject", "")),
                    str(policy.get("policyType", "")),
                    str(e.get("resource", "")),
                    ",".join(e.get("actions") or []),
                    ",".join(e.get("sourceIps") or []),
                    str(e.get("decision", "")),
                )
    return t


async def _acl_get(admin: Admin, args: argparse.Namespace) -> None:
    acl = await admin.get_acl(args.subject, broker_addr=args.broker_addr)
    if acl is None:
        raise QueryNotFoundError(f"no ACL for {args.subject}")
    args.out.result(acl, _acls_table([acl]))


async def _acl_list(admin: Admin, args: argparse.Namespace) -> None:
    acls = await admin.list_acls(args.subject_filter, args.resource_filter, broker_addr=args.broker_addr)
    args.out.result(acls, _acls_table(acls))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `admin` and its subcommands to the `ferromq` parser."""
    p = sub.add_parser(
        "admin",
        help="cluster, brokers, topics, groups, offsets and messages (as mqadmin)",
        description="The everyday operator tasks, against ferromq or Apache RocketMQ brokers.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", DEFAULT_NAMESRV),
        help=f"name server address (default $NAMESRV_ADDR or {DEFAULT_NAMESRV})",
    )
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request (default 5)")
    p.add_argument(
        "--access-key",
        default=os.environ.get("FERROMQ_ACCESS_KEY"),
        help="sign requests for brokers with aclEnable=true (default $FERROMQ_ACCESS_KEY)",
    )
    p.add_argument(
        "--secret-key",
        default=os.environ.get("FERROMQ_SECRET_KEY"),
        help="the access key's secret (default $FERROMQ_SECRET_KEY; the environment keeps it out of ps)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)
    # --json after the subcommand too (`ferromq admin topics --json`).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of tables"
    )
    cmds = p.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")

    def cmd(name: str, func: Command, what: str, within: Any = None) -> argparse.ArgumentParser:
        c = (within or cmds).add_parser(
            name,
            help=what,
            description=what,
            parents=[common],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        c.set_defaults(admin=func)
        return c

    def broker_choice(c: argparse.ArgumentParser, cluster_help: str = "every master of this cluster") -> None:
        where = c.add_mutually_exclusive_group()
        where.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
        where.add_argument("-c", "--cluster", help=cluster_help)

    def message_options(c: argparse.ArgumentParser) -> None:
        c.add_argument("--body", action="store_true", help="print the whole body (default: its start)")
        c.add_argument("--body-file", metavar="PATH", help="write the message's raw body to PATH")

    # cluster and brokers
    cmd("cluster", _cluster, "clusters and brokers: address, version, in/out TPS, messages today, disk use")
    c = cmd("broker-status", _broker_status, "a broker's runtime info (every broker without -b)")
    c.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
    c = cmd("broker-config", _broker_config, "a broker's configuration (every broker without -b)")
    c.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
    c = cmd(
        "update-broker-config", _update_broker_config, "change broker config keys at run time (KEY=VALUE ...)"
    )
    broker_choice(c, "every master of this cluster (default: of all clusters)")
    c.add_argument("pairs", nargs="+", metavar="KEY=VALUE")

    # topics
    c = cmd("topics", _topics, "list the topics the name server knows")
    c.add_argument("-c", "--cluster", help="only the topics of this cluster")
    c.add_argument(
        "-l",
        "--long",
        action="store_true",
        help="each broker's config of each topic: queues, permission, order, message type",
    )
    c = cmd("create-topic", _create_topic, "create (or overwrite) a topic on every broker master")
    c.add_argument("topic")
    c.add_argument("--queues", type=int, default=4, help="read and write queues (default 4)")
    c.add_argument("--perm", type=int, choices=(2, 4, 6), default=6, help="2 write, 4 read, 6 both (default)")
    c.add_argument("--order", action="store_true", help="an ordered topic")
    c.add_argument(
        "--message-type",
        choices=MESSAGE_TYPES,
        help="RocketMQ 5.x topic type (the message.type attribute; RocketMQ 5.x brokers and ferromq)",
    )
    c.add_argument("-b", "--broker", action="append", help="only on this broker name (repeatable)")
    c = cmd(
        "update-topic",
        _update_topic,
        "change a topic's queue counts, permission, order or message type, keeping the rest",
    )
    c.add_argument("topic")
    c.add_argument("--read-queues", type=int)
    c.add_argument("--write-queues", type=int)
    c.add_argument("--perm", type=int, choices=(2, 4, 6), help="2 write, 4 read, 6 both")
    c.add_argument("--order", type=_bool, metavar="true|false")
    c.add_argument("--message-type", choices=MESSAGE_TYPES, help="RocketMQ 5.x topic type (message.type)")
    c.add_argument("-b", "--broker", action="append", help="only on this broker name (repeatable)")
    c = cmd("delete-topic", _delete_topic, "delete a topic on every broker and name server")
    c.add_argument("topic")
    c = cmd("route", _route, "a topic's route: brokers, queue counts, permissions")
    c.add_argument("topic")
    c = cmd("topic-status", _topic_status, "a topic's queues: min and max offset, messages, last store time")
    c.add_argument("topic")
    c = cmd("topic-groups", _topic_groups, "the consumer groups of a topic")
    c.add_argument("topic")
    c = cmd("stats", _stats, "per topic and consumer group: lag, in/out TPS, messages in 24 h (statsAll)")
    c.add_argument("--topic", help="only this topic")
    c.add_argument("--all", action="store_true", help="system, retry and dead-letter topics too")

    # groups
    cmd("groups", _groups, "list the subscription groups of every broker master")
    c = cmd("create-group", _create_group, "create or update a subscription group on every broker master")
    c.add_argument("group")
    c.add_argument("--retry-queues", type=int, default=1, help="retry queues (default 1)")
    c.add_argument("--retry-max-times", type=int, default=16, help="deliveries before the DLQ (default 16)")
    c.add_argument("--disable-consume", action="store_true", help="the group may not consume")
    c.add_argument("--no-broadcast", action="store_true", help="no broadcasting consumption")
    c.add_argument("--no-consume-from-min", action="store_true", help="consumeFromMinEnable=false")
    c.add_argument(
        "--orderly", action="store_true", help="an orderly group (consumeMessageOrderly, RocketMQ 5.x)"
    )
    c.add_argument("-b", "--broker", action="append", help="only on this broker name (repeatable)")
    c = cmd(
        "delete-group", _delete_group, "delete a subscription group, its offsets and its retry/DLQ topics"
    )
    c.add_argument("group")
    c.add_argument("--keep-offsets", action="store_true", help="keep the group's committed offsets")
    c.add_argument("-b", "--broker", action="append", help="only on this broker name (repeatable)")
    c = cmd("progress", _progress, "a consumer group's offsets and lag per queue")
    c.add_argument("group")
    c.add_argument("--topic", help="only this topic")
    c = cmd("connections", _connections, "a consumer group's online clients and subscriptions")
    c.add_argument("group")
    c = cmd("consumer-status", _consumer_status, "what each online consumer of a group reports: its queues")
    c.add_argument("group")
    c.add_argument("--client", help="only this client id")
    c = cmd("producers", _producers, "a producer group's online clients (asked of a topic's brokers)")
    c.add_argument("group")
    c.add_argument("topic")
    c = cmd("reset-offset", _reset_offset, "move a group's offsets on a topic to a point in time")
    c.add_argument("group")
    c.add_argument("topic")
    c.add_argument(
        "--time", required=True, help="now | ms since epoch | 2024-05-01T12:00:00 | 2024-05-01#12:00:00:000"
    )
    c.add_argument("--no-force", action="store_true", help="only move offsets back, never forward")

    # messages
    c = cmd("query-key", _query_key, "messages of a topic by key (through the index)")
    c.add_argument("topic")
    c.add_argument("key")
    c.add_argument("--max", type=int, default=32, help="at most this many per broker (default 32)")
    message_options(c)
    c = cmd("query-id", _query_id, "a message by the msgId its producer was given (unique key)")
    c.add_argument("topic")
    c.add_argument("msg_id")
    message_options(c)
    c = cmd("view-message", _view_message, "a message by its offsetMsgId (store host and CommitLog offset)")
    c.add_argument("offset_msg_id")
    message_options(c)
    c = cmd("query-offset", _query_offset, "the message at an offset of a queue")
    c.add_argument("topic")
    c.add_argument("--broker-name", "-b", required=True, help="the queue's broker name")
    c.add_argument("--queue", "-q", type=int, required=True, help="queue id")
    c.add_argument("--offset", "-o", type=int, required=True, help="queue offset")
    message_options(c)

    # table topics
    c = cmd(
        "table-topics",
        _table_topics,
        "table topics (tableTopics): as the brokers report them (rows tiered since they started, lag, "
        "commits, failures), or with --store/--path each table's version, files, rows, committed "
        "offsets and lag, read from the table's files",
    )
    c.add_argument("-b", "--broker-addr", help="ask this broker only (ip:port; default: every broker)")
    c.add_argument("--store", help="the broker's store root: tables under STORE/tables, lag behind its log")
    c.add_argument("--path", help="the tables' directory or URI (tableTopicPath; default STORE/tables)")
    c.add_argument("--topic", help="only this topic")

    # ACL 2.0
    users = cmds.add_parser("user", help="ACL 2.0 users (mqadmin createUser, getUser, ...)").add_subparsers(
        dest="user_command", required=True, metavar="ACTION"
    )
    everywhere = "every broker of this cluster (default: all clusters)"
    c = cmd("create", _user_create, "create a user", users)
    c.add_argument("username")
    c.add_argument("-p", "--password", required=True)
    c.add_argument("-t", "--type", choices=("Super", "Normal"), help="default Normal")
    broker_choice(c, everywhere)
    c = cmd("update", _user_update, "change a user's password, type or status", users)
    c.add_argument("username")
    c.add_argument("-p", "--password")
    c.add_argument("-t", "--type", choices=("Super", "Normal"))
    c.add_argument("-s", "--status", choices=("enable", "disable"))
    broker_choice(c, everywhere)
    c = cmd("delete", _user_delete, "delete a user and its ACL", users)
    c.add_argument("username")
    broker_choice(c, everywhere)
    c = cmd("get", _user_get, "a user (with its password, as Java answers)", users)
    c.add_argument("username")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")
    c = cmd("list", _user_list, "the users", users)
    c.add_argument("--filter", help="only names containing this")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")
    acls = cmds.add_parser(
        "acl", help="ACL 2.0 access rules (mqadmin createAcl, getAcl, ...)"
    ).add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for name, func, what in (
        ("create", _acl_create, "add entries to a subject's ACL"),
        ("update", _acl_update, "change entries of a subject's ACL"),
    ):
        c = cmd(name, func, what, acls)
        c.add_argument("subject", help="User:NAME")
        c.add_argument("-r", "--resources", required=True, help="Topic:T,Group:G,Topic:prefix*,*")
        c.add_argument("-a", "--actions", required=True, help="Pub,Sub,Create,Update,Delete,Get,List,All")
        c.add_argument("-d", "--decision", default="Allow", choices=("Allow", "Deny"))
        c.add_argument("-i", "--source-ips", help="IPs or CIDR blocks, comma separated")
        broker_choice(c, everywhere)
    c = cmd("delete", _acl_delete, "delete one resource's entry, or a subject's whole ACL", acls)
    c.add_argument("subject", help="User:NAME")
    c.add_argument("-r", "--resource", help="only this resource's entry")
    c.add_argument("--policy-type", choices=("Custom", "Default"))
    broker_choice(c, everywhere)
    c = cmd("get", _acl_get, "a subject's ACL", acls)
    c.add_argument("subject", help="User:NAME")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")
    c = cmd("list", _acl_list, "the ACLs", acls)
    c.add_argument("--subject-filter")
    c.add_argument("--resource-filter")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")

    # retention
    for name, what, func in (
        (
            "delete-expired-commitlog",
            "delete expired CommitLog files now, whatever the hour (mqadmin deleteExpiredCommitLog)",
            _delete_expired_commitlog,
        ),
        (
            "clean-expired-cq",
            "drop the consume queues whose messages are all deleted (mqadmin cleanExpiredCQ)",
            _clean_expired_cq,
        ),
    ):
        c = cmd(name, func, what)
        broker_choice(c, "every broker of this cluster (default: all clusters)")


def _bool(text: str) -> bool:
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


# -- running -----------------------------------------------------------------------------------


def _exit_code(e: BaseException) -> int:
    if isinstance(e, UsageError) or (isinstance(e, ValueError) and not isinstance(e, FerroMQError)):
        return EXIT_USAGE
    if isinstance(e, TopicNotExistError | QueryNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(e, ConnectionClosedError | RequestTimeoutError | OSError | TimeoutError):
        return EXIT_UNREACHABLE
    if isinstance(e, BrokerError) and e.code in NOT_FOUND_CODES:
        return EXIT_NOT_FOUND
    return EXIT_REFUSED


def _reason(e: BaseException) -> str:
    reason = str(e) or type(e).__name__
    if isinstance(e, BrokerError):
        reason += f" [{e.code.name}]"
    elif isinstance(e, ConnectionRefusedError):
        reason = f"connection refused: {reason}"
    return reason


async def _run(args: argparse.Namespace) -> None:
    command: Command = args.admin
    if bool(args.access_key) != bool(args.secret_key):
        raise UsageError("--access-key and --secret-key go together")
    async with Admin(
        args.namesrv, timeout=args.timeout, access_key=args.access_key, secret_key=args.secret_key
    ) as admin:
        await command(admin, args)


def run(args: argparse.Namespace) -> int:
    args.out = Output(bool(getattr(args, "json", False)))
    started = time.monotonic()
    try:
        asyncio.run(_run(args))
    except (FerroMQError, OSError, TimeoutError, ValueError) as e:
        code = _exit_code(e)
        reason = _reason(e)
        if isinstance(e, TimeoutError) and not str(e):
            reason = f"no answer in {time.monotonic() - started:.1f} s"
        if args.out.as_json:
            broker_code = e.code if isinstance(e, BrokerError) else None
            _print_json(
                {
                    "error": {
                        "message": reason,
                        "code": None if broker_code is None else int(broker_code),
                        "codeName": None if broker_code is None else broker_code.name,
                        "exitCode": code,
                    }
                }
            )
        print(f"ferromq admin {args.admin_command}: {reason} (name server {args.namesrv})", file=sys.stderr)
        return code
    return EXIT_OK
