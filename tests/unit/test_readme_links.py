"""The README links into the docs site (docs/*.md). `mkdocs build --strict` checks the site's own
links and anchors but never reads the README, so this test checks the README's: every relative
link names a file of the repository, and every `#anchor` a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor GitHub and MkDocs both give a heading like these (letters, digits, -, _)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def test_readme_links_resolve() -> None:
    readme = ROOT / "README.md"
    links = [m.group(1) for m in LINK.finditer(readme.read_text(encoding="utf-8"))]
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local), "the README links the docs pages"
    broken = []
    for link in local:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else readme
        if not target.is_file():
            broken.append(f"{link}: no file {path}")
        elif anchor and anchor not in anchors(target):
            broken.append(f"{link}: no heading #{anchor} in {path}")
    assert not broken, broken


def test_slug_matches_the_site() -> None:
    # The anchors MkDocs gave these headings (build/site): the same rule as GitHub's.
    assert slug("Automatic failover (controller mode)") == "automatic-failover-controller-mode"
    assert slug("ACL 2.0 (as RocketMQ 5.3.3)") == "acl-20-as-rocketmq-533"
