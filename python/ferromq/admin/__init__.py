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

This module is the entry point (`add_parser`, `run`: the parser, the exit codes); the commands are
in one module per family: `cluster` (clusters, brokers, their config, retention), `topics`, `groups`
(groups, offsets, clients), `messages`, `table_topics`, `auth` (ACL 2.0 users and rules), `lite`
(RocketMQ 5.5's lite topics), with
`output` (tables and JSON) and `targets` (which brokers a command asks).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from ferromq.admin.auth import (
    acl_create,
    acl_delete,
    acl_get,
    acl_list,
    acl_update,
    user_create,
    user_delete,
    user_get,
    user_list,
    user_update,
)
from ferromq.admin.cluster import (
    broker_config,
    broker_status,
    clean_expired_cq,
    delete_expired_commitlog,
    show_cluster,
    update_broker_config,
)
from ferromq.admin.groups import (
    connections,
    consumer_status,
    create_group,
    delete_group,
    list_groups,
    producers,
    progress,
    reset_offset,
)
from ferromq.admin.lite import add_commands as add_lite_commands
from ferromq.admin.messages import query_id, query_key, query_offset, view_message
from ferromq.admin.output import Command, Output, UsageError, print_json
from ferromq.admin.table_topics import show_table_topics
from ferromq.admin.topics import (
    MESSAGE_TYPES,
    create_topic,
    delete_topic,
    list_topics,
    route,
    stats,
    topic_groups,
    topic_status,
    update_topic,
)
from ferromq.client import Admin
from ferromq.errors import (
    BrokerError,
    ConnectionClosedError,
    FerroMQError,
    QueryNotFoundError,
    RequestTimeoutError,
    TopicNotExistError,
)
from ferromq.protocol.codes import ResponseCode

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
    cmd(
        "cluster",
        show_cluster,
        "clusters and brokers: address, version, in/out TPS, messages today, disk use",
    )
    c = cmd("broker-status", broker_status, "a broker's runtime info (every broker without -b)")
    c.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
    c = cmd("broker-config", broker_config, "a broker's configuration (every broker without -b)")
    c.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
    c = cmd(
        "update-broker-config", update_broker_config, "change broker config keys at run time (KEY=VALUE ...)"
    )
    broker_choice(c, "every master of this cluster (default: of all clusters)")
    c.add_argument("pairs", nargs="+", metavar="KEY=VALUE")

    # topics
    c = cmd("topics", list_topics, "list the topics the name server knows")
    c.add_argument("-c", "--cluster", help="only the topics of this cluster")
    c.add_argument(
        "-l",
        "--long",
        action="store_true",
        help="each broker's config of each topic: queues, permission, order, message type",
    )
    c = cmd("create-topic", create_topic, "create (or overwrite) a topic on every broker master")
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
        update_topic,
        "change a topic's queue counts, permission, order or message type, keeping the rest",
    )
    c.add_argument("topic")
    c.add_argument("--read-queues", type=int)
    c.add_argument("--write-queues", type=int)
    c.add_argument("--perm", type=int, choices=(2, 4, 6), help="2 write, 4 read, 6 both")
    c.add_argument("--order", type=_bool, metavar="true|false")
    c.add_argument("--message-type", choices=MESSAGE_TYPES, help="RocketMQ 5.x topic type (message.type)")
    c.add_argument("-b", "--broker", action="append", help="only on this broker name (repeatable)")
    c = cmd("delete-topic", delete_topic, "delete a topic on every broker and name server")
    c.add_argument("topic")
    c = cmd("route", route, "a topic's route: brokers, queue counts, permissions")
    c.add_argument("topic")
    c = cmd("topic-status", topic_status, "a topic's queues: min and max offset, messages, last store time")
    c.add_argument("topic")
    c = cmd("topic-groups", topic_groups, "the consumer groups of a topic")
    c.add_argument("topic")
    c = cmd("stats", stats, "per topic and consumer group: lag, in/out TPS, messages in 24 h (statsAll)")
    c.add_argument("--topic", help="only this topic")
    c.add_argument("--all", action="store_true", help="system, retry and dead-letter topics too")

    # groups
    cmd("groups", list_groups, "list the subscription groups of every broker master")
    c = cmd("create-group", create_group, "create or update a subscription group on every broker master")
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
    c = cmd("delete-group", delete_group, "delete a subscription group, its offsets and its retry/DLQ topics")
    c.add_argument("group")
    c.add_argument("--keep-offsets", action="store_true", help="keep the group's committed offsets")
    c.add_argument("-b", "--broker", action="append", help="only on this broker name (repeatable)")
    c = cmd("progress", progress, "a consumer group's offsets and lag per queue")
    c.add_argument("group")
    c.add_argument("--topic", help="only this topic")
    c = cmd("connections", connections, "a consumer group's online clients and subscriptions")
    c.add_argument("group")
    c = cmd("consumer-status", consumer_status, "what each online consumer of a group reports: its queues")
    c.add_argument("group")
    c.add_argument("--client", help="only this client id")
    c = cmd("producers", producers, "a producer group's online clients (asked of a topic's brokers)")
    c.add_argument("group")
    c.add_argument("topic")
    c = cmd("reset-offset", reset_offset, "move a group's offsets on a topic to a point in time")
    c.add_argument("group")
    c.add_argument("topic")
    c.add_argument(
        "--time", required=True, help="now | ms since epoch | 2024-05-01T12:00:00 | 2024-05-01#12:00:00:000"
    )
    c.add_argument("--no-force", action="store_true", help="only move offsets back, never forward")

    # messages
    c = cmd("query-key", query_key, "messages of a topic by key (through the index)")
    c.add_argument("topic")
    c.add_argument("key")
    c.add_argument("--max", type=int, default=32, help="at most this many per broker (default 32)")
    message_options(c)
    c = cmd("query-id", query_id, "a message by the msgId its producer was given (unique key)")
    c.add_argument("topic")
    c.add_argument("msg_id")
    message_options(c)
    c = cmd("view-message", view_message, "a message by its offsetMsgId (store host and CommitLog offset)")
    c.add_argument("offset_msg_id")
    message_options(c)
    c = cmd("query-offset", query_offset, "the message at an offset of a queue")
    c.add_argument("topic")
    c.add_argument("--broker-name", "-b", required=True, help="the queue's broker name")
    c.add_argument("--queue", "-q", type=int, required=True, help="queue id")
    c.add_argument("--offset", "-o", type=int, required=True, help="queue offset")
    message_options(c)

    # table topics
    c = cmd(
        "table-topics",
        show_table_topics,
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
    c = cmd("create", user_create, "create a user", users)
    c.add_argument("username")
    c.add_argument("-p", "--password", required=True)
    c.add_argument("-t", "--type", choices=("Super", "Normal"), help="default Normal")
    broker_choice(c, everywhere)
    c = cmd("update", user_update, "change a user's password, type or status", users)
    c.add_argument("username")
    c.add_argument("-p", "--password")
    c.add_argument("-t", "--type", choices=("Super", "Normal"))
    c.add_argument("-s", "--status", choices=("enable", "disable"))
    broker_choice(c, everywhere)
    c = cmd("delete", user_delete, "delete a user and its ACL", users)
    c.add_argument("username")
    broker_choice(c, everywhere)
    c = cmd("get", user_get, "a user (with its password, as Java answers)", users)
    c.add_argument("username")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")
    c = cmd("list", user_list, "the users", users)
    c.add_argument("--filter", help="only names containing this")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")
    acls = cmds.add_parser(
        "acl", help="ACL 2.0 access rules (mqadmin createAcl, getAcl, ...)"
    ).add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for name, func, what in (
        ("create", acl_create, "add entries to a subject's ACL"),
        ("update", acl_update, "change entries of a subject's ACL"),
    ):
        c = cmd(name, func, what, acls)
        c.add_argument("subject", help="User:NAME")
        c.add_argument("-r", "--resources", required=True, help="Topic:T,Group:G,Topic:prefix*,*")
        c.add_argument("-a", "--actions", required=True, help="Pub,Sub,Create,Update,Delete,Get,List,All")
        c.add_argument("-d", "--decision", default="Allow", choices=("Allow", "Deny"))
        c.add_argument("-i", "--source-ips", help="IPs or CIDR blocks, comma separated")
        broker_choice(c, everywhere)
    c = cmd("delete", acl_delete, "delete one resource's entry, or a subject's whole ACL", acls)
    c.add_argument("subject", help="User:NAME")
    c.add_argument("-r", "--resource", help="only this resource's entry")
    c.add_argument("--policy-type", choices=("Custom", "Default"))
    broker_choice(c, everywhere)
    c = cmd("get", acl_get, "a subject's ACL", acls)
    c.add_argument("subject", help="User:NAME")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")
    c = cmd("list", acl_list, "the ACLs", acls)
    c.add_argument("--subject-filter")
    c.add_argument("--resource-filter")
    c.add_argument("-b", "--broker-addr", help="ask this broker (default: the first one listed)")

    # lite topics (RocketMQ 5.5)
    add_lite_commands(cmd, cmds)

    # retention
    for name, what, func in (
        (
            "delete-expired-commitlog",
            "delete expired CommitLog files now, whatever the hour (mqadmin deleteExpiredCommitLog)",
            delete_expired_commitlog,
        ),
        (
            "clean-expired-cq",
            "drop the consume queues whose messages are all deleted (mqadmin cleanExpiredCQ)",
            clean_expired_cq,
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
            print_json(
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
