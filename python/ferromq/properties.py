"""Java properties text (broker.conf, the controller's file): the one parser both read with."""

from __future__ import annotations


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """Java-properties lines as (line number, key, value); comments and blanks skipped."""
    out = []
    pending: tuple[int, str] | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if pending is not None:
            start, acc = pending
            line = acc + line.lstrip()
            no = start
            pending = None
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending = (no, stripped[:-1])
            continue
        for i, ch in enumerate(stripped):
            if ch in "=:":
                key, value = stripped[:i].strip(), stripped[i + 1 :].strip()
                break
        else:
            key, value = stripped, ""
        out.append((no, key, value))
    return out
