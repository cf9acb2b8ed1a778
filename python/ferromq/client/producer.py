"""Producer: send (awaitable), one-way, batches, orderly sends with a queue selector, delays;
retries on another queue or broker with latency fault tolerance."""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from ferromq.acl.signing import credentials_of
from ferromq.client.fault import LatencyFaultTolerance
from ferromq.client.instance import ClientInstance
from ferromq.client.lifecycle import AsyncLifecycle
from ferromq.client.message import (
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    UniqueIdGenerator,
    compress_body,
    encode_batch,
    properties_string,
)
from ferromq.errors import BrokerError, ConnectionClosedError, FerroMQError, RequestTimeoutError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import AUTO_CREATE_TOPIC_KEY, DEFAULT_TOPIC_QUEUE_NUMS
from ferromq.protocol.headers import SendMessageRequestHeader, SendMessageResponseHeader

logger = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024

_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# Refusals another broker might not give: worth a retry elsewhere.
_RETRY_CODES = {
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.NO_PERMISSION,
    ResponseCode.TOPIC_NOT_EXIST,
}

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def hash_selector(queues: list[MessageQueue], msg: Message, key: Any) -> MessageQueue:
    """The default orderly selector: a stable hash of the sharding key picks the queue."""
    return hash_queue(queues, key)


def hash_queue(queues: list[MessageQueue], key: Any) -> MessageQueue:
    """The queue a sharding key picks: a stable hash of the key (an int is its own hash)."""
    h = zlib.crc32(str(key).encode()) if not isinstance(key, int) else key
    return queues[abs(h) % len(queues)]


class Producer(AsyncLifecycle):
    """Sends messages. Use `async with Producer(...)` or `await start()` / `await stop()`."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        *,
        instance: ClientInstance | None = None,
        instance_name: str | None = None,
        send_timeout: float = 3.0,
        retries: int = 2,
        max_message_size: int = MAX_MESSAGE_SIZE,
        latency_fault_tolerance: bool = True,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.group = group
        self._own_instance = instance is None
        self.instance = instance or ClientInstance(
            namesrv,
            instance_name=instance_name,
            timeout=send_timeout,
            credentials=credentials_of(access_key, secret_key),
        )
        self.send_timeout = send_timeout
        self.retries = retries
        self.max_message_size = max_message_size
        self._fault = LatencyFaultTolerance() if latency_fault_tolerance else None
        self._ids = UniqueIdGenerator()
        self._next_queue = itertools.count()
        self._pending: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self.instance.producers[self.group] = self
        await self.instance.start()

    async def stop(self) -> None:
        """Waits for async sends in flight, then unregisters (UNREGISTER_CLIENT) and disconnects."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if self._own_instance:
            await self.instance.stop()
        else:
            await self.instance.unregister_group(producer_group=self.group)
        self.instance.producers.pop(self.group, None)

    async def check_transaction_state(self, broker_addr: str, cmd: RemotingCommand) -> None:
        """A plain producer has no transactions to check (TransactionProducer overrides this)."""
        logger.warning("producer group %s got a transaction check but is not transactional", self.group)

    # -- routes and queues ---------------------------------------------------------------------

    async def publish_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues; for an unknown topic, the queues the broker will create
        from TBW102 on the first send (as the official clients do)."""
        route = await self.instance.route(topic)
        if route is None:
            template = await self.instance.route(AUTO_CREATE_TOPIC_KEY)
            if template is None:
                raise BrokerError(f"No route info of this topic: {topic}", ResponseCode.TOPIC_NOT_EXIST)
            queues: list[MessageQueue] = []
            for q in template.queue_datas:
                if q.perm & 2 and template.master(q.broker_name):
                    n = min(DEFAULT_TOPIC_QUEUE_NUMS, q.write_queue_nums)
                    queues += [MessageQueue(topic, q.broker_name, i) for i in range(n)]
            return queues
        queues = route.publish_queues()
        if not queues:
            raise BrokerError(f"No writable queue for topic {topic}", ResponseCode.TOPIC_NOT_EXIST)
        return queues

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        start = next(self._next_queue)
        for i in range(len(queues)):
            mq = queues[(start + i) % len(queues)]
            if mq.broker_name == avoid:
                continue
            if self._fault is None or self._fault.available(mq.broker_name):
                return mq
        for i in range(len(queues)):  # everything is avoided: take any other broker, else any queue
            mq = queues[(start + i) % len(queues)]
            if mq.broker_name != avoid:
                return mq
        return queues[start % len(queues)]

    # -- sending -------------------------------------------------------------------------------

    def _prepare(self, msg: Message) -> tuple[bytes, int, dict[str, str]]:
        if not msg.topic:
            raise ValueError("message has no topic")
        props = msg.all_properties()
        if "UNIQ_KEY" not in props:  # a new id only when needed: one costs ~10 µs
            props["UNIQ_KEY"] = self._ids.next()
        props.setdefault("WAIT", "true")
        body, sys_flag = compress_body(msg.body)
        if len(body) > self.max_message_size:
            raise ValueError(f"message body of {len(body)} bytes exceeds {self.max_message_size}")
        return body, sys_flag, props

    def _header(
        self, topic: str, queue_id: int, sys_flag: int, flag: int, props: str, batch: bool = False
    ) -> dict[str, str]:
        """SEND_MESSAGE_V2's header (the letters)."""
        return SendMessageRequestHeader(
            producer_group=self.group,
            topic=topic,
            queue_id=queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=flag,
            properties=props,
            batch=batch,
        ).to_ext_v2()

    async def _send_to(
        self, mq: MessageQueue, code: int, ext: dict[str, str], body: bytes
    ) -> RemotingCommand:
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            await self.instance.route(mq.topic, refresh=True)
            addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            raise BrokerError(
                f"no master address for broker {mq.broker_name}", ResponseCode.SERVICE_NOT_AVAILABLE
            )
        started = time.monotonic()
        try:
            reply = await self.instance.invoke(
                addr, RemotingCommand(code=code, ext=ext, body=body), self.send_timeout
            )
        except (OSError, ConnectionClosedError, RequestTimeoutError):
            if self._fault is not None:
                self._fault.update(mq.broker_name, 0, failed=True)
            raise
        if self._fault is not None:
            self._fault.update(mq.broker_name, (time.monotonic() - started) * 1000)
        return reply

    async def _send_with_retries(
        self,
        topic: str,
        code: int,
        build: Callable[[MessageQueue], tuple[dict[str, str], bytes]],
        msg_id: str,
        queue: MessageQueue | None,
    ) -> SendResult:
        """Sends to `queue`, or to a picked queue with up to `retries` more attempts elsewhere."""
        attempts = 1 if queue is not None else 1 + self.retries
        last_error: Exception | None = None
        avoid: str | None = None
        for _ in range(attempts):
            mq = queue or self._pick(await self.publish_queues(topic), avoid)
            ext, body = build(mq)
            try:
                reply = await self._send_to(mq, code, ext, body)
            except (OSError, ConnectionClosedError, RequestTimeoutError) as e:
                last_error, avoid = e, mq.broker_name
                logger.debug("send to %s failed (%s); retrying elsewhere", mq, e)
                continue
            status = _STATUS_BY_CODE.get(reply.code)
            if status is None:
                error = BrokerError(reply.remark or f"send failed with code {reply.code}", _code(reply.code))
                if reply.code in _RETRY_CODES:
                    last_error, avoid = error, mq.broker_name
                    if reply.code == ResponseCode.TOPIC_NOT_EXIST:
                        await self.instance.route(topic, refresh=True)
                    continue
                raise error
            answer = SendMessageResponseHeader.from_ext(reply.ext, mq.queue_id)
            return SendResult(
                status=status,
                msg_id=msg_id,
                offset_msg_id=answer.msg_id,
                message_queue=MessageQueue(mq.topic, mq.broker_name, answer.queue_id),
                queue_offset=answer.queue_offset,
                transaction_id=answer.transaction_id,
                recall_handle=reply.ext.get("recallHandle"),
            )
        assert last_error is not None
        if isinstance(last_error, FerroMQError):
            raise last_error
        raise ConnectionClosedError(
            f"send to {topic} failed after {attempts} attempts: {last_error}"
        ) from last_error

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> SendResult:
        """Sends one message and waits for the broker's answer. With `queue` (or a `selector`
        and its `arg`) the message goes to that queue and is not retried elsewhere."""
        body, sys_flag, props = self._prepare(msg)
        if selector is not None:
            queue = selector(await self.publish_queues(msg.topic), msg, arg)
        encoded = properties_string(props)

        def build(mq: MessageQueue) -> tuple[dict[str, str], bytes]:
            return self._header(mq.topic, mq.queue_id, sys_flag, msg.flag, encoded), body

        return await self._send_with_retries(
            msg.topic, RequestCode.SEND_MESSAGE_V2, build, props["UNIQ_KEY"], queue
        )

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Cancels a timer message not yet due (RECALL_MESSAGE) with the handle its send result
        carried; returns its message id. BrokerError when the broker refuses."""
        handle = recall_handle.encode()
        try:
            broker_name = base64.urlsafe_b64decode(handle).decode().split(" ")[2]
        except (ValueError, IndexError) as e:
            raise ValueError(f"not a recall handle: {recall_handle!r}") from e
        addr = self.instance.master_addr(broker_name)
        if addr is None:
            await self.instance.route(topic, refresh=True)
            addr = self.instance.master_addr(broker_name)
        if addr is None:
            raise BrokerError(
                f"no master address for broker {broker_name}", ResponseCode.SERVICE_NOT_AVAILABLE
            )
        ext = {"producerGroup": self.group, "topic": topic, "recallHandle": recall_handle}
        reply = await self.instance.invoke(
            addr, RemotingCommand(code=RequestCode.RECALL_MESSAGE, ext=ext), self.send_timeout
        )
        if reply.code != ResponseCode.SUCCESS:
            raise BrokerError(reply.remark or f"recall failed with code {reply.code}", _code(reply.code))
        return str(reply.ext.get("msgId", ""))

    async def send_orderly(
        self, msg: Message, sharding_key: Any, selector: QueueSelector = hash_selector
    ) -> SendResult:
        """Sends to the queue the sharding key selects: messages of one key stay in order."""
        return await self.send(msg, selector=selector, arg=sharding_key)

    def send_async(
        self, msg: Message, callback: Callable[[SendResult | None, BaseException | None], None] | None = None
    ) -> asyncio.Task[SendResult]:
        """Starts a send and returns its task; `callback(result, error)` runs when it ends."""
        task = asyncio.get_running_loop().create_task(self.send(msg))
        self._pending.add(task)

        def done(t: asyncio.Task[SendResult]) -> None:
            self._pending.discard(t)
            if callback is not None:
                err = t.exception() if not t.cancelled() else asyncio.CancelledError()
                callback(None if err else t.result(), err)

        task.add_done_callback(done)
        return task

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Sends without waiting for (or getting) an answer."""
        body, sys_flag, props = self._prepare(msg)
        mq = queue or self._pick(await self.publish_queues(msg.topic), None)
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            raise BrokerError(
                f"no master address for broker {mq.broker_name}", ResponseCode.SERVICE_NOT_AVAILABLE
            )
        ext = self._header(mq.topic, mq.queue_id, sys_flag, msg.flag, properties_string(props))
        await self.instance.invoke_oneway(
            addr, RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext=ext, body=body)
        )

    async def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None) -> SendResult:
        """Sends messages of one topic as one batch (stored together, consecutive offsets)."""
        if not msgs:
            raise ValueError("empty batch")
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise ValueError("all messages of a batch must have the same topic")
        if any(m.delay_level > 0 for m in msgs):
            raise ValueError("batch messages cannot be delayed")
        body, ids = self.batch_body(msgs)
        return await self.send_batch_body(topic, body, ",".join(ids), queue=queue)

    def batch_body(self, msgs: Sequence[Message]) -> tuple[bytes, list[str]]:
        """The SEND_BATCH_MESSAGE body of messages and their UNIQ_KEYs (new ones where missing)."""
        items, ids = [], []
        for m in msgs:
            props = m.all_properties()
            if "UNIQ_KEY" not in props:
                props["UNIQ_KEY"] = self._ids.next()
            ids.append(props["UNIQ_KEY"])
            items.append((m.body, m.flag, properties_string(props)))
        return encode_batch(items), ids

    async def send_batch_body(
        self, topic: str, body: bytes, msg_id: str, *, queue: MessageQueue | None = None
    ) -> SendResult:
        """Sends an encoded batch body (what `send_batch` builds from messages, or
        `ferromq._store.encode_batch_messages` from columns); `msg_id` is the result's id."""
        if len(body) > self.max_message_size:
            raise ValueError(f"batch of {len(body)} bytes exceeds {self.max_message_size}")

        def build(mq: MessageQueue) -> tuple[dict[str, str], bytes]:
            return self._header(mq.topic, mq.queue_id, 0, 0, "WAIT\x01true", batch=True), body

        return await self._send_with_retries(topic, RequestCode.SEND_BATCH_MESSAGE, build, msg_id, queue)


def _code(code: int) -> ResponseCode:
    try:
        return ResponseCode(code)
    except ValueError:
        return ResponseCode.SYSTEM_ERROR
