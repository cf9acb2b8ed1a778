"""The calls the gRPC front hands to Python itself, without grpcio (crates/grpc, `inbox.rs`).

Every unary-request method the service implements comes this way: the front reads the call,
queues its request and metadata, and makes a descriptor readable; the event loop takes the calls
(`GrpcFront.take_calls`), serves each with the same `MessagingService` method grpcio would call,
on a context that gives what the service asks of grpcio's (the metadata, the time left), and
answers with the encoded replies or a gRPC status. Telemetry (bidirectional) stays grpcio's, as
do the calls the front cannot read whole (compressed, past 8 MiB, too many waiting).

Why: grpcio's HTTP/2 server, its completion queue and the Unix socket hop cost more CPU than the
service's own work for the small calls of 5.x clients (a lite push consumer's receive and ack,
heartbeats, routes). Answers are grpcio's: a request that does not parse gets INTERNAL
"Invalid protobuf byte sequence" (as Java's proxy answers), a method that raises gets UNKNOWN
with grpcio's text, a call whose client goes is cancelled (a long poll stops waiting)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError, Message

from ferromq import _store
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.proxy.unparsable import INVALID_PROTOBUF

logger = logging.getLogger(__name__)

SERVICE = "apache.rocketmq.v2.MessagingService"
# gRPC status codes the inbox answers with.
CANCELLED = 1
UNKNOWN = 2
INTERNAL = 13


@dataclass(frozen=True)
class Method:
    """One method the inbox serves: its request's class, the service's coroutine (or async
    generator, for a server-streaming method)."""

    request: type[Message]
    serve: Callable[[Any, Any], Any]
    streaming: bool


def service_methods(service: rpc.MessagingServiceServicer) -> dict[str, Method]:
    """The methods of `service` by path: those it implements whose request is one message."""
    methods = {}
    for m in spb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        own = getattr(type(service), m.name, None)
        if m.client_streaming or own is None or own is getattr(rpc.MessagingServiceServicer, m.name):
            continue
        methods[f"/{SERVICE}/{m.name}"] = Method(
            getattr(spb, m.input_type.name), getattr(service, m.name), m.server_streaming
        )
    return methods


class Aborted(Exception):
    """A method ended its call with a gRPC status (`CallContext.abort`)."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class CallContext:
    """What the service asks of a call's context: its metadata, the time left before the client's
    deadline, and an abort (grpcio's `ServicerContext` gives the same)."""

    def __init__(self, metadata: Sequence[tuple[str, str]], timeout_ms: int | None) -> None:
        self._metadata = tuple(metadata)
        self._deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    async def abort(self, code: Any, details: str) -> None:
        # grpc.StatusCode's value is (number, name).
        raise Aborted(code.value[0] if isinstance(code.value, tuple) else int(code.value), details)


class FrontCalls:
    """Takes the front's calls on the running event loop and answers them."""

    def __init__(self, methods: dict[str, Method], front: _store.GrpcFront) -> None:
        self._methods = methods
        self._front = front
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._fd: int | None = None

    def start(self) -> None:
        fd = self._front.inbox_fd
        if fd is not None:
            asyncio.get_running_loop().add_reader(fd, self._take)
            self._fd = fd

    async def stop(self, grace_s: float) -> None:
        """No new call is taken; those served now get `grace_s` to end, then are cancelled."""
        fd, self._fd = self._fd, None
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
        tasks = list(self._tasks.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace_s)
            for task in late:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*late, return_exceptions=True)

    def _take(self) -> None:
        calls, cancelled = self._front.take_calls()
        loop = asyncio.get_running_loop()
        for call_id, path, metadata, timeout_ms, request in calls:
            task = loop.create_task(self._serve(call_id, path, metadata, timeout_ms, request))
            self._tasks[call_id] = task
            task.add_done_callback(functools.partial(self._served, call_id))
        for call_id in cancelled:
            running = self._tasks.get(call_id)
            if running is not None:
                running.cancel()

    def _served(self, call_id: int, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(call_id, None)

    async def _serve(
        self,
        call_id: int,
        path: str,
        metadata: list[tuple[str, str]],
        timeout_ms: int | None,
        raw: bytes,
    ) -> None:
        method = self._methods[path]
        try:
            request = method.request.FromString(raw)
        except DecodeError:
            self._front.refuse(call_id, INTERNAL, INVALID_PROTOBUF)
            return
        context = CallContext(metadata, timeout_ms)
        try:
            if method.streaming:
                stream: AsyncIterator[Message] = method.serve(request, context)
                replies = [reply.SerializeToString() async for reply in stream]
            else:
                reply: Awaitable[Message] = method.serve(request, context)
                replies = [(await reply).SerializeToString()]
        except asyncio.CancelledError:
            self._front.refuse(call_id, CANCELLED, "the call was cancelled")
            raise
        except Aborted as e:
            self._front.refuse(call_id, e.code, e.details)
        except Exception as e:
            # grpcio's answer to a method that raised.
            logger.warning("gRPC %s failed: %r", path.rsplit("/", 1)[-1], e, exc_info=True)
            self._front.refuse(call_id, UNKNOWN, f"Unexpected {type(e)}: {e}")
        else:
            self._front.answer(call_id, replies)
