"""A request body that is not the protobuf its method takes is answered as grpc-java answers it
(Java's proxy): INTERNAL "Invalid protobuf byte sequence". grpcio would answer UNKNOWN with the
Python exception's class and text instead.

The generated `add_..._to_server` builds one handler per method; `register` takes them from it
and wraps each once: its deserializer gives `UNPARSABLE` instead of raising, and its behaviour
ends such a call with the status before the servicer sees it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

INVALID_PROTOBUF = "Invalid protobuf byte sequence"
if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]
    Context = grpc.aio.ServicerContext[Any, Any]


class _Unparsable:
    """What a body that does not parse becomes."""


UNPARSABLE = _Unparsable()


def _deserializer(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(raw: bytes) -> Any:
        try:
            return parse(raw)
        except DecodeError:
            return UNPARSABLE

    return deserialize


async def _refuse(context: Context) -> None:
    await context.abort(grpc.StatusCode.INTERNAL, INVALID_PROTOBUF)


def _unary_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def call(request: Any, context: Context) -> Any:
        if request is UNPARSABLE:
            await _refuse(context)
        return await behavior(request, context)

    return call


def _unary_stream(behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def call(request: Any, context: Context) -> AsyncIterator[Any]:
        if request is UNPARSABLE:
            await _refuse(context)
        async for reply in behavior(request, context):
            yield reply

    return call


def _stream_stream(behavior: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def call(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        async def parsed() -> AsyncIterator[Any]:
            async for request in requests:
                if request is UNPARSABLE:
                    await _refuse(context)
                yield request

        async for reply in behavior(parsed(), context):
            yield reply

    return call


def _wrapped(handler: Handler) -> Handler:
    if handler.request_deserializer is None:
        return handler
    h: Any = handler  # grpcio's RpcMethodHandler is a namedtuple
    changes: dict[str, Any] = {"request_deserializer": _deserializer(h.request_deserializer)}
    if h.unary_unary is not None:
        changes["unary_unary"] = _unary_unary(h.unary_unary)
    elif h.unary_stream is not None:
        changes["unary_stream"] = _unary_stream(h.unary_stream)
    elif h.stream_stream is not None:
        changes["stream_stream"] = _stream_stream(h.stream_stream)
    else:
        return handler  # stream-unary: none in MessagingService
    wrapped: Handler = h._replace(**changes)
    return wrapped


class _Collect:
    """Stands for the server in a generated `add_..._to_server`: keeps the handlers it is given."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Handler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers again, by full name: registered below from `handlers`

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Handler]) -> None:
        self.service, self.handlers = service, handlers


def register(add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server) -> None:
    """`add_to_server(servicer, server)`, with every method's handler wrapped."""
    collect = _Collect()
    add_to_server(servicer, collect)
    handlers = {name: _wrapped(h) for name, h in collect.handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(collect.service, handlers),))
    server.add_registered_method_handlers(collect.service, handlers)
