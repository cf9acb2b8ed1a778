"""What the tests of the official C++ client share: its scenario script, and whether it can run here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCENARIOS = Path(__file__).with_name("cpp_scenarios.py")


def cpp_client_problem() -> str | None:
    """Import the client in a child, so that librocketmq.so is never loaded into the test process."""
    try:
        r = subprocess.run(
            [sys.executable, "-c", "import rocketmq.client"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return repr(e)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
    return None
