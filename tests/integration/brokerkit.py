"""The in-process broker of the integration tests (ferromq.testing's, as `running`), and a raw
protocol client for tests."""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from ferromq.broker import Broker
from ferromq.message import StoredMessage
from ferromq.namesrv import NameServer
from ferromq.protocol.command import RemotingCommand, SerializeType
from ferromq.remoting.connection import Connection, open_connection
from ferromq.testing import Broker as TestBroker

SMALL_STORE = {
    "mapped_file_size_commitlog": 1024 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 10_000,
    "max_index_num": 40_000,
}


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, *, namesrv: NameServer | None = None, **overrides: Any
) -> AsyncIterator[tuple[NameServer, Broker]]:
    """A `ferromq.testing.Broker` on the running loop, yielded as (name server, broker): SMALL_STORE
    and `overrides` (BrokerConfig fields), the store in `tmp_path/store` (kept: running again on
    it is a restart), registered with `namesrv` if given (else its own)."""
    settings = {**SMALL_STORE, **overrides}
    async with TestBroker(store_dir=tmp_path, settings=settings, name_server=namesrv) as broker:
        yield broker.name_server, broker.broker


class Client:
    """A bare protocol client: requests in, replies out, server requests recorded."""

    def __init__(self) -> None:
        self.conn: Connection
        self.server_requests: list[RemotingCommand] = []

    async def connect(self, port: int) -> Client:
        async def on_request(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            self.server_requests.append(cmd)
            return None

        self.conn = await open_connection("127.0.0.1", port, on_request)
        return self

    async def call(
        self,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        ser: SerializeType = SerializeType.JSON,
        timeout: float = 10.0,
        language: str = "JAVA",
        version: int = 407,
    ) -> RemotingCommand:
        cmd = RemotingCommand(
            code=code,
            ext={k: str(v) for k, v in (ext or {}).items()},
            body=body,
            serialize_type=ser,
            language=language,
            version=version,
        )
        return await self.conn.request(cmd, timeout)

    async def close(self) -> None:
        await self.conn.close()


def properties(**props: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in props.items())


def send_ext(topic: str, queue_id: int, props: str = "", **extra: Any) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": 1700000000000,
        "flag": 0,
        "properties": props,
    }
    ext.update(extra)
    return ext


def pull_ext(group: str, topic: str, queue_id: int, offset: int, **extra: Any) -> dict[str, Any]:
    ext: dict[str, Any] = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": 32,
        "sysFlag": 4,
        "commitOffset": 0,
        "suspendTimeoutMillis": 1000,
        "subscription": "*",
        "subVersion": 0,
    }
    ext.update(extra)
    return ext


def heartbeat_body(client_id: str, group: str, topic: str, sub: str = "*") -> bytes:
    # The C++ client's shape: enum ordinals, subVersion as a string, a wrong codeSet.
    return orjson.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "consumeFromWhere": 0,
                    "consumeType": 1,
                    "groupName": group,
                    "messageModel": 1,
                    "subscriptionDataSet": [
                        {"subString": sub, "subVersion": "1", "topic": topic, "codeSet": [0], "tagsSet": []}
                    ],
                }
            ],
        }
    )


def batch_body(items: list[tuple[bytes, str]]) -> bytes:
    out = b""
    for body, props in items:
        p = props.encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return out


def register_broker_request(broker_name: str, broker_addr: str) -> tuple[dict[str, Any], bytes]:
    """REGISTER_BROKER's header and an empty topic table, claiming `broker_name` (id 0) at `broker_addr`."""
    ext = {
        "brokerName": broker_name,
        "brokerAddr": broker_addr,
        "clusterName": "DefaultCluster",
        "brokerId": 0,
        "haServerAddr": "127.0.0.1:2",
    }
    return ext, b'{"topicConfigSerializeWrapper": {"topicConfigTable": {}}, "filterServerList": []}'


def pop_request(topic: str, group: str, **extra: Any) -> dict[str, Any]:
    """A POP_MESSAGE header as the 5.x clients send it: every queue, at most 32 messages, no
    long polling, from the first message; `extra` overrides."""
    ext: dict[str, Any] = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": -1,
        "maxMsgNums": 32,
        "invisibleTime": 60_000,
        "pollTime": 0,
        "bornTime": int(time.time() * 1000),
        "initMode": 0,
        "expType": "TAG",
        "exp": "*",
        "order": "false",
    }
    ext.update(extra)
    return ext


def pop_receipt(reply_ext: dict[str, str], m: StoredMessage, broker_name: str) -> str:
    """A popped message's POP_CK: its own (a retry message's), else built from the reply's
    startOffsetInfo as the 5.x client builds it."""
    if "POP_CK" in m.properties:
        return m.properties["POP_CK"]
    starts = {}
    for entry in filter(None, reply_ext["startOffsetInfo"].split(";")):
        mark, qid, offset = entry.split(" ")
        starts[f"{mark}@{qid}"] = offset
    head = [
        starts[f"0@{m.queue_id}"],
        reply_ext["popTime"],
        reply_ext["invisibleTime"],
        reply_ext["reviveQid"],
    ]
    return " ".join([*head, "0", broker_name, str(m.queue_id), str(m.queue_offset)])
