"""The 5.x surfaces under abuse (issue 39), beside the remoting port's (test_abuse.py): HTTP/2
peers that reset streams as fast as they open them (CVE-2023-44487), never end their headers
(CONTINUATION floods, CVE-2024-27316), open streams past the limit, read nothing, or send frames
that are not HTTP/2; gRPC calls with bodies that are not protobuf, length prefixes of gigabytes,
absurd batch sizes and durations and forged receipts. Each attack gets a clear refusal of its own
connection or call, costs the broker a bounded amount of memory and no descriptor once it is
over, and a fresh client is served after it, as Apache RocketMQ 5.3.3's proxy is."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import BrokerProcess
from ferromq.testing import h2frames as h2
from ferromq.testing.process import remoting_request
from ferromq.testing.waiting import wait_until

pytestmark = [pytest.mark.timeout(240)]

TOPIC = "AbuseT"
CLIENT = [("x-mq-client-id", "grpc-abuse"), ("x-mq-language", "PYTHON")]
CALL_TIMEOUT = 10.0
# What one attack may cost the broker's anonymous memory at its peak (MiB).
MEMORY_BUDGET_MIB = 64


def rss_anon_mib(pid: int) -> float:
    m = re.search(r"^RssAnon:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m is not None
    return int(m.group(1)) / 1024


def descriptors(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    conf = {"brokerName": "broker-a", "autoCreateTopicEnable": "true"}
    with BrokerProcess(tmp_path_factory.mktemp("grpc-abuse"), conf) as b:
        ext = {"topic": TOPIC, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
        assert remoting_request(b.broker_addr, RemotingCommand(RC.UPDATE_AND_CREATE_TOPIC, ext=ext)).code == 0
        yield b


def query_route(endpoint: str) -> pb.Status:
    """A QueryRoute on a connection of its own: what a fresh client asks first."""
    with grpc.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        reply = rpc.MessagingServiceStub(ch).QueryRoute(  # type: ignore[no-untyped-call]
            spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=CLIENT, timeout=CALL_TIMEOUT
        )
        status: pb.Status = reply.status
        return status


class Budget:
    """The broker's memory and descriptors before an attack, checked after it."""

    def __init__(self, b: BrokerProcess) -> None:
        assert b.pid is not None
        self.pid = b.pid
        self.endpoint = b.grpc_endpoint
        self.rss = rss_anon_mib(self.pid)
        self.fds = descriptors(self.pid)

    def check(self) -> None:
        grown = rss_anon_mib(self.pid) - self.rss
        assert grown < MEMORY_BUDGET_MIB, f"the attack cost {grown:.0f} MiB"
        # The attack's connections are gone: the broker holds what it held before (its shared
        # connections to grpcio may have been opened meanwhile: a few more).
        wait_until(lambda: descriptors(self.pid) <= self.fds + 4, "the attack's descriptors closed", 20)
        assert query_route(self.endpoint).code == pb.OK, "a fresh client is not served"


def test_rapid_reset_is_cut_off(broker: BrokerProcess) -> None:
    budget = Budget(broker)
    s = h2.connect(broker.grpc_endpoint)
    pairs = b"".join(
        h2.frame(h2.HEADERS, h2.END_HEADERS, sid, h2.call_headers("QueryRoute"))
        + h2.frame(h2.RST_STREAM, 0, sid, struct.pack(">I", h2.CANCEL))
        for sid in range(1, 2 * 500, 2)
    )
    sent = h2.send_until_closed(s, pairs, 40)  # 20,000 streams opened and reset at most
    frames, closed = h2.read_frames(s, 10)
    s.close()
    away = h2.goaway(frames)
    assert away is not None and away.error_code == h2.ENHANCE_YOUR_CALM and closed, (sent, frames[-3:])
    assert sent < 40, "20,000 resets and the connection is still open"
    budget.check()


def test_a_continuation_flood_is_cut_off(broker: BrokerProcess) -> None:
    budget = Budget(broker)
    s = h2.connect(broker.grpc_endpoint)
    s.sendall(h2.frame(h2.HEADERS, 0, 1, h2.call_headers("QueryRoute")))  # no END_HEADERS
    block = h2.frame(h2.CONTINUATION, 0, 1, h2.literal("x-junk", "a" * 16_000))
    sent = h2.send_until_closed(s, block, 4096)  # 64 MiB of header block at most
    frames, closed = h2.read_frames(s, 10)
    s.close()
    assert closed and h2.goaway(frames) is not None, sent
    assert sent < 1024, f"{sent * 16} KB of headers taken before the close"
    budget.check()


def test_streams_past_the_limit_are_refused(broker: BrokerProcess) -> None:
    budget = Budget(broker)
    s = h2.connect(broker.grpc_endpoint)
    # 3,000 calls opened, none with a body or an end: past MAX_CONCURRENT_STREAMS (1,000).
    opened = b"".join(
        h2.frame(h2.HEADERS, h2.END_HEADERS, sid, h2.call_headers("QueryRoute", **dict(CLIENT)))
        for sid in range(1, 2 * 3000, 2)
    )
    h2.send_until_closed(s, opened, 1)
    frames, _ = h2.read_frames(s, 5)
    s.close()
    refused = [f for f in frames if f.kind == h2.RST_STREAM and f.error_code == h2.REFUSED_STREAM]
    away = h2.goaway(frames)
    assert refused or (away is not None and away.error_code != 0), frames[-3:]
    budget.check()


def test_a_reader_with_a_zero_window_holds_only_its_own(broker: BrokerProcess) -> None:
    budget = Budget(broker)
    # Asks 200 routes and lets no byte of the answers come (flow control window 0).
    s = h2.connect(broker.grpc_endpoint, initial_window_size=0)
    request = h2.grpc_message(spb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)).SerializeToString())
    calls = b"".join(
        h2.frame(h2.HEADERS, h2.END_HEADERS, sid, h2.call_headers("QueryRoute", **dict(CLIENT)))
        + h2.frame(h2.DATA, h2.END_STREAM, sid, request)
        for sid in range(1, 400, 2)
    )
    s.sendall(calls)
    frames, _ = h2.read_frames(s, 3)
    assert not [f for f in frames if f.kind == h2.DATA], "the server sent past a window of 0"
    # Every other client is served meanwhile.
    assert query_route(broker.grpc_endpoint).code == pb.OK
    s.close()
    budget.check()


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(bytes(range(256)) * 16, id="not-http2"),
        pytest.param(h2.frame(h2.SETTINGS, 0, 0, b"\x00\x03\x00"), id="settings-of-5-bytes"),
        pytest.param(h2.frame(h2.DATA, 0, 0, b"x"), id="data-on-stream-0"),
        pytest.param(h2.frame(h2.WINDOW_UPDATE, 0, 0, b"\x00\x00\x00\x00"), id="window-update-of-0"),
        pytest.param(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, b"\xff\xff\xff\xff\xff"), id="bad-hpack"),
        pytest.param(
            h2.frame(h2.HEADERS, h2.END_HEADERS, 2, h2.call_headers("QueryRoute")), id="even-stream"
        ),
        pytest.param(b"\x00\xff\xff" + bytes([h2.DATA, 0]) + b"\x00\x00\x00\x01", id="frame-past-max-size"),
    ],
)
def test_frames_that_are_not_http2_close_their_connection_only(broker: BrokerProcess, garbage: bytes) -> None:
    budget = Budget(broker)
    s = h2.connect(broker.grpc_endpoint)
    s.sendall(garbage)
    frames, closed = h2.read_frames(s, 10)
    s.close()
    away = h2.goaway(frames)
    assert closed and away is not None and away.error_code != 0, frames[-3:]
    budget.check()


# Every MessagingService method whose request is one message (Telemetry's is a stream).
METHODS = [
    m.name for m in spb.DESCRIPTOR.services_by_name["MessagingService"].methods if not m.client_streaming
]


@pytest.mark.parametrize("method", METHODS)
def test_a_body_that_is_not_protobuf_is_refused_as_grpc_java_does(broker: BrokerProcess, method: str) -> None:
    """grpc-java (Java's proxy) answers INTERNAL "Invalid protobuf byte sequence"; no Python
    error text may reach the client."""
    with grpc.insecure_channel(broker.grpc_endpoint) as ch:
        call = ch.unary_unary(h2.SERVICE + method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as e:
            call(b"\xff" * 64, metadata=CLIENT, timeout=CALL_TIMEOUT)
    err = e.value
    assert isinstance(err, grpc.Call)
    assert (err.code(), err.details()) == (grpc.StatusCode.INTERNAL, "Invalid protobuf byte sequence")
    assert query_route(broker.grpc_endpoint).code == pb.OK


def test_a_length_prefix_of_gigabytes_is_answered_without_reading_it(broker: BrokerProcess) -> None:
    budget = Budget(broker)
    s = h2.connect(broker.grpc_endpoint)
    s.sendall(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, h2.call_headers("SendMessage", **dict(CLIENT))))
    # A message said to be 4 GiB long, then the end of the call after 100 bytes of it.
    s.sendall(h2.frame(h2.DATA, h2.END_STREAM, 1, b"\x00" + struct.pack(">I", 0xFFFFFFF0) + b"x" * 100))
    frames, closed = h2.read_frames(s, 10)
    s.close()
    answered = [f for f in frames if f.stream == 1 and f.kind in (h2.HEADERS, h2.RST_STREAM)]
    assert answered and (answered[-1].kind == h2.RST_STREAM or answered[-1].flags & h2.END_STREAM), frames
    assert not closed, "the whole connection was closed for one call"
    budget.check()


def test_absurd_receives_and_forged_receipts_get_the_proxys_codes(broker: BrokerProcess) -> None:
    budget = Budget(broker)
    group, queue = pb.Resource(name="AbuseG"), pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1)
    with grpc.insecure_channel(broker.grpc_endpoint) as ch:
        stub = rpc.MessagingServiceStub(ch)  # type: ignore[no-untyped-call]
        receive = spb.ReceiveMessageRequest(
            group=group,
            message_queue=queue,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=2**31 - 1,
            invisible_duration=duration_pb2.Duration(seconds=2**40),
            auto_renew=False,
            long_polling_timeout=duration_pb2.Duration(seconds=20),
        )
        statuses = [
            r.status
            for r in stub.ReceiveMessage(receive, metadata=CLIENT, timeout=30)
            if r.HasField("status")
        ]
        assert [s.code for s in statuses] == [pb.ILLEGAL_INVISIBLE_TIME], statuses
        forged = spb.AckMessageRequest(
            group=group,
            topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(message_id="0" * 32, receipt_handle="forged " * 1000)],
        )
        reply = stub.AckMessage(forged, metadata=CLIENT, timeout=CALL_TIMEOUT)
        assert [e.status.code for e in reply.entries] == [pb.INVALID_RECEIPT_HANDLE]
        # Java checks the duration before it reads the receipt.
        change = spb.ChangeInvisibleDurationRequest(
            group=group,
            topic=pb.Resource(name=TOPIC),
            receipt_handle="forged",
            invisible_duration=duration_pb2.Duration(seconds=-5),
            message_id="0" * 32,
        )
        status = stub.ChangeInvisibleDuration(change, metadata=CLIENT, timeout=CALL_TIMEOUT).status
        assert status.code == pb.ILLEGAL_INVISIBLE_TIME, status
    budget.check()
