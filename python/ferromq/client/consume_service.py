"""What PushConsumer's two consume services share (Java's ConsumeMessageService, with
DefaultMQPushConsumerImpl's sendMessageBack): calling the listener (a sync one in a worker thread
pool) under the limit of calls in flight, and sending a failed message back to the broker.

`consume_concurrently` and `consume_orderly` hold the two services; the consumer makes one of them
at each start, as its listener says.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from ferromq.client.message import ReceivedMessage
from ferromq.client.offset_store import NETWORK_ERRORS
from ferromq.client.rebalance import ProcessQueue
from ferromq.message import encode_properties
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY,
    CLIENT_INNER_PRODUCER_GROUP,
    DEFAULT_TOPIC_QUEUE_NUMS,
)
from ferromq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferromq.client.instance import ClientInstance
    from ferromq.client.offset_store import OffsetStore
    from ferromq.client.rebalance import Rebalancer

logger = logging.getLogger(__name__)


class ConsumerState(Protocol):
    """What the consume services read of their PushConsumer as they go (as Java's services read
    DefaultMQPushConsumerImpl's fields). Typed here, so the services do not import push_consumer,
    which makes them."""

    @property
    def group(self) -> str: ...
    @property
    def instance(self) -> ClientInstance: ...
    @property
    def consume_batch_size(self) -> int: ...
    @property
    def max_concurrency(self) -> int: ...
    @property
    def max_reconsume_times(self) -> int: ...
    @property
    def lock_interval(self) -> float: ...
    @property
    def suspend_current_queue_ms(self) -> int: ...
    @property
    def _listener(self) -> Callable[[list[ReceivedMessage]], Any] | None: ...
    @property
    def _listener_is_async(self) -> bool: ...
    @property
    def _stopping(self) -> bool: ...
    @property
    def _offsets(self) -> OffsetStore | None: ...
    @property
    def _rebalancer(self) -> Rebalancer | None: ...
    @property
    def _clustering(self) -> bool: ...
    @property
    def _retry_topic(self) -> str: ...


# RocketMQ's default retry limit of concurrent consumers (maxReconsumeTimes = -1).
DEFAULT_MAX_RECONSUME_TIMES = 16


class ConsumeService(ABC):
    """Hands the messages its PushConsumer pulls to the listener. It reads the consumer's settings
    and state as it goes, as Java's services read DefaultMQPushConsumerImpl's."""

    default_max_reconsume = DEFAULT_MAX_RECONSUME_TIMES
    """The retry limit when `max_reconsume_times` is negative (-1 here: none)."""

    def __init__(self, consumer: ConsumerState) -> None:
        self.consumer = consumer
        self.semaphore = asyncio.Semaphore(consumer.max_concurrency)
        """Listener calls in flight at once."""
        self._executor: ThreadPoolExecutor | None = None

    # -- hooks of the consumer -----------------------------------------------------------------

    def start(self) -> list[asyncio.Task[None]]:
        """Starts the service's background tasks; the consumer cancels them with its own."""
        return []

    @abstractmethod
    def queue_added(self, pq: ProcessQueue) -> None:
        """A queue newly assigned to the consumer (its pulls have started)."""

    @abstractmethod
    async def queue_removed(self, pq: ProcessQueue) -> None:
        """A queue given up (its pulls have stopped); returns once no batch of it is in the listener."""

    @abstractmethod
    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Messages of `pq` just pulled (and added to it)."""

    def retry_tasks(self) -> list[asyncio.Task[None]]:
        """Local retries waiting to start; the consumer cancels them when it stops."""
        return []

    @abstractmethod
    def stop_consuming(self, pqs: list[ProcessQueue]) -> list[asyncio.Task[Any]]:
        """At stop, after the pulls: keeps what has not reached the listener from starting and
        returns the tasks to wait for (those with messages in the listener)."""

    def shutdown(self) -> None:
        """Ends the worker threads of sync listeners (calls still running are not waited for)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # -- the listener --------------------------------------------------------------------------

    async def call_listener(self, msgs: list[ReceivedMessage]) -> Any:
        c = self.consumer
        listener = c._listener
        assert listener is not None
        if c._listener_is_async:
            result = listener(list(msgs))
        else:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=c.max_concurrency, thread_name_prefix=f"ferromq-consume-{c.group}"
                )
            result = await asyncio.get_running_loop().run_in_executor(self._executor, listener, list(msgs))
        if inspect.isawaitable(result):
            result = await result
        return result

    def max_reconsume(self) -> int:
        """The retry limit; -1 means none (orderly default)."""
        if self.consumer.max_reconsume_times >= 0:
            return self.consumer.max_reconsume_times
        return self.default_max_reconsume

    # -- sending messages back -----------------------------------------------------------------

    async def send_back(self, msg: ReceivedMessage, delay_level: int) -> bool:
        """CONSUMER_SEND_MSG_BACK to the message's store host (`delay_level` 0: the broker picks,
        -1: straight to the DLQ); if that fails, the message is sent to `%RETRY%<group>` directly.
        True when the broker has it again."""
        c = self.consumer
        max_times = self.max_reconsume()
        addr = msg.store_host or c.instance.master_addr(msg.queue.broker_name)
        if addr:
            cmd = RemotingCommand(
                code=RequestCode.CONSUMER_SEND_MSG_BACK,
                ext=ConsumerSendMsgBackRequestHeader(
                    offset=msg.commitlog_offset,
                    group=c.group,
                    delay_level=delay_level,
                    origin_msg_id=msg.msg_id,
                    origin_topic=msg.topic,
                    unit_mode=False,
                    max_reconsume_times=max_times if max_times >= 0 else DEFAULT_MAX_RECONSUME_TIMES,
                ).to_ext(),
            )
            try:
                reply = await c.instance.invoke(addr, cmd)
                if reply.code == ResponseCode.SUCCESS:
                    return True
                logger.warning(
                    "group %s: broker %s refused to take message %s back: %s",
                    c.group,
                    addr,
                    msg.msg_id,
                    reply.remark,
                )
            except NETWORK_ERRORS as e:
                logger.warning("group %s: sending message %s back failed: %s", c.group, msg.msg_id, e)
        return await self._resend_to_retry_topic(msg, delay_level, max_times)

    async def _resend_to_retry_topic(self, msg: ReceivedMessage, delay_level: int, max_times: int) -> bool:
        """What the Java client does when CONSUMER_SEND_MSG_BACK fails: a plain send to the retry
        topic, with reconsumeTimes + 1 (the broker moves it to the DLQ past the limit)."""
        c = self.consumer
        addr = c.instance.master_addr(msg.queue.broker_name)
        if addr is None:
            return False
        limit = max_times if max_times >= 0 else DEFAULT_MAX_RECONSUME_TIMES
        props = dict(msg.properties)
        props.setdefault("RETRY_TOPIC", msg.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.msg_id)
        props["MAX_RECONSUME_TIMES"] = str(limit)
        props.pop("DELAY", None)
        if delay_level >= 0:
            props["DELAY"] = str(delay_level or 3 + msg.reconsume_times)
            reconsume_times = msg.reconsume_times + 1
        else:
            reconsume_times = max(msg.reconsume_times, limit)  # at the limit: the broker DLQs it
        cmd = RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2,
            ext=SendMessageRequestHeader(
                producer_group=CLIENT_INNER_PRODUCER_GROUP,
                topic=c._retry_topic,
                default_topic=AUTO_CREATE_TOPIC_KEY,
                default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
                queue_id=0,
                sys_flag=0,
                born_timestamp=int(time.time() * 1000),
                flag=msg.flag,
                properties=encode_properties(props),
                reconsume_times=reconsume_times,
                max_reconsume_times=limit,
            ).to_ext_v2(),
            body=msg.body,
        )
        try:
            reply = await c.instance.invoke(addr, cmd)
        except NETWORK_ERRORS as e:
            logger.warning("group %s: re-sending %s to the retry topic failed: %s", c.group, msg.msg_id, e)
            return False
        if reply.code != ResponseCode.SUCCESS:
            logger.warning(
                "group %s: re-sending %s to the retry topic refused: %s", c.group, msg.msg_id, reply.remark
            )
            return False
        return True


def log_crash(task: asyncio.Task[None]) -> None:
    """A done callback: logs the exception a background task died of."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s died", task.get_name(), exc_info=task.exception())
