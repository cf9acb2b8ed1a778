"""The console's pages: cluster and brokers (with a throughput chart), topics, one topic, groups
with lag and connections, one group, message lookup, table topics; `/api/cluster` for the chart
and `/api/tables`, the table topics as JSON. Every page asks the cluster through one `Admin`; a
request a broker does not support shows as "not available" in its place instead of failing the
page. Only GET and HEAD are served.

The access page (ACL 2.0's users and ACL entries, `/access`) is behind a login of its own: HTTP
Basic with the console's `--login USER` and the password in `$FERROMQ_CONSOLE_PASSWORD`; without
them it is not served at all. The console reads the brokers with its own keys (`--access-key`,
`$FERROMQ_SECRET_KEY`), which must be a Super user's to read users."""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from ferromq.client import Admin
from ferromq.client.admin import is_system_topic
from ferromq.client.admin_results import (
    BrokerRuntimeInfo,
    ConsumerConnections,
    TopicQueueStats,
    TopicTraffic,
)
from ferromq.client.message import MessageQueue, ReceivedMessage
from ferromq.errors import BrokerError, FerroMQError
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.constants import (
    FILTERSRV_CONSUMER_GROUP,
    ONS_API_GROUP_PREFIX,
    SELF_TEST_GROUP_PREFIX,
    SYSTEM_GROUP_PREFIX,
    TOOLS_CONSUMER_GROUP,
)

logger = logging.getLogger(__name__)

HERE = Path(__file__).parent
ADMIN_KEY = web.AppKey("admin", Admin)
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
NAMESRV_KEY = web.AppKey("namesrv", str)
LOGIN_KEY = web.AppKey("login", tuple)
BODY_PREVIEW = 2000


def _ms(ts: int) -> str:
    if ts <= 0:
        return "-"
    return datetime.fromtimestamp(ts / 1000).strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class Unavailable:
    """What a page shows instead of a part a broker could not answer."""

    reason: str


async def _try(coro: Any) -> Any:
    """The result, or `Unavailable` with the reason (an unsupported request, a broker down)."""
    try:
        return await coro
    except (FerroMQError, OSError, TimeoutError) as e:
        return Unavailable(str(e) or type(e).__name__)


async def _render(request: web.Request, name: str, **context: Any) -> web.Response:
    env = request.app[TEMPLATES_KEY]
    text = env.get_template(name).render(namesrv=request.app[NAMESRV_KEY], page=name, **context)
    return web.Response(text=text, content_type="text/html")


async def _runtime_infos(admin: Admin) -> list[tuple[dict[str, Any], BrokerRuntimeInfo | Unavailable]]:
    """Every broker of every cluster (its cluster, name, id and address) with its runtime info."""
    info = await admin.cluster_info()
    out = []
    for cluster, names in sorted(info.clusters.items()):
        for name in names:
            for broker_id, addr in sorted(info.brokers[name].addrs.items()):
                rt = await _try(admin.broker_runtime_info(addr))
                out.append(({"cluster": cluster, "name": name, "id": broker_id, "addr": addr}, rt))
    return out


async def _brokers(admin: Admin) -> list[dict[str, Any]]:
    rows = []
    for row, rt in await _runtime_infos(admin):
        if isinstance(rt, Unavailable):
            row["error"] = rt.reason
        else:
            row.update(
                version=rt.version,
                put_tps=rt.put_tps,
                get_tps=rt.get_tps,
                put_today=rt.put_today,
                get_today=rt.get_today,
                disk=rt.commitlog_disk_ratio,
            )
        rows.append(row)
    return rows


async def cluster_page(request: web.Request) -> web.Response:
    brokers = await _brokers(request.app[ADMIN_KEY])
    return await _render(request, "cluster.html", brokers=brokers)


async def cluster_api(request: web.Request) -> web.Response:
    """The chart's data: per broker, the in and out TPS now."""
    brokers = await _brokers(request.app[ADMIN_KEY])
    return web.json_response(
        {
            "at": int(datetime.now().timestamp() * 1000),
            "in": sum(b.get("put_tps", 0.0) for b in brokers),
            "out": sum(b.get("get_tps", 0.0) for b in brokers),
            "brokers": brokers,
        }
    )


async def _table_brokers(admin: Admin) -> list[dict[str, Any]]:
    """Per broker, its table topics (`tables`, empty when it tiers none), or why it did not answer."""
    rows = []
    for row, rt in await _runtime_infos(admin):
        if isinstance(rt, Unavailable):
            row["error"] = rt.reason
        else:
            row["tables"] = [asdict(t) for t in rt.table_topics]
        rows.append(row)
    return rows


async def tables_page(request: web.Request) -> web.Response:
    brokers = await _table_brokers(request.app[ADMIN_KEY])
    return await _render(request, "tables.html", brokers=brokers, ms=_ms)


async def tables_api(request: web.Request) -> web.Response:
    brokers = await _table_brokers(request.app[ADMIN_KEY])
    return web.json_response({"at": int(datetime.now().timestamp() * 1000), "brokers": brokers})


async def topics_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    show_system = request.query.get("system") == "1"
    info = await admin.cluster_info()
    hidden = set(info.clusters) | set(info.brokers)
    rows: list[dict[str, Any]] = []
    for topic in await admin.list_topics():
        if not show_system and is_system_topic(topic, hidden):
            continue
        route = await _try(admin.topic_route(topic))
        if isinstance(route, Unavailable):
            rows.append({"topic": topic, "error": route.reason})
            continue
        traffic = await _try(admin.topic_traffic(topic))
        rates = {} if isinstance(traffic, Unavailable) else _rates(traffic)
        rows.append(
            {
                **rates,
                "topic": topic,
                "brokers": ", ".join(q.broker_name for q in route.queue_datas),
                "read": sum(q.read_queue_nums for q in route.queue_datas),
                "write": sum(q.write_queue_nums for q in route.queue_datas),
                "order": bool(route.order_topic_conf),
            }
        )
    return await _render(request, "topics.html", topics=rows, show_system=show_system)


def _rates(t: TopicTraffic) -> dict[str, Any]:
    return {
        "in_tps": t.in_tps,
        "out_tps": sum(g.out_tps for g in t.groups),
        "in_today": t.in_today,
        "lag": sum(g.lag for g in t.groups),
    }


async def topic_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    topic = request.match_info["topic"]
    route = await _try(admin.topic_route(topic))
    if isinstance(route, Unavailable):
        raise web.HTTPNotFound(text=f"topic {topic}: {route.reason}")
    stats = await _try(admin.topic_stats(topic))
    if not isinstance(stats, Unavailable):
        stats = [_stats_row(s) for s in stats]
    groups = await _try(admin.topic_consumer_groups(topic))
    return await _render(request, "topic.html", topic=topic, route=route, stats=stats, groups=groups)


def _stats_row(s: TopicQueueStats) -> dict[str, Any]:
    return {
        "broker": s.queue.broker_name,
        "queue": s.queue.queue_id,
        "min": s.min_offset,
        "max": s.max_offset,
        "messages": s.messages,
        "last": _ms(s.last_update_timestamp),
    }


async def _online(admin: Admin, group: str) -> ConsumerConnections | Unavailable | None:
    """The group's connections; None when no consumer of it is online."""
    try:
        return await admin.consumer_connections(group)
    except BrokerError as e:
        if e.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        return Unavailable(str(e))
    except (FerroMQError, OSError, TimeoutError) as e:
        return Unavailable(str(e) or type(e).__name__)


async def groups_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    show_system = request.query.get("system") == "1"
    groups = await _try(admin.list_groups())
    rows = []
    if not isinstance(groups, Unavailable):
        names = [g for g in groups if show_system or not _is_system_group(g)]
        progress = await asyncio.gather(*(_try(admin.consumer_progress(g)) for g in names))
        online = await asyncio.gather(*(_online(admin, g) for g in names))
        for name, p, conns in zip(names, progress, online, strict=True):
            rows.append(
                {
                    "group": name,
                    "lag": p.reason if isinstance(p, Unavailable) else p.total_lag,
                    "tps": None if isinstance(p, Unavailable) else p.consume_tps,
                    "clients": _clients(conns),
                    "broadcast": groups[name].consume_broadcast_enable,
                }
            )
    return await _render(request, "groups.html", groups=rows, error=groups, show_system=show_system)


SYSTEM_GROUP_PREFIXES = (
    SYSTEM_GROUP_PREFIX,
    TOOLS_CONSUMER_GROUP,
    FILTERSRV_CONSUMER_GROUP,
    SELF_TEST_GROUP_PREFIX,
    ONS_API_GROUP_PREFIX,
)


def _is_system_group(group: str) -> bool:
    return group.startswith(SYSTEM_GROUP_PREFIXES) or group == "CID_ONS-HTTP-PROXY"


def _clients(conns: ConsumerConnections | Unavailable | None) -> str | int:
    if conns is None:
        return 0
    if isinstance(conns, Unavailable):
        return "not available"
    return len(conns.connections)


async def group_page(request: web.Request) -> web.Response:
    admin = request.app[ADMIN_KEY]
    group = request.match_info["group"]
    progress = await _try(admin.consumer_progress(group))
    conns = await _online(admin, group)
    return await _render(request, "group.html", group=group, progress=progress, conns=conns, ms=_ms)


async def message_page(request: web.Request) -> web.Response:
    """Lookup by key, by the producer's msgId, by offsetMsgId, or by queue and offset."""
    admin = request.app[ADMIN_KEY]
    q = request.query
    topic, key, msg_id = q.get("topic", "").strip(), q.get("key", "").strip(), q.get("msgId", "").strip()
    offset_msg_id = q.get("offsetMsgId", "").strip()
    messages: list[ReceivedMessage] = []
    error = ""
    searched = any((key, msg_id, offset_msg_id, q.get("offset")))
    try:
        if offset_msg_id:
            messages = [await admin.query_message_by_offset_msg_id(offset_msg_id)]
        elif msg_id and topic:
            messages = [await admin.query_message_by_msg_id(topic, msg_id)]
        elif key and topic:
            messages = await admin.query_message_by_key(topic, key)
        elif q.get("offset") and topic:
            queue = MessageQueue(topic, q.get("broker", ""), int(q.get("queue", "0")))
            messages = [await admin.message_at(queue, int(q["offset"]))]
        elif searched:
            error = "give a topic with the key, msgId or queue offset"
    except ValueError as e:
        error = str(e)
    except (FerroMQError, OSError, TimeoutError) as e:
        error = str(e) or type(e).__name__
    if searched and not messages and not error:
        error = "no message found"
    shown = [_message_row(m) for m in messages]
    return await _render(request, "message.html", query=dict(q), messages=shown, error=error)


def _message_row(m: ReceivedMessage) -> dict[str, Any]:
    body = m.body.decode("utf-8", errors="replace")
    return {
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "topic": m.topic,
        "tags": m.tags or "",
        "keys": " ".join(m.keys),
        "queue": f"{m.queue.broker_name} / {m.queue.queue_id}",
        "queue_offset": m.queue_offset,
        "born": f"{_ms(m.born_timestamp)} from {m.born_host}",
        "stored": f"{_ms(m.store_timestamp)} on {m.store_host}",
        "reconsume_times": m.reconsume_times,
        "properties": sorted(m.properties.items()),
        "body": body[:BODY_PREVIEW],
        "body_cut": len(body) > BODY_PREVIEW,
        "size": len(m.body),
    }


def _logged_in(request: web.Request) -> bool:
    login: tuple[str, str] | tuple[()] = request.app[LOGIN_KEY]
    if not login:
        raise web.HTTPForbidden(
            text="the access page needs the console's own login: start it with --login USER and "
            "the password in $FERROMQ_CONSOLE_PASSWORD"
        )
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    try:
        given = base64.b64decode(value, validate=True).decode("utf-8") if scheme == "Basic" else ""
    except ValueError:
        given = ""
    return hmac.compare_digest(given.encode(), f"{login[0]}:{login[1]}".encode())


async def access_page(request: web.Request) -> web.Response:
    if not _logged_in(request):
        raise web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="ferromq console"'})
    admin = request.app[ADMIN_KEY]
    info = await _try(admin.cluster_info())
    addrs = (
        [] if isinstance(info, Unavailable) else [a for b in info.brokers.values() for a in b.addrs.values()]
    )
    broker = addrs[0] if addrs else ""
    users = (
        await _try(admin.list_users(broker_addr=broker)) if broker else Unavailable("no broker registered")
    )
    acls = await _try(admin.list_acls(broker_addr=broker)) if broker else []
    error = next((x.reason for x in (info, users, acls) if isinstance(x, Unavailable)), None)
    entries = [
        {
            "subject": acl.get("subject", ""),
            "policy": policy.get("policyType", ""),
            "resource": e.get("resource", ""),
            "actions": ", ".join(e.get("actions") or []),
            "ips": ", ".join(e.get("sourceIps") or []),
            "decision": e.get("decision", ""),
        }
        for acl in ([] if error else acls)
        for policy in acl.get("policies") or []
        for e in policy.get("entries") or []
    ]
    return await _render(
        request, "access.html", broker=broker, users=[] if error else users, entries=entries, error=error
    )


def make_app(
    namesrv: str,
    *,
    timeout: float = 5.0,
    login: tuple[str, str] | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> web.Application:
    """The console as an aiohttp application (its Admin starts and stops with it). `login`: the
    user and password of the access page; `access_key`/`secret_key`: what it signs requests with."""
    app = web.Application()
    app[NAMESRV_KEY] = namesrv
    app[LOGIN_KEY] = login or ()
    app[TEMPLATES_KEY] = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )

    async def admin_context(app: web.Application) -> Any:
        async with Admin(namesrv, timeout=timeout, access_key=access_key, secret_key=secret_key) as admin:
            app[ADMIN_KEY] = admin
            yield

    app.cleanup_ctx.append(admin_context)
    app.router.add_get("/", cluster_page)
    app.router.add_get("/api/cluster", cluster_api)
    app.router.add_get("/topics", topics_page)
    app.router.add_get("/topics/{topic}", topic_page)
    app.router.add_get("/groups", groups_page)
    app.router.add_get("/groups/{group}", group_page)
    app.router.add_get("/message", message_page)
    app.router.add_get("/tables", tables_page)
    app.router.add_get("/api/tables", tables_api)
    app.router.add_get("/access", access_page)
    app.router.add_static("/static", HERE / "static")
    return app


async def start_console(namesrv: str, host: str, port: int, **settings: Any) -> tuple[web.AppRunner, str]:
    """Serves the console (`settings`: `make_app`'s); returns the runner (`await runner.cleanup()`
    stops it) and its URL."""
    runner = web.AppRunner(make_app(namesrv, **settings), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    return runner, f"http://{bound[0]}:{bound[1]}/"
