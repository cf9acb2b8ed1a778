"""The broker's side of tiered storage: the uploader process, the retention floor and read-through.

`TieredService` starts the uploader (ferromq.tiered.uploader) and restarts it if it dies; every
tieredStoreUploadIntervalMs it tells it which local CommitLog files are sealed and flushed (whole
files below the store's flushed offset), and learns from it which are in the bucket. Local
retention may delete a file only once the bucket has it: the store's retention floor
(`Store.retention_floor`) is set to the end of the last file of the unbroken run the bucket holds
from the local CommitLog's start, and before the uploader has said anything, to the start itself.
A message acknowledged is on local disk or in the bucket, never neither; a disk that fills up
meanwhile refuses writes, as it does without tiering.

Reads (RocketMQ's tiered store with tieredStorageLevel=NOT_IN_DISK, `TieredReader`): what the
local store no longer has is read from the bucket: a pull below the queue's local min offset, a
pop's read there (the pop rules call `pop_read`), a record by CommitLog offset
(VIEW_MESSAGE_BY_ID), a query by key, and a queue's min offset and earliest store time count the
bucket's messages. The event loop never waits on the bucket: reads run on a pool of their own.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import orjson

from ferromq.helper_processes import helper, supervise
from ferromq.tiered.bucket import Bucket
from ferromq.tiered.config import TieredStoreConfig
from ferromq.tiered.reader import READ_TIMEOUT_S, NotCached, TieredReader
from ferromq.tiered.segments import SegmentSummary
from ferromq.tiered.uploader import Settings

if TYPE_CHECKING:
    from ferromq.store import MessageStore

logger = logging.getLogger(__name__)

_READ_THREADS = 4


class TieredService(TieredReader):
    """One broker's tiered storage (see the module's docstring); its reads are `TieredReader`'s."""

    def __init__(self, store: MessageStore, cfg: TieredStoreConfig, cluster: str, broker: str) -> None:
        self.store = store
        self.cfg = cfg
        self.settings = Settings(
            uri=cfg.tiered_uri,
            cluster=cluster,
            broker=broker,
            commitlog_dir=store.config.commitlog_dir or os.path.join(store.config.root, "commitlog"),
            options=cfg.tiered_s3_options,
            reserved_hours=cfg.tiered_store_file_reserved_time,
            delete_enable=cfg.tiered_store_delete_file_enable,
            delete_interval_ms=cfg.tiered_store_delete_file_interval,
        )
        # Reads block a pop's thread: they give up sooner than the uploader's writes.
        bucket = Bucket(
            self.settings.uri,
            self.settings.cluster,
            self.settings.broker,
            self.settings.options,
            request_timeout=READ_TIMEOUT_S,
        )
        super().__init__(bucket, cfg.tiered_store_read_cache_bytes)
        self._pool = ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="tiered-read")
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._told: tuple[int, ...] = ()
        self._expired: set[int] = set()  # files expired from the bucket, perhaps still local
        self.uploaded_files = 0
        self.expired_files = 0
        self.failures = 0
        self.last_error = ""
        self.uploader_starts = 0

    # -- the uploader --------------------------------------------------------------------------

    async def start(self) -> None:
        # Nothing local goes before the uploader has said what the bucket holds.
        self.store.raw.retention_floor = self.store.min_physical_offset
        supervised = supervise("tiered storage: the uploader", self._run_uploader)
        self._task = asyncio.get_running_loop().create_task(supervised, name="tiered-uploader")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run_uploader(self) -> None:
        async with helper("ferromq.tiered.uploader", self.settings.to_json()) as proc:
            self._proc = proc
            self.uploader_starts += 1
            self._told = ()
            assert proc.stdin is not None and proc.stdout is not None
            reader = asyncio.get_running_loop().create_task(self._read_reports(proc.stdout))
            try:
                while not reader.done():
                    self._tell_sealed(proc.stdin)
                    await proc.stdin.drain()
                    await asyncio.wait([reader], timeout=self.cfg.tiered_store_upload_interval_ms / 1000)
                await reader
                logger.warning(
                    "tiered storage: the uploader exited (%s); starting it again", await proc.wait()
                )
            finally:
                reader.cancel()
                self._proc = None

    def _tell_sealed(self, stdin: asyncio.StreamWriter) -> None:
        size = self.store.config.mapped_file_size_commitlog
        flushed = self.store.flushed_physical_offset
        first = self.store.min_physical_offset // size * size
        sealed = tuple(range(first, flushed - size + 1, size))
        if sealed != self._told:
            self._told = sealed
            stdin.write(orjson.dumps({"sealed": sealed}) + b"\n")

    async def _read_reports(self, stdout: asyncio.StreamReader) -> None:
        while line := await stdout.readline():
            report: dict[str, Any] = orjson.loads(line)
            if "tiered" in report:
                self.add(SegmentSummary.from_json(report["tiered"]), int(report["headerLength"]))
                self.uploaded_files += 1
            elif "expired" in report:
                self.remove(int(report["expired"]))
                self._expired.add(int(report["expired"]))
                self.expired_files += 1
            elif "error" in report:
                self.failures += 1
                self.last_error = str(report["error"])
                logger.warning("tiered storage: %s (tried again)", self.last_error)
            self._raise_floor()

    @property
    def uploader_pid(self) -> int | None:
        """The uploader process's PID while it runs."""
        return None if self._proc is None else self._proc.pid

    def pending_bytes(self) -> int:
        """Sealed and flushed CommitLog bytes the bucket does not have yet."""
        size = self.store.config.mapped_file_size_commitlog
        sealed_end = self.store.flushed_physical_offset // size * size
        floor = self.store.raw.retention_floor
        return max(0, sealed_end - (floor if floor is not None else sealed_end))

    def _raise_floor(self) -> None:
        """Local retention may delete the files of the unbroken run the bucket holds (or held, and
        expired: older than tieredStoreFileReservedTime) from the local CommitLog's start."""
        size = self.store.config.mapped_file_size_commitlog
        floor = self.store.min_physical_offset // size * size
        start = floor
        with self._lock:
            while floor in self._segments or floor in self._expired:
                floor += size
        self._expired = {s for s in self._expired if s >= start}  # below: gone locally too
        self.store.raw.retention_floor = floor

    # -- reads ---------------------------------------------------------------------------------

    def record_if_cached(self, topic: str, queue_id: int, offset: int) -> bytes | None:
        """The record at a queue offset, for a caller that must not wait (the revive, on the event
        loop): from the read cache, else NotCached (an OSError) and a fetch into the cache starts
        on the read threads, for the next try. None when the bucket does not hold it."""
        try:
            read = self.read_queue(topic, queue_id, offset, 1, None, offset + 1, cached_only=True)
        except NotCached:
            self._pool.submit(self._fetch_quietly, topic, queue_id, offset)
            raise
        return None if read is None else read.body

    def _fetch_quietly(self, topic: str, queue_id: int, offset: int) -> None:
        try:
            self.read_queue(topic, queue_id, offset, 1, None, offset + 1)
        except OSError as e:
            logger.debug("tiered storage: fetching %s/%d@%d failed: %s", topic, queue_id, offset, e)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Runs a read on the tiered store's threads."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
