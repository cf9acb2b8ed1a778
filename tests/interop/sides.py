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

from tests.interop.mqadmin import MqadminShell

T = TypeVar("T")


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
