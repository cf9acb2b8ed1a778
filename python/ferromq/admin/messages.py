"""`ferromq admin` on messages: query-key, query-id, view-message, query-offset."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ferromq.admin.output import UsageError, local_time, make_table
from ferromq.client import Admin
from ferromq.client.message import MessageQueue, ReceivedMessage
from ferromq.errors import QueryNotFoundError

BODY_PREVIEW = 60


def _message_table(m: ReceivedMessage, full_body: bool) -> Table:
    t = make_table("field", "value")
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
        ("born", f"{local_time(m.born_timestamp)} from {m.born_host}"),
        ("stored", f"{local_time(m.store_timestamp)} on {m.store_host}"),
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


async def query_key(admin: Admin, args: argparse.Namespace) -> None:
    msgs = await admin.query_message_by_key(args.topic, args.key, max_num=args.max)
    if not msgs:
        raise QueryNotFoundError(f"no message of {args.topic} with key {args.key!r}")
    _show_messages(args, msgs)


async def query_id(admin: Admin, args: argparse.Namespace) -> None:
    _show_messages(args, [await admin.query_message_by_msg_id(args.topic, args.msg_id)])


async def view_message(admin: Admin, args: argparse.Namespace) -> None:
    try:
        msg = await admin.query_message_by_offset_msg_id(args.offset_msg_id)
    except ValueError as e:
        raise UsageError(str(e)) from None
    _show_messages(args, [msg])


async def query_offset(admin: Admin, args: argparse.Namespace) -> None:
    queue = MessageQueue(args.topic, args.broker_name, args.queue)
    _show_messages(args, [await admin.message_at(queue, args.offset)])
