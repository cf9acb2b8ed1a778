"""Blocking facades for scripts: the asyncio clients run on an event loop in a background thread,
and every method waits for its result.

    with BlockingProducer("PG", "127.0.0.1:9876") as producer:
        producer.send(Message("Orders", b"hello", tags="TagA"))

    consumer = BlockingPushConsumer("CG", "127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA")
    consumer.register_listener(handle)      # a plain function; it runs on a worker thread
    consumer.start()
    ...
    consumer.shutdown()
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from ferromq.client.message import Message, MessageQueue, ReceivedMessage, SendResult
from ferromq.client.producer import Producer, QueueSelector, hash_selector
from ferromq.client.pull_consumer import PullConsumer
from ferromq.client.push_consumer import ConcurrentListener, ExpressionType, OrderlyListener, PushConsumer
from ferromq.client.transaction_producer import (
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread, for calling coroutines from blocking code."""

    def __init__(self, name: str = "ferromq-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class _Blocking:
    """Owns a loop thread and a client object living on it."""

    _loop: LoopThread

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        self._loop.run(coro)

    def start(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def _shutdown(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            self._loop.run(coro)
        finally:
            self._loop.close()


class BlockingProducer(_Blocking):
    """`Producer` with blocking methods. `send` waits for the broker's answer; `send_async`
    returns a `concurrent.futures.Future`."""

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        self._loop = LoopThread(f"ferromq-producer-{group}")
        self._producer: Producer = self._loop.run(_build(lambda: Producer(group, namesrv, **options)))

    def start(self) -> None:
        self._start(self._producer.start())

    def shutdown(self) -> None:
        self._shutdown(self._producer.stop())

    def send(self, msg: Message, *, queue: MessageQueue | None = None) -> SendResult:
        return self._loop.run(self._producer.send(msg, queue=queue))

    def send_orderly(
        self, msg: Message, sharding_key: Any, selector: QueueSelector = hash_selector
    ) -> SendResult:
        return self._loop.run(self._producer.send_orderly(msg, sharding_key, selector))

    def send_oneway(self, msg: Message) -> None:
        self._loop.run(self._producer.send_oneway(msg))

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        return self._loop.run(self._producer.send_batch(msgs))

    def send_async(self, msg: Message) -> Any:
        """A concurrent.futures.Future of the SendResult."""
        return asyncio.run_coroutine_threadsafe(self._producer.send(msg), self._loop.loop)


class BlockingTransactionProducer(_Blocking):
    """`TransactionProducer` with blocking methods; the listener's methods may be plain functions."""

    def __init__(self, group: str, namesrv: str, listener: TransactionListener, **options: Any) -> None:
        self._loop = LoopThread(f"ferromq-tx-{group}")
        self._producer: TransactionProducer = self._loop.run(
            _build(lambda: TransactionProducer(group, namesrv, listener, **options))
        )

    def start(self) -> None:
        self._start(self._producer.start())

    def shutdown(self) -> None:
        self._shutdown(self._producer.stop())

    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        return self._loop.run(self._producer.send_message_in_transaction(msg, arg))


class BlockingPushConsumer(_Blocking):
    """`PushConsumer` for scripts: `start()` returns once it runs; listeners may be plain functions
    (they run on the consumer's worker threads)."""

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        self._loop = LoopThread(f"ferromq-consumer-{group}")
        self._consumer: PushConsumer = self._loop.run(_build(lambda: PushConsumer(group, namesrv, **options)))

    def subscribe(
        self, topic: str, expression: str = "*", expression_type: ExpressionType | str = "TAG"
    ) -> None:
        self._consumer.subscribe(topic, expression, expression_type)

    def register_listener(self, listener: ConcurrentListener) -> None:
        self._consumer.register_listener(listener)

    def register_orderly_listener(self, listener: OrderlyListener) -> None:
        self._consumer.register_orderly_listener(listener)

    def start(self) -> None:
        self._start(self._consumer.start())

    def shutdown(self) -> None:
        self._shutdown(self._consumer.stop())


class BlockingPullConsumer(_Blocking):
    """`PullConsumer` with blocking methods."""

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        self._loop = LoopThread(f"ferromq-pull-{group}")
        self._consumer: PullConsumer = self._loop.run(_build(lambda: PullConsumer(group, namesrv, **options)))

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._consumer.subscribe(topic, expression)

    def assign(self, queues: Sequence[MessageQueue], expression: str = "*") -> None:
        self._consumer.assign(queues, expression)

    def assignment(self) -> list[MessageQueue]:
        return self._consumer.assignment()

    def fetch_queues(self, topic: str) -> list[MessageQueue]:
        return self._loop.run(self._consumer.fetch_queues(topic))

    def poll(self, timeout: float | None = None) -> list[ReceivedMessage]:
        return self._loop.run(self._consumer.poll(timeout))

    def seek(self, queue: MessageQueue, offset: int) -> None:
        self._loop.run(self._consumer.seek(queue, offset))

    def seek_to_begin(self, queue: MessageQueue) -> None:
        self._loop.run(self._consumer.seek_to_begin(queue))

    def seek_to_end(self, queue: MessageQueue) -> None:
        self._loop.run(self._consumer.seek_to_end(queue))

    def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        self._loop.run(self._consumer.commit(offsets))

    def start(self) -> None:
        self._start(self._consumer.start())

    def shutdown(self) -> None:
        self._shutdown(self._consumer.stop())


async def _build(factory: Callable[[], T]) -> T:
    # Client objects create asyncio primitives: build them on the loop that will run them.
    return factory()
