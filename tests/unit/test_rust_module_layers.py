"""The module graph of each Rust crate in crates/: no cycle, and crates that depend one way.

Every `.rs` file under a crate's `src/` is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs` is
`a::b`, `lib.rs` and `main.rs` the crate root). Its edges are the `crate::...` paths it names, in
`use` lines (groups such as `use crate::{a, b::{c, d}}` expanded) and inline (`crate::codes::X`),
each resolved to the longest module it starts with; comments and string literals are left out, so
a doc link (`[`crate::pop`]`) is no edge. Relative paths (`super::`, `self::`, a child's name in
its parent) stay inside one module and its submodules, which Rust treats as one unit, and are not
counted. The same check as tests/unit/test_import_layers.py does for python/ferromq.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.unit.test_import_layers import strongly_connected

CRATES = Path(__file__).resolve().parents[2] / "crates"

# (crate, crate it must not depend on): the wire under the rules, the rules under their users.
FORBIDDEN_CRATE_DEPENDENCIES = [
    ("ferromq-store", "ferromq-remoting"),
    ("ferromq-store", "ferromq-broker"),
    ("ferromq-remoting", "ferromq-broker"),
    ("ferromq-remoting", "ferromq-grpc"),
    ("ferromq-broker", "ferromq-grpc"),
    ("ferromq-broker", "ferromq-python"),
    ("ferromq-grpc", "ferromq-python"),
]

# A comment, a string literal (plain, byte or raw) or a char literal: blanked before paths are read.
_NOT_CODE = re.compile(
    r"""//[^\n]*|/\*.*?\*/|b?r(?P<hashes>\#*)".*?"(?P=hashes)|b?"(?:\\.|[^"\\])*"|b?'(?:\\.|[^'\\\n])'""",
    re.DOTALL,
)
_CRATE_PATH = re.compile(r"\bcrate::")
_SEGMENT = re.compile(r"\s*(\w+)\s*")


@dataclass(frozen=True)
class Edge:
    user: str
    used: str


def code_only(text: str) -> str:
    """`text` with comments and literals blanked (newlines kept, so positions keep their lines)."""
    return _NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _paths_at(text: str, pos: int) -> tuple[list[list[str]], int]:
    """The paths written at `pos` (after a `crate::` or a `::{`): one, or a `{...}` group's."""
    if text.startswith("{", pos):
        paths = []
        pos += 1
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text) or text[pos] == "}":
                return paths, pos + 1
            inner, pos = _paths_at(text, pos)
            paths.extend(inner)
            # `name as alias` names the same path.
            alias = re.compile(r"\s*as\s+\w+").match(text, pos)
            if alias:
                pos = alias.end()
    segments: list[str] = []
    while True:
        match = _SEGMENT.match(text, pos)
        if not match:
            return [segments] if segments else [], pos
        segments.append(match.group(1))
        pos = match.end()
        if not text.startswith("::", pos):
            return [segments], pos
        pos += 2
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if text.startswith("{", pos):
            tails, pos = _paths_at(text, pos)
            return [segments + tail for tail in tails] or [segments], pos


def crate_paths(source: str) -> list[list[str]]:
    """Every `crate::` path in `source`'s code, as its segments after `crate`."""
    code = code_only(source)
    paths: list[list[str]] = []
    for match in _CRATE_PATH.finditer(code):
        found, _ = _paths_at(code, match.end())
        paths.extend(found)
    return paths


def modules_of(src: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(src.rglob("*.rs")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
            parts.pop()
        modules["::".join(parts) or "crate"] = path
    return modules


def _resolve(segments: list[str], modules: dict[str, Path]) -> str:
    for end in range(len(segments), 0, -1):
        name = "::".join(segments[:end])
        if name in modules:
            return name
    return "crate"


def module_edges(src: Path) -> list[Edge]:
    modules = modules_of(src)
    edges: set[Edge] = set()
    for name, path in modules.items():
        for segments in crate_paths(path.read_text(encoding="utf-8")):
            used = _resolve(segments, modules)
            if used != name:
                edges.add(Edge(name, used))
    return sorted(edges, key=lambda e: (e.user, e.used))


def crate_sources() -> dict[str, Path]:
    """Package name -> its src/ folder, for every crate under crates/."""
    found: dict[str, Path] = {}
    for manifest in sorted(CRATES.glob("*/Cargo.toml")):
        package = tomllib.loads(manifest.read_text(encoding="utf-8"))["package"]["name"]
        found[package] = manifest.parent / "src"
    return found


def graph_of(src: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules_of(src)}
    for edge in module_edges(src):
        graph[edge.user].add(edge.used)
    return graph


def test_paths_are_read_from_code_with_groups_and_not_from_comments() -> None:
    source = """
        //! See [`crate::pop`] and `crate::doc::Thing`.
        use crate::codes::{self, A, B as C};
        use crate::{conn::Conn, frame::{Frame, Header}};
        /* crate::hidden::X */
        fn f() { let s = "crate::text::Y"; crate::inline::call(); g::<'a>('x'); }
    """
    assert sorted(crate_paths(source)) == sorted(
        [
            ["codes", "self"],
            ["codes", "A"],
            ["codes", "B"],
            ["conn", "Conn"],
            ["frame", "Frame"],
            ["frame", "Header"],
            ["inline", "call"],
        ]
    )


def test_the_graph_sees_each_crate() -> None:
    crates = crate_sources()
    packages = {"ferromq-store", "ferromq-remoting", "ferromq-broker", "ferromq-grpc", "ferromq-python"}
    assert packages <= set(crates)
    broker = module_edges(crates["ferromq-broker"])
    assert Edge("sender", "waits") in broker
    assert Edge("pop", "pull") in broker
    # pull.rs names `crate::pop` only in a doc link.
    assert Edge("pull", "pop") not in broker
    store = module_edges(crates["ferromq-store"])
    assert Edge("message_store", "send") in store
    assert Edge("message_store::timer", "timer") in store
    assert Edge("ha", "store") in module_edges(crates["ferromq-python"])
    assert sum(len(module_edges(src)) for src in crates.values()) > 150


def test_no_module_cycle_in_any_crate() -> None:
    cycles = {package: strongly_connected(graph_of(src)) for package, src in crate_sources().items()}
    assert {package: found for package, found in cycles.items() if found} == {}


def test_crates_depend_one_way() -> None:
    depends: dict[str, set[str]] = {}
    for manifest in sorted(CRATES.glob("*/Cargo.toml")):
        parsed = tomllib.loads(manifest.read_text(encoding="utf-8"))
        depends[parsed["package"]["name"]] = set(parsed.get("dependencies", {}))
    wrong = [(low, high) for low, high in FORBIDDEN_CRATE_DEPENDENCIES if high in depends.get(low, set())]
    assert wrong == []
    assert "ferromq-remoting" in depends["ferromq-broker"]
