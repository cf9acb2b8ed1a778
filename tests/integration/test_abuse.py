"""A broker among misbehaving peers (issue 12, bounded memory and hostile input): idle and
slowloris connections are closed, a connection flood meets a cap (and a log line, not a line per
refusal), a peer that does not read its replies stops being read, unfinished frames share one
budget, and refusals are RocketMQ codes with plain remarks. The memory tests run `ferromq serve` in
a subprocess and assert its anonymous RSS (RssAnon) stays under 256 MiB."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import select
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Awaitable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from ferromq import _store
from ferromq.broker.topics import TopicConfig
from ferromq.client.admin import parse_consume_stats
from ferromq.jsonutil import loads_lenient
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import FLAG_RESPONSE, MAX_FRAME_SIZE, RemotingCommand, decode_frame, encode
from ferromq.remoting.connection import CloseReason, Connection
from ferromq.remoting.plane import PlaneServer
from ferromq.remoting.server import RemotingServer, ServerLimits
from ferromq.testing.waiting import until, wait_until

from .brokerkit import Client, batch_body, pop_request, properties, pull_ext, running, send_ext

logger = logging.getLogger(__name__)

RSS_CEILING = 256 * 1024 * 1024
WAIT = 20.0  # seconds any condition below may take on a loaded machine


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 90))  # type: ignore[arg-type]


async def raw_connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Reads until the server closes the socket (EOF or reset), within WAIT."""
    async with asyncio.timeout(WAIT):
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
    return True


# -- timeouts and the connection cap ------------------------------------------------------------


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    """serverChannelMaxIdleTimeSeconds: no byte either way for that long closes the channel."""

    async def main() -> None:
        async with running(tmp_path, server_channel_max_idle_time_seconds=1) as (_, broker):
            assert broker.server is not None
            reader, writer = await raw_connect(broker.port)
            await until(lambda: broker.server.open_connections == 1, "accepted")  # type: ignore[union-attr]
            assert await closed_by_server(reader)
            await until(lambda: broker.server.closed_by_reason[CloseReason.IDLE] == 1, "idle close")  # type: ignore[union-attr]
            writer.close()
            # A client that talks is not idle in the meantime: it is served.
            c = await Client().connect(broker.port)
            r = await c.call(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})
            assert r.code == R.SUCCESS
            await c.close()

    run(main())


def test_slowloris_unfinished_frame_times_out(tmp_path: Path) -> None:
    """A frame that never completes is closed after the read timeout, although bytes keep coming
    (the idle timeout alone would never fire)."""

    async def main() -> None:
        async with running(
            tmp_path, server_read_timeout_seconds=1, server_channel_max_idle_time_seconds=600
        ) as (_, broker):
            server = broker.server
            assert server is not None
            reader, writer = await raw_connect(broker.port)
            writer.write(struct.pack(">i", 10_000) + b"\x00\x00\x00\x10")
            drip = 0
            while server.closed_by_reason[CloseReason.READ_TIMEOUT] == 0:
                assert drip < WAIT * 20, "the unfinished frame was not timed out"
                with contextlib.suppress(ConnectionError):
                    writer.write(b" ")  # one byte at a time, well under the frame's length
                    await writer.drain()
                drip += 1
                await asyncio.sleep(0.05)  # the drip under test: a frame that never completes
            assert await closed_by_server(reader)
            assert server.buffered_request_bytes == 0
            writer.close()

    run(main())


async def connect_from(source: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection from another loopback address (127.0.0.0/8): another host, as the server sees it."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def served(port: int) -> bool:
    """A new client from 127.0.0.1 gets its request answered."""
    c = await Client().connect(port)
    try:
        return (await c.call(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})).code == R.SUCCESS
    finally:
        await c.close()


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_one_host_cannot_take_every_connection(
    tmp_path: Path, plane: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A host opening idle connections by the hundred holds its address's share
    (serverMaxConnectionsPerAddress), one log line for all the refusals; at the global limit the
    longest-idle connection makes room for a new one, so a new client is served while the flood
    holds every slot; the clients that talk keep being served."""

    async def main() -> None:
        async with running(
            tmp_path,
            data_plane=plane,
            server_max_connections=12,
            server_max_connections_per_address=5,
        ) as (_, broker):
            server = broker.server
            assert server is not None
            logger_name = (
                "ferromq.remoting.plane" if isinstance(server, PlaneServer) else "ferromq.remoting.server"
            )
            with caplog.at_level(logging.WARNING, logger=logger_name):
                flood = [await connect_from("127.0.0.2", broker.port) for _ in range(60)]
                await until(lambda: server.closed_by_reason[CloseReason.ADDRESS_LIMIT] == 55, "refusals")
            await until(lambda: server.open_connections == 5, "the address's share open")
            lines = [r.getMessage() for r in caplog.records if r.name == logger_name]
            assert len(lines) == 1 and "serverMaxConnectionsPerAddress=5" in lines[0], lines
            # More hosts fill every slot; each newcomer past the limit closes the longest idle.
            talker = await Client().connect(broker.port)
            for source in ("127.0.0.3", "127.0.0.4"):
                flood += [await connect_from(source, broker.port) for _ in range(5)]
                assert (await talker.call(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})).code == 0
            await until(lambda: server.closed_by_reason[CloseReason.EVICTED] >= 4, "evictions")
            assert await served(broker.port), "a new client is served while the flood holds every slot"
            assert (await talker.call(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})).code == 0
            assert server.open_connections <= 12
            await talker.close()
            for _, writer in flood:
                writer.close()

    run(main())


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_bytes_alone_do_not_keep_a_connection_open(tmp_path: Path, plane: str) -> None:
    """The idle clock counts complete requests: a peer dripping a frame that never completes (the
    read timeout off) is closed as idle, one that sends requests is not."""

    async def main() -> None:
        async with running(
            tmp_path,
            data_plane=plane,
            server_channel_max_idle_time_seconds=1,
            server_read_timeout_seconds=0,
        ) as (_, broker):
            server = broker.server
            assert server is not None
            reader, writer = await raw_connect(broker.port)
            writer.write(struct.pack(">i", 10_000))
            talker = await Client().connect(broker.port)
            drip = 0
            while server.closed_by_reason[CloseReason.IDLE] == 0:
                assert drip < WAIT * 10, "the dripping connection was not closed as idle"
                with contextlib.suppress(ConnectionError):
                    writer.write(b" ")
                    await writer.drain()
                r = await talker.call(RC.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0})
                assert r.code == R.SUCCESS, "a client that sends requests is not idle"
                drip += 1
                await asyncio.sleep(0.1)  # the drip under test: bytes that are no request
            assert await closed_by_server(reader)
            assert server.closed_by_reason[CloseReason.IDLE] == 1
            await talker.close()
            writer.close()

    run(main())


# -- back-pressure ------------------------------------------------------------------------------


def test_replies_of_all_connections_share_one_budget() -> None:
    """The Python server (the name server's and the controller's): 8 peers pipeline 50 requests
    whose replies carry 1 MiB each and read nothing. Their unsent replies together stay within
    serverTotalReplyBufferBytes plus one reply each (each alone would hold its 4 MiB bound); a new
    client is served meanwhile; when the peers read, every request is answered."""
    size, requests, peers = 1024 * 1024, 50, 8
    payload = b"s" * size

    def answer(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand(R.SUCCESS, cmd.opaque, FLAG_RESPONSE, body=payload)

    async def main() -> None:
        limits = ServerLimits(reply_buffer_bytes=4 * size, total_reply_buffer_bytes=6 * size)
        server = RemotingServer(answer, "127.0.0.1", 0, limits=limits)
        await server.start()
        try:
            loop = asyncio.get_running_loop()
            frames = b"".join(
                encode(RemotingCommand(RC.GET_MAX_OFFSET, opaque=i + 1)) for i in range(requests)
            )
            socks = []
            for _ in range(peers):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
                sock.setblocking(False)
                await loop.sock_connect(sock, ("127.0.0.1", server.port))
                await loop.sock_sendall(sock, frames)
                socks.append(sock)

            def unsent() -> int:
                return sum(
                    conn._transport.get_write_buffer_size()
                    for conn in server.connections
                    if conn._transport is not None
                )

            await until(lambda: len(server.connections) == peers, "the peers connected")
            await asyncio.sleep(0)  # let each peer's first chunk be read
            high = 0
            for _ in range(20):  # the replies build while the peers read nothing
                high = max(high, unsent())
                await asyncio.sleep(0.05)  # sampling: the bound must hold over the whole second
            assert high <= 6 * size + peers * (size + 4096), f"{high >> 20} MiB unsent"
            c = await Client().connect(server.port)
            assert (await c.call(RC.GET_MAX_OFFSET, {})).code == R.SUCCESS
            await c.close()
            counts = await asyncio.gather(
                *(loop.run_in_executor(None, _read_replies, s, requests) for s in socks)
            )
            assert counts == [requests] * peers
            for sock in socks:
                sock.close()
        finally:
            await server.stop()

    run(main())


def test_requests_whose_connection_closes_before_they_start_are_dropped() -> None:
    """A peer sends a request handled as a task and is gone before the task's first step (here the
    connection is aborted in between): the handler's coroutine is closed with the task, not left
    unawaited (which Python warns of when it is collected); the server goes on serving."""
    started: list[Coroutine[Any, Any, RemotingCommand]] = []

    async def answer(cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand(R.SUCCESS, cmd.opaque, FLAG_RESPONSE)

    def handler(conn: Connection, cmd: RemotingCommand) -> Coroutine[Any, Any, RemotingCommand]:
        coro = answer(cmd)
        if cmd.code == RC.GET_MAX_OFFSET:
            started.append(coro)
            # Runs before the request's task: it is scheduled after this returns.
            asyncio.get_running_loop().call_soon(conn.abort, CloseReason.IDLE)
        return coro

    async def main() -> None:
        server = RemotingServer(handler, "127.0.0.1", 0)
        await server.start()
        try:
            reader, writer = await raw_connect(server.port)
            writer.write(encode(RemotingCommand(RC.GET_MAX_OFFSET, opaque=1)))
            await writer.drain()
            assert await closed_by_server(reader)
            writer.close()
            await until(lambda: bool(started) and not server.connections, "the connection closed")
            assert inspect.getcoroutinestate(started[0]) == inspect.CORO_CLOSED
            c = await Client().connect(server.port)
            assert (await c.call(RC.GET_TOPIC_STATS_INFO, {})).code == R.SUCCESS
            await c.close()
        finally:
            await server.stop()

    run(main())


def test_peer_not_reading_replies_stops_being_read(tmp_path: Path) -> None:
    """300 pipelined pulls of a 1 MiB message from a peer that reads nothing: the broker holds at
    most its reply bound (plus one reply) for it, then stops reading; when the peer reads, every
    pull is answered."""
    size, bound, pulls = 1024 * 1024, 2 * 1024 * 1024, 300

    async def main() -> None:
        async with running(
            tmp_path, server_reply_buffer_bytes=bound, mapped_file_size_commitlog=8 * 1024 * 1024
        ) as (_, broker):
            server = broker.server
            assert server is not None
            c = await Client().connect(broker.port)
            r = await c.call(RC.SEND_MESSAGE, send_ext("Big", 0), b"x" * size)
            assert r.code == R.SUCCESS, r.remark
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", broker.port))
            frames = b"".join(
                encode(RemotingCommand(RC.PULL_MESSAGE, opaque=i + 1, ext=_strs(pull_ext("G", "Big", 0, 0))))
                for i in range(pulls)
            )
            await asyncio.get_running_loop().sock_sendall(sock, frames)
            port = sock.getsockname()[1]
            await until(lambda: any(x.peer_port == port for x in server.connections), "accepted")
            conn = next(x for x in server.connections if x.peer_port == port)
            await until(lambda: "replies" in conn.reading_paused_for, "reading paused for unread replies")
            transport = conn._transport
            assert transport is not None
            assert transport.get_write_buffer_size() <= bound + size + 64 * 1024
            # Others are served meanwhile.
            assert (await c.call(RC.GET_MAX_OFFSET, {"topic": "Big", "queueId": 0})).ext["offset"] == "1"
            answered = await asyncio.get_running_loop().run_in_executor(None, _read_replies, sock, pulls)
            assert answered == pulls
            await until(lambda: not conn.reading_paused_for, "reading resumed")
            sock.close()
            await c.close()

    run(main())


def test_broker_stops_while_a_peer_reads_nothing(tmp_path: Path) -> None:
    """Shutdown lets a peer take its last replies for a moment, then aborts its connection (a
    graceful close waited for a peer that never reads forever)."""

    async def main() -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.setblocking(False)
        try:
            async with running(tmp_path, server_reply_buffer_bytes=1024 * 1024) as (_, broker):
                server = broker.server
                assert server is not None
                c = await Client().connect(broker.port)
                assert (
                    await c.call(RC.SEND_MESSAGE, send_ext("Stop", 0), bytes(512 * 1024))
                ).code == R.SUCCESS
                await c.close()
                await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", broker.port))
                pull = _strs(pull_ext("G", "Stop", 0, 0))
                frames = b"".join(
                    encode(RemotingCommand(RC.PULL_MESSAGE, opaque=i + 1, ext=pull)) for i in range(50)
                )
                await asyncio.get_running_loop().sock_sendall(sock, frames)
                port = sock.getsockname()[1]
                await until(
                    lambda: any(x.peer_port == port and x.reading_paused_for for x in server.connections),
                    "the peer is held back",
                )
            assert server.closed_by_reason[CloseReason.SHUTDOWN] >= 1
        finally:
            sock.close()

    run(main())


def _strs(ext: dict[str, object]) -> dict[str, str]:
    return {k: str(v) for k, v in ext.items()}


class FrameReader:
    """Frames from a blocking socket, each read within a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def read(self, deadline: float) -> RemotingCommand:
        while True:
            decoded = decode_frame(self.buf, MAX_FRAME_SIZE)
            if decoded is not None:
                del self.buf[: decoded[1]]
                return decoded[0]
            left = deadline - time.monotonic()
            assert left > 0, "no reply in time"
            ready, _, _ = select.select([self.sock], [], [], left)
            if ready:
                chunk = self.sock.recv(1 << 20)
                assert chunk, "the server closed the connection"
                self.buf += chunk


def _read_replies(sock: socket.socket, count: int) -> int:
    sock.setblocking(True)
    deadline = time.monotonic() + 60
    seen = set()
    reader = FrameReader(sock)
    for _ in range(count):
        reply = reader.read(deadline)
        assert reply.code == R.SUCCESS, reply.remark
        seen.add(reply.opaque)
    return len(seen)


def waiting_for_budget(server: RemotingServer | PlaneServer) -> int:
    """Connections the server does not read until their frame fits in the request budget."""
    if isinstance(server, PlaneServer):
        return server.waiting_for_budget
    return sum(1 for x in server.connections if "budget" in x.reading_paused_for)


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_unfinished_frames_share_one_budget(tmp_path: Path, plane: str) -> None:
    """Ten peers each start a 3 MiB frame: each unfinished frame reserves its length in the
    budget, the peers whose frame does not fit are not read; when the holders finish, the others
    are read in turn, and everyone is served."""
    budget, frame_body = 4 * 1024 * 1024, 3 * 1024 * 1024

    async def main() -> None:
        async with running(
            tmp_path,
            server_request_buffer_bytes=budget,
            mapped_file_size_commitlog=16 * 1024 * 1024,
            data_plane=plane,
        ) as (_, broker):
            server = broker.server
            assert server is not None
            frames = [
                encode(
                    RemotingCommand(
                        RC.SEND_MESSAGE, opaque=1, ext=_strs(send_ext("Budget", 0)), body=bytes(frame_body)
                    )
                )
                for _ in range(10)
            ]
            peers = [await raw_connect(broker.port) for _ in range(10)]
            for (_, w), frame in zip(peers, frames, strict=True):
                w.write(frame[: len(frame) - 10])  # all but the last bytes
            await until(lambda: waiting_for_budget(server) == 9, "all peers but one wait for the budget")
            # One frame's reservation fits in the budget at a time (3 MiB of 4 MiB).
            assert len(frames[0]) == server.buffered_request_bytes <= budget
            for (_, w), frame in zip(peers, frames, strict=True):
                w.write(frame[len(frame) - 10 :])
            for r, _ in peers:
                reply = await asyncio.wait_for(_read_reply(r), WAIT)
                assert reply.code == R.SUCCESS, reply.remark
            assert server.buffered_request_bytes == 0
            for _, w in peers:
                w.close()

    run(main())


@pytest.mark.parametrize("plane", ["rust", "python"])
def test_read_timeout_spares_frames_waiting_for_the_budget(tmp_path: Path, plane: str) -> None:
    """A peer held back for the request budget is not the slow one: when the stalled holder of
    the budget is timed out, the waiting peer gets the budget, a fresh read timeout, and its reply."""
    budget, frame_body = 4 * 1024 * 1024, 3 * 1024 * 1024

    async def main() -> None:
        async with running(
            tmp_path,
            server_request_buffer_bytes=budget,
            server_read_timeout_seconds=1,
            mapped_file_size_commitlog=16 * 1024 * 1024,
            data_plane=plane,
        ) as (_, broker):
            server = broker.server
            assert server is not None
            frame = encode(
                RemotingCommand(
                    RC.SEND_MESSAGE, opaque=1, ext=_strs(send_ext("Budget", 0)), body=bytes(frame_body)
                )
            )
            _, stalled = await raw_connect(broker.port)
            stalled.write(frame[: len(frame) // 2])  # holds 3 MiB of the budget, then stops
            await until(
                lambda: server.buffered_request_bytes == len(frame), "the first frame holds the budget"
            )
            reader, waiting = await raw_connect(broker.port)
            waiting.write(frame[:100])
            await until(lambda: waiting_for_budget(server) == 1, "the second peer waits for the budget")
            await until(
                lambda: server.closed_by_reason[CloseReason.READ_TIMEOUT] >= 1, "the stalled peer times out"
            )
            waiting.write(frame[100:])
            reply = await asyncio.wait_for(_read_reply(reader), WAIT)
            assert reply.code == R.SUCCESS, reply.remark
            assert server.closed_by_reason[CloseReason.READ_TIMEOUT] == 1
            stalled.close()
            waiting.close()

    run(main())


async def _read_reply(reader: asyncio.StreamReader) -> RemotingCommand:
    head = await reader.readexactly(4)
    rest = await reader.readexactly(struct.unpack(">i", head)[0])
    decoded = decode_frame(head + rest)
    assert decoded is not None
    return decoded[0]


def test_requests_in_flight_of_all_connections_are_bounded(tmp_path: Path) -> None:
    """serverMaxInflightRequests: held pulls are cheap to send and each holds memory until it is
    answered; past the bound, connections that add requests are not read until an eighth of them
    are done (here: a message wakes the held pulls)."""

    async def main() -> None:
        async with running(tmp_path, server_max_inflight_requests=50) as (_, broker):
            server = broker.server
            assert server is not None
            c = await Client().connect(broker.port)
            r = await c.call(
                RC.UPDATE_AND_CREATE_TOPIC,
                {"topic": "Busy", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
            )
            assert r.code == R.SUCCESS
            reader, writer = await raw_connect(broker.port)
            ext = _strs(pull_ext("BusyG", "Busy", 0, 0, sysFlag=6, suspendTimeoutMillis=60_000))
            writer.write(
                b"".join(encode(RemotingCommand(RC.PULL_MESSAGE, opaque=i + 1, ext=ext)) for i in range(60))
            )
            await until(lambda: broker.hold.held_count == 60, "60 pulls held")
            holder = next(x for x in server.connections if x.reading_paused_for)
            assert holder.reading_paused_for == {"busy"}
            # A request of another connection is answered; the connection is then not read either.
            assert (await c.call(RC.GET_MAX_OFFSET, {"topic": "Busy", "queueId": 0})).code == R.SUCCESS
            await until(lambda: "busy" in c_conn(server, c).reading_paused_for, "the client waits")
            pending = asyncio.ensure_future(c.call(RC.GET_MAX_OFFSET, {"topic": "Busy", "queueId": 0}))
            # A producer's first request still gets in: the message wakes the held pulls.
            p = await Client().connect(broker.port)
            assert (await p.call(RC.SEND_MESSAGE, send_ext("Busy", 0), b"wake up")).code == R.SUCCESS
            for _ in range(60):
                assert (await asyncio.wait_for(_read_reply(reader), WAIT)).code == R.SUCCESS
            r = await asyncio.wait_for(pending, WAIT)
            assert r.code == R.SUCCESS and r.ext["offset"] == "1"
            await until(lambda: not any(x.reading_paused_for for x in server.connections), "all read again")
            writer.close()
            await c.close()
            await p.close()

    run(main())


def c_conn(server: object, client: Client) -> Connection:
    """The server side of a test client's connection."""
    port = client.conn._transport.get_extra_info("sockname")[1]  # type: ignore[union-attr]
    return next(x for x in server.connections if x.peer_port == port)  # type: ignore[attr-defined]


# -- refusals with RocketMQ codes ----------------------------------------------------------------


def test_requests_waiting_on_the_data_plane_are_bounded(tmp_path: Path) -> None:
    """Held pulls and waiting pops each hold their request on the data plane until answered: at
    most MAX_HELD_PULLS (and MAX_WAITING_POPS) wait there; past that a peer's pulls and pops go to
    Python, which holds them under its in-flight bound. A message then answers every one."""
    bound, extra = _store.MAX_HELD_PULLS, 20
    assert _store.MAX_WAITING_POPS == bound

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            broker.topics.update(TopicConfig("Waits", 1, 1))
            c = await Client().connect(broker.port)
            # The first pops make the revive topic and the groups (Python): the plane serves them.
            for group in ("WaitsG", "WaitsP"):
                first = await c.call(RC.POP_MESSAGE, pop_request("Waits", group))
                assert first.code == R.POLLING_TIMEOUT
            pull = _strs(pull_ext("WaitsG", "Waits", 0, 0, sysFlag=6, suspendTimeoutMillis=60_000))
            pop = _strs(pop_request("Waits", "WaitsP", pollTime=20_000, bornTime=int(time.time() * 1000)))
            count = bound + extra
            reader, writer = await raw_connect(broker.port)
            for code, ext in ((RC.PULL_MESSAGE, pull), (RC.POP_MESSAGE, pop)):
                writer.write(
                    b"".join(encode(RemotingCommand(code, opaque=i + 1, ext=ext)) for i in range(count))
                )
            await writer.drain()
            await until(lambda: broker.planes.held_pulls == bound, "the plane's pulls held", 60)
            await until(lambda: broker.hold.held_of("Waits") == extra, "the rest held by Python", 60)
            await until(lambda: broker.planes.waiting_pops == bound, "the plane's pops waiting", 60)
            await until(
                lambda: broker.pop.polling_count("Waits", "WaitsP", -1) == extra, "the rest in Python", 60
            )
            assert (await c.call(RC.SEND_MESSAGE, send_ext("Waits", 0), b"go")).code == R.SUCCESS
            # Every pull gets the message, and one pop; the other pops find nothing when woken and
            # wait on until their poll time (20 s) ends.
            codes = [(await asyncio.wait_for(_read_reply(reader), 40)).code for _ in range(2 * count)]
            assert sorted(codes) == sorted([R.SUCCESS] * (count + 1) + [R.POLLING_TIMEOUT] * (count - 1))
            assert broker.planes.held_pulls == broker.planes.waiting_pops == 0
            writer.close()
            await c.close()

    run(main())


def test_topic_queue_counts_are_bounded(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, max_topic_queue_nums=64) as (_, broker):
            c = await Client().connect(broker.port)
            for n in (0, -5, 65, 2_000_000):
                r = await c.call(
                    RC.UPDATE_AND_CREATE_TOPIC,
                    {"topic": "Q", "readQueueNums": n, "writeQueueNums": 1, "perm": 6},
                )
                assert r.code == R.SYSTEM_ERROR
                assert r.remark is not None and "maxTopicQueueNums" in r.remark and str(n) in r.remark
                assert broker.topics.get("Q") is None
            r = await c.call(
                RC.UPDATE_AND_CREATE_TOPIC,
                {"topic": "Q", "readQueueNums": 64, "writeQueueNums": 64, "perm": 6},
            )
            assert r.code == R.SUCCESS
            r = await c.call(RC.SEND_MESSAGE, send_ext("Q", 63), b"m")
            assert r.code == R.SUCCESS, r.remark
            await c.close()

    run(main())


def test_retry_queue_counts_are_bounded(tmp_path: Path) -> None:
    """A subscription group's retryQueueNums makes its %RETRY% topic: bounded the same way."""

    async def main() -> None:
        async with running(tmp_path, max_topic_queue_nums=16) as (_, broker):
            c = await Client().connect(broker.port)
            for n in (17, -1, 2_000_000):
                body = orjson.dumps({"groupName": "RG", "retryQueueNums": n})
                r = await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
                assert r.code == R.SYSTEM_ERROR and "maxTopicQueueNums" in (r.remark or "")
            body = orjson.dumps({"groupName": "RG", "retryQueueNums": 16})
            assert (await c.call(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)).code == R.SUCCESS
            await c.close()

    run(main())


def test_all_consumer_offsets_answers_javas_body(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            for q, off in ((0, 5), (3, 9)):
                r = await c.call(
                    RC.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": "G1", "topic": "TopicTest", "queueId": q, "commitOffset": off},
                )
                assert r.code == R.SUCCESS
            r = await c.call(RC.GET_ALL_CONSUMER_OFFSET)
            assert r.code == R.SUCCESS, r.remark
            assert b'"TopicTest@G1":{0:5,3:9}' in r.body
            assert loads_lenient(r.body)["offsetTable"]["TopicTest@G1"] == {"0": 5, "3": 9}
            await c.close()

    run(main())


def test_out_of_range_numbers_and_bad_batches_are_refused_plainly(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            assert (await c.call(RC.SEND_MESSAGE, send_ext("T", 0), b"m")).code == R.SUCCESS
            # Past Java's long: refused, naming the field.
            for offset in (2**63, 2**64, -(2**70)):
                r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "T", 0, offset))
                assert r.code == R.SYSTEM_ERROR
                assert r.remark is not None and "queueOffset" in r.remark
                assert "Error" not in r.remark
            # A negative long is an offset too small, as Java 4.9.7 answers it.
            r = await c.call(RC.PULL_MESSAGE, pull_ext("G", "T", 0, -1))
            assert r.code == R.PULL_OFFSET_MOVED and int(r.ext["nextBeginOffset"]) == 0
            for code, ext in (
                (RC.GET_MAX_OFFSET, {"topic": "T", "queueId": 2**31}),
                (RC.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": 0, "timestamp": 2**64}),
                (RC.VIEW_MESSAGE_BY_ID, {"offset": 2**63}),
                (
                    RC.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": "G", "topic": "T", "queueId": 0, "commitOffset": 2**64},
                ),
                (RC.SEND_MESSAGE, send_ext("T", 0, bornTimestamp=2**64)),
            ):
                r = await c.call(code, ext, b"m")
                assert r.code == R.SYSTEM_ERROR, (code, r.remark)
                assert r.remark is not None and "out of the range" in r.remark, (code, r.remark)
            props = properties(KEYS="k").encode()
            bad = (
                batch_body([(b"a", "")])
                + struct.pack(">iiiii", 20 + 1 + 2, 0, 0, 0, 1)
                + b"b"
                + struct.pack(">h", -len(props))
            )
            r = await c.call(RC.SEND_BATCH_MESSAGE, send_ext("T", 0, batch="true"), bad)
            assert r.code == R.MESSAGE_ILLEGAL and "negative properties length" in (r.remark or "")
            assert (await c.call(RC.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})).ext["offset"] == "1"
            await c.close()

    run(main())


def test_consume_stats_past_the_frame_limit_is_refused(tmp_path: Path) -> None:
    """GET_CONSUME_STATS of a group over 170 topics of 1024 queues would be a reply of ~18 MB: it is
    refused with a remark instead of a frame no client can read."""

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            for t in range(170):
                topic = f"Stats{t:03d}"
                broker.topics.update(TopicConfig(topic, 1024, 1024))
                for q in range(1024):
                    broker.offsets.commit("G", topic, q, 0)
            c = await Client().connect(broker.port)
            r = await c.call(RC.GET_CONSUME_STATS, {"consumerGroup": "G"}, timeout=30)
            assert r.code == R.SYSTEM_ERROR and not r.body
            assert r.remark is not None and "exceed the frame limit" in r.remark
            r = await c.call(RC.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "Stats007"})
            assert r.code == R.SUCCESS and len(parse_consume_stats(r.body, "G")[0]) == 1024
            await c.close()

    run(main())


# -- memory of a `ferromq serve` subprocess -----------------------------------------------------


def rss_anon(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"^RssAnon:\s+(\d+) kB", status, re.M)
    assert m, status
    return int(m.group(1)) * 1024


class Serve:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path, ns_port: int, broker_port: int) -> None:
        self.proc, self.log, self.ns_port, self.broker_port = proc, log, ns_port, broker_port
        self.peak = 0

    def rss(self) -> int:
        assert self.proc.poll() is None, self.log.read_text(errors="replace")[-4000:]
        value = rss_anon(self.proc.pid)
        self.peak = max(self.peak, value)
        return value

    def call(
        self, port: int, code: int, ext: dict[str, object], body: bytes = b"", timeout: float = WAIT
    ) -> RemotingCommand:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(encode(RemotingCommand(code, opaque=1, ext=_strs(ext), body=body)))
            return FrameReader(s).read(time.monotonic() + timeout)


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    home = tmp_path_factory.mktemp("serve")
    conf = home / "broker.conf"
    conf.write_text(
        "brokerName=abuse\n"
        "mappedFileSizeCommitLog=33554432\n"
        "serverRequestBufferBytes=33554432\n"
        "serverReplyBufferBytes=4194304\n"
        "serverReadTimeoutSeconds=120\n"
    )
    log = home / "serve.log"
    argv = [sys.executable, "-m", "ferromq.cli", "serve", "-c", str(conf), "--profile", "small"]
    argv += ["--store", str(home / "store"), "-p", "0", "--namesrv-port", "0"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    try:
        started = re.compile(r"name server [\d.]+:(\d+), broker \S+ on [\d.]+:(\d+)")

        def serving() -> re.Match[str] | None:
            assert proc.poll() is None, log.read_text(errors="replace")
            return started.search(log.read_text())

        m = wait_until(serving, "ferromq serve to start", timeout=60)
        yield Serve(proc, log, int(m.group(1)), int(m.group(2)))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def _settle(serve: Serve, seconds: float = 1.0, timeout: float = 8.0) -> None:
    """Samples RSS until it has not grown for `seconds` (bounded by `timeout`)."""
    start = last_growth = time.monotonic()
    high = serve.rss()
    while time.monotonic() - last_growth < seconds and time.monotonic() - start < timeout:
        now = serve.rss()
        if now > high + 1024 * 1024:
            high, last_growth = now, time.monotonic()
        time.sleep(0.05)  # sampling RSS: a quiet second is the condition


def test_rss_pipelined_pulls_without_reading(serve: Serve) -> None:
    size = 3 * 1024 * 1024
    r = serve.call(serve.broker_port, RC.SEND_MESSAGE, send_ext("BigPull", 0), b"y" * size)
    assert r.code == R.SUCCESS, r.remark
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", serve.broker_port))
    with sock:
        sock.sendall(
            b"".join(
                encode(
                    RemotingCommand(RC.PULL_MESSAGE, opaque=i + 1, ext=_strs(pull_ext("G", "BigPull", 0, 0)))
                )
                for i in range(300)
            )
        )
        _settle(serve)
        assert serve.peak < RSS_CEILING, f"RssAnon {serve.peak >> 20} MiB with 300 unread pull replies"
        deadline = time.monotonic() + 120
        reader = FrameReader(sock)
        for i in range(300):
            assert reader.read(deadline).code == R.SUCCESS
            if i % 20 == 0:
                serve.rss()
    assert serve.peak < RSS_CEILING, f"RssAnon {serve.peak >> 20} MiB while the pulls were read"
    logger.info("300 unread pulls of 3 MiB: RssAnon peak %d MiB", serve.peak >> 20)


def _pull_flood(serve: Serve, topic: str, connections: int, pulls: int) -> list[socket.socket]:
    """`connections` sockets that read nothing, each with `pulls` pipelined pulls (a subscription,
    the suspend flag, maxMsgNums=32) across the stored offsets of queue 0 of `topic`."""
    socks = []
    for c in range(connections):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", serve.broker_port))
        frames = b"".join(
            encode(
                RemotingCommand(
                    RC.PULL_MESSAGE,
                    opaque=i + 1,
                    ext=_strs(pull_ext(f"Flood{c}", topic, 0, i % 24, sysFlag=6, maxMsgNums=32)),
                )
            )
            for i in range(pulls)
        )
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.send(frames)  # what fits: the broker stops reading a peer that reads nothing
        socks.append(sock)
    return socks


def test_rss_pipelined_pulls_of_large_messages_on_many_connections(serve: Serve) -> None:
    """24 messages of ~4 MiB; 8 connections each pipeline 300 pulls and read nothing: the replies
    built wait within the per-connection and the process-wide reply budgets, and a new client is
    served meanwhile."""
    size = 4 * 1024 * 1024 - 4096
    for c in range(8):  # known groups: their pulls are served on the data plane
        body = orjson.dumps({"groupName": f"Flood{c}"})
        assert (
            serve.call(serve.broker_port, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body).code == R.SUCCESS
        )
    for i in range(24):
        r = serve.call(serve.broker_port, RC.SEND_MESSAGE, send_ext("FloodPull", 0), bytes([i]) * size)
        assert r.code == R.SUCCESS, r.remark
    _settle(serve)
    idle = serve.rss()
    serve.peak = 0
    socks = _pull_flood(serve, "FloodPull", 8, 300)
    try:
        _settle(serve, seconds=2.0)
        # Within a client's default send timeout (3 s).
        r = serve.call(
            serve.broker_port, RC.SEND_MESSAGE, send_ext("Normal", 0), b"served meanwhile", timeout=3
        )
        assert r.code == R.SUCCESS, r.remark
        grown = serve.peak - idle
        assert grown < RSS_CEILING, f"RssAnon grew {grown >> 20} MiB with 8 x 300 unread pulls of 4 MiB"
        logger.info("8 x 300 unread pulls of 4 MiB: RssAnon +%d MiB", grown >> 20)
    finally:
        for sock in socks:
            sock.close()


def _held_pulls(serve: Serve, topic: str, count: int) -> socket.socket:
    """A socket that reads nothing, with `count` pulls held on the empty queue 0 of `topic`."""
    r = serve.call(
        serve.broker_port,
        RC.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
    )
    assert r.code == R.SUCCESS, r.remark
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", serve.broker_port))
    ext = _strs(pull_ext("HeldG", topic, 0, 0, sysFlag=6, suspendTimeoutMillis=60_000))
    sock.sendall(
        b"".join(encode(RemotingCommand(RC.PULL_MESSAGE, opaque=i + 1, ext=ext)) for i in range(count))
    )

    def held() -> bool:
        info = serve.call(serve.broker_port, RC.GET_BROKER_RUNTIME_INFO, {})
        return int(orjson.loads(info.body)["table"]["pullHeldCount"]) >= count

    wait_until(held, "the pulls to be held", timeout=WAIT)
    return sock


def test_rss_held_pulls_woken_by_one_large_message(serve: Serve) -> None:
    """200 pulls held on an empty queue of a peer that reads nothing, then one 3 MiB message
    wakes them all: each reads it only once the replies before it have left."""
    size = 3 * 1024 * 1024
    with _held_pulls(serve, "HeldPull", 200) as sock:
        r = serve.call(serve.broker_port, RC.SEND_MESSAGE, send_ext("HeldPull", 0), b"h" * size)
        assert r.code == R.SUCCESS, r.remark
        _settle(serve)
        assert serve.peak < RSS_CEILING, f"RssAnon {serve.peak >> 20} MiB with 200 woken pulls unread"
        reader = FrameReader(sock)
        deadline = time.monotonic() + 120
        for _ in range(200):
            reply = reader.read(deadline)
            assert reply.code == R.SUCCESS and len(reply.body) > size
    logger.info("200 held pulls woken by a 3 MiB message: RssAnon peak %d MiB", serve.peak >> 20)


def test_rss_pipelined_lookups_without_reading(serve: Serve) -> None:
    """VIEW_MESSAGE_BY_ID is answered by a task, not at once: 200 pipelined lookups of a 3 MiB
    message from a peer that reads nothing are read from the store one drained reply at a time."""
    size = 3 * 1024 * 1024
    r = serve.call(serve.broker_port, RC.SEND_MESSAGE, send_ext("Lookup", 0), b"v" * size)
    assert r.code == R.SUCCESS, r.remark
    # The offsetMsgId ends with the physical offset (16 hex digits).
    offset = int(r.ext["msgId"][-16:], 16)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", serve.broker_port))
    with sock:
        ext = {"offset": str(offset)}
        sock.sendall(
            b"".join(
                encode(RemotingCommand(RC.VIEW_MESSAGE_BY_ID, opaque=i + 1, ext=ext)) for i in range(200)
            )
        )
        _settle(serve)
        assert serve.peak < RSS_CEILING, f"RssAnon {serve.peak >> 20} MiB with 200 unread lookups"
        reader = FrameReader(sock)
        deadline = time.monotonic() + 120
        for _ in range(200):
            reply = reader.read(deadline)
            assert reply.code == R.SUCCESS and len(reply.body) > size, reply.remark
    logger.info("200 unread lookups of a 3 MiB message: RssAnon peak %d MiB", serve.peak >> 20)


def test_rss_connections_holding_unfinished_frames(serve: Serve) -> None:
    """60 connections each send 15 MiB of a 16 MiB frame and stop."""
    held = 15 * 1024 * 1024
    chunk = bytes(256 * 1024)
    socks = []
    try:
        for _ in range(60):
            s = socket.create_connection(("127.0.0.1", serve.broker_port), timeout=WAIT)
            s.setblocking(False)
            socks.append([s, struct.pack(">ii", MAX_FRAME_SIZE - 8, 0x10) + b"{" + b" " * 15, 0])
        # Push round-robin until every peer sent 15 MiB or none can send more (the broker stopped
        # reading them and their socket buffers are full).
        stalled_since: float | None = None
        while True:
            progress = False
            for entry in socks:
                s, head, sent = entry
                if sent >= held:
                    continue
                data = head if sent == 0 else chunk[: held - sent]
                try:
                    entry[2] = sent + s.send(data)
                    progress = True
                except BlockingIOError:
                    pass
            if all(e[2] >= held for e in socks):
                break
            if progress:
                stalled_since = None
            elif stalled_since is None:
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > 1.0:
                break
            serve.rss()
            select.select([], [e[0] for e in socks if e[2] < held], [], 0.1)
        _settle(serve)
        assert serve.peak < RSS_CEILING, f"RssAnon {serve.peak >> 20} MiB with 60 unfinished 15 MiB frames"
        logger.info("60 unfinished 15 MiB frames: RssAnon peak %d MiB", serve.peak >> 20)
        # A normal client is served meanwhile.
        r = serve.call(serve.broker_port, RC.SEND_MESSAGE, send_ext("Normal", 0), b"still here")
        assert r.code == R.SUCCESS, r.remark
    finally:
        for e in socks:
            e[0].close()


def test_rss_compressed_register_broker_bomb(serve: Serve) -> None:
    """512 MiB of zeros deflated to ~0.5 MB, sent as a compressed REGISTER_BROKER body."""
    deflater = zlib.compressobj(1)
    zeros = bytes(1024 * 1024)
    bomb = b"".join(deflater.compress(zeros) for _ in range(512)) + deflater.flush()
    assert len(bomb) < 4 * 1024 * 1024
    ext = {
        "brokerName": "evil",
        "brokerAddr": "127.0.0.1:1",
        "clusterName": "DefaultCluster",
        "brokerId": 0,
        "haServerAddr": "127.0.0.1:2",
        "compressed": "true",
        "bodyCrc32": zlib.crc32(bomb) & 0x7FFFFFFF,
    }
    r = serve.call(serve.ns_port, RC.REGISTER_BROKER, ext, bomb)
    assert r.code == R.SYSTEM_ERROR
    assert r.remark is not None and "inflates past 16777216 bytes" in r.remark
    _settle(serve, 0.5)
    assert serve.peak < RSS_CEILING, f"RssAnon {serve.peak >> 20} MiB after a compressed bomb"
    logger.info("512 MiB REGISTER_BROKER bomb: RssAnon peak %d MiB", serve.peak >> 20)
    r = serve.call(serve.ns_port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    assert r.code == R.SUCCESS
    assert b"evil" not in r.body


def test_rss_pid_is_the_broker(serve: Serve) -> None:
    """The process measured is the one serving (not a launcher that forked it)."""
    assert os.path.exists(f"/proc/{serve.proc.pid}/status")
    r = serve.call(serve.broker_port, RC.GET_BROKER_RUNTIME_INFO, {})
    assert r.code == R.SUCCESS
