"""Table topics tiered by a process of their own, so the broker's CPU goes to messages.

With `tableTopicProcess=true` (the default) the broker runs `TieringProcess` instead of a
`TieringService` thread: it starts `python -m ferromq.tables.process`, restarts it if it dies,
and answers `progress()` and `lags()` (metrics, GET_BROKER_RUNTIME_INFO) from what it reports.
The process opens a read-only view of the broker's store (as Spark's local source does: it reads
the files the broker writes, a consistent prefix, refreshed each cycle) and runs the same
`TieringService` cycles on it; its commits are exactly once as in the broker (each table records
where each queue ended), so a process killed or started twice neither loses nor doubles a row.

In JSON lines: the first line in is the settings (`TieringSettings`, the store's root and file
sizes; kept off the command line, which other users of the host can read); each cycle the process
writes `{"progress": [...]}` (every topic's `TopicProgress`). It ends when its input does (the
broker went) and does not commit what it was about to once told to stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Iterable
from typing import Any, TextIO

import orjson

from ferromq import _store
from ferromq.helper_processes import helper, run_child, supervise
from ferromq.tables.config import TableTopicConfig
from ferromq.tables.tiering import TieringService, TieringSettings, TopicProgress

logger = logging.getLogger(__name__)


class TieringProcess:
    """The broker's side: the tiering process, supervised, and its last report."""

    def __init__(self, store: _store.Store, settings: TieringSettings, view: dict[str, Any]) -> None:
        self._store = store
        self.settings = settings
        self._view = view
        self._progress: list[TopicProgress] = []
        self._task: asyncio.Task[None] | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0

    @classmethod
    def of(
        cls, store: _store.Store, cfg: TableTopicConfig, store_root: str, view: dict[str, Any]
    ) -> TieringProcess:
        """`view`: how the process opens the store (`_store.Store`'s keyword arguments)."""
        return cls(store, TieringSettings.of(cfg, store_root), view)

    async def start(self) -> None:
        supervised = supervise("table topics: the tiering process", self._run)
        self._task = asyncio.get_running_loop().create_task(supervised, name="table-topics-process")
        s = self.settings
        chosen = ", ".join(s.names) if s.pattern is None else f"topics matching {s.pattern!r}"
        logger.info("table topics: %s, tables under %s, tiered by a process of their own", chosen, s.root)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        given = orjson.dumps({"settings": dataclasses.asdict(self.settings), "view": self._view})
        # Closing its input tells it to stop; it commits nothing more after that.
        async with helper("ferromq.tables.process", given, gentle_stop_s=10) as proc:
            self.process = proc
            self.starts += 1
            assert proc.stdout is not None
            try:
                while line := await proc.stdout.readline():
                    report = orjson.loads(line)
                    self._progress = [_progress_of(p) for p in report.get("progress", [])]
                logger.warning(
                    "table topics: the tiering process exited (%s); starting it again", await proc.wait()
                )
            finally:
                self.process = None

    def progress(self) -> list[TopicProgress]:
        return list(self._progress)

    def lags(self, progress: Iterable[TopicProgress]) -> dict[str, int]:
        """Per topic, the messages the log holds that its table does not yet."""
        return TieringService.lags_of(self._store, progress)


def _progress_of(d: dict[str, Any]) -> TopicProgress:
    d = dict(d)
    d["committed"] = {int(q): int(o) for q, o in d.get("committed", {}).items()}
    return TopicProgress(**d)


def _settings_of(d: dict[str, Any]) -> TieringSettings:
    return TieringSettings(**{**d, "names": tuple(d["names"])})


def run(stdin: TextIO, stdout: TextIO) -> None:
    first = stdin.readline()
    if not first:
        return
    given = orjson.loads(first)
    view = _store.Store(**given["view"], read_only=True)
    service = TieringService(view, _settings_of(given["settings"]))
    stopped = threading.Event()

    def watch_input() -> None:
        for _ in stdin:
            pass
        stopped.set()
        service.stop_soon()

    threading.Thread(target=watch_input, daemon=True).start()
    while not stopped.is_set():
        more = False
        try:
            view.refresh()
            more = service.run_once()
        except Exception:
            logger.exception("table topics: a cycle failed")
        progress = [dataclasses.asdict(p) for p in service.progress()]
        stdout.write(orjson.dumps({"progress": progress}, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
        stdout.flush()
        if not more:
            stopped.wait(service.settings.interval)


if __name__ == "__main__":
    run_child(run)
