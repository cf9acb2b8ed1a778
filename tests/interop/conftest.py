"""Interop tests: unmodified clients against a real `ferromq serve` process.

`ferromq_server` starts one `ferromq -v serve` (name server + broker) per test module on free 127.0.0.1
ports with a fresh store, yields a `FerromqServer` (`namesrv` is the address clients use) and stops it
with SIGTERM, asserting a clean exit and no ERROR / Traceback in its log. `ferromq_namesrv` is the name
server address alone; when a test using it fails, the part of the broker log written during that test
is attached to the report. Tests can attach more text with `failure_sections`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

READY_LINE = "ferromq serving:"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0
LOG_TAIL_CHARS = 60_000

_log_key = pytest.StashKey[tuple[Path, int]]()
_sections_key = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()


def pytest_configure(config: pytest.Config) -> None:
    # Also listed in pyproject's markers; registered here so the suite runs under --strict-markers
    # either way.
    config.addinivalue_line("markers", "interop: runs an official RocketMQ client against a ferromq broker")


def ferromq_executable() -> str:
    exe = Path(sys.executable).with_name("ferromq")
    return str(exe) if exe.exists() else "ferromq"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, limit: int = LOG_TAIL_CHARS, start: int = 0) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    if len(text) > limit:
        text = f"... ({len(text) - limit} characters omitted)\n" + text[-limit:]
    return text


@dataclass
class FerromqServer:
    process: subprocess.Popen[bytes]
    namesrv: str
    broker_addr: str
    store: Path
    log_path: Path

    def log(self) -> str:
        return log_tail(self.log_path)


def start_ferromq(workdir: Path, attempts: int = 3, config: Path | None = None) -> FerromqServer:
    """Start `ferromq -v serve` (with a broker.conf if given); retried on new ports if a port was
    taken between probe and bind."""
    last_error = ""
    for attempt in range(attempts):
        ns_port, broker_port = free_port(), free_port()
        while broker_port == ns_port:
            broker_port = free_port()
        store = workdir / f"store{attempt}"
        log_path = workdir / f"ferromq{attempt}.log"
        cmd = [
            ferromq_executable(),
            "-v",
            "serve",
            "--store",
            str(store),
            "--namesrv-port",
            str(ns_port),
            "-p",
            str(broker_port),
            *(["-c", str(config)] if config is not None else []),
        ]
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if READY_LINE in log_path.read_text(encoding="utf-8", errors="replace"):
                namesrv, broker = f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}"
                return FerromqServer(proc, namesrv, broker, store, log_path)
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
            last_error = f"no {READY_LINE!r} line within {START_TIMEOUT} s"
        else:
            last_error = f"exited with code {proc.returncode} before it was ready"
        last_error += f": {' '.join(cmd)}\n--- log ---\n{log_tail(log_path)}"
        if "address already in use" not in log_tail(log_path).lower():
            break
    raise RuntimeError(f"ferromq serve did not start: {last_error}")


def stop_ferromq(server: FerromqServer) -> None:
    """SIGTERM, bounded wait, clean exit code; the broker log goes into every failure message."""
    proc = server.process
    if proc.poll() is not None:
        pytest.fail(f"ferromq serve died during the tests (exit code {proc.returncode})\n{server.log()}")
    os.kill(proc.pid, signal.SIGTERM)
    try:
        code = proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT)
        pytest.fail(f"ferromq serve did not stop within {STOP_TIMEOUT} s of SIGTERM\n{server.log()}")
    assert code == 0, (
        f"ferromq serve exited with code {code} after SIGTERM\n--- broker log ---\n{server.log()}"
    )
    text = server.log_path.read_text(encoding="utf-8", errors="replace")
    problems = [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")]
    assert not problems, "the broker logged errors:\n" + "\n".join(problems[:20]) + f"\n---\n{server.log()}"


@pytest.fixture(scope="module")
def ferromq_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FerromqServer]:
    server = start_ferromq(tmp_path_factory.mktemp("ferromq"))
    try:
        yield server
    finally:
        stop_ferromq(server)


@pytest.fixture
def ferromq_namesrv(ferromq_server: FerromqServer, request: pytest.FixtureRequest) -> str:
    """The name server address of the module's broker; if the test fails, the part of the broker log
    written while it ran is attached to the report."""
    request.node.stash[_log_key] = (ferromq_server.log_path, ferromq_server.log_path.stat().st_size)
    return ferromq_server.namesrv


@pytest.fixture
def failure_sections(request: pytest.FixtureRequest) -> list[tuple[str, Callable[[], str]]]:
    """Append (title, text producer) pairs; they are added to the report if the test fails."""
    return request.node.stash.setdefault(_sections_key, [])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.failed and call.when in ("call", "teardown"):
        for title, text in item.stash.get(_sections_key, []):
            try:
                report.sections.append((title, text()))
            except Exception as e:
                report.sections.append((title, f"<failed to collect: {e!r}>"))
        logged = item.stash.get(_log_key, None)
        if logged is not None:
            path, start = logged
            title = f"ferromq broker log ({path}, from byte {start})"
            report.sections.append((title, log_tail(path, start=start)))
    return report
