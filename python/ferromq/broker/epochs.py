"""The epoch file of a store in controller mode (RocketMQ 5.x's EpochFileCache): for each master
epoch this CommitLog holds data of, the offset where that epoch's data starts. A replica that
follows a new master compares its epochs with the master's and cuts its CommitLog after the last
point both agree on (`consistent_point`), so a former master drops what it wrote alone.

On disk: `epochFileCheckpoint` in the store root, one "epoch startOffset" line per epoch, replaced
atomically (written beside, fsynced, renamed)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int

    def to_json(self) -> dict[str, int]:
        return {"epoch": self.epoch, "startOffset": self.start_offset}

    @staticmethod
    def from_json(d: dict[str, object]) -> EpochEntry:
        return EpochEntry(int(str(d["epoch"])), int(str(d["startOffset"])))


class EpochFile:
    def __init__(self, store_root: str | os.PathLike[str]) -> None:
        self.path = Path(store_root) / FILE_NAME
        self.entries: list[EpochEntry] = []
        if self.path.exists():
            for line in self.path.read_text(encoding="ascii").splitlines():
                if line.strip():
                    epoch, start = line.split()
                    self.entries.append(EpochEntry(int(epoch), int(start)))
            self.entries.sort()

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def replace(self, entries: list[EpochEntry]) -> None:
        self.entries = sorted(entries)
        tmp = self.path.with_name(FILE_NAME + ".tmp")
        with open(tmp, "w", encoding="ascii") as f:
            f.writelines(f"{e.epoch} {e.start_offset}\n" for e in self.entries)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def begin(self, epoch: int, start_offset: int) -> None:
        """This replica became master of `epoch` with its CommitLog ending at `start_offset`:
        epochs it has no data of are dropped (their data was never replicated here). A master
        that restarts within its own epoch keeps where that epoch began."""
        if self.entries and self.entries[-1].epoch == epoch:
            return
        kept = [e for e in self.entries if e.start_offset < start_offset and e.epoch < epoch]
        self.replace([*kept, EpochEntry(epoch, start_offset)])


def consistent_point(
    local: list[EpochEntry], local_end: int, remote: list[EpochEntry], remote_end: int
) -> int | None:
    """Where this CommitLog stops agreeing with the master's: the end of the newest epoch both
    began at the same offset (the earlier of the two ends). None: no epoch in common."""
    local_ends = _ends(local, local_end)
    remote_ends = _ends(remote, remote_end)
    remote_starts = {e.epoch: e.start_offset for e in remote}
    for entry in sorted(local, reverse=True):
        if remote_starts.get(entry.epoch) == entry.start_offset:
            return min(local_ends[entry.epoch], remote_ends[entry.epoch])
    return None


def _ends(entries: list[EpochEntry], end: int) -> dict[int, int]:
    ordered = sorted(entries)
    return {
        e.epoch: (ordered[i + 1].start_offset if i + 1 < len(ordered) else end) for i, e in enumerate(ordered)
    }
