"""What the tests of the official C++ client share: its scenario script, and whether it can run here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

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


def scenario_argv(scenario: str, namesrv: str, deadline: float | None = None, **opts: Any) -> list[str]:
    """The command line of one cpp_scenarios.py child: `opts` become `--key-name value` (True: the
    bare flag; a list: the flag once per value; False or None: left out)."""
    argv = [sys.executable, str(SCENARIOS), scenario, namesrv]
    if deadline is not None:
        argv += ["--deadline", str(deadline)]
    for key, value in opts.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list | tuple):
            for v in value:
                argv += [flag, str(v)]
        else:
            argv += [flag, str(value)]
    return argv
