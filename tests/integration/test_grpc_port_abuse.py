"""The gRPC port among hostile peers (issue 39): it keeps the remoting port's discipline. A
connection that only says hello (HTTP/2's preface) costs the broker one descriptor, not three (the
front's connections to grpcio are shared, opened by the calls that need them), so hundreds of them
under a low open file limit leave every port serving; one address past its share
(`serverMaxConnectionsPerAddress`) is accepted and closed while the others are served; and a
connection that sends nothing, part of the preface, or the preface alone is closed within the
handshake and idle timeouts (`serverChannelMaxIdleTimeSeconds`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import RemotingCommand
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.testing import Broker, BrokerProcess
from ferromq.testing.process import remoting_request
from ferromq.testing.waiting import closed_by_peer, until, wait_until
from tests.integration.brokerkit import send_ext

pytestmark = [pytest.mark.timeout(240)]

RUN = uuid.uuid4().hex[:6]
CALL_TIMEOUT = 10.0
WAIT = 20.0
# HTTP/2's client preface and an empty SETTINGS frame: all a hostile peer sends.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
# Preface-only connections held at once against the broker of the first test, and the open file
# limit it is given: the descriptors it has, and room for them with one each (three each fail).
HELLOS = 500
LIMIT_ROOM = 2 * HELLOS
CLIENT = [("x-mq-client-id", f"abuse-{RUN}"), ("x-mq-language", "PYTHON")]


def query_route(endpoint: str, topic: str) -> pb.Status:
    """A QueryRoute on a connection of its own (not shared with another channel of this process)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(endpoint, options=options) as ch:
        reply = rpc.MessagingServiceStub(ch).QueryRoute(  # type: ignore[no-untyped-call]
            spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=CLIENT, timeout=CALL_TIMEOUT
        )
        status: pb.Status = reply.status
        return status


def remoting_send(addr: str, topic: str) -> RemotingCommand:
    """One SEND_MESSAGE on a connection of its own, and its reply."""
    ext = {k: str(v) for k, v in send_ext(topic, 0).items()}
    return remoting_request(addr, RemotingCommand(RC.SEND_MESSAGE, opaque=1, ext=ext, body=b"hello"))


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def own_file_limit(needed: int) -> Iterator[None]:
    """This process's soft open file limit at least `needed` (within its hard limit) meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open file limit ({hard}) is under {needed}")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def hello(addr: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    """A connection from `source` that sends HTTP/2's preface and nothing more."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((source, 0))
        s.settimeout(CALL_TIMEOUT)
        s.connect(addr)
        s.sendall(PREFACE)
    except BaseException:
        s.close()
        raise
    return s


def served(s: socket.socket) -> bool:
    """Whether the broker answered the preface with its own SETTINGS frame (False: it closed the
    connection instead)."""
    header = b""
    try:
        while len(header) < 9:
            chunk = s.recv(9 - len(header))
            if not chunk:
                return False
            header += chunk
    except ConnectionResetError:
        return False
    return header[3] == 0x04


def endpoint_of(endpoint: str) -> tuple[str, int]:
    host, port = endpoint.rsplit(":", 1)
    return host, int(port)


def test_preface_only_connections_cost_one_descriptor_and_every_port_serves_on(tmp_path: Path) -> None:
    """HELLOS connections that only send the preface, against a broker whose open file limit leaves
    room for twice as many descriptors as that: its descriptors grow by about one a connection,
    and a fresh QueryRoute and a remoting send are answered meanwhile (before, each cost three,
    and the broker stopped answering at the limit)."""
    topic = f"Hello{RUN}"
    conf: dict[str, str | bool] = {"autoCreateTopicEnable": True, "brokerName": f"abuse{RUN}"}
    with own_file_limit(HELLOS + 256), BrokerProcess(tmp_path, conf) as server:
        assert server.logged("open file limit"), server.log_tail()
        grpc_addr = endpoint_of(server.grpc_endpoint)
        # The calls a client makes first, so that what they open is open before the count.
        assert query_route(server.grpc_endpoint, topic).code in (pb.OK, pb.TOPIC_NOT_FOUND)
        assert remoting_send(server.broker_addr, topic).code == 0
        before = descriptors(server.pid)
        limit = before + LIMIT_ROOM
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (limit, limit))
        socks: list[socket.socket] = []
        try:
            for _ in range(HELLOS):
                socks.append(hello(grpc_addr))
            # (Less a few: the broker may close the connections of the calls above meanwhile.)
            accepted = before + HELLOS - 10
            wait_until(lambda: descriptors(server.pid) >= accepted, "every connection accepted", WAIT)
            held = descriptors(server.pid) - before
            assert held <= HELLOS + 20, f"{held} descriptors for {HELLOS} preface-only connections"
            status = query_route(server.grpc_endpoint, topic)
            assert status.code in (pb.OK, pb.TOPIC_NOT_FOUND), status
            assert remoting_send(server.broker_addr, topic).code == 0
            # Every hello is still served (none was dropped for want of descriptors).
            assert all(served(s) for s in socks)
        finally:
            for s in socks:
                s.close()
        assert not server.logged("Too many open files"), server.log_tail()
    assert server.returncode == 0, server.log_tail()


def test_an_address_past_its_share_is_closed_and_the_others_are_served() -> None:
    """serverMaxConnectionsPerAddress on the gRPC port: past an address's share a connection is
    accepted and closed at once; another address is served meanwhile, and so is a call from the
    first once its connections are gone."""
    share = 20

    async def main() -> None:
        async with Broker(settings={"server_max_connections_per_address": share}) as b:
            addr = endpoint_of(b.grpc_endpoint)
            socks: list[socket.socket] = []
            try:
                for _ in range(share):
                    socks.append(await asyncio.to_thread(hello, addr))
                assert all(await asyncio.to_thread(lambda: [served(s) for s in socks]))
                for _ in range(5):
                    past = await asyncio.to_thread(hello, addr)
                    socks.append(past)
                    assert await asyncio.to_thread(closed_by_peer, past, WAIT), "past the share, open"
                other = await asyncio.to_thread(hello, addr, "127.0.0.2")
                socks.append(other)
                assert await asyncio.to_thread(served, other), "another address was not served"
            finally:
                for s in socks:
                    s.close()
            front = b.broker.grpc.front if b.broker.grpc is not None else None
            assert front is not None
            await until(lambda: front.open_connections == 0, "the connections gone", WAIT)
            status = await asyncio.to_thread(query_route, b.grpc_endpoint, f"Share{RUN}")
            assert status.code in (pb.OK, pb.TOPIC_NOT_FOUND), status

    asyncio.run(main())


def test_silent_and_preface_only_connections_are_closed_by_peer_the_timeouts() -> None:
    """With serverChannelMaxIdleTimeSeconds of 2, a connection that sends nothing, one that sends
    part of the preface and one that sends the preface alone are all closed within a few seconds
    (the handshake timeout is the idle timeout when shorter; a preface-only connection has no call
    open, so it is idle)."""
    idle = 2

    async def main() -> None:
        async with Broker(settings={"server_channel_max_idle_time_seconds": idle}) as b:
            addr = endpoint_of(b.grpc_endpoint)

            def connections() -> list[tuple[str, socket.socket]]:
                silent = socket.create_connection(addr, timeout=CALL_TIMEOUT)
                part = socket.create_connection(addr, timeout=CALL_TIMEOUT)
                part.sendall(PREFACE[:10])
                return [("silent", silent), ("part of the preface", part), ("preface", hello(addr))]

            socks = await asyncio.to_thread(connections)
            started = time.monotonic()
            try:
                for name, s in socks:
                    closed = await asyncio.to_thread(closed_by_peer, s, 4 * idle + 5)
                    assert closed, f"{name}: still open after {time.monotonic() - started:.1f} s"
            finally:
                for _, s in socks:
                    s.close()

    asyncio.run(main())
