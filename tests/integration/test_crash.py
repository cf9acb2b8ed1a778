"""Durability: a SYNC_FLUSH writer killed with SIGKILL loses nothing it acknowledged, and recovery
leaves CommitLog, consume queues and index in agreement."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ferromq.message import decode_messages
from ferromq.store import MessageStore

from ..conftest import SMALL

WRITER = Path(__file__).with_name("crash_writer.py")


def run_and_kill(root: Path, round_no: int, threads: int, min_acks: int) -> dict[str, tuple[int, int, int]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(root), str(round_no), str(threads)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    acks: dict[str, tuple[int, int, int]] = {}
    enough = threading.Event()

    def reader() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            parts = line.split()
            if parts and parts[0] == "ACK":
                acks[parts[1]] = (int(parts[2]), int(parts[3]), int(parts[4]))
                if len(acks) >= min_acks:
                    enough.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert enough.wait(60), f"writer acknowledged only {len(acks)} appends: {child.stderr}"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        t.join(timeout=30)
        assert child.stderr is not None
        child.stderr.close()
        assert child.stdout is not None
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return acks


def tear_tail(root: Path) -> bool:
    """Writes garbage right after the last written byte of the newest CommitLog segment."""
    segments = sorted((root / "commitlog").iterdir())
    for seg in reversed(segments):
        data = seg.read_bytes()
        end = len(data.rstrip(b"\0"))
        if end == 0:
            continue
        if end + 64 > len(data):
            return False
        with open(seg, "r+b") as f:
            f.seek(end)
            f.write(b"\x00\x00\x00\x40\xda\xa3\x20\xa7" + os.urandom(30))
        return True
    return False


def check_store(
    root: Path, acked: dict[str, tuple[int, int, int]], threads: int, tag: str
) -> dict[str, int | bool]:
    with MessageStore(root, **SMALL) as store:
        report = store.recovery
        assert report["abnormal_exit"] is True
        by_key: dict[str, tuple[int, int, int]] = {}
        for q in range(threads):
            offset = 0
            while True:
                r = store.get("Crash", q, offset, 64, 1 << 22)
                if r.status != "FOUND":
                    assert r.status == "OFFSET_OVERFLOW_ONE", r
                    break
                for m, qoff in zip(decode_messages(r.body, check_crc=True), r.queue_offsets, strict=True):
                    # The consume queue and the CommitLog agree on every unit.
                    assert (m.topic, m.queue_id, m.queue_offset) == ("Crash", q, qoff)
                    (key,) = m.keys
                    assert key not in by_key, f"{key} stored twice"
                    by_key[key] = (m.physical_offset, m.queue_id, m.queue_offset)
                offset = r.next_begin_offset
        missing = [k for k in acked if k not in by_key]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        for key, where in acked.items():
            assert by_key[key] == where, key
        # The index agrees too (every 7th key, to keep the test quick).
        for key in list(by_key)[::7]:
            hits = store.query("Crash", key, 4)
            assert [m.physical_offset for m in hits] == [by_key[key][0]], key
        # New appends continue each queue without gaps.
        for q in range(threads):
            r = store.put("Crash", q, b"after", keys=f"after-{tag}-{q}")
            assert r.queue_offset == store.max_offset("Crash", q) - 1
        return report


def test_sigkill_loses_no_acknowledged_append(tmp_path: Path) -> None:
    root = tmp_path / "store"
    threads = 4
    all_acked: dict[str, tuple[int, int, int]] = {}
    truncations = 0
    for round_no in range(6):
        acks = run_and_kill(root, round_no, threads, min_acks=500 + 300 * round_no)
        all_acked.update(acks)
        if round_no % 2 == 1:
            assert tear_tail(root)
        report = check_store(root, all_acked, threads, tag=str(round_no))
        truncations += int(report["truncated_bytes"] > 0)
    assert truncations >= 2, "torn tails were cut"
    assert len(all_acked) >= 7500


def test_crash_before_any_checkpoint_recovers_from_the_start(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acks = run_and_kill(root, 0, 2, min_acks=200)
    # Lose every consume queue and the index: all of it is rebuilt from the CommitLog.
    for sub in ("consumequeue", "index"):
        for p in sorted((root / sub).rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
    started = time.monotonic()
    report = check_store(root, acks, 2, tag="only")
    assert report["redispatched"] >= len(acks)
    assert time.monotonic() - started < 120
