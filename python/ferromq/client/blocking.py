"""Blocking facades for scripts: the asyncio clients run on an event loop in a background thread,
and every method waits for its result.

    with BlockingProducer("PG", "127.0.0.1:9876") as producer:
        producer.send(Message("Orders", b"hello", tags="TagA"))
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from ferromq.client.message import Message, MessageQueue, SendResult
from ferromq.client.producer import Producer, QueueSelector, hash_selector

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


class BlockingProducer:
    """`Producer` with blocking methods. `send` waits for the broker's answer; `send_async`
    returns a `concurrent.futures.Future`."""

    def __init__(self, group: str, namesrv: str, **options: Any) -> None:
        self._loop = LoopThread(f"ferromq-producer-{group}")
        self._producer: Producer = self._loop.run(_build(lambda: Producer(group, namesrv, **options)))

    def start(self) -> None:
        self._loop.run(self._producer.start())

    def shutdown(self) -> None:
        try:
            self._loop.run(self._producer.stop())
        finally:
            self._loop.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

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


async def _build(factory: Callable[[], T]) -> T:
    # Client objects create asyncio primitives: build them on the loop that will run them.
    return factory()
