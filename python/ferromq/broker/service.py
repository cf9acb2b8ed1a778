"""A broker service that runs one background task: `start()` creates it, `stop()` cancels and
awaits it (idempotent), and a task that dies on an exception is logged."""

from __future__ import annotations

import asyncio
import logging

logger = logging.getLogger(__name__)


class TaskService:
    """Subclasses give `service_name` and `_run()`."""

    service_name = "service"

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.service_name)
            self._task.add_done_callback(self._log_death)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _log_death(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s died", self.service_name, exc_info=task.exception())
