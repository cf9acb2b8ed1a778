"""A RocketMQ broker for your tests: a ferromq name server and broker in this process, on free
127.0.0.1 ports, with a temporary store in the small-footprint profile. Any RocketMQ 4.x client
(the official C++ and Java clients, ferromq's Python client) connects to `namesrv`.

    from ferromq.testing import Broker

    with Broker() as broker:                 # in a background thread; ready when `with` enters
        run_my_app(namesrv=broker.namesrv)
        broker.wait_for_messages("Orders", 3)
        assert [m.payload() for m in broker.messages("Orders")] == [b"a", b"b", b"c"]

    async with Broker() as broker:           # on the running event loop
        ...

`config` takes broker.conf keys (RocketMQ's names, checked strictly: a typo is an error), e.g.
`{"flushDiskType": "SYNC_FLUSH", "autoCreateTopicEnable": "false"}`. `fast=True` makes every
delay level 1 s and checks unresolved transactions every second once they are a second old, so
tests of delayed messages and transaction check-backs take seconds, not minutes; real clocks
throughout. `settings` sets fields of `ferromq.broker.BrokerConfig` by their Python names, over
`config`, e.g. `{"mapped_file_size_commitlog": 1 << 20}`.

A broker that keeps its store: `Broker(store_dir=path)` puts it in `path/store` and leaves it
there when it stops, so a second `Broker(store_dir=path)` is the same broker restarted. Brokers
of one cluster: start a `ferromq.namesrv.NameServer` yourself on the event loop and give it to
each as `name_server` (used with `async with`; they register with it and leave it running).

Also here, for tests:

- `BrokerProcess` (`ferromq.testing.process`): `ferromq serve` in a child process, started from
  a broker.conf on free ports and stopped through its PID.
- `until` and `wait_until` (`ferromq.testing.waiting`): waiting, bounded, for a condition.
- `free_port()` and `unique_name(prefix)`.

The pytest plugin (`ferromq.testing.pytest_plugin`, registered on install) gives the fixtures
`ferromq_broker`, `ferromq_session_broker` and `ferromq_topic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from ferromq.app import make_broker
from ferromq.broker import Broker as _Broker
from ferromq.broker import load_broker_config
from ferromq.client import Admin
from ferromq.message import StoredMessage
from ferromq.namesrv import NameServer
from ferromq.testing.process import BrokerProcess, free_port, write_conf
from ferromq.testing.waiting import WaitTimeout, until, wait_until

__all__ = [
    "FAST_CONFIG",
    "Broker",
    "BrokerProcess",
    "WaitTimeout",
    "free_port",
    "unique_name",
    "until",
    "wait_until",
]

T = TypeVar("T")

# Every delay level (the 18 of RocketMQ's default) is 1 s; transactions are checked every second
# once they are a second old.
FAST_CONFIG: Mapping[str, str] = {
    "messageDelayLevel": " ".join(["1s"] * 18),
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "1000",
}

START_TIMEOUT = 30.0
POLL_INTERVAL = 0.02


def unique_name(prefix: str) -> str:
    """`prefix` plus a random suffix, within RocketMQ's name rules (letters, digits, `-`, `_`)."""
    clean = "".join(c if c.isalnum() or c in "-_" else "_" for c in prefix)[:80]
    return f"{clean}_{uuid.uuid4().hex[:10]}"


class Broker:
    """A name server and a broker; see the module's documentation. Use it with `with` or `async
    with` (or `start()`/`stop()`, `await astart()`/`await astop()`). Helpers wait with bounded
    timeouts and raise `WaitTimeout` (a TimeoutError) naming what they waited for."""

    def __init__(
        self,
        config: Mapping[str, str | int | bool] | None = None,
        *,
        fast: bool = False,
        store_dir: str | Path | None = None,
        broker_name: str = "broker-a",
        settings: Mapping[str, Any] | None = None,
        name_server: NameServer | None = None,
    ) -> None:
        """`config`: broker.conf keys; `fast`: 1 s delay levels and transaction checks;
        `store_dir`: where the store goes (`store_dir/store`, kept), instead of a temporary
        directory removed at the stop; `settings`: BrokerConfig fields by name, over `config`;
        `name_server`: a started NameServer to register with instead of one of its own."""
        self._conf = {**(FAST_CONFIG if fast else {}), **(config or {})}
        self._settings = dict(settings or {})
        self._broker_name = broker_name
        self._own_dir = store_dir is None
        self._dir = Path(tempfile.mkdtemp(prefix="ferromq-test-")) if store_dir is None else Path(store_dir)
        self._given_ns = name_server
        self._ns: NameServer | None = None
        self._broker: _Broker | None = None
        self._admin: Admin | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def namesrv(self) -> str:
        """The name server's `host:port`: what clients are given as namesrvAddr."""
        assert self._ns is not None, "the broker is not started"
        return f"127.0.0.1:{self._ns.port}"

    @property
    def broker_addr(self) -> str:
        """The broker's `host:port`."""
        return self.broker.config.broker_addr

    @property
    def grpc_endpoint(self) -> str:
        """The `host:port` the RocketMQ 5.x clients are given (their ClientConfiguration's
        endpoints), or "" when the settings turned gRPC off (`grpc_server_port=None`)."""
        grpc = self.broker.grpc
        return f"127.0.0.1:{grpc.port}" if grpc is not None else ""

    @property
    def store_dir(self) -> Path:
        return self._dir

    @property
    def name_server(self) -> NameServer:
        """The name server object (its own, or the one given as `name_server`)."""
        assert self._ns is not None, "the broker is not started"
        return self._ns

    @property
    def broker(self) -> _Broker:
        """The broker object itself (its config, store and managers)."""
        assert self._broker is not None, "the broker is not started"
        return self._broker

    # -- lifecycle ---------------------------------------------------------------------------

    async def astart(self) -> None:
        """Starts on the running event loop; returns once the broker is registered (if it has a
        name server to register with)."""
        conf_path = write_conf(self._dir / "broker.conf", self._conf) if self._conf else None
        if self._given_ns is not None:
            self._ns = self._given_ns
        else:
            self._ns = NameServer("127.0.0.1", 0)
            await self._ns.start()
        try:
            settings = {
                "broker_name": self._broker_name,
                "listen_port": 0,
                "grpc_server_port": 0,
                "namesrv_addr": self.namesrv,
                "store_path_root_dir": str(self._dir / "store"),
                **self._settings,
            }
            cfg = load_broker_config(conf_path, profile="small", strict=True, **settings)
            self._broker = make_broker(cfg, "127.0.0.1")
            await self._broker.start()
            registers = bool(cfg.namesrv_addrs)  # not when `settings` take its name servers away
            if registers and not await self._ns.wait_registered(self.broker_addr, START_TIMEOUT):
                raise TimeoutError(f"the broker did not register within {START_TIMEOUT} s")
        except BaseException:
            await self.astop()
            raise

    async def astop(self) -> None:
        """Stops what `astart` started (not a given name server) and removes the temporary store."""
        if self._admin is not None:
            await self._admin.stop()
            self._admin = None
        if self._broker is not None:
            await self._broker.stop()
            self._broker = None
        if self._ns is not None and self._ns is not self._given_ns:
            await self._ns.stop()
        self._ns = None
        if self._own_dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def start(self) -> None:
        """Starts in a background thread with its own event loop; returns once ready."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="ferromq-testing-broker", daemon=True)
        self._thread.start()
        try:
            self._call(self.astart(), START_TIMEOUT + 30)
        except BaseException:
            self._stop_thread()
            raise

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            self._call(self.astop(), 60)
        finally:
            self._stop_thread()

    def _stop_thread(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        await self.astart()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Runs `coro` on the broker's loop: the background thread's in sync mode."""
        if self._loop is None:
            coro.close()
            raise RuntimeError("use `await` helpers (a*) with `async with Broker()`, or `with Broker()`")
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    # -- helpers -----------------------------------------------------------------------------

    async def acreate_topic(self, topic: str, queues: int = 4, *, order: bool = False) -> None:
        """Creates `topic` with `queues` read and write queues (through the admin protocol, as
        mqadmin would) and waits until the name server routes it."""
        if self._admin is None:  # made on first use: a broker that is not asked has no client
            admin = Admin(self.namesrv)
            await admin.start()
            self._admin = admin
        admin = self._admin
        await admin.create_topic(topic, queue_nums=queues, order=order)

        async def routed() -> bool:
            with contextlib.suppress(Exception):
                route = await admin.topic_route(topic)
                return any(q.write_queue_nums == queues for q in route.queue_datas)
            return False

        await until(routed, f"topic {topic} at the name server", START_TIMEOUT, interval=POLL_INTERVAL)

    def create_topic(self, topic: str, queues: int = 4, *, order: bool = False) -> None:
        self._call(self.acreate_topic(topic, queues, order=order), START_TIMEOUT + 10)

    def messages(self, topic: str) -> list[StoredMessage]:
        """Every message stored in `topic` now, read from the store: by queue, then offset. Bodies
        may be compressed: `payload()` gives the decompressed bytes."""
        store = self.broker.store
        out: list[StoredMessage] = []
        for name, queue_id, lo, hi in sorted(store.queues()):
            if name != topic:
                continue
            offset = lo
            while offset < hi:
                batch = store.get_messages(topic, queue_id, offset, max_count=256)
                if not batch:
                    break
                out += batch
                offset = batch[-1].queue_offset + 1
        return out

    def count(self, topic: str) -> int:
        """Messages stored in `topic` (max minus min offset, over its queues)."""
        return sum(hi - lo for name, _, lo, hi in self.broker.store.queues() if name == topic)

    def wait_for_messages(self, topic: str, count: int, timeout: float = 30.0) -> list[StoredMessage]:
        """Waits until `topic` holds at least `count` messages (delayed ones count once delivered)
        and returns them."""
        what = f"{count} messages in {topic}"
        wait_until(lambda: self.count(topic) >= count, what, timeout, interval=POLL_INTERVAL)
        return self.messages(topic)

    async def await_messages(self, topic: str, count: int, timeout: float = 30.0) -> list[StoredMessage]:
        what = f"{count} messages in {topic}"
        await until(lambda: self.count(topic) >= count, what, timeout, interval=POLL_INTERVAL)
        return self.messages(topic)

    def consumed(self, group: str, topic: str) -> bool:
        """The group's committed offsets reach the end of every queue of `topic`."""
        store, offsets = self.broker.store, self.broker.offsets
        queues = [(q, hi) for name, q, _, hi in store.queues() if name == topic]
        return bool(queues) and all(offsets.query(group, topic, q) >= hi for q, hi in queues)

    def wait_consumed(self, group: str, topic: str, timeout: float = 30.0) -> None:
        """Waits until consumer `group` has committed every message of `topic`. Clients commit
        offsets on a timer (the official ones every 5 s) and when they shut down."""
        what = f"group {group} to consume {topic}"
        wait_until(lambda: self.consumed(group, topic), what, timeout, interval=POLL_INTERVAL)

    async def await_consumed(self, group: str, topic: str, timeout: float = 30.0) -> None:
        what = f"group {group} to consume {topic}"
        await until(lambda: self.consumed(group, topic), what, timeout, interval=POLL_INTERVAL)
