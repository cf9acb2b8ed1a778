"""grpcio's socket folder (under the temporary directory): removed when the broker stops, and the
folders of brokers killed with `kill -9` removed by the next broker's start."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from ferromq.proxy.server import FOLDER_PREFIX, remove_stale_folders
from ferromq.testing import BrokerProcess


def folders_of(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}{pid}-*"))


def test_a_killed_brokers_folder_is_removed_by_the_next_start(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "first", {}) as first:
        [killed] = folders_of(first.pid)
        assert (killed / "grpc.sock").exists()
        first.stop(kill=True)
    assert killed.exists(), "kill -9 leaves the folder behind"
    with BrokerProcess(tmp_path / "second", {}) as second:
        assert not killed.exists()
        [live] = folders_of(second.pid)
    assert second.returncode == 0, second.log_tail()
    assert not live.exists(), "a broker that stops removes its folder"


def test_only_the_folders_of_gone_processes_holding_a_socket_are_removed(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid, live_pid = int(gone.stdout), int(subprocess.check_output(["sh", "-c", "echo $PPID"]).strip())
    stale = tmp_path / f"{FOLDER_PREFIX}{dead_pid}-abc"
    live = tmp_path / f"{FOLDER_PREFIX}{live_pid}-abc"
    other = tmp_path / f"{FOLDER_PREFIX}{dead_pid}-xyz"
    unnamed = tmp_path / f"{FOLDER_PREFIX}abc"
    for folder in (stale, live, other, unnamed):
        folder.mkdir()
        (folder / "grpc.sock").touch()
    (other / "notes.txt").write_text("not grpcio's")
    assert remove_stale_folders(tmp_path) == [stale]
    assert [p.exists() for p in (stale, live, other, unnamed)] == [False, True, True, True]
