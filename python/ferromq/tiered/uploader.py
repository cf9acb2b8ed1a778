"""The tiered store's uploader: a process of its own, so the broker's CPU goes to messages.

`ferromq.tiered.service` starts it (`python -m ferromq.tiered.uploader`) and talks to it in JSON
lines. The first line in is the settings (`Settings`: kept off the command line, which other users
of the host can read); each line after names the local CommitLog files that are sealed and flushed
(`{"sealed": [start, ...]}`). Lines out:

- `{"tiered": summary, "headerLength": n}`: a file is in the bucket (every file found there at the
  start, then each one uploaded), with its queues object's summary (ferromq.tiered.segments);
- `{"expired": start}`: a file older than tieredStoreFileReservedTime was deleted from the bucket;
- `{"error": text}`: an upload or a deletion failed; it is tried again (after 1 s, doubling up to
  30 s), never skipped.

A file is uploaded in order of its offset: the CommitLog object, then its keys, then its queues
object, which marks it done. One cut off (kill -9, a server gone) is made again from its start.
The process ends when its input does (the broker went).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from ferromq.helper_processes import run_child
from ferromq.tiered.bucket import COMMITLOG, KEYS, QUEUES, Bucket, file_name
from ferromq.tiered.segments import index_segment, list_files

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class Settings:
    uri: str
    cluster: str
    broker: str
    commitlog_dir: str
    options: dict[str, str] = field(default_factory=dict)
    reserved_hours: int = 72
    delete_enable: bool = True
    delete_interval_ms: int = 3_600_000

    def to_json(self) -> bytes:
        return orjson.dumps(self.__dict__)


class Uploader:
    def __init__(self, settings: Settings, out: TextIO) -> None:
        self.settings = settings
        self.bucket = Bucket(settings.uri, settings.cluster, settings.broker, settings.options)
        self.out = out
        self.tiered: dict[int, int] = {}  # start -> the newest store time in it
        self.expired: set[int] = set()  # deleted from the bucket by expiry: never uploaded again
        self.sealed: set[int] = set()  # the local files the broker last said are sealed
        self._next_expiry = 0.0

    def emit(self, line: dict[str, Any]) -> None:
        self.out.write(orjson.dumps(line).decode() + "\n")
        self.out.flush()

    def load(self) -> None:
        """Reports the files the bucket has (a queues object each; a file cut off before it is
        uploaded again)."""
        for summary, n in list_files(self.bucket):
            self.tiered[summary.start] = summary.max_store_timestamp
            self.emit({"tiered": summary.to_json(), "headerLength": n})

    def upload(self, start: int) -> None:
        local = Path(self.settings.commitlog_dir) / file_name(start)
        indexed = index_segment(local, start)
        size = self.bucket.put_file(COMMITLOG, start, local)
        if self.bucket.size(COMMITLOG, start) != size:
            raise OSError(f"the bucket holds a different size for CommitLog file {file_name(start)}")
        self.bucket.put_bytes(KEYS, start, indexed.keys)
        self.bucket.put_bytes(QUEUES, start, indexed.queues)
        self.tiered[start] = indexed.summary.max_store_timestamp
        self.emit({"tiered": indexed.summary.to_json(), "headerLength": indexed.header_length})

    def expire(self, now_ms: int) -> None:
        """Deletes the files whose newest message is older than tieredStoreFileReservedTime, oldest
        first (their queues object first: a file half deleted is no longer in the bucket)."""
        limit = now_ms - self.settings.reserved_hours * 3_600_000
        for start in sorted(self.tiered):
            if self.tiered[start] >= limit:
                break
            self.bucket.delete(QUEUES, start)
            del self.tiered[start]
            self.expired.add(start)
            self.emit({"expired": start})
            self.bucket.delete(KEYS, start)
            self.bucket.delete(COMMITLOG, start)

    def work(self) -> bool:
        """Uploads the oldest sealed file the bucket lacks and expires what is due; False when
        there was nothing to do."""
        if self.settings.delete_enable and time.monotonic() >= self._next_expiry:
            self.expire(int(time.time() * 1000))
            self._next_expiry = time.monotonic() + self.settings.delete_interval_ms / 1000
        pending = sorted(s for s in self.sealed if s not in self.tiered and s not in self.expired)
        if not pending:
            return False
        self.upload(pending[0])
        return True


def _read_lines(stream: TextIO, lines: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        if line.strip():
            lines.put(orjson.loads(line))
    lines.put(None)


def run(stdin: TextIO, stdout: TextIO) -> None:
    first = stdin.readline()
    if not first:
        return
    settings = Settings(**orjson.loads(first))
    uploader = Uploader(settings, stdout)
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(stdin, lines), daemon=True).start()
    backoff = 0.0
    loaded = False
    while True:
        try:
            line = lines.get(timeout=backoff or (1.0 if loaded else 0.01))
        except queue.Empty:
            line = {}
        if line is None:
            return  # the broker is gone
        if "sealed" in line:  # the whole list, each time it changes
            uploader.sealed = {int(s) for s in line["sealed"]}
        try:
            if not loaded:
                uploader.load()
                loaded = True
            while uploader.work() and lines.empty():
                pass
            backoff = 0.0
        except Exception as e:  # a server away, refusing or slow: the same work again later
            backoff = min(MAX_BACKOFF_S, max(1.0, backoff * 2))
            logger.debug("tiered upload failed", exc_info=True)  # the broker logs the report
            uploader.emit({"error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    run_child(run)
