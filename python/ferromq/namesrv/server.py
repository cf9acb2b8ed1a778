"""The name server process: a remoting server over a RouteInfoManager."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import zlib
from typing import Any

from ferromq.acl.namesrv import NamesrvGuard
from ferromq.acl.plain import Account, PlainAcl
from ferromq.acl.watch import AclFileWatcher
from ferromq.errors import BrokerError
from ferromq.jsonutil import dumps, loads_lenient
from ferromq.namesrv.routeinfo import RouteInfoManager
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import MAX_FRAME_SIZE, RemotingCommand
from ferromq.protocol.constants import MASTER_EPOCH, ORDER_TOPIC_CONFIG
from ferromq.protocol.headers import (
    AddWritePermOfBrokerResponseHeader,
    BrokerNameRequestHeader,
    DeleteTopicRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
    ext_int,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Dispatcher, Handler
from ferromq.remoting.server import RemotingServer, ServerLimits
from ferromq.remoting.tls import TlsSettings

logger = logging.getLogger(__name__)

SCAN_INTERVAL_SECONDS = 10.0


class NameServer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9876,
        *,
        broker_expire_seconds: float = 120.0,
        limits: ServerLimits | None = None,
        tls: TlsSettings | None = None,
        acl: PlainAcl | None = None,
        broker_account: Account | None = None,
        extra_handlers: dict[int, Handler] | None = None,
    ) -> None:
        """`extra_handlers`: more request codes served on this port (an embedded controller's,
        enableControllerInNamesrv). `broker_account`: with an ACL, an admin account trusted besides
        the files' (the embedded broker's of `ferromq serve`)."""
        self.acl = acl
        """With an ACL (aclEnable=true), writes need a trusted account and a broker name is never
        taken over from another live address (ferromq.acl.namesrv)."""
        self.routes = RouteInfoManager()
        self.kv: dict[str, dict[str, str]] = {}
        self._expire_after = broker_expire_seconds
        handlers: dict[int, Handler] = {
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.PUT_KV_CONFIG: self._put_kv,
            RequestCode.GET_KV_CONFIG: self._get_kv,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self._kv_list,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self._system_topics,
            RequestCode.GET_NAMESRV_CONFIG: self._get_config,
            **(extra_handlers or {}),
        }
        self.guarded = acl is not None or broker_account is not None
        """Writes need a trusted account (the files' admins, or only `broker_account` without
        files: `ferromq serve` under ACL 2.0)."""
        guard = NamesrvGuard(acl, broker_account) if self.guarded else None
        self.server = RemotingServer(
            Dispatcher(handlers, "namesrv", guard=guard), host, port, limits=limits, tls=tls
        )
        self._scan_task: asyncio.Task[None] | None = None
        self._acl_watcher = AclFileWatcher(acl) if acl is not None else None

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop(), name="namesrv-scan")
        if self._acl_watcher is not None:
            await self._acl_watcher.start()
        logger.info("name server listening on port %d", self.port)

    async def wait_registered(self, broker_addr: str, timeout: float) -> bool:
        """Waits (bounded) until the broker at `broker_addr` has registered; False on timeout."""
        deadline = time.monotonic() + timeout
        while broker_addr not in self.routes.live:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            await asyncio.gather(self._scan_task, return_exceptions=True)
            self._scan_task = None
        if self._acl_watcher is not None:
            await self._acl_watcher.stop()
        await self.server.stop()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(min(SCAN_INTERVAL_SECONDS, self._expire_after / 4))
            self.routes.expire(time.monotonic(), self._expire_after)

    async def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.of(cmd)
        crc = h.body_crc32
        if crc and crc != zlib.crc32(cmd.body) & 0x7FFFFFFF:
            return cmd.reply(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        topics = _decode_register_body(cmd.body, h.compressed)
        broker_addr = h.broker_addr
        refusal = self._takeover_refusal(h.broker_name, h.broker_id, broker_addr, cmd)
        if refusal is not None:
            return cmd.reply(ResponseCode.NO_PERMISSION, refusal)
        epoch = ext_int(cmd, MASTER_EPOCH, 0)
        master = self.routes.register_broker(
            cluster=h.cluster_name,
            broker_addr=broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            ha_server_addr=h.ha_server_addr,
            topic_configs=topics,
            now=time.monotonic(),
            connection_key=conn,
            master_epoch=epoch,
        )
        conn.on_close(self.routes.connection_closed)
        # A slave learns where its master is and the master's HA address (RouteInfoManager).
        reply = RegisterBrokerResponseHeader()
        live = self.routes.live.get(master) if master else None
        if master and live is not None:
            reply = RegisterBrokerResponseHeader(ha_server_addr=live.ha_server_addr, master_addr=master)
        order = self.kv.get(ORDER_TOPIC_CONFIG)
        return cmd.reply(
            ResponseCode.SUCCESS, ext=reply.to_ext(), body=dumps({"table": order}) if order else b""
        )

    def _takeover_refusal(self, name: str, broker_id: int, addr: str, cmd: RemotingCommand) -> str | None:
        """Why a registration may not take `name`/`broker_id` over from the live address holding
        it, or None. In controller mode the controllers' election decides who is master: a master
        of a later epoch takes the id over at once (the deposed one may be cut off, its registration
        still live), and a deposed master of an earlier epoch cannot take it back. Otherwise, with
        an ACL, a live broker's id is not taken over from another address at all."""
        holder = self.routes.live_addr(name, broker_id)
        if holder is None or holder == addr:
            return None
        epoch, held = ext_int(cmd, MASTER_EPOCH, 0), self.routes.live[holder].master_epoch
        if epoch < held:
            return (
                f"broker {name} (id {broker_id}) is the master of epoch {held} at {holder}; a registration "
                f"of epoch {epoch} is older"
            )
        if epoch == held and self.guarded:
            return (
                f"broker {name} (id {broker_id}) is registered from {holder}; another address cannot take "
                "it over while that one is live (it must unregister, or expire)"
            )
        return None

    async def _unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.of(cmd)
        self.routes.unregister_broker(
            cluster=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
        )
        return cmd.reply(ResponseCode.SUCCESS)

    async def _get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = GetRouteInfoRequestHeader.of(cmd).topic
        route = self.routes.route(topic)
        if route is None:
            return cmd.reply(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        order_conf = self.kv.get(ORDER_TOPIC_CONFIG, {}).get(topic)
        if order_conf:
            route["orderTopicConf"] = order_conf
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(route))

    async def _cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(self.routes.cluster_info()))

    async def _all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.reply(ResponseCode.SUCCESS, body=dumps({"topicList": self.routes.topics()}))

    async def _topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topics = self.routes.topics_of_cluster(GetTopicsByClusterRequestHeader.of(cmd).cluster)
        return cmd.reply(ResponseCode.SUCCESS, body=dumps({"topicList": topics}))

    async def _wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        count = self.routes.set_write_perm(BrokerNameRequestHeader.of(cmd).broker_name, False)
        return cmd.reply(
            ResponseCode.SUCCESS, ext=WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).to_ext()
        )

    async def _add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        count = self.routes.set_write_perm(BrokerNameRequestHeader.of(cmd).broker_name, True)
        return cmd.reply(
            ResponseCode.SUCCESS, ext=AddWritePermOfBrokerResponseHeader(add_topic_count=count).to_ext()
        )

    async def _system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        names, addr = self.routes.system_topics()
        body: dict[str, Any] = {"topicList": names}
        if addr is not None:
            body["brokerAddr"] = addr
        return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))

    async def _get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG (mqadmin getNamesrvConfig): the settings a ferromq name server has,
        by their RocketMQ keys, as Java properties text."""
        idle = self.server.limits.idle_timeout
        props = {"listenPort": self.port, "serverChannelMaxIdleTimeSeconds": int(idle or 0)}
        return cmd.reply(ResponseCode.SUCCESS, body="".join(f"{k}={v}\n" for k, v in props.items()).encode())

    async def _delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(DeleteTopicRequestHeader.of(cmd).topic)
        return cmd.reply(ResponseCode.SUCCESS)

    async def _put_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.of(cmd)
        self.kv.setdefault(h.namespace, {})[h.key] = h.value
        return cmd.reply(ResponseCode.SUCCESS)

    async def _get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.of(cmd)
        ns, key = h.namespace, h.key
        value = self.kv.get(ns, {}).get(key)
        if value is None:
            return cmd.reply(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.reply(ResponseCode.SUCCESS, ext=GetKVConfigResponseHeader(value=value).to_ext())

    async def _delete_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.of(cmd)
        self.kv.get(h.namespace, {}).pop(h.key, None)
        return cmd.reply(ResponseCode.SUCCESS)

    async def _kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = GetKVListByNamespaceRequestHeader.of(cmd).namespace
        table = self.kv.get(ns)
        if not table:
            return cmd.reply(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.reply(ResponseCode.SUCCESS, body=dumps({"table": table}))

    async def _query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # Brokers ask whether to re-register; always saying "changed" makes them register,
        # which also refreshes their liveness.
        live = self.routes.live.get(QueryDataVersionRequestHeader.of(cmd).broker_addr)
        if live is not None:
            live.last_update = time.monotonic()
        return cmd.reply(
            ResponseCode.SUCCESS, ext=QueryDataVersionResponseHeader(changed=True).to_ext(), body=b"null"
        )


def _decode_register_body(body: bytes, compressed: bool) -> dict[str, dict[str, Any]]:
    """Topic configs of a REGISTER_BROKER body (plain `RegisterBrokerBody` JSON or its compressed
    form). A body that inflates past the frame limit is refused (Java inflates without a bound)."""
    if not body:
        return {}
    if compressed:
        try:
            return _decode_compressed_register_body(_inflate(body, MAX_FRAME_SIZE))
        except zlib.error:
            raise BrokerError("Failed to decode RegisterBrokerBody: not a zlib stream") from None
        except struct.error:
            raise BrokerError("Failed to decode RegisterBrokerBody: the body ends early") from None
        except UnicodeDecodeError:
            raise BrokerError("Failed to decode RegisterBrokerBody: a topic config is not UTF-8") from None
        except _BadBody as e:
            raise BrokerError(f"Failed to decode RegisterBrokerBody: {e}") from None
    try:
        data = loads_lenient(body)
    except ValueError:
        raise BrokerError("Failed to decode RegisterBrokerBody: not JSON") from None
    wrapper = data.get("topicConfigSerializeWrapper", data) if isinstance(data, dict) else None
    table = wrapper.get("topicConfigTable") or {} if isinstance(wrapper, dict) else None
    if not isinstance(table, dict):
        raise BrokerError("Failed to decode RegisterBrokerBody: no topicConfigTable object")
    topics = {}
    for name, cfg in table.items():
        if not isinstance(cfg, dict):
            continue
        for key, default in (("readQueueNums", 16), ("writeQueueNums", 16), ("perm", 6), ("topicSysFlag", 0)):
            value = cfg.get(key, default)
            if type(value) is not int:
                if not (isinstance(value, str) and value.lstrip("-").isdigit()):
                    raise BrokerError(
                        f"Failed to decode RegisterBrokerBody: {key} of topic {str(name)[:128]} "
                        "is not a number"
                    )
                cfg[key] = int(value)
        topics[str(name)] = cfg
    return topics


class _BadBody(ValueError):
    """A compressed REGISTER_BROKER body that is not what Java writes (the message says how)."""


def _inflate(body: bytes, limit: int) -> bytes:
    """The zlib stream inflated, refusing one that would grow past `limit` bytes (a few MB of
    zeros inflate to gigabytes) before it does."""
    inflater = zlib.decompressobj()
    raw = inflater.decompress(body, limit + 1)
    if len(raw) > limit:
        raise BrokerError(
            f"Failed to decode RegisterBrokerBody: it inflates past {limit} bytes (the frame limit); refused"
        )
    if not inflater.eof:
        raise BrokerError("Failed to decode RegisterBrokerBody: the compressed data ends early")
    return raw


def _decode_compressed_register_body(raw: bytes) -> dict[str, dict[str, Any]]:
    """`RegisterBrokerBody.encode(compress=true)` inflated: int length + DataVersion JSON, int
    topic count, per topic int length + `TopicConfig.encode()` ("name read write perm filter"),
    int length + the filter server list JSON."""
    at = 0

    def take_int() -> int:
        nonlocal at
        (v,) = struct.unpack_from(">i", raw, at)
        at += 4
        if v < 0 or v > len(raw) - at:
            raise _BadBody(f"length {v} at byte {at - 4} overruns the body")
        return int(v)

    def take_bytes() -> bytes:
        nonlocal at
        n = take_int()
        at += n
        return raw[at - n : at]

    take_bytes()  # the data version JSON
    topics: dict[str, dict[str, Any]] = {}
    for _ in range(take_int()):
        parts = take_bytes().decode().split(" ")
        if len(parts) != 5:
            raise _BadBody(f"topic config {' '.join(parts)[:100]!r} is not 5 fields")
        name, read_q, write_q, perm, filter_type = parts
        if not (read_q.isdigit() and write_q.isdigit() and perm.isdigit()):
            raise _BadBody(
                f"topic config {' '.join(parts)[:100]!r} has queue counts or perm that are not numbers"
            )
        topics[name] = {
            "topicName": name,
            "readQueueNums": int(read_q),
            "writeQueueNums": int(write_q),
            "perm": int(perm),
            "topicFilterType": filter_type,
        }
    return topics
