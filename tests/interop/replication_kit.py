"""Helpers of the replication interop tests: ferromq name server and broker processes started from
broker.conf files on free 127.0.0.1 ports, killed with SIGKILL when a test says so, and comparisons of
two stores' files."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ferromq.testing.process import ferromq_command, free_port, log_tail, write_conf
from ferromq.testing.waiting import wait_until
from tests.interop.small_store import SMALL_STORE

START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
# The small store, so a few hundred messages cross file boundaries; the same for every broker.
STORE_CONF = {
    **SMALL_STORE,
    "flushDiskType": "ASYNC_FLUSH",
    "brokerClusterName": "DefaultCluster",
    "brokerName": "broker-r",
    "brokerIP1": "127.0.0.1",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
}


@dataclass
class Process:
    """A ferromq child process and its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    addr: str
    log_start: int = 0
    """Where this run's part of the log starts (a restarted broker appends to its log)."""

    def log(self) -> str:
        return log_tail(self.log_path, start=self.log_start)

    def logged(self, text: str) -> bool:
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start)
            return text in f.read().decode("utf-8", errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as a machine that dies."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT)

    def stop(self) -> int | None:
        """SIGTERM and a bounded wait; the exit code (None when it had to be killed)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def spawn(name: str, argv: list[str], log_path: Path, ready: str, addr: str) -> Process:
    start = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    p = Process(name, proc, log_path, addr, start)
    try:
        wait_until(
            lambda: p.logged(ready) or proc.poll() is not None,
            f"{name} to start",
            timeout=START_TIMEOUT,
            why=p.log,
        )
    except AssertionError:
        p.kill()
        raise
    if proc.poll() is not None:
        raise AssertionError(f"{name} exited with {proc.returncode}: {' '.join(argv)}\n{p.log()}")
    return p


def start_namesrv(workdir: Path) -> Process:
    port = free_port()
    argv = [*ferromq_command(), "-v", "namesrv", "--port", str(port)]
    return spawn(
        "name server", argv, workdir / "namesrv.log", "ferromq name server listening", f"127.0.0.1:{port}"
    )


START_ATTEMPTS = 3


def start_broker(workdir: Path, name: str, namesrv: str, conf: dict[str, str]) -> Process:
    """`ferromq broker -c broker.conf` with the store under `workdir/name`; `conf` should set listenPort.
    A port another process took between its choice and the bind (parallel workers start servers too) is
    chosen again, as many as START_ATTEMPTS times."""
    root = workdir / name
    for attempt in range(START_ATTEMPTS):
        full = {**STORE_CONF, "storePathRootDir": str(root / "store"), "namesrvAddr": namesrv, **conf}
        conf_path = write_conf(root / "broker.conf", full)
        argv = [*ferromq_command(), "-v", "broker", "-c", str(conf_path), "--host", "127.0.0.1"]
        try:
            return spawn(name, argv, root / "broker.log", "ferromq broker", f"127.0.0.1:{full['listenPort']}")
        except AssertionError as e:
            if "Address already in use" not in str(e) or attempt == START_ATTEMPTS - 1:
                raise
            # A new listenPort; the HA port stays (a test may have told a slave where it is).
            conf = {**conf, **_ports(keep_ha=conf.get("haListenPort"))}
    raise AssertionError("unreachable")


def _ports(with_ha: bool = False, keep_ha: str | None = None) -> dict[str, str]:
    """A listenPort that is not `keep_ha` (and, `with_ha`, an HA port that is neither it nor its VIP
    channel's, listenPort - 2)."""
    avoid = {int(keep_ha), int(keep_ha) + 2} if keep_ha else set()
    listen = free_port()
    while listen in avoid:
        listen = free_port()
    ports = {"listenPort": str(listen)}
    if with_ha:
        ha = free_port()
        while ha in (listen, listen - 2):
            ha = free_port()
        ports["haListenPort"] = str(ha)
    return ports


def wait_slave_connected(master: Process, what: str = "the slave to connect", timeout: float = 30.0) -> None:
    """Until a slave's HA connection asked the master for its CommitLog (the master logs it)."""
    wait_until(lambda: master.logged("asks for CommitLog offset"), what, timeout=timeout, why=master.log)


def master_conf(role: str) -> dict[str, str]:
    # The broker also listens on listenPort - 2 (the VIP channel, as Java's): the HA port must be
    # neither of them.
    return {"brokerRole": role, "brokerId": "0", **_ports(with_ha=True)}


def slave_conf(**extra: str) -> dict[str, str]:
    return {"brokerRole": "SLAVE", "brokerId": "1", **_ports(with_ha=False), **extra}


def store_files(root: Path, sub: str) -> dict[str, bytes]:
    """Every file under `root/sub` by relative path (20-digit data files only: no temporaries)."""
    base = root / sub
    if not base.is_dir():
        return {}
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and len(p.name) == 20 and p.name.isdigit()
    }


def differences(master: dict[str, bytes], slave: dict[str, bytes]) -> list[str]:
    """What differs between the slave's files and the master's (the slave may start later: a new slave
    starts at the master's last CommitLog file)."""
    # A preallocated file nothing was written to yet may exist on one side only.
    out = [
        f"{name}: missing on the slave"
        for name, data in master.items()
        if name not in slave and _after_first(name, slave) and data.count(0) != len(data)
    ]
    for name, data in slave.items():
        if name not in master:
            if data.count(0) != len(data):
                out.append(f"{name}: only on the slave")
        elif master[name] != data:
            out.append(f"{name}: bytes differ")
    return out


def _after_first(name: str, slave: dict[str, bytes]) -> bool:
    same_dir = [n for n in slave if os.path.dirname(n) == os.path.dirname(name)]
    return bool(same_dir) and name > min(same_dir)
