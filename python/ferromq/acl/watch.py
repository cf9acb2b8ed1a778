"""Reloads the ACL when its files change (Java 4.9.7's `AclFileWatchService`: every 5 s, a
changed modification time or a file added or removed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from ferromq.acl.errors import AclError
from ferromq.acl.plain import PlainAcl

logger = logging.getLogger(__name__)

WATCH_INTERVAL = 5.0


class AclFileWatcher:
    def __init__(self, acl: PlainAcl, interval: float = WATCH_INTERVAL) -> None:
        self._acl = acl
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        # The files as they were when they could not be used: that error is logged once.
        self._failed: dict[Path, int] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="acl-file-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.poll()

    def poll(self) -> bool:
        """Reloads if a file changed; True when it did. A file that cannot be used keeps the ACL
        as it was (logged)."""
        times = self._acl.file_times()
        if times == dict(self._acl.snapshot.mtimes) or times == self._failed:
            return False
        try:
            self._acl.load()
        except (AclError, OSError) as e:
            self._failed = times
            logger.error("the ACL files changed but cannot be used, the previous ACL stays: %s", e)
            return False
        self._failed = None
        logger.info("ACL reloaded")
        return True
