"""Python's held pulls (PullRequestHoldService), on a real store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferromq.broker.long_polling import PullRequestHoldService
from ferromq.store import MessageStore

from ..conftest import SMALL


def test_a_message_stored_before_the_hold_ends_it_at_once(tmp_path: Path) -> None:
    """A pull reads offset 0 and finds nothing; a message is stored before its hold begins (its
    arrival handled while nobody was held): the hold ends at once instead of at its re-check or
    its suspend time."""

    async def main() -> None:
        with MessageStore(tmp_path / "s", **SMALL) as store:
            hold = PullRequestHoldService(store.max_offset, check_interval=60.0)
            await hold.start()
            try:
                store.put("T", 0, b"between the read and the hold")
                hold.notify("T", 0, 1)  # nobody held yet: wakes nobody
                await asyncio.wait_for(hold.hold("T", 0, 0, 60.0, lambda _: True), 10)
                assert hold.held_count == 0
                # Nothing new past offset 1: that hold waits for its own (short) suspend time.
                await hold.hold("T", 0, 1, 0.2, lambda _: True)
            finally:
                await hold.stop()

    asyncio.run(main())
