"""The store's JSON files (`{store}/config/*.json`: topics.json, consumerOffset.json,
subscriptionGroup.json, delayOffset.json, ...) as RocketMQ reads and writes them: write `.tmp`,
keep the old file as `.bak`, rename into place; on load fall back to `.bak` when the file is
missing or unreadable. Java writes integer map keys unquoted, so reading is lenient."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import orjson

from ferromq.jsonutil import loads_lenient

logger = logging.getLogger(__name__)


def load_json_file(path: Path) -> dict[str, Any] | None:
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            raw = candidate.read_bytes()
        except FileNotFoundError:
            continue
        if not raw.strip():
            continue
        try:
            data = loads_lenient(raw)
        except ValueError as e:
            logger.error("%s is not valid JSON (%s); trying the backup", candidate, e)
            continue
        if isinstance(data, dict):
            return data
    return None


def dump_json(data: dict[str, Any]) -> bytes:
    """The bytes a config file holds: indented by two, integer keys written as strings."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def save_json_file(path: Path, data: dict[str, Any] | bytes) -> None:
    """Saves `data` (or bytes already made as `dump_json` makes them) as described above."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data if isinstance(data, bytes) else dump_json(data))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    if path.exists():
        # The old file becomes the backup by a rename, not a copy (a million lite topics' offsets
        # are tens of MB); until the next rename a reader finds no file and reads the backup.
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
