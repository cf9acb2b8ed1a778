"""The broker's gRPC port (`grpcServerPort`, Apache RocketMQ's proxy port, 8081 by default): the
RocketMQ 5.x clients' MessagingService. Clients connect to the Rust front (`_store.GrpcFront`,
crates/grpc), which serves TLS and plain clients on the one port as Apache RocketMQ's proxy does
(`tls.server.mode`; the Java client turns TLS on by default). The calls it does not serve itself it
hands to the service (`ferromq.proxy.service`) on the broker's event loop: the unary-request ones
directly (`ferromq.proxy.inbox`), Telemetry and the few it cannot read whole over HTTP/2 on a Unix
socket in a private folder to grpcio's asyncio server. The front names the client in the
`x-ferromq-peer` header.

The broker starts one over itself (local mode); `ferromq proxy -pm cluster` starts one over the
brokers a name server lists (`ferromq.proxy.cluster.ClusterBackend`)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from ferromq import _store
from ferromq.broker.broker import server_limits
from ferromq.proxy import unparsable
from ferromq.proxy.backend import Backend
from ferromq.proxy.inbox import FrontCalls, service_methods
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2_grpc as rpc
from ferromq.proxy.service import MessagingService
from ferromq.remoting.server import fd_bounded
from ferromq.remoting.tls import PlaneTls, TlsConfigError, TlsMode

logger = logging.getLogger(__name__)
# grpcio's Cython layer logs every poller wake-up at DEBUG: not what `ferromq -v` is for.
logging.getLogger("grpc._cython.cygrpc").setLevel(logging.INFO)

# Java's grpcMaxInboundMessageSize (130 MiB): a send of 4 MiB bodies in a batch fits.
MAX_INBOUND_MESSAGE_SIZE = 130 * 1024 * 1024
# Calls that may wait for the event loop: past grpcio's defaults (1000, hard 3000) it answers
# CANCELLED within a second or so, where Java's proxy lets a call wait for its deadline. Bounded
# still (a queued call holds its request).
MAX_PENDING_REQUESTS = 10_000
MAX_PENDING_REQUESTS_HARD = 20_000
# Seconds the server waits for calls in flight when it stops (long polls end sooner).
STOP_GRACE_SECONDS = 1.0
# The front's threads: TLS and HTTP/2 framing only, the calls run in Python. One: measured with
# benches/grpc_bench.py on 2 cores, a second thread's cross-thread wakeups cost more CPU per call
# (109 against 84 µs per send, 32 against 22 per received message) than it gains.
FRONT_THREADS = 1
# grpcio's socket folder: FOLDER_PREFIX, the broker's pid, "-", random characters.
FOLDER_PREFIX = "ferromq-grpc-"


class GrpcServer:
    def __init__(self, backend: Backend, host: str, port: int) -> None:
        """Over `backend`: a `LocalBackend` over the broker it runs in (local mode, made by
        `ferromq.app`), or a `ClusterBackend` (cluster mode)."""
        self.backend: Backend = backend
        self._host = host
        self._requested_port = port
        self.port = 0
        self.service = MessagingService(self.backend, self.endpoint)
        self._server: grpc.aio.Server | None = None
        self._front: _store.GrpcFront | None = None
        self._calls: FrontCalls | None = None
        self._folder: Path | None = None

    @property
    def front(self) -> _store.GrpcFront | None:
        """The Rust front, while the port is served."""
        return self._front

    def endpoint(self) -> tuple[str, int]:
        """Where clients reach this port (what routes name)."""
        host = self._host if self._host not in ("0.0.0.0", "::", "") else self.backend.config.broker_ip1
        return host, self.port

    async def start(self) -> None:
        """Starts grpcio on its Unix socket, then the front on the public port. Raises
        OSError(EADDRINUSE) when the port is taken, `TlsConfigError` for unusable TLS settings."""
        tls = self._tls()
        # The service's methods the front hands to Python directly (see ferromq.proxy.inbox).
        methods = service_methods(self.service)
        # mkdtemp makes the folder 0700: nothing but this user reaches grpcio past the front.
        # (Under the temporary directory, not the store: a socket's path is at most 107 bytes.)
        remove_stale_folders(Path(tempfile.gettempdir()))
        self._folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        try:
            front = await self._start_both(self._folder / "grpc.sock", tls, list(methods))
        except BaseException:
            await self._stop_grpcio()
            raise
        self._front, self.port = front, front.port
        self.service.front = front
        self._calls = FrontCalls(methods, front)
        self._calls.start()
        self.service.renewals.start()
        logger.info(
            "gRPC (RocketMQ 5.x clients) listening on %s:%d (%s)",
            self._host,
            front.port,
            f"TLS {tls.mode}" if tls is not None else "plain only",
        )

    async def _start_both(
        self, socket_path: Path, tls: PlaneTls | None, inbox_methods: list[str]
    ) -> _store.GrpcFront:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_SIZE),
                ("grpc.server.max_pending_requests", MAX_PENDING_REQUESTS),
                ("grpc.server.max_pending_requests_hard_limit", MAX_PENDING_REQUESTS_HARD),
            ]
        )
        unparsable.register(rpc.add_MessagingServiceServicer_to_server, self.service, server)
        if server.add_insecure_port(f"unix:{socket_path}") == 0:
            raise OSError(errno.EIO, f"grpcio cannot listen on {socket_path}")
        await server.start()
        self._server = server
        plane = self.backend.data_plane
        # The remoting port's bounds (serverMaxConnections and the rest), on this port's own.
        limits = server_limits(self.backend.config)
        try:
            return _store.GrpcFront(
                self._host,
                self._requested_port,
                socket_path,
                threads=FRONT_THREADS,
                tls=tls,
                plane=plane,
                on_dead_letter=self._dead_letter_handler() if plane is not None else None,
                inbox_methods=inbox_methods,
                max_connections=fd_bounded(limits.max_connections),
                max_connections_per_address=limits.max_connections_per_address,
                idle_timeout_ms=int((limits.idle_timeout or 0) * 1000),
            )
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise OSError(
                    errno.EADDRINUSE, f"cannot listen for gRPC on {self._host}:{self._requested_port}"
                ) from e
            raise

    def _dead_letter_handler(self) -> Callable[[str, str, str, int, str], None]:
        """What the front calls, on its own thread, with a message it popped past its consumer's
        retry policy: the service moves it to the dead letter queue on this event loop."""
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()

        def start(*args: Any) -> None:
            task = loop.create_task(self.service.dead_letter_from_front(*args))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        def handle(group: str, topic: str, receipt: str, commit_log_offset: int, message_id: str) -> None:
            loop.call_soon_threadsafe(start, group, topic, receipt, commit_log_offset, message_id)

        return handle

    def _tls(self) -> PlaneTls | None:
        """TLS as the broker's port serves it (the same keys, as Java's proxy reads the same
        system properties); in permissive test mode without the `cryptography` package, plain
        clients only, as the data plane does."""
        settings = self.backend.config.tls_settings()
        try:
            return settings.plane_tls()
        except TlsConfigError as e:
            test_certificate = settings.test_mode_enable and not settings.cert_path
            if settings.mode == TlsMode.PERMISSIVE and test_certificate:
                logger.warning("gRPC port: TLS clients are not served: %s", e)
                return None
            raise

    async def stop(self) -> None:
        # grpcio and the calls Python serves first: they end with a status the clients see;
        # then the front, whose connections to grpcio have closed, tells the clients to go.
        calls, self._calls = self._calls, None
        if calls is not None:
            await asyncio.gather(self._stop_grpcio(), calls.stop(STOP_GRACE_SECONDS))
        else:
            await self._stop_grpcio()
        front, self._front = self._front, None
        self.service.front = None
        if front is not None:
            await asyncio.to_thread(front.stop, int(STOP_GRACE_SECONDS * 1000))
        await self.service.renewals.stop()
        for client_id in list(self.service.sessions.by_id):
            self.service.sessions.remove(client_id)

    async def _stop_grpcio(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_SECONDS)
        self._remove_folder()

    def _remove_folder(self) -> None:
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def remove_stale_folders(tmp: Path) -> list[Path]:
    """Removes the socket folders of brokers that died without removing theirs (`kill -9`): this
    user's folders named with the pid of a process that no longer exists, holding nothing but
    grpcio's socket. The folders removed."""
    removed = []
    uid = os.getuid()
    for folder in tmp.glob(f"{FOLDER_PREFIX}*-*"):
        pid_text = folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        try:
            if not pid_text.isdigit() or folder.stat().st_uid != uid or _alive(int(pid_text)):
                continue
            if any(entry.name != "grpc.sock" for entry in folder.iterdir()):
                continue
        except OSError:  # gone meanwhile, or not ours to read
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:
        logger.info("removed %d socket folder(s) of brokers that are gone", len(removed))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
