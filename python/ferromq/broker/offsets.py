"""Consumer offsets (`config/consumerOffset.json`): `topic@group` -> {queueId: offset}."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ferromq.broker.config_file import load_config_file, save_config_file

logger = logging.getLogger(__name__)


class ConsumerOffsetManager:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self.table: dict[str, dict[int, int]] = {}
        self._dirty = False
        data = load_config_file(path)
        for key, queues in ((data or {}).get("offsetTable") or {}).items():
            if isinstance(queues, dict):
                self.table[str(key)] = {int(q): int(o) for q, o in queues.items()}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            queues = self.table.setdefault(f"{topic}@{group}", {})
            old = queues.get(queue_id)
            if old is not None and offset < old:
                logger.debug(
                    "offset of %s@%s:%d moves back from %d to %d", topic, group, queue_id, old, offset
                )
            queues[queue_id] = offset
            self._dirty = True

    def put_all(self, key: str, queues: dict[int, int]) -> None:
        """A slave takes its master's offsets of one `topic@group` (SlaveSynchronize)."""
        with self._lock:
            self.table[key] = dict(queues)
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def offsets_of_group(self, group: str) -> dict[str, dict[int, int]]:
        suffix = f"@{group}"
        return {k[: -len(suffix)]: dict(v) for k, v in self.table.items() if k.endswith(suffix)}

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            for key in [k for k in self.table if k.split("@", 1)[0] == topic]:
                del self.table[key]
            self._dirty = True

    def persist(self, force: bool = False) -> None:
        with self._lock:
            if not (self._dirty or force):
                return
            data = {"offsetTable": {k: dict(sorted(v.items())) for k, v in sorted(self.table.items())}}
            self._dirty = False
        save_config_file(self._path, data)
