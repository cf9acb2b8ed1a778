"""`ferromq serve` (a name server and a broker) in a child process, for tests that need a real
server process: tests of the command itself, of signals and restarts, or of clients in other
languages. It runs on free 127.0.0.1 ports, and is stopped through its PID.

    from ferromq.testing import BrokerProcess

    with BrokerProcess(tmp_path, {"autoCreateTopicEnable": "true"}) as server:
        run_my_app(namesrv=server.namesrv)
    assert server.returncode == 0 and not server.errors()

`config` is a broker.conf: a mapping of its keys, which is written to `workdir/ferromq.conf`, or
the path of a file. The store is `store` if it is given, or else a fresh `workdir/store<N>`. The
log (`ferromq -v`) goes to `workdir/ferromq<N>.log`. N counts start attempts: when another
process takes a port between choosing it and binding it, the start is tried again on new ports.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from ferromq.protocol.command import RemotingCommand, decode_frame, encode
from ferromq.testing.waiting import WaitTimeout, wait_until

__all__ = ["BrokerProcess", "ferromq_command", "free_port", "log_tail", "remoting_request", "write_conf"]

READY_LINE = "ferromq serving:"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
LOG_TAIL_CHARS = 60_000


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free just now (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(log: str) -> bool:
    """Whether a process's log says it could not listen because another took its port between
    `free_port` and its start: the OS's words, or the one line `ferromq` prints for it."""
    text = log.lower()
    return "address already in use" in text or " is in use (another" in text


def ferromq_command() -> list[str]:
    """The `ferromq` command of this interpreter: the script installed beside it, or else
    `python -m ferromq.cli`."""
    script = Path(sys.executable).with_name("ferromq")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "ferromq.cli"]


def remoting_request(addr: str, request: RemotingCommand, timeout: float = 10.0) -> RemotingCommand:
    """`request` to the remoting server at `host:port` on a connection of its own; its reply
    (AssertionError when the server closes the connection without one)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(encode(request))
        buf = b""
        while (decoded := decode_frame(buf)) is None:
            chunk = s.recv(65536)
            assert chunk, "the server closed the connection without a reply"
            buf += chunk
        return decoded[0]


def write_conf(path: str | os.PathLike[str], config: Mapping[str, str | int | bool]) -> Path:
    """Writes `config` as a broker.conf (`key=value` lines; booleans as `true`/`false`) to `path`,
    making its directory if need be, and returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = (f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in config.items())
    path.write_text("".join(lines), encoding="utf-8")
    return path


def log_tail(path: str | os.PathLike[str], limit: int = LOG_TAIL_CHARS, start: int = 0) -> str:
    """A log file's text from byte `start`, cut to its last `limit` characters."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    if len(text) > limit:
        text = f"... ({len(text) - limit} characters omitted)\n" + text[-limit:]
    return text


class BrokerProcess:
    """A `ferromq -v serve` child process; see the module's documentation. Use it with `with`, or
    call `start()` (which returns it) and `stop()`. The addresses, `store`, `log_path` and
    `process` are set by `start()`."""

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        config: Mapping[str, str | int | bool] | str | os.PathLike[str] | None = None,
        *,
        store: str | os.PathLike[str] | None = None,
        attempts: int = 3,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.workdir = Path(workdir)
        self._config = config
        self._store = None if store is None else Path(store)
        self._attempts = attempts
        self._start_timeout = start_timeout
        self.namesrv = ""
        """The name server's `host:port`: what clients are given as namesrvAddr."""
        self.broker_addr = ""
        """The broker's `host:port`."""
        self.grpc_endpoint = ""
        """The `host:port` of its gRPC port: what the RocketMQ 5.x clients are given as endpoints."""
        self.store = Path()
        self.log_path = Path()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        """The broker's port."""
        return int(self.broker_addr.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        assert self.process is not None, "the broker process is not started"
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended, else None."""
        return None if self.process is None else self.process.poll()

    def _conf_path(self) -> Path | None:
        config = self._config
        if config is None:
            return None
        if not isinstance(config, Mapping):
            return Path(config)
        return write_conf(self.workdir / "ferromq.conf", config)

    def start(self) -> Self:
        """Starts the process and returns once its log says it is serving. RuntimeError, with the
        command and its log, when it exits first or does not say so within `start_timeout`."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self._conf_path()
        problem = ""
        for attempt in range(self._attempts):
            ns_port, port, grpc_port = free_port(), free_port(), free_port()
            # Distinct, and not the broker's HA port (its port + 1).
            while len({ns_port, port, grpc_port, port + 1}) < 4:
                port, grpc_port = free_port(), free_port()
            self.namesrv, self.broker_addr = f"127.0.0.1:{ns_port}", f"127.0.0.1:{port}"
            self.grpc_endpoint = f"127.0.0.1:{grpc_port}"
            self.store = self._store or self.workdir / f"store{attempt}"
            self.log_path = self.workdir / f"ferromq{attempt}.log"
            cmd = [
                *ferromq_command(),
                "-v",
                "serve",
                *(["-c", str(conf)] if conf is not None else []),
                "--store",
                str(self.store),
                "--namesrv-port",
                str(ns_port),
                "-p",
                str(port),
                "--grpc-port",
                str(grpc_port),
            ]
            with open(self.log_path, "wb") as log_file:
                self.process = subprocess.Popen(
                    cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir
                )
            try:
                problem = self._wait_ready()
            except BaseException:
                self.stop(kill=True)
                raise
            if not problem:
                return self
            self.stop(kill=True)
            problem += f": {' '.join(cmd)}\n--- log ---\n{self.log()}"
            if not port_taken(self.log()):
                break
        raise RuntimeError(f"ferromq serve did not start: {problem}")

    def _wait_ready(self) -> str:
        """'' once the log says it is serving; else what happened instead."""
        try:
            wait_until(
                lambda: self.logged(READY_LINE) or self.returncode is not None,
                f"{READY_LINE!r} in {self.log_path}",
                timeout=self._start_timeout,
            )
        except WaitTimeout:
            return f"no {READY_LINE!r} line within {self._start_timeout} s"
        if self.logged(READY_LINE):
            return ""
        return f"exited with code {self.returncode} before it was ready"

    def stop(self, kill: bool = False, timeout: float = STOP_TIMEOUT) -> int | None:
        """Stops the process through its PID: SIGTERM, then waits up to `timeout` seconds and
        returns the exit code; SIGKILL and None if it is still running then. `kill=True` sends
        SIGKILL at once and returns None. A process that has already ended: its exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is not None:
            return proc.returncode
        os.kill(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=STOP_TIMEOUT)
            return None
        return None if kill else code

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the log -------------------------------------------------------------------------------

    def log(self, start: int = 0, limit: int = LOG_TAIL_CHARS) -> str:
        """The log from byte `start`, cut to its last `limit` characters."""
        return log_tail(self.log_path, limit, start)

    def log_tail(self, lines: int = 80) -> str:
        """The log's last `lines` lines."""
        return "\n".join(self._log_text().splitlines()[-lines:])

    def logged(self, text: str) -> bool:
        return text in self._log_text()

    def errors(self) -> list[str]:
        """The log's ERROR lines and the first lines of tracebacks."""
        lines = self._log_text().splitlines()
        return [line for line in lines if " ERROR " in line or line.startswith("Traceback")]

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
