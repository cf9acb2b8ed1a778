"""Consumer offsets (`config/consumerOffset.json`): `topic@group` -> {queueId: offset}.

The table itself lives in Rust (`_store.ConsumerOffsets`), shared with the data plane: its pulls
commit into it and its pops read and move offsets there, so every request sees the same offsets
wherever it is served. This class loads and persists it."""

from __future__ import annotations

import logging
from pathlib import Path

from ferromq import _store
from ferromq.broker.json_files import load_json_file, save_json_file

logger = logging.getLogger(__name__)


class ConsumerOffsetManager:
    def __init__(self, path: Path) -> None:
        self._path = path
        self.shared = _store.ConsumerOffsets()
        """The table, as the data planes and the pop rules are given it."""
        data = load_json_file(path)
        for key, queues in ((data or {}).get("offsetTable") or {}).items():
            if isinstance(queues, dict):
                self.shared.put_all(str(key), {int(q): int(o) for q, o in queues.items()})
        self.shared.take_dirty()

    @property
    def table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table, keys and queue ids in ascending order (Java's tables of small
        integer keys iterate that way, and files and answers stay stable)."""
        return {k: dict(sorted(v.items())) for k, v in sorted(self.shared.snapshot().items())}

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.shared.commit(group, topic, queue_id, offset)

    def put_all(self, key: str, queues: dict[int, int]) -> None:
        """A slave takes its master's offsets of one `topic@group` (SlaveSynchronize)."""
        self.shared.put_all(key, dict(queues))

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1."""
        return self.shared.query(group, topic, queue_id)

    def offsets_of_group(self, group: str) -> dict[str, dict[int, int]]:
        suffix = f"@{group}"
        return {k[: -len(suffix)]: v for k, v in self.table.items() if k.endswith(suffix)}

    def groups_of_topic(self, topic: str) -> set[str]:
        """The groups with an offset on `topic` (ConsumerOffsetManager.whichGroupByTopic)."""
        prefix = f"{topic}@"
        return {key[len(prefix) :] for key in self.shared.snapshot() if key.startswith(prefix)}

    def remove_topic(self, topic: str) -> None:
        self.shared.remove_topic(topic)

    def remove_topics(self, topics: list[str]) -> None:
        """Every offset of the topics named, in one pass over the table."""
        self.shared.remove_topics(set(topics))

    def remove_group(self, group: str) -> None:
        """Every offset of `group` (ConsumerOffsetManager.removeOffset)."""
        self.shared.remove_group(group)

    def persist(self, force: bool = False) -> None:
        if not (self.shared.take_dirty() or force):
            return
        # Made by Rust, off the GIL: the bytes `dump_json({"offsetTable": self.table})` would make
        # (tests/unit/test_consumer_offsets_file.py), without copying a million lite topics' offsets
        # into Python first.
        save_json_file(self._path, self.shared.to_json())
