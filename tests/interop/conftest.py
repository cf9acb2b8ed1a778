"""Interop tests: unmodified clients against a real `ferromq serve` process.

`ferromq_server` starts one `ferromq.testing.BrokerProcess` (`ferromq -v serve`, name server + broker)
per test module on free 127.0.0.1 ports with a fresh store, and stops it with `stop_ferromq`: SIGTERM,
asserting a clean exit and no ERROR / Traceback in its log. `ferromq_namesrv` is the name server address
alone; when a test using it fails, the part of the broker log written during that test is attached to the
report. Tests can attach more text with `failure_sections`. The 5.x clients' side-by-side tests share
`java_proxy` (Apache RocketMQ 5.3.3's proxy in local mode) and `ferromq_grpc`, one of each per run,
and `grpc_admins`, 5.3.3's mqadmin for each of them (one JVM each for every command of the run): the
two modules that use them are one unit of tests/scheduling.py, run by one worker, so a Java proxy
(tens of CPU seconds to start) and two mqadmin JVMs are started once. Their topics and groups carry
each module's prefix and a run id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ferromq.testing import BrokerProcess
from ferromq.testing.process import log_tail

if TYPE_CHECKING:
    from apache_rocketmq import ApacheRocketMQProxy

    from tests.interop.mqadmin import MqadminShell

STOP_TIMEOUT = 15.0

_log_key = pytest.StashKey[tuple[Path, int]]()
_sections_key = pytest.StashKey[list[tuple[str, Callable[[], str]]]]()


def pytest_configure(config: pytest.Config) -> None:
    # Also listed in pyproject's markers; registered here so the suite runs under --strict-markers
    # either way.
    config.addinivalue_line("markers", "interop: runs an official RocketMQ client against a ferromq broker")


def stop_ferromq(server: BrokerProcess) -> None:
    """SIGTERM, bounded wait, clean exit code; the broker log goes into every failure message."""
    if server.returncode is not None:
        pytest.fail(f"ferromq serve died during the tests (exit code {server.returncode})\n{server.log()}")
    code = server.stop(timeout=STOP_TIMEOUT)
    if code is None:
        pytest.fail(f"ferromq serve did not stop within {STOP_TIMEOUT} s of SIGTERM\n{server.log()}")
    assert code == 0, (
        f"ferromq serve exited with code {code} after SIGTERM\n--- broker log ---\n{server.log()}"
    )
    problems = server.errors()
    assert not problems, "the broker logged errors:\n" + "\n".join(problems[:20]) + f"\n---\n{server.log()}"


@pytest.fixture(scope="module")
def ferromq_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    server = BrokerProcess(tmp_path_factory.mktemp("ferromq")).start()
    try:
        yield server
    finally:
        stop_ferromq(server)


@pytest.fixture(scope="session")
def java_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheRocketMQProxy]:
    """Apache RocketMQ 5.3.3's proxy in local mode with the 5.x side-by-side tests' broker settings
    (tests/interop/grpc_kit.py), for the run."""
    from apache_rocketmq import start_rocketmq_proxy

    from tests.interop.grpc_kit import BROKER_CONF, PROXY_CONF

    proxy = start_rocketmq_proxy(
        tmp_path_factory.mktemp("rocketmq-proxy"), broker_conf=BROKER_CONF, proxy_conf=PROXY_CONF
    )
    try:
        yield proxy
    finally:
        # Its store is thrown away and nothing reads its exit: SIGKILL spares the ~15 s of the
        # proxy's and its broker's shutdown hooks.
        proxy.stop(kill=True)


@pytest.fixture(scope="session")
def proxy55(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheRocketMQProxy]:
    """Apache RocketMQ 5.5.0's proxy in local mode with the launcher's defaults, for the run (the two
    modules that use it are one unit of tests/scheduling.py; their topics and groups differ)."""
    from apache_rocketmq import ROCKETMQ_55_VERSION, start_rocketmq_proxy

    proxy = start_rocketmq_proxy(tmp_path_factory.mktemp("rocketmq55-proxy"), version=ROCKETMQ_55_VERSION)
    try:
        yield proxy
    finally:
        proxy.stop(kill=True)  # nobody reads its store


@pytest.fixture(scope="session")
def ferromq_grpc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """`ferromq serve` with the same settings as `java_proxy`, for the run."""
    from tests.interop.grpc_kit import BROKER_CONF

    server = BrokerProcess(tmp_path_factory.mktemp("ferromq-grpc"), BROKER_CONF).start()
    try:
        yield server
    finally:
        stop_ferromq(server)


@pytest.fixture(scope="session")
def grpc_admins(
    ferromq_grpc: BrokerProcess, java_proxy: ApacheRocketMQProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[MqadminShell, MqadminShell]]:
    """Apache RocketMQ 5.3.3's mqadmin for `ferromq_grpc` and for `java_proxy`, each one JVM that
    runs every command of the run (a fresh MQAdminStartup.main0 each, as the mqadmin script)."""
    from apache_rocketmq import ROCKETMQ_5_VERSION

    from tests.interop.grpc_kit import on_both
    from tests.interop.mqadmin import MqadminShell

    root = tmp_path_factory.mktemp("grpc-mqadmin")
    shells = on_both(
        lambda: MqadminShell(root / "ferromq", ferromq_grpc.namesrv, version=ROCKETMQ_5_VERSION),
        lambda: MqadminShell(root / "rocketmq", java_proxy.namesrv, version=ROCKETMQ_5_VERSION),
    )
    try:
        yield shells
    finally:
        for shell in shells:
            shell.close()


@pytest.fixture
def ferromq_namesrv(ferromq_server: BrokerProcess, request: pytest.FixtureRequest) -> str:
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
