"""What the benchmarks share: the environment recorded with their results, and writing them."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any


def environment() -> dict[str, Any]:
    """The machine and the code a result was measured on."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": commit.stdout.strip(),
        "loadavg": os.getloadavg(),
    }


def write_results(path: str | Path, doc: dict[str, Any]) -> None:
    """Writes `doc` with the environment added, as JSON, and says where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**doc, "env": environment()}, indent=1) + "\n")
    print(f"results written to {out}")
