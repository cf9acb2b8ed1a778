"""MkDocs hook: `\\|` inside a code span of a table row becomes `|`.

GitHub's tables split cells at every unescaped pipe, code spans included, so the pages write
`[-t Super\\|Normal]`; Python-Markdown's tables do not split inside code spans and would show the
backslash. Both renderings then show `[-t Super|Normal]`."""

from __future__ import annotations

import re
from typing import Any

CODE_SPAN = re.compile(r"`[^`\n]*`")


def _unescape(span: re.Match[str]) -> str:
    return span.group(0).replace("\\|", "|")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|") and "\\|" in line:
            lines[i] = CODE_SPAN.sub(_unescape, line)
    return "\n".join(lines)
