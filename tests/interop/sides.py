"""The servers a side-by-side test runs the same thing against (ferromq and Apache RocketMQ), as the
tests reach them: a gRPC side (the 5.x clients' endpoint, and where topics and groups are made), and an
mqadmin side (Apache RocketMQ's own mqadmin in one JVM per side: tests/interop/mqadmin.py)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from apache_rocketmq import start_rocketmq

from ferromq.testing import BrokerProcess
from tests.interop.conftest import stop_ferromq
from tests.interop.mqadmin import MqadminShell

T = TypeVar("T")

CLUSTER = "DefaultCluster"
# What both servers of an mqadmin comparison are started with (plus each module's own keys): mqadmin's
# `-c CLUSTER` reaches the one broker, named alike on both sides.
MQADMIN_CONF = {"brokerClusterName": CLUSTER, "brokerName": "broker-a", "brokerIP1": "127.0.0.1"}


@dataclass(frozen=True)
class GrpcSide:
    """One server under test: where to create topics and groups (a broker's remoting address, and the
    name server that must route them), and the gRPC endpoint the 5.x clients talk to."""

    kind: str
    namesrv: str
    broker_addr: str
    grpc_endpoint: str

    @property
    def broker_port(self) -> int:
        return int(self.broker_addr.rsplit(":", 1)[1])


@dataclass
class MqadminSide:
    """One server under test and the mqadmin JVM that runs every command of a module against it."""

    kind: str
    namesrv: str
    broker_addr: str
    home: Path
    shell: MqadminShell

    def admin(self, subcommand: str, *args: str) -> str:
        return self.shell.run(subcommand, *args)

    def labels(self) -> dict[str, str]:
        """What differs between the sides by nature, and the placeholder each becomes in a comparison."""
        return {self.broker_addr: "<broker>", self.namesrv: "<namesrv>", str(self.home): "<home>"}


def both(sides: dict[str, T], command: Callable[[T], Any]) -> dict[str, Any]:
    """`command` run for each side at the same time; its result per side."""
    with ThreadPoolExecutor(len(sides)) as pool:
        futures = {k: pool.submit(command, s) for k, s in sides.items()}
        return {k: f.result() for k, f in futures.items()}


def same(outputs: dict[str, Any], what: str) -> Any:
    """Asserts both sides gave the same (each printed: run with `-s` to see them); returns it."""
    for kind, value in outputs.items():
        print(f"--- {what} [{kind}]\n{value}")
    assert outputs["ferromq"] == outputs["rocketmq"], what
    return outputs["ferromq"]


def serve_both(
    stack: ExitStack, tmp_path_factory: pytest.TempPathFactory, name: str, conf: dict[str, str], version: str
) -> dict[str, tuple[str, str, Path]]:
    """`ferromq serve` and Apache RocketMQ `version`'s name server and broker, both with `conf` and fresh
    stores, stopped when `stack` closes (Java's by SIGKILL: nobody reads its store, and that spares its
    shutdown hook's ~13 s): kind -> (name server, broker address, a home for an mqadmin of the side)."""
    work = tmp_path_factory.mktemp(f"{name}-ferromq")
    server = BrokerProcess(work, conf).start()
    stack.callback(stop_ferromq, server)
    java_root = tmp_path_factory.mktemp(f"{name}-rocketmq")
    mq = start_rocketmq(java_root, dict(conf), version=version)
    stack.callback(mq.stop, kill=True)
    return {
        "ferromq": (server.namesrv, server.broker_addr, work / "mqadmin"),
        "rocketmq": (mq.namesrv, mq.broker_addr, java_root / "mqadmin"),
    }


def mqadmin_sides(
    stack: ExitStack,
    where: dict[str, tuple[str, str, Path]],
    version: str,
    shell: Callable[[Path, str], MqadminShell] | None = None,
) -> dict[str, MqadminSide]:
    """An mqadmin side per server of `where` (kind -> name server, broker address, the mqadmin's home):
    mqadmin `version`'s JVM (or `shell(home, namesrv)`'s), made for all at once and closed when `stack`
    closes."""

    def start(w: tuple[str, str, Path]) -> MqadminShell:
        return shell(w[2], w[0]) if shell is not None else MqadminShell(w[2], w[0], version=version)

    shells = both(where, start)
    for s in shells.values():
        stack.callback(s.close)
    return {kind: MqadminSide(kind, *w, shells[kind]) for kind, w in where.items()}
