"""The backend of cluster mode: the brokers a name server lists, called over remoting as a 4.x/5.x
client calls them, as Apache RocketMQ's proxy does in cluster mode. Routes come from the name
server, a topic's message type from a broker holding it (GET_TOPIC_CONFIG), a group's settings
from a broker's subscription groups; sends, pops, acks and changes of invisible time go to the
broker a queue or a receipt handle names (the receipt's ExtraInfo carries the broker's name), a
recall to the broker its handle names. A transaction's half message is ended on the broker it was
sent to (or checked from); a broker's check reaches the proxy as a 4.x producer of the topic (the
proxy's producer group) and goes on to a 5.x producer of the topic over its Telemetry stream."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from ferromq.acl.signing import Credentials
from ferromq.auth.evaluator import Auth, AuthSettings
from ferromq.auth.metadata import AuthMetadata
from ferromq.auth.model import Acl, User
from ferromq.broker.pop.service import split_records
from ferromq.broker.processors.recall import decode_handle
from ferromq.broker.subscriptions import SubscriptionGroupConfig
from ferromq.broker.topics import TopicConfig
from ferromq.client.admin import Admin, check_reply
from ferromq.client.instance import ClientInstance
from ferromq.client.route import TopicRoute
from ferromq.errors import ConnectionClosedError, FerroMQError, RequestTimeoutError
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
)
from ferromq.proxy.backend import LiteNotifier
from ferromq.proxy.results import BrokerQueues, Popped, SendOutcome, lite_order_counts
from ferromq.proxy.status import Code, ProxyError

if TYPE_CHECKING:
    from ferromq import _store
    from ferromq.acl.plain import PlainAcl
    from ferromq.broker.clients import Subscription
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.pop.formats import ExtraInfo
    from ferromq.broker.pop.service import PopRequest
    from ferromq.proxy.sessions import Session

logger = logging.getLogger(__name__)

# Seconds a topic's route is used before the name server is asked again (a broker gone leaves the
# routes within this, once the name server dropped it).
ROUTE_TTL_SECONDS = 5.0
# Seconds a topic's configuration and a group's are kept (Java's proxy caches them too); an
# unknown group is asked for again sooner.
CONFIG_TTL_SECONDS = 20.0
UNKNOWN_GROUP_TTL_SECONDS = 5.0
# A request to a broker (a pop's: past its long polling).
REQUEST_TIMEOUT_SECONDS = 3.0


def _offsets(info: str) -> dict[tuple[str, int], int]:
    """A pop reply's startOffsetInfo (`<mark> <queueId> <offset>` joined by `;`)."""
    out = {}
    for part in filter(None, info.split(";")):
        mark, queue_id, offset = part.split(" ")
        out[(mark, int(queue_id))] = int(offset)
    return out


def _receipt_fields(group: str, topic: str, receipt: ExtraInfo) -> dict[str, str]:
    """The header fields ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME name a popped message by."""
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(receipt.queue_id),
        "extraInfo": str(receipt),
        "offset": str(receipt.offset),
    }


def _subscription_json(s: Subscription) -> dict[str, Any]:
    return {
        "topic": s.topic,
        "subString": s.sub_string,
        "expressionType": s.expression_type,
        "tagsSet": sorted(s.tags),
        "codeSet": list(s.codes or ()),
        "subVersion": s.sub_version,
        "classFilterMode": False,
    }


class ClusterBackend:
    def __init__(
        self,
        config: BrokerConfig,
        namesrv: str,
        *,
        credentials: Credentials | None = None,
        auth: AuthSettings | None = None,
        auth_refresh_seconds: float = 60.0,
    ) -> None:
        """`credentials`: the proxy's own keys (innerClientAuthenticationCredentials), which sign
        its requests to the brokers. `auth`: ACL 2.0 over the gRPC port, with the users and ACLs
        read from the brokers (AUTH_LIST_USER / AUTH_LIST_ACL) every `auth_refresh_seconds`, as
        Java's proxy caches what it reads of them."""
        self._config = config
        self.instance = ClientInstance(
            namesrv, instance_name="ferromq-proxy", timeout=REQUEST_TIMEOUT_SECONDS, credentials=credentials
        )
        self._auth = Auth(auth, AuthMetadata(None)) if auth is not None and auth.enabled else None
        self._auth_refresh = auth_refresh_seconds
        self._auth_task: asyncio.Task[None] | None = None
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._topics: dict[str, tuple[float, TopicConfig]] = {}
        self._groups: dict[str, tuple[float, SubscriptionGroupConfig | None]] = {}
        self._next_broker = itertools.count()
        self._admin = Admin(namesrv, instance=self.instance)
        self._publishers: dict[str, dict[str, Session]] = {}
        """topic -> the 5.x producers of it by client id (who a broker's check goes to)."""
        self._next_publisher = itertools.count()

    @property
    def config(self) -> BrokerConfig:
        return self._config

    @property
    def reserved_topics(self) -> frozenset[str]:
        return frozenset()

    @property
    def acl(self) -> PlainAcl | None:
        return None

    @property
    def auth(self) -> Auth | None:
        return self._auth

    @property
    def data_plane(self) -> _store.DataPlane | None:
        return None

    async def start(self) -> None:
        await self.instance.start()
        if self._auth is not None:
            # Until the first copy arrives nobody is known, so every call is refused.
            await self.refresh_auth()
            self._auth_task = asyncio.get_running_loop().create_task(self._refresh_auth_loop())

    async def stop(self) -> None:
        if self._auth_task is not None:
            self._auth_task.cancel()
            await asyncio.gather(self._auth_task, return_exceptions=True)
        await self.instance.stop()

    async def refresh_auth(self) -> bool:
        """Copies the users and ACLs of a broker of the cluster; whether it could."""
        assert self._auth is not None
        try:
            users = await self._admin.list_users()
            acls = await self._admin.list_acls()
            self._auth.metadata.replace_all(
                [User.from_info(u) for u in users], [Acl.from_info(a) for a in acls]
            )
        except (FerroMQError, OSError, TimeoutError, ValueError) as e:
            logger.warning("cannot read the brokers' users and ACLs (ACL 2.0 stays as it was): %s", e)
            return False
        return True

    async def _refresh_auth_loop(self) -> None:
        while True:
            await asyncio.sleep(self._auth_refresh)
            await self.refresh_auth()

    # -- requests --------------------------------------------------------------------------------

    async def _call(
        self,
        addr: str,
        code: RequestCode,
        ext: dict[str, str],
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        """One request to a broker; a broker not reached drops the cached routes (the name server
        may list others now)."""
        try:
            return await self.instance.invoke(addr, RemotingCommand(code=code, ext=ext, body=body), timeout)
        except (OSError, ConnectionClosedError, RequestTimeoutError) as e:
            self._routes.clear()
            raise ConnectionClosedError(f"the broker at {addr} did not answer {code.name}: {e}") from e

    async def _route(self, topic: str) -> TopicRoute | None:
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and now - cached[0] < ROUTE_TTL_SECONDS:
            return cached[1]
        route = await self.instance.route(topic, refresh=True)
        if route is None:
            self._routes.pop(topic, None)
            return None
        self._routes[topic] = (now, route)
        return route

    def _master(self, broker_name: str) -> str:
        addr = self.instance.master_addr(broker_name)
        if addr is None:
            raise ProxyError(Code.INTERNAL_SERVER_ERROR, f"no master of broker {broker_name} is known")
        return addr

    async def _masters(self, topic: str) -> dict[str, str]:
        """Broker name -> master address, of the brokers holding `topic`."""
        route = await self._route(topic)
        if route is None:
            return {}
        return {
            q.broker_name: addr
            for q in route.queue_datas
            if (addr := route.master(q.broker_name)) is not None
        }

    # -- metadata ----------------------------------------------------------------------------------

    async def queues(self, topic: str) -> list[BrokerQueues] | None:
        route = await self._route(topic)
        if route is None:
            return None
        return [
            BrokerQueues(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm)
            for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
            if route.master(q.broker_name)
        ]

    async def message_type(self, topic: str) -> str:
        tc = await self._topic_config(topic)
        return tc.message_type if tc is not None else "UNSPECIFIED"

    async def _topic_config(self, topic: str) -> TopicConfig | None:
        now = time.monotonic()
        cached = self._topics.get(topic)
        if cached is not None and now - cached[0] < CONFIG_TTL_SECONDS:
            return cached[1]
        tc = None
        for addr in (await self._masters(topic)).values():
            try:
                reply = await self._call(addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
            except ConnectionClosedError as e:  # a broker gone: another of the topic's answers
                logger.debug("%s", e)
                continue
            if reply.code == ResponseCode.SUCCESS:
                tc = TopicConfig.from_json(loads_lenient(reply.body))
                break
            if reply.code != ResponseCode.TOPIC_NOT_EXIST:
                check_reply(reply, f"GET_TOPIC_CONFIG of {topic}")
        if tc is not None:
            self._topics[topic] = (now, tc)
        return tc

    async def group(self, group: str) -> SubscriptionGroupConfig | None:
        now = time.monotonic()
        cached = self._groups.get(group)
        ttl = (
            CONFIG_TTL_SECONDS if cached is not None and cached[1] is not None else UNKNOWN_GROUP_TTL_SECONDS
        )
        if cached is not None and now - cached[0] < ttl:
            return cached[1]
        # A master of the proxy's cluster (rocketMQClusterName), else of any: groups are made on
        # every broker of a cluster.
        info = await self._admin.cluster_info()
        cluster = self._config.broker_cluster_name
        masters = info.master_addrs(cluster if cluster in info.clusters else None)
        if not masters:
            return None
        addr = masters[min(masters)]
        reply = check_reply(
            await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}),
            "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
        )
        table = (loads_lenient(reply.body) if reply.body else {}).get("subscriptionGroupTable") or {}
        for name, data in table.items():
            if isinstance(data, dict):
                self._groups[str(name)] = (now, SubscriptionGroupConfig.from_json(data))
        if group not in table:
            self._groups[group] = (now, None)
        return self._groups[group][1]

    # -- messages ----------------------------------------------------------------------------------

    async def send(
        self, session: Session, broker_name: str, h: SendMessageRequestHeader, body: bytes
    ) -> SendOutcome:
        reply = await self._call(self._master(broker_name), RequestCode.SEND_MESSAGE_V2, h.to_ext_v2(), body)
        if reply.code not in _STORED_CODES:
            check_reply(reply, f"the send to {broker_name}")
        return SendOutcome(reply.code, reply.ext)

    async def pop(self, broker_name: str, req: PopRequest) -> Popped:
        if not broker_name:
            readable = [q.broker_name for q in await self.queues(req.topic) or [] if q.readable]
            if not readable:
                raise ProxyError(Code.FORBIDDEN, "no readable queue")
            broker_name = readable[next(self._next_broker) % len(readable)]
        sub = req.subscription
        ext = {
            "consumerGroup": req.group,
            "topic": req.topic,
            "queueId": str(req.queue_id),
            "maxMsgNums": str(req.max_msgs),
            "invisibleTime": str(req.invisible_time),
            "pollTime": str(req.poll_time),
            "bornTime": str(int(time.time() * 1000)),
            "initMode": str(req.init_mode),
            "expType": sub.expression_type,
            "exp": sub.sub_string,
            "order": "true" if req.order else "false",
        }
        if req.attempt_id:
            ext["attemptId"] = req.attempt_id
        timeout = req.poll_time / 1000.0 + REQUEST_TIMEOUT_SECONDS
        reply = await self._call(self._master(broker_name), RequestCode.POP_MESSAGE, ext, timeout=timeout)
        found = reply.code == ResponseCode.SUCCESS
        if not found and reply.code not in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            check_reply(reply, f"the pop from {broker_name}")
        e = reply.ext
        return Popped(
            found,
            (reply.body or b"") if found else b"",
            int(e.get("popTime", "0")),
            int(e.get("invisibleTime", "0")),
            int(e.get("reviveQid", "0")),
            _offsets(e.get("startOffsetInfo", "")),
            broker_name,
        )

    async def pop_lite(
        self,
        broker_name: str,
        client_id: str,
        group: str,
        topic: str,
        max_msgs: int,
        invisible_ms: int,
        poll_ms: int,
        attempt_id: str | None,
    ) -> Popped:
        if not broker_name:
            readable = [q.broker_name for q in await self.queues(topic) or [] if q.readable]
            if not readable:
                raise ProxyError(Code.FORBIDDEN, "no readable queue")
            broker_name = readable[next(self._next_broker) % len(readable)]
        ext = {
            "clientId": client_id,
            "consumerGroup": group,
            "topic": topic,
            "maxMsgNum": str(max_msgs),
            "invisibleTime": str(invisible_ms),
            "pollTime": str(poll_ms),
            "bornTime": str(int(time.time() * 1000)),
        }
        if attempt_id:
            ext["attemptId"] = attempt_id
        timeout = poll_ms / 1000.0 + REQUEST_TIMEOUT_SECONDS
        reply = await self._call(
            self._master(broker_name), RequestCode.POP_LITE_MESSAGE, ext, timeout=timeout
        )
        found = reply.code == ResponseCode.SUCCESS
        if not found and reply.code not in (ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND):
            check_reply(reply, f"the lite pop from {broker_name}")
        e = reply.ext
        body = (reply.body or b"") if found else b""
        return Popped(
            found,
            body,
            int(e.get("popTime", "0")),
            int(e.get("invisibleTime", "0")),
            int(e.get("reviveQid", "0")),
            {},
            broker_name,
            lite_order_counts(e.get("orderCountInfo", ""), len(split_records(body))) if found else [],
        )

    async def sync_lite(self, entry: dict[str, Any], notify: LiteNotifier) -> None:
        """LITE_SUBSCRIPTION_CTL to every broker with readable queues of the topic (LiteSubscriptionService);
        a broker's NOTIFY_UNSUBSCRIBE_LITE comes back on the proxy's connection to it."""
        self.instance.on_unsubscribe_lite = notify
        brokers = [q.broker_name for q in await self.queues(str(entry["topic"])) or [] if q.readable]
        body = orjson.dumps({"subscriptionSet": [entry]})
        replies = await asyncio.gather(
            *(self._call(self._master(b), RequestCode.LITE_SUBSCRIPTION_CTL, {}, body) for b in brokers)
        )
        for broker, reply in zip(brokers, replies, strict=True):
            check_reply(reply, f"the lite subscription on {broker}")

    async def ack(self, group: str, topic: str, receipt: ExtraInfo, lite_topic: str | None = None) -> None:
        ext = _receipt_fields(group, topic, receipt)
        if lite_topic:
            ext["liteTopic"] = lite_topic
        reply = await self._call(self._master(receipt.broker_name), RequestCode.ACK_MESSAGE, ext)
        check_reply(reply, f"the ack on {receipt.broker_name}")

    async def change_invisible(
        self,
        group: str,
        topic: str,
        receipt: ExtraInfo,
        invisible_ms: int,
        lite_topic: str | None = None,
        suspend: bool = False,
    ) -> tuple[int, int, int]:
        ext = {**_receipt_fields(group, topic, receipt), "invisibleTime": str(invisible_ms)}
        if lite_topic:
            ext |= {"liteTopic": lite_topic, "suspend": "true" if suspend else "false"}
        addr = self._master(receipt.broker_name)
        reply = check_reply(
            await self._call(addr, RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext),
            f"the change of invisible time on {receipt.broker_name}",
        )
        e = reply.ext
        return int(e["popTime"]), int(e["invisibleTime"]), int(e["reviveQid"])

    async def dead_letter(self, group: str, receipt: ExtraInfo, commit_log_offset: int) -> None:
        h = ConsumerSendMsgBackRequestHeader(
            offset=commit_log_offset, group=group, delay_level=-1, max_reconsume_times=0
        )
        addr = self._master(receipt.broker_name)
        check_reply(
            await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, h.to_ext()),
            f"the dead letter on {receipt.broker_name}",
        )

    async def end_transaction(
        self, session: Session, broker_name: str, h: EndTransactionRequestHeader
    ) -> None:
        """One way, as Java's producers and proxy end a transaction: a broker that cannot end it
        checks it again later."""
        addr = self._master(broker_name)
        cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext=h.to_ext())
        try:
            await self.instance.invoke_oneway(addr, cmd)
        except (OSError, ConnectionClosedError) as e:
            self._routes.clear()
            raise ConnectionClosedError(f"the broker at {addr} did not take END_TRANSACTION: {e}") from e

    async def recall(self, session: Session, topic: str, handle: str) -> str:
        _, broker_name, _, _ = decode_handle(handle)
        ext = {"topic": topic, "recallHandle": handle, "producerGroup": topic}
        reply = await self._call(self._master(broker_name), RequestCode.RECALL_MESSAGE, ext)
        return check_reply(reply, f"the recall on {broker_name}").ext.get("msgId", "")

    async def relay_check(self, topic: str, broker_addr: str, cmd: RemotingCommand) -> None:
        """A broker's check of a half message of `topic`: to one of the topic's 5.x producers."""
        live = [s for s in self._publishers.get(topic, {}).values() if not s.closed]
        if not live:
            logger.debug("no 5.x producer of %s for the check from %s", topic, broker_addr)
            return
        session = live[next(self._next_publisher) % len(live)]
        session.check_transaction(cmd, self._broker_name_of(broker_addr))

    def _broker_name_of(self, addr: str) -> str:
        for route in self.instance.routes.values():
            for name, addrs in route.broker_addrs.items():
                if addr in addrs.values():
                    return name
        return ""

    # -- clients: heartbeats to the brokers of their topics, as a 4.x client's -------------------

    async def _broadcast(self, addrs: set[str], code: RequestCode, ext: dict[str, str], body: bytes) -> None:
        """One request to each broker; one not reached or refusing is logged (the next heartbeat
        tries again)."""
        order = sorted(addrs)
        results = await asyncio.gather(
            *(self._call(addr, code, dict(ext), body) for addr in order), return_exceptions=True
        )
        for addr, result in zip(order, results, strict=True):
            if isinstance(result, BaseException):
                logger.debug("%s to %s failed: %s", code.name, addr, result)
            elif result.code != ResponseCode.SUCCESS:
                logger.warning("%s to %s refused: %s", code.name, addr, result.remark)

    async def _brokers_of(self, topics: list[str]) -> set[str]:
        addrs: set[str] = set()
        for topic in topics:
            addrs.update((await self._masters(topic)).values())
        return addrs

    async def register_producer(self, session: Session, topics: list[str]) -> None:
        """The proxy's producer group is the topic; this process is a producer of it too (the
        client instance's heartbeats), which a broker's transaction checks come to."""
        for topic in topics:
            publishers = self._publishers.setdefault(topic, {})
            for gone in [c for c, s in publishers.items() if s.closed]:
                del publishers[gone]
            publishers[session.client_id_] = session
            if topic not in self.instance.producers:
                self.instance.producers[topic] = _TopicProducer(self, topic)
        body = orjson.dumps(
            {
                "clientID": session.client_id_,
                "producerDataSet": [{"groupName": t} for t in topics],
                "consumerDataSet": [],
            }
        )
        await self._broadcast(await self._brokers_of(topics), RequestCode.HEART_BEAT, {}, body)

    async def register_consumer(
        self, session: Session, group: str, data: dict[str, str], subscriptions: list[Subscription]
    ) -> None:
        consumer = {
            "groupName": group,
            **data,
            "subscriptionDataSet": [_subscription_json(s) for s in subscriptions],
            "unitMode": False,
        }
        body = orjson.dumps(
            {"clientID": session.client_id_, "producerDataSet": [], "consumerDataSet": [consumer]}
        )
        addrs = await self._brokers_of([s.topic for s in subscriptions])
        await self._broadcast(addrs, RequestCode.HEART_BEAT, {}, body)

    async def unregister(self, session: Session, topics: list[str], group: str | None) -> None:
        for topic in topics:
            publishers = self._publishers.get(topic, {})
            publishers.pop(session.client_id_, None)
            if not publishers:
                self._publishers.pop(topic, None)
                self.instance.producers.pop(topic, None)
            h = UnregisterClientRequestHeader(client_id=session.client_id_, producer_group=topic)
            await self._broadcast(
                await self._brokers_of([topic]), RequestCode.UNREGISTER_CLIENT, h.to_ext(), b""
            )
        if group is not None:
            # Every broker known: a group's topics are not named on termination.
            h = UnregisterClientRequestHeader(client_id=session.client_id_, consumer_group=group)
            await self._broadcast(
                self.instance.broker_addrs(), RequestCode.UNREGISTER_CLIENT, h.to_ext(), b""
            )


class _TopicProducer:
    """The proxy's producer group of a topic, as the client instance knows its producers."""

    def __init__(self, backend: ClusterBackend, topic: str) -> None:
        self._backend = backend
        self.group = topic

    async def check_transaction_state(self, broker_addr: str, cmd: RemotingCommand) -> None:
        await self._backend.relay_check(self.group, broker_addr, cmd)


# A send stored whose wait (for the disk, a slave) failed: the service gives the entry its code.
_STORED_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)
