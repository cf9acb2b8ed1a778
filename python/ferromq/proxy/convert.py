"""Messages between the 5.x clients' protocol and the store, as Apache RocketMQ's proxy converts
them (`GrpcConverter`, `SendMessageActivity`). The rules of a send (the proxy's checks with its
codes and texts, the stored properties and system flag, the message's type, a FIFO group's queue)
live once, in Rust (`ferromq_grpc::convert`), and so do those of a received message (a stored record
made a v2 `Message` with its receipt handle): the gRPC front applies them to the calls it serves on
the data plane, and this module, through the binding, to the calls the service serves."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ferromq import _store
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.results import Popped
from ferromq.proxy.status import ProxyError


def _refusal(e: ValueError) -> Exception:
    """The binding's ValueError(code, message) as the front's ProxyError."""
    if len(e.args) == 2 and isinstance(e.args[0], int):
        return ProxyError(e.args[0], e.args[1])
    return e


def check_topic_name(name: str, reserved: Collection[str] = ()) -> None:
    """ILLEGAL_TOPIC, with the proxy's texts, for a name a client may not use (`reserved`: the
    broker's own system topics, in local mode)."""
    try:
        _store.grpc_check_topic(name, list(reserved))
    except ValueError as e:
        raise _refusal(e) from None


def check_lite_topic(lite: str) -> None:
    """ILLEGAL_LITE_TOPIC, with the proxy's texts, for a lite topic a client may not subscribe."""
    try:
        _store.grpc_check_lite_topic(lite)
    except ValueError as e:
        raise _refusal(e) from None


def check_group_name(name: str) -> None:
    """ILLEGAL_CONSUMER_GROUP, with the proxy's texts, for a name a client may not use."""
    try:
        _store.grpc_check_group(name)
    except ValueError as e:
        raise _refusal(e) from None


def check_invisible(ms: int, *, receive: bool) -> None:
    """ILLEGAL_INVISIBLE_TIME, with the proxy's texts, for an invisible duration out of bounds: a
    receive's (at least 10 s) or a change's (at least 0), at most 12 hours."""
    try:
        _store.grpc_check_invisible(ms, None if receive else 0)
    except ValueError as e:
        raise _refusal(e) from None


def polling_time(
    long_polling_ms: int | None, request_timeout_ms: int | None, remaining_ms: int | None
) -> int:
    """How long a receive that finds nothing waits (ms), as the proxy reckons it; ILLEGAL_POLLING_TIME
    when the call's time left (None: no deadline) is under the 5 s minimum."""
    try:
        return _store.grpc_polling_time(long_polling_ms, request_timeout_ms, remaining_ms)
    except ValueError as e:
        raise _refusal(e) from None


def send_failure(code: int, name: str) -> tuple[int, str]:
    """The entry's (code, text) of a send the broker answered with `code` (named `name`)."""
    return _store.grpc_send_failure(code, name)


@dataclass(frozen=True)
class Outgoing:
    """A v2 message as the broker stores it."""

    topic: str
    body: bytes
    properties_string: str
    sys_flag: int
    born_timestamp: int
    """0: the client gave none."""
    message_type: str
    """NORMAL, FIFO, DELAY or TRANSACTION."""
    message_group: str | None


def to_store(m: pb.Message, peer: str, now_ms: int) -> Outgoing:
    """The RocketMQ message of a v2 message from `peer` (SendMessageActivity.buildMessage), after
    the proxy's checks on it in its order (ProxyError on the first that fails)."""
    try:
        properties, sys_flag, born, message_type, group = _store.grpc_outgoing(
            m.SerializeToString(), peer, now_ms
        )
    except ValueError as e:
        raise _refusal(e) from None
    return Outgoing(m.topic.name, bytes(m.body), properties, sys_flag, born, message_type, group)


def fifo_queue(message_group: str, queues: int) -> int:
    """The write queue of a message group: Guava's consistentHash of the group's Java hash code, as
    the proxy's SendMessageQueueSelector picks it (a group keeps its queue while the count does)."""
    return _store.fifo_queue(message_group, queues)


def to_v2(records: bytes, topic: str | None = None) -> pb.Message:
    """The first of `records` as a 5.x client is shown it (GrpcConverter.buildMessage), of `topic`
    (None: the record's own)."""
    return pb.Message.FromString(_store.grpc_message(records, topic))


def popped_to_v2(popped: Popped, topic: str) -> list[pb.Message]:
    """A pop's records as a 5.x client receives them, each with its receipt handle (the broker's
    receipt and the message's CommitLog offset on that broker): `topic` is the one it asked for (a
    retried message shows its original topic)."""
    starts = {queue_id: start for (mark, queue_id), start in popped.starts.items() if mark == "0"}
    return [
        pb.Message.FromString(raw)
        for raw in _store.grpc_popped(
            popped.body,
            topic,
            popped.broker_name,
            popped.pop_time,
            popped.invisible_time,
            popped.revive_qid,
            starts,
            popped.lite_counts,
        )
    ]
