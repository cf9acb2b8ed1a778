"""`ferromq admin lite ...`: RocketMQ 5.5's lite topics as the brokers report them, the commands of
mqadmin 5.5.0's `lite` family: broker (getBrokerLiteInfo), parent (getParentTopicInfo), topic
(getLiteTopicInfo), client (getLiteClientInfo), group (getLiteGroupInfo) and trigger-dispatch
(triggerLiteDispatch). Against ferromq and Apache RocketMQ 5.5 brokers alike."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ferromq.admin.output import local_time, make_table
from ferromq.admin.targets import broker_addrs
from ferromq.client import Admin


def _time(ts: Any) -> str:
    return local_time(int(ts)) if isinstance(ts, int) and ts > 0 else "-"


COUNTS = ("max LMQ", "current LMQ", "subscriptions", "order infos", "CQ table", "offset table", "event map")


async def lite_broker(admin: Admin, args: argparse.Namespace) -> None:
    out: dict[str, Any] = {}
    t = make_table("broker", "store type", *COUNTS, right=COUNTS)
    for addr in await broker_addrs(admin, args.broker_addr):
        info = out[addr] = await admin.broker_lite_info(addr)
        t.add_row(
            addr,
            str(info.get("storeType", "-")),
            *(
                str(info.get(k, "-"))
                for k in (
                    "maxLmqNum",
                    "currentLmqNum",
                    "liteSubscriptionCount",
                    "orderInfoCount",
                    "cqTableSize",
                    "offsetTableSize",
                    "eventMapSize",
                )
            ),
        )
    extra = []
    if args.detail:
        for addr, info in out.items():
            extra.append(f"{addr} topics (TTL, minutes): {json.dumps(info.get('topicMeta') or {})}")
            extra.append(f"{addr} groups by topic: {json.dumps(info.get('groupMeta') or {})}")
    args.out.result(out, t, *extra)


async def lite_parent(admin: Admin, args: argparse.Namespace) -> None:
    found = await admin.parent_topic_info(args.topic)
    t = make_table("broker", "TTL", "lite topics", "LMQs", "groups", right=("TTL", "lite topics", "LMQs"))
    for name, info in found.items():
        t.add_row(
            name,
            str(info.get("ttl", "-")),
            str(info.get("liteTopicCount", "-")),
            str(info.get("lmqNum", "-")),
            ", ".join(info.get("groups") or []) or "-",
        )
    args.out.result(found, t)


async def lite_topic(admin: Admin, args: argparse.Namespace) -> None:
    found = await admin.lite_topic_info(args.parent, args.lite_topic)
    t = make_table(
        "broker",
        "min offset",
        "max offset",
        "last stored",
        "sharding",
        "subscribers",
        right=("min offset", "max offset"),
    )
    for name, info in found.items():
        offsets = info.get("topicOffset") or {}
        subscribers = info.get("subscriber") or []
        t.add_row(
            name,
            str(offsets.get("minOffset", 0)),
            str(offsets.get("maxOffset", 0)),
            _time(offsets.get("lastUpdateTimestamp")),
            str(info.get("shardingToBroker", "-")).lower(),
            ", ".join(f"{s.get('clientId')}@{s.get('group')}" for s in subscribers) or "-",
        )
    args.out.result(found, t)


async def lite_client(admin: Admin, args: argparse.Namespace) -> None:
    found = await admin.lite_client_info(args.parent, args.group, args.client_id, args.max)
    t = make_table("broker", "lite topics", "last access", "names", right=("lite topics",))
    for name, info in found.items():
        count = info.get("liteTopicCount", -1)
        names = sorted(info.get("liteTopicSet") or [])
        t.add_row(
            name,
            "N/A" if count == -1 else str(count),
            _time(info.get("lastAccessTime")),
            ", ".join(names) or "-",
        )
    args.out.result(found, t)


async def lite_group(admin: Admin, args: argparse.Namespace) -> None:
    found = await admin.lite_group_info(args.parent, args.group, args.lite_topic, args.top_k)
    renderables: list[Any] = []
    total = sum(max(0, int(info.get("totalLagCount", 0))) for info in found.values())
    if args.lite_topic:
        t = make_table(
            "broker",
            "broker offset",
            "consumer offset",
            "lag",
            "last consumed",
            right=("broker offset", "consumer offset", "lag"),
        )
        for name, info in found.items():
            w = info.get("liteTopicOffsetWrapper")
            if w is None:
                t.add_row(name, "-", "-", "-", "-")
                continue
            lag = int(w.get("brokerOffset", 0)) - int(w.get("consumerOffset", 0))
            t.add_row(
                name,
                str(w.get("brokerOffset")),
                str(w.get("consumerOffset")),
                str(lag),
                _time(w.get("lastTimestamp")),
            )
        renderables.append(t)
    else:
        t = make_table("broker", "lite topic", "lag", "first unconsumed", right=("lag",))
        for name, info in found.items():
            for lag in info.get("lagCountTopK") or []:
                t.add_row(
                    name,
                    str(lag.get("liteTopic")),
                    str(lag.get("lagCount")),
                    _time(lag.get("earliestUnconsumedTimestamp")),
                )
        renderables.append(t)
    renderables.append(f"total lag: {total}")
    args.out.result(found, *renderables)


async def lite_trigger_dispatch(admin: Admin, args: argparse.Namespace) -> None:
    names = await admin.trigger_lite_dispatch(args.parent, args.group, args.client, args.broker_name)
    args.out.result({"dispatched": names}, f"dispatched on {', '.join(names) if names else 'no broker'}")


def add_commands(cmd: Any, cmds: Any) -> None:
    """`lite` and its actions, made with `__init__`'s `cmd` helper."""
    lite = cmds.add_parser(
        "lite", help="RocketMQ 5.5 lite topics: brokers, parent topics, lite topics, clients, groups"
    ).add_subparsers(dest="lite_command", required=True, metavar="ACTION")
    c = cmd("broker", lite_broker, "each broker's lite state (mqadmin getBrokerLiteInfo)", lite)
    c.add_argument("-b", "--broker-addr", help="this broker only (ip:port)")
    c.add_argument("-d", "--detail", action="store_true", help="the LITE topics and groups each knows")
    c = cmd(
        "parent", lite_parent, "a LITE topic: TTL, lite topics, groups (mqadmin getParentTopicInfo)", lite
    )
    c.add_argument("topic")
    c = cmd("topic", lite_topic, "a lite topic: offsets, subscribers (mqadmin getLiteTopicInfo)", lite)
    c.add_argument("parent")
    c.add_argument("lite_topic")
    c = cmd("client", lite_client, "a lite client's lite topics (mqadmin getLiteClientInfo)", lite)
    c.add_argument("parent")
    c.add_argument("group")
    c.add_argument("client_id")
    c.add_argument("--max", type=int, default=1000, help="at most this many lite topics (default 1000)")
    c = cmd("group", lite_group, "a lite group's lag (mqadmin getLiteGroupInfo)", lite)
    c.add_argument("parent")
    c.add_argument("group")
    c.add_argument("-l", "--lite-topic", help="one lite topic's offsets (default: the top K by lag)")
    c.add_argument("-k", "--top-k", type=int, default=20, help="how many lite topics (default 20)")
    c = cmd(
        "trigger-dispatch",
        lite_trigger_dispatch,
        "hand a lite group's lite topics with messages to its clients again (mqadmin triggerLiteDispatch)",
        lite,
    )
    c.add_argument("parent")
    c.add_argument("group")
    c.add_argument("--client", help="only to this client id")
    c.add_argument("-b", "--broker-name", help="only on this broker")
