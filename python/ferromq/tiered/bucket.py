"""The bucket a broker tiers to, and its layout.

Under `<tieredStoreFilePath>/<brokerClusterName>/<brokerName>/`:

    commitlog/<20-digit start offset>   a sealed CommitLog file, byte for byte as on local disk
    queues/<20-digit start offset>      its queue units (ferromq.tiered.segments); written last:
                                        a file is in the bucket once this object is
    keys/<20-digit start offset>        its key index

Objects are written whole (S3 multipart for large ones) and never changed: writing one again
writes the same bytes, so an upload cut by kill -9 or a server that went away is simply made again.
Reached with pyarrow's file systems (S3FileSystem, LocalFileSystem for the posix provider), set up
from the same options as the table topics' (ferromq.tables.objectstore).
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from ferromq.tables.objectstore import filesystem

COMMITLOG = "commitlog"
QUEUES = "queues"
KEYS = "keys"
_COPY_CHUNK = 8 * 1024 * 1024


def file_name(offset: int) -> str:
    """A CommitLog file's name: its start offset in 20 digits."""
    return f"{offset:020d}"


class Bucket:
    """One broker's part of the bucket."""

    def __init__(
        self,
        uri: str,
        cluster: str,
        broker: str,
        options: Mapping[str, str] | None = None,
        request_timeout: float = 30,
    ) -> None:
        if "://" not in uri:
            Path(uri).mkdir(parents=True, exist_ok=True)
            uri = Path(uri).resolve().as_uri()
        self.fs, root = filesystem(uri, options, request_timeout)
        self._local = isinstance(self.fs, pafs.LocalFileSystem)
        self.root = posixpath.join(root, cluster, broker)
        self.uri = uri

    def path(self, kind: str, start: int) -> str:
        return posixpath.join(self.root, kind, file_name(start))

    def starts(self, kind: str) -> list[int]:
        """The start offsets of the `kind` objects there are, in order."""
        selector = pafs.FileSelector(posixpath.join(self.root, kind), allow_not_found=True)
        out = []
        for info in self.fs.get_file_info(selector):
            name = posixpath.basename(info.path)
            if info.type == pafs.FileType.File and len(name) == 20 and name.isdigit():
                out.append(int(name))
        return sorted(out)

    def put_file(self, kind: str, start: int, local: Path) -> int:
        """Copies a local file to the object; returns the bytes written."""
        written = 0
        with open(local, "rb") as src, self._writing(kind, start) as dst:
            while chunk := src.read(_COPY_CHUNK):
                dst.write(chunk)
                written += len(chunk)
        return written

    def put_bytes(self, kind: str, start: int, data: bytes) -> None:
        with self._writing(kind, start) as dst:
            dst.write(data)

    @contextlib.contextmanager
    def _writing(self, kind: str, start: int) -> Iterator[pa.NativeFile]:
        """An object being written: on S3 it appears whole once complete; in a directory it is
        written aside and renamed, so that a crash leaves no object cut short."""
        path = self.path(kind, start)
        if not self._local:
            with self.fs.open_output_stream(path) as out:
                yield out
            return
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        part = path + ".part"
        with self.fs.open_output_stream(part) as out:
            yield out
        self.fs.move(part, path)

    def size(self, kind: str, start: int) -> int | None:
        info = self.fs.get_file_info(self.path(kind, start))
        return info.size if info.type == pafs.FileType.File else None

    def read(self, kind: str, start: int, offset: int = 0, length: int | None = None) -> bytes:
        """`length` bytes (all to the end when None) of an object from `offset` (a ranged GET)."""
        with self.fs.open_input_file(self.path(kind, start)) as f:
            if length is None:
                length = f.size() - offset
            return bytes(f.read_at(length, offset))

    def delete(self, kind: str, start: int) -> None:
        try:
            self.fs.delete_file(self.path(kind, start))
        except FileNotFoundError:
            pass
