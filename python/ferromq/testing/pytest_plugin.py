"""pytest fixtures with a RocketMQ broker (ferromq, in-process, on free 127.0.0.1 ports), registered
through the `pytest11` entry point when ferromq is installed:

- `ferromq_broker`: a fresh `ferromq.testing.Broker` for one test. Options with the marker
  `@pytest.mark.ferromq(config={"flushDiskType": "SYNC_FLUSH"}, fast=True)`.
- `ferromq_session_broker`: one broker for the whole session (one per pytest-xdist worker);
  configured in the ini file with `ferromq_config` (lines of `key=value`) and `ferromq_fast`.
  Tests that share it keep apart by using their own names: `ferromq_topic`, `ferromq_group`.
- `ferromq_topic`, `ferromq_group`: a topic and a consumer group name unique to the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ferromq.testing import Broker, unique_name


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "ferromq_config", "broker.conf lines (key=value) of ferromq_session_broker", type="linelist"
    )
    parser.addini(
        "ferromq_fast", "ferromq_session_broker: 1 s delay levels and transaction checks", type="bool"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ferromq(config=None, fast=False): options of the ferromq_broker fixture's broker"
    )


def _ini_config(config: pytest.Config) -> dict[str, str]:
    out = {}
    for line in config.getini("ferromq_config"):
        key, sep, value = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"ferromq_config: {line!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


@pytest.fixture
def ferromq_broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    marker = request.node.get_closest_marker("ferromq")
    options = dict(marker.kwargs) if marker is not None else {}
    with Broker(options.get("config"), fast=bool(options.get("fast", False))) as broker:
        yield broker


@pytest.fixture(scope="session")
def ferromq_session_broker(pytestconfig: pytest.Config) -> Iterator[Broker]:
    fast = bool(pytestconfig.getini("ferromq_fast"))
    with Broker(_ini_config(pytestconfig), fast=fast) as broker:
        yield broker


@pytest.fixture
def ferromq_topic(request: pytest.FixtureRequest) -> str:
    return unique_name(request.node.name)


@pytest.fixture
def ferromq_group(request: pytest.FixtureRequest) -> str:
    return unique_name(f"g_{request.node.name}")
