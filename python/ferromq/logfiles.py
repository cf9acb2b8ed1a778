"""Log files of a broker process, beside stderr, as Apache RocketMQ keeps them in
~/logs/rocketmqlogs: `broker.log` (everything ferromq logs) and `stats.log` (the once-a-minute
lines per topic and group of the `ferromq.stats` logger, which go nowhere else). Both roll over at
a size, keeping a number of old files (`broker.log.1` is the newest of those)."""

from __future__ import annotations

import logging
import os
from logging.handlers import RotatingFileHandler
from pathlib import Path

STATS_LOGGER = "ferromq.stats"
BROKER_LOG = "broker.log"
STATS_LOG = "stats.log"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STATS_FORMAT = "%(asctime)s %(message)s"


class _NotStats(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(STATS_LOGGER)


def open_log_files(log_dir: str | os.PathLike[str], max_bytes: int, backups: int) -> list[Path]:
    """Adds the rolling `broker.log` to the root logger and `stats.log` to the stats logger (which
    stops propagating, so stats lines stay off stderr). Raises OSError when the directory cannot
    be made or written. Returns the two paths."""
    directory = Path(log_dir)
    directory.mkdir(parents=True, exist_ok=True)
    broker = RotatingFileHandler(
        directory / BROKER_LOG, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
    )
    broker.setFormatter(logging.Formatter(LOG_FORMAT))
    broker.addFilter(_NotStats())
    logging.getLogger().addHandler(broker)
    stats = RotatingFileHandler(
        directory / STATS_LOG, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
    )
    stats.setFormatter(logging.Formatter(STATS_FORMAT))
    stats_logger = logging.getLogger(STATS_LOGGER)
    stats_logger.addHandler(stats)
    stats_logger.setLevel(logging.INFO)
    stats_logger.propagate = False
    return [directory / BROKER_LOG, directory / STATS_LOG]


def _rolling(path: Path, max_bytes: int, backups: int) -> RotatingFileHandler:
    return RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")


def close_log_files() -> None:
    """Removes and closes the handlers `open_log_files` added (a process that serves twice, tests)."""
    for name in ("", STATS_LOGGER):
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            if isinstance(h, RotatingFileHandler):
                logger.removeHandler(h)
                h.close()
    logging.getLogger(STATS_LOGGER).propagate = True
