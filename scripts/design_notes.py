"""Renders the design notes: each `docs/design/X.tmpl.md` into `docs/design/X.md`, its citations
`[[path@@start]]` and `[[path@@start@@end]]` resolved to `path:N` / `path:N-M` from the tree.

A start anchor is text that must stand on exactly one line of the file (`start##K`: its K-th
line); an end anchor is the first line at or after the start that contains it (`-end`: the line
before that one). A citation that no longer resolves is an error: the code it named moved or is
gone, and the note must say where it is now.

    python scripts/design_notes.py           # writes the notes
    python scripts/design_notes.py --check   # exits 1 when a note is not what its template renders
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design"
CITATION = re.compile(r"\[\[(.+?)\]\]")


class Unresolved(Exception):
    """A citation that names no line, or more than one."""


def _cite(citation: str, files: dict[str, list[str]]) -> str:
    path, start, *rest = citation.split("@@")
    if path not in files:
        try:
            files[path] = (ROOT / path).read_text(encoding="utf-8").split("\n")
        except OSError as e:
            raise Unresolved(f"{path}: {e}") from None
    lines = files[path]
    nth = None
    if m := re.search(r"##(\d+)$", start):
        start, nth = start[: m.start()], int(m.group(1))
    hits = [i for i, line in enumerate(lines) if start in line]
    if nth is not None:
        hits = hits[nth - 1 : nth]
    if len(hits) != 1:
        raise Unresolved(f"{path}: {start!r} stands on {len(hits)} lines, not one")
    first = hits[0] + 1
    if not rest:
        return f"`{path}:{first}`"
    end = rest[0]
    before = end.startswith("-")
    end = end.removeprefix("-")
    for i in range(hits[0] + 1 if before else hits[0], len(lines)):
        if end in lines[i]:
            last = i if before else i + 1
            return f"`{path}:{first}-{last}`" if last > first else f"`{path}:{first}`"
    raise Unresolved(f"{path}: end {end!r} not found after line {first}")


def render(template: Path) -> str:
    """The note `template` renders to; raises `Unresolved` naming every citation that fails."""
    files: dict[str, list[str]] = {}
    problems: list[str] = []

    def resolve(m: re.Match[str]) -> str:
        try:
            return _cite(m.group(1), files)
        except Unresolved as e:
            problems.append(f"{template.name}: {e}")
            return m.group(0)

    text = CITATION.sub(resolve, template.read_text(encoding="utf-8"))
    if problems:
        raise Unresolved("\n".join(problems))
    return text


def notes() -> list[tuple[Path, Path]]:
    """(template, note) of each design note."""
    return [(t, t.with_name(t.name.replace(".tmpl.md", ".md"))) for t in sorted(DESIGN.glob("*.tmpl.md"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for template, note in notes():
        try:
            text = render(template)
        except Unresolved as e:
            print(e, file=sys.stderr)
            return 1
        if args.check:
            if not note.exists() or note.read_text(encoding="utf-8") != text:
                stale.append(note.relative_to(ROOT))
        else:
            note.write_text(text, encoding="utf-8")
    if stale:
        print(
            f"out of date (run: python scripts/design_notes.py): {', '.join(map(str, stale))}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
