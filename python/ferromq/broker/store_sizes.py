"""The store directory against a broker configuration: a store keeps the file sizes it was created
with, and serving it with other sizes is refused (`check_store_sizes`) with a message naming the
profile and the broker.conf keys that match the files."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ferromq.broker.config import KEY_OF, PROFILES, BrokerConfig, StoreMismatchError

_DATA_FILE = re.compile(r"[0-9]{20}")  # CommitLog and consume-queue files: their first offset
_INDEX_FILE = re.compile(r"[0-9]{17}")  # index files: their creation time
_SIZE_KEYS = {
    "commitlog": ("mapped_file_size_commitlog",),
    "consumequeue": ("mapped_file_size_consume_queue",),
    "index": ("max_hash_slot_num", "max_index_num"),
}
_FILES_OF = {"commitlog": "CommitLog", "consumequeue": "consume-queue", "index": "index"}


def _file_sizes(values: Mapping[str, int]) -> dict[str, int]:
    """The size of a CommitLog, a consume-queue and an index file under these field values."""
    return {
        "commitlog": values["mapped_file_size_commitlog"],
        # The store rounds it up to whole 20-byte units.
        "consumequeue": -(-values["mapped_file_size_consume_queue"] // 20) * 20,
        "index": 40 + 4 * values["max_hash_slot_num"] + 20 * values["max_index_num"],
    }


def _first_file(directory: Path, depth: int, name: re.Pattern[str]) -> Path | None:
    """The first data file (by name) `depth` directories below `directory`."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return None
    for entry in entries:
        if depth == 0 and entry.is_file() and name.fullmatch(entry.name):
            return Path(entry.path)
        if depth > 0 and entry.is_dir():
            found = _first_file(Path(entry.path), depth - 1, name)
            if found is not None:
                return found
    return None


def _sizes_on_disk(cfg: BrokerConfig) -> dict[str, int]:
    root = Path(cfg.store_path_root_dir)
    files = {
        "commitlog": _first_file(Path(cfg.store_path_commit_log or root / "commitlog"), 0, _DATA_FILE),
        "consumequeue": _first_file(root / "consumequeue", 2, _DATA_FILE),
        "index": _first_file(root / "index", 0, _INDEX_FILE) if cfg.message_index_enable else None,
    }
    sizes = {}
    for kind, file in files.items():
        try:
            if file is not None:
                sizes[kind] = file.stat().st_size
        except OSError:
            pass
    return sizes


def check_store_sizes(cfg: BrokerConfig) -> None:
    """Raises `StoreMismatchError` if the store directory holds CommitLog, consume-queue or index
    files of other sizes than `cfg` makes, naming the profile and the keys that match them."""
    ours = {name: getattr(cfg, name) for names in _SIZE_KEYS.values() for name in names}
    expected = _file_sizes(ours)
    wrong = {kind: size for kind, size in _sizes_on_disk(cfg).items() if size != expected[kind]}
    if not wrong:
        return
    defaults = {f.name: f.default for f in dataclasses.fields(BrokerConfig) if f.name in ours}
    profiles = {name: {**defaults, **values} for name, values in PROFILES.items()}
    said: list[str] = []
    keys: list[str] = []
    for kind, size in wrong.items():
        fields = _SIZE_KEYS[kind]
        setting = ", ".join(f"{KEY_OF[f]}={ours[f]}" for f in fields)
        if kind == "index":
            setting += f" make {expected[kind]}"
        said.append(f"{_FILES_OF[kind]} files are {size} bytes ({setting})")
        match = [v for v in profiles.values() if _file_sizes(v)[kind] == size]
        if match:
            keys.extend(f"{KEY_OF[f]}={match[0][f]}" for f in fields)
        elif kind == "index":
            keys.append(f"maxHashSlotNum and maxIndexNum as written (40 + 4 x slots + 20 x entries = {size})")
        else:
            keys.append(f"{KEY_OF[fields[0]]}={size}")
    fits = [
        name
        for name, values in profiles.items()
        if name != cfg.profile and all(_file_sizes(values)[kind] == size for kind, size in wrong.items())
    ]
    fix = f"use --profile {fits[0]}, or set " if fits else "set "
    raise StoreMismatchError(
        f"store {cfg.store_path_root_dir} has files of other sizes than configured (profile {cfg.profile}): "
        f"{'; '.join(said)}; {fix}{', '.join(keys)} in broker.conf"
    )
