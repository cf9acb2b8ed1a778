"""A fault-injecting HTTP/1.1 proxy in front of an S3-compatible server (tools/s3_server.py), for tests.

`FaultProxy(upstream)` listens on 127.0.0.1 (a free port) and forwards every request to `upstream`
(`http://127.0.0.1:PORT`, versitygw's endpoint) byte for byte: the request head as the client sent
it (method, path, query, Host, Authorization, x-amz-*: the SigV4 signature, which covers the Host
header the client sent, stays valid) and the body streamed through in 64 KiB pieces, whether framed
by Content-Length or chunked (aws-chunked uploads included), never held whole. A client's
connection is kept alive across requests unless a response says `Connection: close` (versitygw's
all do: it closes after each response, and the proxy relays that as it is). It runs in a thread of
its own with its own asyncio loop, so synchronous tests drive it:

    with FaultProxy(s3.endpoint) as proxy:
        fs, path = filesystem(uri, {**s3.storage_options(), "AWS_ENDPOINT_URL": proxy.endpoint})
        proxy.slow_down()        # every request answered 503 SlowDown
        proxy.refuse()           # as a stopped server: connections reset, new ones refused
        proxy.passthrough()      # service again
        proxy.stats().faults     # {"slow_down": 3, "refuse": 1, ...}

One mode at a time, switched from any thread (each switch takes effect before it returns):

- `passthrough()`: everything forwarded.
- `slow_down(fraction=1.0, methods=None)`: that fraction of the requests (of `methods`, or all),
  chosen by a counter (1.0: each; 0.5: every second; 0.25: every fourth), is answered 503 with S3's
  `SlowDown` XML error; the others are forwarded.
- `delay(seconds, methods=None)`: each request (of `methods`, or all) waits `seconds` before it is
  forwarded, or until the next switch if that comes first (`delay(3600)` holds requests until then).
- `refuse()`: the listening socket is closed (new connections: refused) and every open connection
  reset (RST), the upstream ones too; `passthrough()` listens again on the same port.
- `quota(max_bytes)`: a PUT or POST whose body would take the bytes uploaded through the proxy (since
  it started; `stats().bytes_uploaded`, plus the bodies being forwarded) past `max_bytes` is answered
  403 with an S3 `QuotaExceeded` XML error (a full bucket quota); the others are forwarded. A body of
  unknown length (chunked without Content-Length) counts with its x-amz-decoded-content-length.
- `stall_uploads()`: a PUT's body (PutObject, UploadPart) is read (after a 100 Continue if asked
  for) and dropped, and the request never answered: a server stopped mid-upload. The next switch
  resets those connections.

`stats()` counts the requests seen and answered, the faults injected per kind, the bytes uploaded
(PUT and POST bodies forwarded) and dropped by stalls, the requests waiting now, and the last 1000
request lines.

A request answered by the proxy itself keeps its connection alive once its body is read, except one
sent with `Expect: 100-continue`: it is answered at once with `Connection: close` (as S3 does). If the
upstream cannot be reached the client's connection is reset. A request with a body goes upstream on a
new connection (a kept-alive one the server closes meanwhile cannot be retried with a streamed body). An
upstream that answers and closes before it took a whole body still has its answer relayed. A connection
the proxy closes is read to its end first (a few seconds at most), so the client never gets a reset for
bytes it had sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import struct
import threading
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Collection, Coroutine
from dataclasses import dataclass, field
from email.utils import formatdate
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlparse

CHUNK = 64 * 1024
# How long a connection the proxy closes is read to its end first (see _lingering_close).
LINGER_SECONDS = 2.0
# How long an upstream whose connection broke while it was sent a body has to finish its answer.
UPSTREAM_ANSWER_SECONDS = 5.0
MAX_HEAD = 64 * 1024
_T = TypeVar("_T")

SLOW_DOWN = (503, "Slow Down", "SlowDown", "Please reduce your request rate.")
QUOTA_EXCEEDED = (403, "Forbidden", "QuotaExceeded", "The bucket quota has been exceeded.")


class _Drop(Exception):
    """The client's connection ends here (reset)."""


@dataclass(frozen=True)
class _Mode:
    kind: str = "passthrough"
    fraction: float = 1.0
    methods: frozenset[str] | None = None
    seconds: float = 0.0
    max_bytes: int = 0

    def applies(self, method: str) -> bool:
        return self.methods is None or method in self.methods


@dataclass(frozen=True)
class FaultStats:
    """What the proxy has seen so far (a snapshot)."""

    requests: int  # request heads read from clients
    answered: int  # responses completed (forwarded or the proxy's own)
    bytes_uploaded: int  # body bytes of PUT and POST requests forwarded upstream
    bytes_stalled: int  # body bytes of stalled uploads, read and dropped
    faults: dict[str, int]  # per kind: slow_down, delay, refuse (connections reset), quota, stall
    by_method: dict[str, int]
    delayed_now: int  # requests waiting out a delay at this moment
    stalled_now: int  # uploads being stalled at this moment
    recent: list[str] = field(default_factory=list)  # "METHOD /target" of the last 1000 requests


@dataclass
class _Request:
    head: bytes
    method: str
    target: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    reserved: int = 0  # of the quota: bytes of its body not forwarded yet

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and not self.chunked else None

    @property
    def has_body(self) -> bool:
        return self.chunked or bool(self.content_length)

    @property
    def upload_size(self) -> int:
        """The body's size as far as the head tells (what a quota counts it as)."""
        if self.content_length is not None:
            return self.content_length
        return int(self.headers.get("x-amz-decoded-content-length", "0") or 0)

    @property
    def expects_continue(self) -> bool:
        return self.headers.get("expect", "").lower() == "100-continue"

    @property
    def wants_close(self) -> bool:
        return "close" in self.headers.get("connection", "").lower() or self.head.split(b"\r\n", 1)[
            0
        ].endswith(b"HTTP/1.0")


def _parse_head(head: bytes) -> tuple[list[bytes], dict[str, str]]:
    lines = head[:-4].split(b"\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().decode("latin-1").lower()] = value.strip().decode("latin-1")
    return lines[0].split(b" ", 2), headers


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """The head up to its blank line; None at a clean end of the stream before one."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise _Drop("truncated head") from e
    except asyncio.LimitOverrunError as e:
        raise _Drop("head too long") from e


async def _copy_exact(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter | None,
    n: int,
    counted: Callable[[int], None] | None = None,
) -> None:
    """`n` bytes from `reader` to `writer` (or dropped), a piece at a time."""
    while n > 0:
        data = await reader.read(min(CHUNK, n))
        if not data:
            raise _Drop("body cut short")
        n -= len(data)
        if writer is not None:
            writer.write(data)
            await writer.drain()
        if counted is not None:
            counted(len(data))


async def _copy_chunked(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter | None,
    counted: Callable[[int], None] | None = None,
) -> None:
    """A chunked body, verbatim (chunk sizes, extensions, trailers), from `reader` to `writer`. What
    follows the last data (its CRLF, the last chunk, the trailers) goes in one write: a server that
    answered and closed once it had the data (versitygw) resets the connection on the first bytes that
    follow, and a second write would then fail and close it before its answer is read."""
    data_end = b""  # the CRLF after a chunk's data, sent with what follows it
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            end = [data_end, line]
            while end[-1] != b"\r\n":  # trailers, up to the blank line
                end.append(await reader.readuntil(b"\r\n"))
            if writer is not None:
                writer.write(b"".join(end))
                await writer.drain()
            return
        if writer is not None:
            writer.write(data_end + line)
        await _copy_exact(reader, writer, size, counted)
        data_end = await reader.readexactly(2)


async def _skip_body(
    reader: asyncio.StreamReader, req: _Request, counted: Callable[[int], None] | None = None
) -> None:
    if req.chunked:
        await _copy_chunked(reader, None, counted)
    elif req.content_length:
        await _copy_exact(reader, None, req.content_length, counted)


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Closes the connection with a RST (SO_LINGER 0), as a server that went away."""
    if writer is None:
        return
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _Conn:
    """A client's connection and the upstream one its requests go through."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[Any] | None = None

    def drop_upstream(self) -> None:
        if self.up_writer is not None:
            self.up_writer.transport.abort()
        self.up_reader = self.up_writer = None

    def reset(self) -> None:
        _reset(self.up_writer)
        _reset(self.writer)
        self.up_reader = self.up_writer = None
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()


class FaultProxy:
    """An HTTP/1.1 reverse proxy to `upstream` that injects S3's failures on demand (module doc)."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        parsed = urlparse(upstream)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise ValueError(f"upstream must be http://HOST:PORT, not {upstream!r}")
        self.upstream = upstream
        self._up_addr = (parsed.hostname, parsed.port)
        self.host = host
        self.port = port
        self.endpoint = ""
        self._lock = threading.Lock()
        self._mode = _Mode()
        self._release = asyncio.Event()  # set when the stall (or delay) in force ends
        self._slow_seen = 0
        self._requests = 0
        self._answered = 0
        self._uploaded = 0
        self._reserved = 0
        self._faults: Counter[str] = Counter()
        self._by_method: Counter[str] = Counter()
        self._recent: deque[str] = deque(maxlen=1000)
        self._delayed_now = 0
        self._stalled_now = 0
        self._stalled_bytes = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()

    # -- life cycle (test thread) --

    def start(self) -> FaultProxy:
        if self._loop is not None:
            raise RuntimeError("already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        self._call(self._listen())
        self.endpoint = f"http://{self.host}:{self.port}"
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- modes (test thread) --

    def passthrough(self) -> None:
        self._switch(_Mode())

    def slow_down(self, fraction: float = 1.0, methods: Collection[str] | None = None) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be within [0, 1]")
        self._switch(_Mode("slow_down", fraction=fraction, methods=_methods(methods)))

    def delay(self, seconds: float, methods: Collection[str] | None = None) -> None:
        self._switch(_Mode("delay", seconds=seconds, methods=_methods(methods)))

    def refuse(self) -> None:
        self._switch(_Mode("refuse"))

    def quota(self, max_bytes: int) -> None:
        self._switch(_Mode("quota", max_bytes=max_bytes))

    def stall_uploads(self) -> None:
        self._switch(_Mode("stall"))

    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode.kind

    def stats(self) -> FaultStats:
        with self._lock:
            return FaultStats(
                requests=self._requests,
                answered=self._answered,
                bytes_uploaded=self._uploaded,
                bytes_stalled=self._stalled_bytes,
                faults=dict(self._faults),
                by_method=dict(self._by_method),
                delayed_now=self._delayed_now,
                stalled_now=self._stalled_now,
                recent=list(self._recent),
            )

    def _switch(self, mode: _Mode) -> None:
        if self._loop is None:
            raise RuntimeError("the proxy is not running")
        with self._lock:
            self._mode = mode
            self._slow_seen = 0
            released, self._release = self._release, asyncio.Event()
        self._call(self._apply(mode, released))

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float = 30.0) -> _T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- the loop's side --

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_HEAD, reuse_address=True
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _apply(self, mode: _Mode, released: asyncio.Event) -> None:
        released.set()  # the requests stalled or delayed under the previous mode
        if mode.kind == "refuse":
            if self._server is not None:
                self._server.close()
                self._server = None
            conns, self._conns = self._conns, set()
            for conn in conns:
                conn.reset()
            with self._lock:
                self._faults["refuse"] += len(conns)
        elif self._server is None:
            await self._listen()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        conns, self._conns = self._conns, set()
        tasks = [c.task for c in conns if c.task is not None]
        for conn in conns:
            conn.reset()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(reader, writer)
        conn.task = asyncio.current_task()
        self._conns.add(conn)
        try:
            with self._lock:
                refused = self._mode.kind == "refuse"
            if refused:
                raise _Drop("refusing")
            while await self._one(conn):
                pass
            conn.drop_upstream()
            await _lingering_close(reader, writer)
        except (_Drop, OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            conn.reset()
        except asyncio.CancelledError:
            conn.reset()
        finally:
            self._conns.discard(conn)

    async def _one(self, conn: _Conn) -> bool:
        """Serves one request of `conn`; whether its connection stays open for the next."""
        head = await _read_head(conn.reader)
        if head is None:
            return False
        (method_b, target_b, *_), headers = _parse_head(head)
        req = _Request(head, method_b.decode("latin-1"), target_b.decode("latin-1"), headers)
        with self._lock:
            self._requests += 1
            self._by_method[req.method] += 1
            self._recent.append(f"{req.method} {req.target}")
            mode, release = self._mode, self._release
            action = self._decide(req, mode)
        try:
            if action == "refuse":
                raise _Drop("refusing")
            if action == "slow_down":
                return await self._answer(conn, req, SLOW_DOWN)
            if action == "quota":
                return await self._answer(conn, req, QUOTA_EXCEEDED)
            if action == "stall":
                if req.has_body and req.expects_continue:
                    conn.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await conn.writer.drain()
                await self._waiting(_skip_body(conn.reader, req, self._count_stalled), "_stalled_now")
                await self._waiting(release.wait(), "_stalled_now")
                raise _Drop("stalled upload released")
            if action == "delay":
                await self._waiting(_sleep_or(mode.seconds, release), "_delayed_now")
            return await self._forward(conn, req)
        finally:
            if req.reserved:
                with self._lock:
                    self._reserved -= req.reserved
                    req.reserved = 0

    def _decide(self, req: _Request, mode: _Mode) -> str:
        """What to do with `req` under `mode` (with the lock held); reserves the upload's bytes."""
        kind = mode.kind
        if kind == "refuse":
            return "refuse"
        action = "forward"
        if kind == "slow_down" and mode.applies(req.method):
            self._slow_seen += 1
            n = self._slow_seen
            if math.floor(n * mode.fraction + 1e-9) > math.floor((n - 1) * mode.fraction + 1e-9):
                self._faults["slow_down"] += 1
                return "slow_down"
        elif kind == "delay" and mode.applies(req.method):
            self._faults["delay"] += 1
            action = "delay"
        elif kind == "stall" and req.method == "PUT":
            self._faults["stall"] += 1
            return "stall"
        if req.method in ("PUT", "POST"):
            size = req.upload_size
            if kind == "quota" and self._uploaded + self._reserved + size > mode.max_bytes:
                self._faults["quota"] += 1
                return "quota"
            req.reserved = size
            self._reserved += size
        return action

    def _count_stalled(self, n: int) -> None:
        with self._lock:
            self._stalled_bytes += n

    async def _waiting(self, aw: Awaitable[Any], gauge: str) -> None:
        with self._lock:
            setattr(self, gauge, getattr(self, gauge) + 1)
        try:
            await aw
        finally:
            with self._lock:
                setattr(self, gauge, getattr(self, gauge) - 1)

    async def _answer(self, conn: _Conn, req: _Request, error: tuple[int, str, str, str]) -> bool:
        """The proxy's own S3 error response to `req`."""
        status, reason, code, message = error
        # A client waiting for 100 Continue gets the error at once and the connection closes (its
        # body is not sent); any other body is read first, so the connection stays usable.
        close = req.wants_close or (req.has_body and req.expects_continue)
        if req.has_body and not close:
            await _skip_body(conn.reader, req)
        request_id = uuid.uuid4().hex[:16].upper()
        resource = req.target.split("?", 1)[0]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<Resource>{resource}</Resource><RequestId>{request_id}</RequestId></Error>"
        ).encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\n"
            f"Date: {formatdate(usegmt=True)}\r\n"
            f"x-amz-request-id: {request_id}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
        ).encode()
        conn.writer.write(head if req.method == "HEAD" else head + body)
        await conn.writer.drain()
        with self._lock:
            self._answered += 1
        return not close

    async def _upstream(self, conn: _Conn) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if (
            conn.up_reader is None
            or conn.up_writer is None
            or conn.up_reader.at_eof()
            or conn.up_writer.is_closing()
        ):
            conn.drop_upstream()
            try:
                conn.up_reader, conn.up_writer = await asyncio.wait_for(_open_upstream(*self._up_addr), 10)
            except (OSError, TimeoutError) as e:
                raise _Drop(f"upstream unreachable: {e}") from e
        assert conn.up_reader is not None and conn.up_writer is not None
        return conn.up_reader, conn.up_writer

    async def _forward(self, conn: _Conn, req: _Request) -> bool:
        if req.has_body:
            # A body goes on a new upstream connection: one kept alive may be closed by the server
            # while the request is on its way (its close not seen yet), and a body the client has
            # streamed cannot be sent again, so the client's connection would be reset.
            conn.drop_upstream()
        up_reader, up_writer = await self._upstream(conn)
        up_writer.write(req.head)
        await up_writer.drain()
        body: asyncio.Task[None] | None = None
        if req.has_body:
            body = asyncio.create_task(self._pump_body(conn, req, up_writer))
        relay = asyncio.create_task(self._relay(conn, req, up_reader))
        try:
            body_failed = False
            if body is not None:
                await asyncio.wait({body, relay}, return_when=asyncio.FIRST_COMPLETED)
                if body.done() and body.exception() is not None:
                    # The upstream may have answered and closed before it took the whole body
                    # (versitygw stops reading an aws-chunked body at its decoded length, under load
                    # before the last chunk arrived): that answer still goes to the client.
                    body_failed = True
                    await asyncio.wait({relay}, timeout=UPSTREAM_ANSWER_SECONDS)
                    if not relay.done() or relay.exception() is not None:
                        raise _Drop("request body failed")
            keep = await relay
            if body is not None and (body_failed or not body.done()):
                # Answered before the whole body was sent (an early error): the connection cannot
                # carry another request.
                keep = False
        finally:
            for task in (body, relay):
                if task is not None and not task.done():
                    task.cancel()
            for task in (body, relay):
                if task is not None:
                    with contextlib.suppress(BaseException):
                        await task
        if not keep:
            conn.drop_upstream()
        return keep and not req.wants_close

    async def _pump_body(self, conn: _Conn, req: _Request, up_writer: asyncio.StreamWriter) -> None:
        def counted(n: int) -> None:
            with self._lock:
                self._uploaded += n
                taken = min(n, req.reserved)
                req.reserved -= taken
                self._reserved -= taken

        count = counted if req.method in ("PUT", "POST") else None
        if req.chunked:
            await _copy_chunked(conn.reader, up_writer, count)
        elif req.content_length:
            await _copy_exact(conn.reader, up_writer, req.content_length, count)

    async def _relay(self, conn: _Conn, req: _Request, up_reader: asyncio.StreamReader) -> bool:
        """Upstream's response to `req` (after any 1xx) to the client; whether both stay open."""
        while True:
            head = await _read_head(up_reader)
            if head is None:
                raise _Drop("upstream closed before answering")
            (_, status_b, *_), headers = _parse_head(head)
            status = int(status_b)
            conn.writer.write(head)
            await conn.writer.drain()
            if not 100 <= status < 200:
                break
        keep = "close" not in headers.get("connection", "").lower()
        if req.method == "HEAD" or status in (204, 304):
            pass
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            await _copy_chunked(up_reader, conn.writer)
        elif "content-length" in headers:
            await _copy_exact(up_reader, conn.writer, int(headers["content-length"]))
        else:
            while data := await up_reader.read(CHUNK):
                conn.writer.write(data)
                await conn.writer.drain()
            keep = False
        await conn.writer.drain()
        with self._lock:
            self._answered += 1
        return keep


class _UpstreamProtocol(asyncio.StreamReaderProtocol):
    """An upstream connection whose reader ends at its end of stream, whatever ended it. A server that
    answers and closes before it took a whole body (versitygw stops reading an aws-chunked upload at its
    decoded length) makes the next write of the body fail; asyncio would hand that write's error to the
    reader too, and the reader raises it before the answer already received, which is then lost."""

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(None)


async def _open_upstream(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """asyncio.open_connection with _UpstreamProtocol. A writer's drain still fails once the connection
    is lost, so the body's pump stops."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_HEAD, loop=loop)
    protocol = _UpstreamProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(lambda: protocol, host, port)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def _lingering_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Closes a connection once the client stopped sending (at most LINGER_SECONDS): bytes left unread
    in the socket would make the kernel answer with a reset, which the client can see before the
    response it has not read yet (an upload body curl sent when its wait for 100 Continue ran out,
    answered SlowDown with `Connection: close`)."""
    with contextlib.suppress(OSError, TimeoutError):
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_SECONDS):
            while await reader.read(CHUNK):
                pass
    writer.close()


async def _sleep_or(seconds: float, event: asyncio.Event) -> None:
    """Sleeps `seconds`, or less if `event` is set meanwhile (the mode switched)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


def _methods(methods: Collection[str] | None) -> frozenset[str] | None:
    return None if methods is None else frozenset(m.upper() for m in methods)
