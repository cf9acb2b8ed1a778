"""The broker's helper processes (the tiered store's uploader, the table topics' tiering process):
started with `python -m <module>`, spoken to in JSON lines, started again when they die, their logs
kept in the broker's log.

The broker's side: `supervise(what, session)` runs a session again and again (after
RESTART_DELAY_S), and a session opens `helper(module, settings)`: the process with its three pipes,
its first input line the settings (never on its command line, which other users of the host can
read). On the way out it is stopped: killed, or with `gentle_stop_s` told by the end of its input
and killed only if it has not ended in that time.

The helper's side: its main is `run_child(run)`. Each of its log records goes to its standard
error as one JSON line (level, logger name, the message with its traceback), and `relay()` on the
broker's side logs each again through the broker's logging, under the same logger name and level:
one record stays one record, traceback included, in broker.log. A line that is not such a record
(a crash's own output) is logged as a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TextIO

import orjson

RESTART_DELAY_S = 1.0
# A report line (a file's summary, every table's progress) names every queue it covers.
LINE_LIMIT = 64 * 1024 * 1024

logger = logging.getLogger(__name__)


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


async def supervise(what: str, session: Callable[[], Awaitable[None]]) -> None:
    """Runs `session` again and again until cancelled, RESTART_DELAY_S after each end."""
    while True:
        try:
            await session()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s failed", what)
        await asyncio.sleep(RESTART_DELAY_S)


@contextlib.asynccontextmanager
async def helper(
    module: str, settings: bytes, *, gentle_stop_s: float = 0.0
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m module`, its logs relayed, `settings` its first input line; stopped on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=LINE_LIMIT,
    )
    assert proc.stdin is not None and proc.stderr is not None
    logs = asyncio.get_running_loop().create_task(relay(proc.stderr, logging.getLogger(module)))
    try:
        proc.stdin.write(settings + b"\n")
        await proc.stdin.drain()
        yield proc
    finally:
        if proc.returncode is None:
            if gentle_stop_s > 0:
                proc.stdin.close()
                try:
                    await asyncio.wait_for(proc.wait(), gentle_stop_s)
                except TimeoutError:
                    proc.kill()
            else:
                proc.kill()
            await proc.wait()
        await asyncio.wait([logs], timeout=5)
        logs.cancel()
