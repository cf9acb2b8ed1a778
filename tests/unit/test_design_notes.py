"""The design notes cite code by file:line (docs/design/*.md, rendered from their templates by
scripts/design_notes.py): every citation still names one line, and the notes are current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_design_notes_cite_the_code_as_it_is() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "design_notes.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
