"""The start/stop lifecycle shared by producers, consumers and Admin: `async with` starts and
stops them."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncLifecycle:
    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
