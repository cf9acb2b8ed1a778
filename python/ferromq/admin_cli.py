"""`ferromq admin`: the everyday cluster questions, answered through the name server with the
Python client's `Admin` (so it works against ferromq and Apache RocketMQ brokers alike).

    ferromq admin [-n 127.0.0.1:9876] topics
    ferromq admin cluster
    ferromq admin create-topic Orders [--queues 8] [--order]
    ferromq admin route Orders
    ferromq admin progress GROUP [--topic Orders]
    ferromq admin query-key Orders order-1
    ferromq admin query-id Orders MSG_ID
    ferromq admin delete-expired-commitlog [-b BROKER_ADDR | -c CLUSTER]
    ferromq admin clean-expired-cq [-b BROKER_ADDR | -c CLUSTER]

A failed request (no name server there, a topic that does not exist, ...) is one line on stderr
and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable

from ferromq.client import Admin
from ferromq.client.message import ReceivedMessage
from ferromq.errors import FerroMQError

DEFAULT_NAMESRV = "127.0.0.1:9876"

Command = Callable[[Admin, argparse.Namespace], Awaitable[None]]


async def _topics(admin: Admin, args: argparse.Namespace) -> None:
    for topic in sorted(await admin.list_topics()):
        print(topic)


async def _cluster(admin: Admin, args: argparse.Namespace) -> None:
    info = await admin.cluster_info()
    print(f"{'cluster':<20} {'broker':<24} {'id':>3}  address")
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            for broker_id, addr in sorted(info.brokers[name].addrs.items()):
                print(f"{cluster:<20} {name:<24} {broker_id:>3}  {addr}")


async def _create_topic(admin: Admin, args: argparse.Namespace) -> None:
    brokers = await admin.create_topic(args.topic, queue_nums=args.queues, order=args.order)
    print(f"topic {args.topic}: {args.queues} queues on {', '.join(brokers)}")


async def _route(admin: Admin, args: argparse.Namespace) -> None:
    route = await admin.topic_route(args.topic)
    print(f"{'broker':<24} {'read':>5} {'write':>5} {'perm':>4}  master")
    for q in route.queue_datas:
        print(
            f"{q.broker_name:<24} {q.read_queue_nums:>5} {q.write_queue_nums:>5} {q.perm:>4}  "
            f"{route.master(q.broker_name) or '-'}"
        )


async def _progress(admin: Admin, args: argparse.Namespace) -> None:
    progress = await admin.consumer_progress(args.group, args.topic)
    print(
        f"{'topic':<32} {'broker':<20} {'queue':>5} {'broker offset':>14} {'consumer offset':>16} {'lag':>8}"
    )
    for q in progress.queues:
        mq = q.queue
        print(
            f"{mq.topic:<32} {mq.broker_name:<20} {mq.queue_id:>5} {q.broker_offset:>14} "
            f"{q.consumer_offset:>16} {q.lag:>8}"
        )
    print(f"total lag {progress.total_lag}")


def _print_message(m: ReceivedMessage) -> None:
    body = m.body.decode("utf-8", errors="replace")
    print(
        f"{m.msg_id}  {m.topic} queue {m.queue.queue_id} offset {m.queue_offset}  tags={m.tags or ''} "
        f"keys={' '.join(m.keys)}  body={body[:60]!r}"
    )


async def _query_key(admin: Admin, args: argparse.Namespace) -> None:
    msgs = await admin.query_message_by_key(args.topic, args.key)
    for m in msgs:
        _print_message(m)
    print(f"{len(msgs)} message(s)")


async def _query_id(admin: Admin, args: argparse.Namespace) -> None:
    _print_message(await admin.query_message_by_msg_id(args.topic, args.msg_id))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `admin` and its subcommands to the `ferromq` parser."""
    p = sub.add_parser("admin", help="topics, cluster, consumer progress and message queries")
    p.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", DEFAULT_NAMESRV),
        help=f"name server address (default $NAMESRV_ADDR or {DEFAULT_NAMESRV})",
    )
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request (default 5)")
    p.set_defaults(func=run)
    cmds = p.add_subparsers(dest="admin_command", required=True)

    c = cmds.add_parser("topics", help="list the topics the name server knows")
    c.set_defaults(admin=_topics)
    c = cmds.add_parser("cluster", help="list clusters, brokers and their addresses")
    c.set_defaults(admin=_cluster)
    c = cmds.add_parser("create-topic", help="create or update a topic on every broker master")
    c.add_argument("topic")
    c.add_argument("--queues", type=int, default=4, help="read and write queues (default 4)")
    c.add_argument("--order", action="store_true", help="an ordered topic")
    c.set_defaults(admin=_create_topic)
    c = cmds.add_parser("route", help="a topic's route: brokers, queue counts, permissions")
    c.add_argument("topic")
    c.set_defaults(admin=_route)
    c = cmds.add_parser("progress", help="a consumer group's offsets and lag per queue")
    c.add_argument("group")
    c.add_argument("--topic", help="only this topic")
    c.set_defaults(admin=_progress)
    c = cmds.add_parser("query-key", help="messages of a topic by key (through the index)")
    c.add_argument("topic")
    c.add_argument("key")
    c.set_defaults(admin=_query_key)
    c = cmds.add_parser("query-id", help="a message by the msgId its producer was given")
    c.add_argument("topic")
    c.add_argument("msg_id")
    c.set_defaults(admin=_query_id)
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
        c = cmds.add_parser(name, help=what)
        where = c.add_mutually_exclusive_group()
        where.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
        where.add_argument("-c", "--cluster", help="every broker of this cluster (default: all clusters)")
        c.set_defaults(admin=func)


async def _delete_expired_commitlog(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_expired_commitlog(broker_addr=args.broker_addr, cluster=args.cluster)
    print(f"expired CommitLog files will be deleted by the next retention rounds of {', '.join(addrs)}")


async def _clean_expired_cq(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.clean_expired_consume_queue(broker_addr=args.broker_addr, cluster=args.cluster)
    print(f"consume queues with nothing left dropped on {', '.join(addrs)}")


async def _run(args: argparse.Namespace) -> None:
    command: Command = args.admin
    async with Admin(args.namesrv, timeout=args.timeout) as admin:
        await command(admin, args)


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_run(args))
    except (FerroMQError, OSError, TimeoutError) as e:
        reason = str(e) or type(e).__name__
        print(f"ferromq admin {args.admin_command}: {reason} (name server {args.namesrv})", file=sys.stderr)
        return 1
    return 0
