"""Shared fixtures: small store files so tests exercise rollover, always closed afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ferromq.store import MessageStore

if TYPE_CHECKING:
    from xdist.remote import Producer

    from tests.scheduling import ModuleUnits

# The records for docs/compatibility.md (hooks and the `compat` fixture): see tests/interop/compat.py.
from tests.interop.compat import compat, pytest_runtest_logreport, pytest_sessionfinish  # noqa: F401

SMALL = {
    "mapped_file_size_commitlog": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 100,
    "max_hash_slot_num": 1000,
    "max_index_num": 5000,
}


# Every test of these directories carries their marker (`-m "not interop"` selects by it).
_DIRECTORY_MARKS = {"interop": pytest.mark.interop, "spark": pytest.mark.spark}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test by its directory under tests/ (before `-m` selects by marks)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            mark = _DIRECTORY_MARKS.get(item.path.relative_to(here).parts[0])
            if mark is not None:
                item.add_marker(mark)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleUnits | None:
    """`--dist loadfile` as tests/scheduling.py describes it; other modes as xdist has them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.scheduling import ModuleUnits

    return ModuleUnits(config, log)


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
