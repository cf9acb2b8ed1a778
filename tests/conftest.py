"""Shared fixtures: small store files so tests exercise rollover, always closed afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferromq.store import MessageStore

# The README compatibility records (hooks and the `compat` fixture): see tests/interop/compat.py.
from tests.interop.compat import compat, pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401

SMALL = {
    "mapped_file_size_commitlog": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 100,
    "max_hash_slot_num": 1000,
    "max_index_num": 5000,
}


def _shares_module_state(item: pytest.Item) -> bool:
    """The test uses a module- or class-scoped fixture (directly or through another fixture)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        d.scope in ("module", "class", "package") for defs in info.name2fixturedefs.values() for d in defs
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`): every Spark test runs on one worker (one Spark JVM),
    the tests of a module that share a module-scoped fixture (a broker) run on one worker, and any
    other test goes wherever a worker is free."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif _shares_module_state(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture
def small_options() -> dict[str, int]:
    return dict(SMALL)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore(tmp_path / "store", **SMALL)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    # A leak warning is then blamed on the test that leaked.
    yield
    gc.collect()
