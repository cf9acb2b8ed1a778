"""`ferromq admin` on consumer and producer groups: groups, create-group, delete-group, progress,
connections, consumer-status, producers, reset-offset."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from ferromq.admin.output import UsageError, jsonable, local_time, make_table
from ferromq.admin.targets import master_addrs
from ferromq.client import Admin
from ferromq.client.admin import check_reply
from ferromq.client.admin_results import GroupConfig
from ferromq.jsonutil import dumps, loads_lenient
from ferromq.protocol.codes import RequestCode
from ferromq.protocol.command import RemotingCommand


async def _group_tables(admin: Admin) -> dict[str, dict[str, Any]]:
    """Group name -> its config as the first master that has it sent it (GET_ALL_SUBSCRIPTIONGROUP_CONFIG):
    what Admin.list_groups reads, with the 5.x fields (consumeMessageOrderly, ...) kept."""
    out: dict[str, dict[str, Any]] = {}
    for name, addr in (await master_addrs(admin, None)).items():
        cmd = RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        reply = check_reply(await admin.instance.invoke(addr, cmd, admin.timeout), f"groups of {name}")
        table = (loads_lenient(reply.body) if reply.body else {}).get("subscriptionGroupTable") or {}
        for group, cfg in table.items():
            if isinstance(cfg, dict):
                out.setdefault(str(group), cfg)
    return dict(sorted(out.items()))


async def list_groups(admin: Admin, args: argparse.Namespace) -> None:
    raw = await _group_tables(admin)
    t = make_table(
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
        rows.append({**jsonable(g), "consumeMessageOrderly": orderly})
    args.out.result(rows, t)


def _yes(b: bool) -> str:
    return "yes" if b else "no"


async def _create_orderly_group(admin: Admin, cfg: GroupConfig, broker_names: list[str] | None) -> list[str]:
    """Admin.create_group with `consumeMessageOrderly: true` in the body (mqadmin updateSubGroup -o true)."""
    masters = await master_addrs(admin, broker_names)
    body = dumps({**cfg.to_json(), "consumeMessageOrderly": True})
    for name, addr in masters.items():
        cmd = RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
        check_reply(
            await admin.instance.invoke(addr, cmd, admin.timeout),
            f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP {cfg.group_name} on {name}",
        )
    return list(masters)


async def create_group(admin: Admin, args: argparse.Namespace) -> None:
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
        {"group": {**jsonable(cfg), "consumeMessageOrderly": args.orderly}, "brokers": brokers},
        f"group {args.group} created or updated on {', '.join(brokers)}",
    )


async def delete_group(admin: Admin, args: argparse.Namespace) -> None:
    brokers = await admin.delete_group(
        args.group, remove_offsets=not args.keep_offsets, broker_names=args.broker or None
    )
    args.out.result(
        {"deleted": args.group, "brokers": brokers}, f"group {args.group} deleted on {', '.join(brokers)}"
    )


async def progress(admin: Admin, args: argparse.Namespace) -> None:
    progress = await admin.consumer_progress(args.group, args.topic)
    t = make_table(
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
            local_time(q.last_timestamp),
        )
    data = {
        "group": progress.group,
        "consumeTps": progress.consume_tps,
        "totalLag": progress.total_lag,
        "queues": progress.queues,
    }
    args.out.result(data, t, f"total lag {progress.total_lag}, consume TPS {progress.consume_tps:.2f}")


async def connections(admin: Admin, args: argparse.Namespace) -> None:
    cc = await admin.consumer_connections(args.group)
    t = make_table("client id", "address", "language", "version", right=("version",))
    for c in cc.connections:
        t.add_row(c.client_id, c.client_addr, c.language, str(c.version))
    subs = make_table("topic", "expression", "type")
    for s in cc.subscriptions.values():
        subs.add_row(s.topic, s.expression, s.expression_type)
    args.out.result(
        cc,
        t,
        subs,
        f"consume type {cc.consume_type or '-'}, message model {cc.message_model or '-'}, "
        f"consume from {cc.consume_from_where or '-'}",
    )


async def consumer_status(admin: Admin, args: argparse.Namespace) -> None:
    if args.client:
        clients = [args.client]
    else:
        clients = [c.client_id for c in (await admin.consumer_connections(args.group)).connections]
    infos = [await admin.consumer_running_info(args.group, c) for c in clients]
    t = make_table(
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
                local_time(q.last_pull_timestamp),
                local_time(q.last_consume_timestamp),
            )
    args.out.result(infos, t)


async def producers(admin: Admin, args: argparse.Namespace) -> None:
    pc = await admin.producer_connections(args.group, args.topic)
    t = make_table("client id", "address", "language", "version", right=("version",))
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


async def reset_offset(admin: Admin, args: argparse.Namespace) -> None:
    ts = parse_time(args.time)
    r = await admin.reset_offset_by_time(args.group, args.topic, ts, force=not args.no_force)
    t = make_table(
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
        r,
        f"group {args.group} on {args.topic} reset to {'the end' if ts == -1 else local_time(ts)}; {how}",
        t,
    )
