"""Where consumers keep their progress (RocketMQ's OffsetStore): on the brokers for clustering
consumers (`RemoteBrokerOffsetStore`), in a local JSON file for broadcasting ones
(`LocalFileOffsetStore`). Also the broker offset queries a consumer needs to pick its first offset.

An offset is the next logical offset of a queue to consume. -1 means "unknown" (nothing stored),
-2 "the broker could not be asked" (try again later).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import orjson

from ferromq.client.instance import ClientInstance
from ferromq.client.message import MessageQueue
from ferromq.errors import BrokerError, ConnectionClosedError, RequestTimeoutError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

logger = logging.getLogger(__name__)

OFFSET_UNKNOWN = -1
OFFSET_UNREACHABLE = -2

# What a request to a broker can fail with (besides a refusal, which comes back as a reply code).
NETWORK_ERRORS = (OSError, ConnectionClosedError, RequestTimeoutError)


class OffsetStore(Protocol):
    """The consumer's view of its offsets: a table in memory, loaded from and persisted to
    wherever the store keeps them."""

    async def load(self) -> None:
        """Reads what the store keeps before the first use (a no-op for broker stores)."""
        ...

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        """Sets the offset in memory; with `increase_only` a smaller value is ignored."""
        ...

    def read(self, mq: MessageQueue) -> int:
        """The offset in memory, -1 when there is none."""
        ...

    async def read_from_store(self, mq: MessageQueue) -> int:
        """The persisted offset: >= 0, -1 when none is stored, -2 when the store cannot tell now."""
        ...

    async def persist(self, mqs: Iterable[MessageQueue], *, wait: bool = False) -> None:
        """Persists the in-memory offsets of `mqs`; with `wait`, until the store confirms."""
        ...

    def remove(self, mq: MessageQueue) -> None:
        """Forgets the queue's in-memory offset (after the consumer gave the queue up)."""
        ...


async def broker_addr(instance: ClientInstance, mq: MessageQueue) -> str | None:
    """The master address of the queue's broker, refreshing the topic route once if unknown."""
    addr = instance.master_addr(mq.broker_name)
    if addr is None:
        try:
            await instance.route(mq.topic, refresh=True)
        except Exception as e:
            logger.debug("route of %s failed: %s", mq.topic, e)
        addr = instance.master_addr(mq.broker_name)
    return addr


def queue_offset_ext(code: RequestCode, mq: MessageQueue, timestamp: int = 0) -> dict[str, str]:
    """The header of GET_MAX_OFFSET, GET_MIN_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP on a queue."""
    if code == RequestCode.SEARCH_OFFSET_BY_TIMESTAMP:
        return SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp).to_ext()
    if code == RequestCode.GET_MIN_OFFSET:
        return GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id).to_ext()
    if code == RequestCode.GET_MAX_OFFSET:
        return GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id).to_ext()
    raise ValueError(f"{code!r} is not a queue offset request")


async def _offset_request(
    instance: ClientInstance, mq: MessageQueue, code: RequestCode, ext: dict[str, str]
) -> RemotingCommand:
    addr = await broker_addr(instance, mq)
    if addr is None:
        raise BrokerError(f"no master for broker {mq.broker_name}", ResponseCode.SERVICE_NOT_AVAILABLE)
    return await instance.invoke(addr, RemotingCommand(code=code, ext=ext))


def _offset_of(reply: RemotingCommand, what: str, mq: MessageQueue) -> int:
    if reply.code != ResponseCode.SUCCESS:
        raise BrokerError(f"{what} of {mq} refused: {reply.remark}", _response_code(reply.code))
    return int(reply.ext.get("offset", "0"))  # lenient: a Java broker always names it


async def max_offset(instance: ClientInstance, mq: MessageQueue) -> int:
    """GET_MAX_OFFSET: the queue's next offset to be written."""
    code = RequestCode.GET_MAX_OFFSET
    reply = await _offset_request(instance, mq, code, queue_offset_ext(code, mq))
    return _offset_of(reply, "max offset", mq)


async def search_offset(instance: ClientInstance, mq: MessageQueue, timestamp_ms: int) -> int:
    """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the message stored closest to `timestamp_ms`."""
    code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
    reply = await _offset_request(instance, mq, code, queue_offset_ext(code, mq, timestamp_ms))
    return _offset_of(reply, "offset by timestamp", mq)


def _response_code(code: int) -> ResponseCode:
    try:
        return ResponseCode(code)
    except ValueError:
        return ResponseCode.SYSTEM_ERROR


class _MemoryTable:
    def __init__(self) -> None:
        self.offsets: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = False) -> None:
        if increase_only and offset <= self.offsets.get(mq, -1):
            return
        self.offsets[mq] = offset

    def read(self, mq: MessageQueue) -> int:
        return self.offsets.get(mq, OFFSET_UNKNOWN)

    def remove(self, mq: MessageQueue) -> None:
        self.offsets.pop(mq, None)


class RemoteBrokerOffsetStore(_MemoryTable):
    """Offsets of a clustering consumer group, kept by the brokers (QUERY_CONSUMER_OFFSET /
    UPDATE_CONSUMER_OFFSET to the master of each queue's broker)."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def load(self) -> None:
        return None

    async def read_from_store(self, mq: MessageQueue) -> int:
        try:
            ext = QueryConsumerOffsetRequestHeader(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id
            ).to_ext()
            reply = await _offset_request(self.instance, mq, RequestCode.QUERY_CONSUMER_OFFSET, ext)
        except NETWORK_ERRORS as e:
            logger.warning("querying the offset of %s for %s failed: %s", mq, self.group, e)
            return OFFSET_UNREACHABLE
        except BrokerError as e:  # no master known
            logger.warning("querying the offset of %s for %s failed: %s", mq, self.group, e)
            return OFFSET_UNREACHABLE
        if reply.code == ResponseCode.SUCCESS:
            offset = OffsetResponseHeader.of(reply).offset if "offset" in reply.ext else -1
            self.update(mq, offset)
            return offset
        if reply.code != ResponseCode.QUERY_NOT_FOUND:
            logger.warning("broker refused the offset of %s for %s: %s", mq, self.group, reply.remark)
        # Java maps every broker refusal to "no offset" (22 is the usual one: a new group).
        return OFFSET_UNKNOWN

    async def persist(self, mqs: Iterable[MessageQueue], *, wait: bool = False) -> None:
        for mq in list(mqs):
            offset = self.offsets.get(mq)
            if offset is None or offset < 0:
                continue
            try:
                await self.commit(mq, offset, wait=wait)
            except Exception as e:
                logger.warning("persisting offset %d of %s for %s failed: %s", offset, mq, self.group, e)

    async def commit(self, mq: MessageQueue, offset: int, *, wait: bool = False) -> None:
        """UPDATE_CONSUMER_OFFSET for one queue (one-way unless `wait`)."""
        addr = await broker_addr(self.instance, mq)
        if addr is None:
            raise BrokerError(f"no master for broker {mq.broker_name}", ResponseCode.SERVICE_NOT_AVAILABLE)
        cmd = RemotingCommand(
            code=RequestCode.UPDATE_CONSUMER_OFFSET,
            ext=UpdateConsumerOffsetRequestHeader(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
            ).to_ext(),
        )
        if not wait:
            await self.instance.invoke_oneway(addr, cmd)
            return
        reply = await self.instance.invoke(addr, cmd)
        if reply.code != ResponseCode.SUCCESS:
            raise BrokerError(reply.remark or "offset update refused", _response_code(reply.code))


def default_offsets_dir() -> Path:
    """`~/.ferromq/offsets`: where broadcasting consumers keep their offsets by default."""
    return Path.home() / ".ferromq" / "offsets"


class LocalFileOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in a JSON file only this client uses:
    `{"offsetTable": [{"topic", "brokerName", "queueId", "offset"}, ...]}`. Written atomically
    (temporary file, then rename); the previous version is kept as `<name>.bak` and read when the
    file itself is missing or broken."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._write_lock = asyncio.Lock()

    @classmethod
    def for_client(
        cls, client_id: str, group: str, directory: str | Path | None = None
    ) -> LocalFileOffsetStore:
        """The store at `<directory>/<client id>/<group>.json`."""
        base = Path(directory) if directory is not None else default_offsets_dir()
        return cls(base / _safe_name(client_id) / f"{_safe_name(group)}.json")

    async def load(self) -> None:
        table = await asyncio.to_thread(self._read_file)
        self.offsets.update(table)

    def _read_file(self) -> dict[MessageQueue, int]:
        for path in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data: Any = orjson.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, orjson.JSONDecodeError) as e:
                logger.warning("offset file %s is unreadable: %s", path, e)
                continue
            out: dict[MessageQueue, int] = {}
            try:
                for entry in data.get("offsetTable") or []:
                    mq = MessageQueue(str(entry["topic"]), str(entry["brokerName"]), int(entry["queueId"]))
                    out[mq] = int(entry["offset"])
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                logger.warning("offset file %s is malformed: %s", path, e)
                continue
            return out
        return {}

    async def read_from_store(self, mq: MessageQueue) -> int:
        return self.read(mq)

    async def persist(self, mqs: Iterable[MessageQueue], *, wait: bool = False) -> None:
        """Writes the whole table (not only `mqs`: queues not assigned right now keep their offsets)."""
        entries = [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
            for mq, offset in sorted(self.offsets.items())
            if offset >= 0
        ]
        data = orjson.dumps({"offsetTable": entries}, option=orjson.OPT_INDENT_2)
        async with self._write_lock:
            try:
                await asyncio.to_thread(self._write_file, data)
            except OSError as e:
                logger.warning("writing offset file %s failed: %s", self.path, e)

    def _write_file(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)


def _safe_name(name: str) -> str:
    """A path component from a client id or group (`/` and NUL are the only bytes Unix forbids)."""
    out = name.replace("/", "_").replace("\x00", "_")
    return out if out not in ("", ".", "..") else f"_{out}"
