"""Logs of the broker's helper processes (the tiered store's uploader, the table topics' tiering),
kept in the broker's own log.

A helper's main is `run_child(run)`: each of its log records goes to its standard error as one
JSON line (level, logger name, the message with its traceback), and the broker reads that stream
with `relay()`, which logs each record again through its own logging, under the same logger name
and level: one record stays one record, traceback included, in broker.log. A line that is not
such a record (a crash's own output) is logged as a warning.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from typing import TextIO

import orjson


class _JsonLines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            line = orjson.dumps({"level": record.levelno, "name": record.name, "msg": text})
            sys.stderr.write(line.decode() + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def log_to_parent(level: int | str = logging.INFO) -> None:
    """A helper process's logging: every record to the broker, through standard error."""
    root = logging.getLogger()
    root.handlers[:] = [_JsonLines()]
    root.setLevel(level)


def run_child(run: Callable[[TextIO, TextIO], None]) -> None:
    """A helper process's main: its logs to the broker, then `run(stdin, stdout)`. A broker killed
    with SIGKILL leaves a pipe nobody reads: the helper ends quietly (its successor is started
    with the broker's)."""
    log_to_parent(logging.INFO)
    try:
        run(sys.stdin, sys.stdout)
    except BrokenPipeError:
        # Nothing is left to say, and nothing to flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


async def relay(stream: asyncio.StreamReader, fallback: logging.Logger) -> None:
    """Logs the records a helper process writes to `stream` until it ends."""
    while line := await stream.readline():
        try:
            record = orjson.loads(line)
            logging.getLogger(str(record["name"])).log(int(record["level"]), "%s", record["msg"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            fallback.warning("%s", line.decode(errors="replace").rstrip())
