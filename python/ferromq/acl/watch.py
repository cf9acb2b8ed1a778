"""Reloads the ACL when its files change (Java 4.9.7's `AclFileWatchService`: every 5 s, a
changed modification time or a file added or removed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ferromq.acl.errors import AclError
from ferromq.acl.plain import PlainAcl

logger = logging.getLogger(__name__)

WATCH_INTERVAL = 5.0


class AclFileWatcher:
    def __init__(self, acl: PlainAcl, interval: float = WATCH_INTERVAL) -> None:
        self._acl = acl
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

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
        try:
            if not self._acl.changed():
                return False
            self._acl.load()
        except AclError as e:
            logger.error("ACL files changed but cannot be used, the previous ACL stays: %s", e)
            return False
        except OSError as e:
            logger.error("ACL files changed but cannot be read, the previous ACL stays: %s", e)
            return False
        logger.info("ACL reloaded")
        return True
