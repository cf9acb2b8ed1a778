"""MkDocs hook: serves benches/README.md as benchmarks/notes.md and benches/results/* (plots, JSON,
text) under benchmarks/results/, so the benchmarks page links the files where the benchmarks write
them instead of copies that would go stale. Links to them are checked like any other page's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
BENCHES = ROOT / "benches"
SHOWN = {".json", ".png", ".txt"}


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "benchmarks/notes.md", abs_src_path=str(BENCHES / "README.md")))
    for path in sorted((BENCHES / "results").iterdir()):
        if path.is_file() and path.suffix in SHOWN:
            files.append(File.generated(config, f"benchmarks/results/{path.name}", abs_src_path=str(path)))
    return files
