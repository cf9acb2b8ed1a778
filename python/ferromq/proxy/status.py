"""The `Status` every MessagingService response carries, as Apache RocketMQ's proxy gives it: the
v2 `Code`s, the refusals the gRPC front raises (`ProxyError`), and how a broker refusal (a
`ferromq.errors` class with its RocketMQ response code) becomes one.

A refusal travels inside a normal response (gRPC status OK) with only its `status` set, as the
Java proxy answers; gRPC's own status is for the transport and for Telemetry."""

from __future__ import annotations

import logging

from ferromq.errors import FerroMQError, TopicNotExistError
from ferromq.protocol.codes import ResponseCode
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb

logger = logging.getLogger(__name__)

Code = pb.Code

# The text Java's proxy puts before the message of a refusal its local broker gave
# (ProxyException's toString through GrpcProxyException).
PROXY_EXCEPTION = "org.apache.rocketmq.proxy.common.ProxyException: "


class ProxyError(FerroMQError):
    """A request the gRPC front refuses with a v2 `Code` and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = code
        self.message = message


def ok() -> pb.Status:
    return pb.Status(code=Code.OK, message="OK")


def status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message or Code.Name(code))  # type: ignore[arg-type]


_CODES: dict[int, int] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
}


def code_of_response(response_code: int) -> int:
    """A broker response code as the proxy's `ResponseBuilder.buildCode` maps it."""
    return _CODES.get(response_code, Code.INTERNAL_SERVER_ERROR)


def status_of(e: Exception) -> pb.Status:
    """The status of a refusal: the front's own, or the broker's as the local Java proxy wraps it;
    any other exception is a fault, logged with its traceback (the one place the service turns
    one into INTERNAL_SERVER_ERROR)."""
    if isinstance(e, ProxyError):
        return status(e.status_code, e.message)
    if isinstance(e, TopicNotExistError):
        return status(Code.TOPIC_NOT_FOUND, str(e))
    if isinstance(e, FerroMQError):
        mapped = code_of_response(e.code)
        if mapped == Code.INTERNAL_SERVER_ERROR:
            return status(mapped, PROXY_EXCEPTION + str(e))
        return status(mapped, str(e))
    # Not a refusal: a fault of ours. The client learns only its name; the log has the rest.
    logger.error("gRPC: internal error answered INTERNAL_SERVER_ERROR: %r", e, exc_info=e)
    return status(Code.INTERNAL_SERVER_ERROR, f"{e}. {type(e).__name__}")
