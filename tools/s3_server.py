"""Run a real S3-compatible server, versitygw with its posix backend, on 127.0.0.1 for tests.

`tools/s3server/` is a Go module that pins versitygw (`tool` line of its go.mod, go.sum); `build()`
builds it once with the machine's Go into `tools/s3server/bin/versitygw` (gitignored; rebuilt only
when go.mod or go.sum changes). `start_s3(root)` starts it on a free port with its buckets as
directories under `root/data`, waits until it answers, and stops it (by its PID) on exit:

    with start_s3(tmp_path) as s3:
        uri = s3.bucket("tables")          # creates the bucket: "s3://tables"
        ...  # clients use s3.endpoint, s3.access_key, s3.secret_key, s3.region
        s3.stop(); ...; s3.start()         # the same data, the same port, the server away meanwhile

`python tools/s3_server.py` builds it (scripts/test.sh does, where Go is installed).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

MODULE = Path(__file__).resolve().parent / "s3server"
BINARY = MODULE / "bin" / "versitygw"
PACKAGE = "github.com/versity/versitygw/cmd/versitygw"
_STAMP = MODULE / "bin" / "source.sha256"


class S3Unavailable(RuntimeError):
    """The server cannot be built here (no Go, or the module proxy refused): tests skip with this."""


def _source_hash() -> str:
    h = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        h.update((MODULE / name).read_bytes())
    return h.hexdigest()


def build() -> Path:
    """The versitygw binary, built with the machine's Go unless the one there matches the pins."""
    digest = _source_hash()
    if BINARY.exists() and _STAMP.exists() and _STAMP.read_text().strip() == digest:
        return BINARY
    go = shutil.which("go")
    if go is None:
        raise S3Unavailable("Go is not installed: the S3 server (versitygw, tools/s3server) cannot be built")
    BINARY.parent.mkdir(exist_ok=True)
    done = subprocess.run(
        [go, "build", "-o", str(BINARY), PACKAGE],
        cwd=MODULE,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        raise S3Unavailable(f"go build {PACKAGE} failed: {done.stderr.strip()[-2000:]}")
    _STAMP.write_text(digest)
    return BINARY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """A running versitygw: its endpoint, root credentials and region."""

    access_key = "ferromqtest"
    secret_key = "ferromqtestsecret"
    region = "us-east-1"

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = port or _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = root / "versitygw.log"

    def start(self, timeout: float = 30.0) -> None:
        """Starts the server (again: same port, same data) and returns once it answers."""
        binary = build()
        (self.root / "meta").mkdir(exist_ok=True)
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(binary),
                    "--access", self.access_key,
                    "--secret", self.secret_key,
                    "--region", self.region,
                    "--port", f"127.0.0.1:{self.port}",
                    "--quiet",
                    "posix",
                    "--sidecar", str(self.root / "meta"),
                    str(self.data),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"versitygw exited ({self._proc.returncode}): {self._log.read_text()[-2000:]}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    if s.recv(12).startswith(b"HTTP/1."):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"versitygw did not answer on {self.endpoint} within {timeout} s")
            time.sleep(0.1)

    def stop(self) -> None:
        """Ends the server (SIGTERM to its PID, SIGKILL after 10 s)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def bucket(self, name: str) -> str:
        """Creates the bucket `name` (a directory of the posix backend) and returns `s3://name`."""
        (self.data / name).mkdir(exist_ok=True)
        return f"s3://{name}"

    def storage_options(self) -> dict[str, str]:
        """The AWS_* settings that reach this server (delta-rs's storage_options, or environment)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }


@contextlib.contextmanager
def start_s3(root: str | os.PathLike[str]) -> Iterator[S3Server]:
    """A versitygw serving the directory `root/data` on 127.0.0.1, stopped on exit."""
    server = S3Server(Path(root))
    server.start()
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    try:
        print(build())
    except S3Unavailable as e:
        print(f"S3 server not built: {e}", file=sys.stderr)
        sys.exit(1)
