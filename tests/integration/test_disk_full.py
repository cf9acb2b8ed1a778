"""Disk full, honestly (issue 12): on a small tmpfs a broker refuses writes with SERVICE_NOT_AVAILABLE
(14) before the disk is full, stores nothing it refused, refuses nothing it stored, never hands out
a queue offset twice, and takes writes again on its own once space returns. Once with the
diskSpaceWarningLevelRatio check (90 %), once with only the blocks running out (ENOSPC).

The tmpfs lives in a private mount namespace (`unshare -Urm`), so the test needs no privileges
beyond user namespaces and leaves no mount behind; where those are not allowed it is skipped
with the reason."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ferromq.protocol.codes import ResponseCode as R

REPO = Path(__file__).resolve().parents[2]
TMPFS_SIZE = "32m"


def _namespaces_work(tmp: Path) -> str | None:
    """None when a private tmpfs can be mounted here, else why not."""
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    probe = tmp / "probe"
    probe.mkdir()
    r = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return None if r.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {r.stderr.strip()}"


def run_scenario(tmp_path: Path, mode: str) -> dict[str, Any]:
    reason = _namespaces_work(tmp_path)
    if reason is not None:
        pytest.skip(reason)
    mount = tmp_path / "disk"
    mount.mkdir()
    out = tmp_path / "result.json"
    script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && shift 2 && exec "$@"'
    cmd = ["unshare", "-Urm", "sh", "-c", script, "sh", TMPFS_SIZE, str(mount)]
    cmd += [sys.executable, "-m", "tests.integration.disk_full_scenario", str(mount), mode, str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=REPO, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"scenario failed ({r.returncode})\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    result["log"] = r.stderr
    return result


def check(result: dict[str, Any]) -> list[dict[str, Any]]:
    sends = result["sends"]
    refused = [s for s in sends if s["code"] != R.SUCCESS]
    acked = [s for s in sends if s["code"] == R.SUCCESS]
    filling = [s for s in sends if s["phase"] == "filling"]
    assert refused, "the disk never filled up"
    assert filling[-1]["code"] != R.SUCCESS, "filling stopped without a refusal"
    # Every refusal is SERVICE_NOT_AVAILABLE with a remark a person understands.
    for s in refused:
        assert s["code"] == R.SERVICE_NOT_AVAILABLE, s
        assert "disk is full" in s["remark"] and "nothing was stored" in s["remark"], s["remark"]
        assert "Traceback" not in s["remark"] and "Error" not in s["remark"], s["remark"]
    # Writes came back on their own after the filler went.
    freed = [s for s in sends if s["phase"] == "freed"]
    assert sum(s["code"] == R.SUCCESS for s in freed) >= 20, freed[-5:]

    # Nothing stored that was refused, nothing refused that was stored, no queue offset twice.
    acked_ids = sorted(n for s in acked for n in s["ids"])
    pulled = {int(q): units for q, units in result["pulled"].items()}
    pulled_ids = sorted(n for units in pulled.values() for _, n in units)
    assert pulled_ids == acked_ids
    for q, units in pulled.items():
        assert [o for o, _ in units] == list(range(len(units))), f"queue {q} offsets are not 0..n-1"
    at = {(q, o): n for q, units in pulled.items() for o, n in units}
    for s in acked:
        for i, n in enumerate(s["ids"]):
            assert at[(s["queue"], s["offset"] + i)] == n, s
    # The index has every acknowledged message (keys of messages sent while the disk was full).
    for n, found in result["keys_found"].items():
        assert int(n) in found, (n, found)
    disk_full, _used, behind = result["space_after"]
    assert not disk_full and behind is None
    return refused


@pytest.mark.timeout(300)
def test_full_disk_refuses_writes_above_the_warning_level(tmp_path: Path) -> None:
    result = run_scenario(tmp_path, "ratio")
    refused = check(result)
    first = refused[0]
    # Refused by the 90 % rule, before the disk ran out of blocks.
    assert "diskSpaceWarningLevelRatio 90%" in first["remark"], first["remark"]
    assert first["used"] < 0.99, first
    assert "refusing writes until space returns" in result["log"]


@pytest.mark.timeout(300)
def test_no_space_left_refuses_writes_before_they_are_stored(tmp_path: Path) -> None:
    result = run_scenario(tmp_path, "enospc")
    refused = check(result)
    assert any("No space left on device" in s["remark"] for s in refused), refused[0]["remark"]
